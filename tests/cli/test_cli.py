"""The command line: one-line errors (exit 1), usage errors (exit 2), --version, quiet pipes, progress bars,
``build`` verifying everything in memory before writing, name clashes and output-directory problems."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptxgen import __version__, cli
from ptxgen.config import load_config, shipped_configs, to_dict
from ptxgen.errors import AssembleError, CudaError, VerifyError
from tests.helpers import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
SHIPPED = ", ".join(shipped_configs())


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def fast_assemble(monkeypatch):
    """Replace ptxas with a stub where a test is about the CLI's flow, not the SASS (keeps the tier fast)."""
    import types

    import ptxgen.assemble

    stub = types.SimpleNamespace(registers=1, spill_store_bytes=0, spill_load_bytes=0, assemble_seconds=0.0,
                                 warnings=[], count=lambda key: 0)
    monkeypatch.setattr(ptxgen.assemble, "assemble", lambda ptx, arch, sass=False: stub)


def _config_file(path: Path, **changes) -> Path:
    raw = to_dict(load_config("level1"))
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            raw[section][field] = value
        else:
            raw[section] = value
    path.write_text(yaml.safe_dump(raw))
    return path


# --------------------------------------------------------------------------- user and environment errors


def test_missing_config_is_one_line_exit_1(capsys):
    rc, out, err = _run(capsys, "build", "--config", "level99")
    assert rc == 1 and out == ""
    assert _one_error_line(err) == (f"ptxgen: error: ConfigError: config 'level99': no such file, and not a shipped "
                                    f"config; give a YAML path or a shipped name ({SHIPPED})")


def test_directory_config_path(capsys, tmp_path):
    rc, _, err = _run(capsys, "check", "--config", str(tmp_path))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: ConfigError: config {str(tmp_path)!r}: is a directory; "
                                    "give a YAML file or a shipped config name")


def test_unreadable_config(capsys, tmp_path, monkeypatch):
    path = _config_file(tmp_path / "mine.yaml")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)  # root reads chmod 000 files, so fake the OS answer
    rc, _, err = _run(capsys, "build", "--config", str(path), "-o", str(tmp_path / "out"))
    assert rc == 1
    assert _one_error_line(err) == f"ptxgen: error: ConfigError: {path}: cannot read (Permission denied)"


def test_non_utf8_config(capsys, tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: x\n\xff\xfe\x00")
    rc, _, err = _run(capsys, "build", "--config", str(path))
    assert rc == 1
    assert _one_error_line(err) == f"ptxgen: error: ConfigError: {path}: not UTF-8 text (byte 8); a config is a YAML file"


def test_bad_yaml(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tile: {block_m: 128\n  block_n: [\n")
    rc, _, err = _run(capsys, "build", "--config", str(path))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: ConfigError: {path}: malformed YAML at line 2, column 10: "
                                    "expected ',' or '}', but got ':'")


def test_illegal_config(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ntile: {block_n: 200}\n")
    rc, _, err = _run(capsys, "build", "--config", str(path), "-o", str(tmp_path / "out"))
    assert rc == 1
    assert _one_error_line(err) == ("ptxgen: error: ConfigError: bad.yaml: tile.block_n=200: "
                                    "UMMA N must be a multiple of 16 in [16, 256]")
    assert not (tmp_path / "out").exists()


def test_no_torch(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ModuleNotFoundError
    rc, out, err = _run(capsys, "run", "--shape", "256x256x256")
    assert rc == 1 and out == ""
    assert _one_error_line(err) == ('ptxgen: error: SetupError: torch is not installed; `ptxgen run` and `ptxgen bench` '
                                    'need it: pip install "ptxgen[torch]" (a CUDA build of torch on the GPU machine)')


def test_cpu_only_torch(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", None)
    rc, _, err = _run(capsys, "bench", "--shape", "256x256x256")
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: SetupError: torch {torch.__version__} is a CPU-only build; "
                                    "`ptxgen run` and `ptxgen bench` need a CUDA build of torch and an NVIDIA GPU "
                                    "(build and check work without one)")


def test_no_gpu(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = _run(capsys, "run", "--shape", "256x256x256")
    assert rc == 1
    assert _one_error_line(err) == ("ptxgen: error: SetupError: no CUDA GPU visible (torch.cuda.is_available() is "
                                    "False): run on a machine with an sm_90a (Hopper) or sm_100a (Blackwell) GPU and "
                                    "its NVIDIA driver")


def test_driver_error_and_missing_cuda_bindings(capsys, monkeypatch):
    import ptxgen.bench

    monkeypatch.setattr(cli, "_require_gpu", lambda: None)

    def no_driver(*args, **kwargs):
        raise CudaError("cuInit failed: no NVIDIA driver library (libcuda.so.1 not found)", call="cuInit")

    monkeypatch.setattr(ptxgen.bench, "run_one", no_driver)
    rc, _, err = _run(capsys, "run", "--shape", "256x256x256")
    assert rc == 1
    assert _one_error_line(err) == ("ptxgen: error: CudaError: cuInit failed: no NVIDIA driver library "
                                    "(libcuda.so.1 not found)")

    def no_bindings(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'cuda'", name="cuda")

    monkeypatch.setattr(ptxgen.bench, "run_one", no_bindings)
    rc, _, err = _run(capsys, "run", "--shape", "256x256x256")
    assert rc == 1
    assert _one_error_line(err) == ('ptxgen: error: SetupError: the CUDA Python packages are not installed: '
                                    'pip install "ptxgen[cuda]" (No module named \'cuda\')')


def test_other_import_errors_are_bugs_not_hidden(monkeypatch):
    import ptxgen.bench

    monkeypatch.setattr(cli, "_require_gpu", lambda: None)
    monkeypatch.setattr(ptxgen.bench, "run_one", lambda *a: __import__("ptxgen_no_such_module"))
    with pytest.raises(ModuleNotFoundError):
        cli.main(["run", "--shape", "256x256x256"])


def test_multiline_error_is_cut_to_one_line(capsys, monkeypatch):
    import ptxgen.check.verify

    def fail(kernel):
        raise VerifyError("circular wait: producer and MMA\n  producer ...\n  mma ...")

    monkeypatch.setattr(ptxgen.check.verify, "verify", fail)
    rc, _, err = _run(capsys, "check", "--config", "level1")
    assert rc == 1
    assert _one_error_line(err) == ("ptxgen: error: VerifyError: level1: circular wait: producer and MMA "
                                    "(2 more lines: rerun with --debug)")
    rc, _, err = _run(capsys, "--debug", "check", "--config", "level1")
    assert rc == 1 and "Traceback" in err and "  mma ..." in err


# --------------------------------------------------------------------------- usage, version, pipes, python -m


@pytest.mark.parametrize("argv", [["build", "--bogus"], ["frobnicate"], [], ["run"], ["check", "--interleavings", "0"],
                                  ["check", "--interleavings", "-3"], ["run", "--shape", "12x3"]])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage: ptxgen" in capsys.readouterr().err


def test_interleavings_0_is_rejected_not_a_vacuous_pass(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--config", "level1", "--interleavings", "0"])
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("ptxgen check: error: argument --interleavings: 0: must be >= 1 "
                                    "(0 interleavings would check nothing)")


def test_version_through_python_m_ptxgen():
    proc = subprocess.run([sys.executable, "-m", "ptxgen", "--version"], capture_output=True, text=True, env=ENV)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"ptxgen {__version__}\n", "")


def test_python_m_ptxgen_error_exit_1():
    proc = subprocess.run([sys.executable, "-m", "ptxgen", "inspect", "--config", "level99"], capture_output=True,
                          text=True, env=ENV)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("ptxgen: error: ConfigError: config 'level99': no such file")


def test_pipe_into_head_is_quiet():
    proc = subprocess.run(f"'{sys.executable}' -m ptxgen inspect --config level1 | head -1", shell=True,
                          capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0
    assert proc.stdout.startswith("//")
    assert proc.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored" line


# --------------------------------------------------------------------------- progress bars


@pytest.mark.parametrize("tty", [False, True])
def test_progress_bar_only_on_a_terminal(capsys, monkeypatch, tmp_path, tty, fast_assemble):
    monkeypatch.setattr(cli, "_configs", lambda args: ["level1", "level2"])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty, raising=False)
    rc, out, err = _run(capsys, "build", "--all", "-o", str(tmp_path))
    assert rc == 0
    assert out.count("verified; wrote") == 2
    assert ("build:" in err and "0/2" in err) is tty
    if not tty:
        assert err == ""
    rc, out, err = _run(capsys, "check", "--all", "--shape", "128x128x128", "--interleavings", "1")
    assert rc == 0 and out.count("verifier passed") == 2
    assert ("check:" in err and "0/2" in err) is tty
    if not tty:
        assert err == ""


# --------------------------------------------------------------------------- build: verify, then write


def test_build_verifies_every_kernel(capsys, monkeypatch, tmp_path, fast_assemble):
    import ptxgen.check.verify

    seen = []
    real = ptxgen.check.verify.verify
    monkeypatch.setattr(ptxgen.check.verify, "verify", lambda kernel: (seen.append(kernel.config_name), real(kernel)))
    rc, _, _ = _run(capsys, "build", "-c", "level1", "-c", "h100_128x128", "-o", str(tmp_path))
    assert rc == 0 and seen == ["level1", "h100_128x128"]


def test_build_prebuilt_writes_images_and_manifest(capsys, monkeypatch, tmp_path):
    """``build --prebuilt -o DIR -c NAME``: one image per config and the manifest, through the ptxas compile (a stub
    here), reported one line per image; nothing of generated/ is touched."""
    import json

    import ptxgen.assemble

    monkeypatch.setattr(ptxgen.assemble, "compile_ptx", lambda ptx, target, backend="ptxas": b"cubin:" + target.encode())
    monkeypatch.setattr(ptxgen.assemble, "toolchain_version", lambda backend="ptxas": "ptxas cuda_13.5.r13.5/x -O3")
    rc, out, _ = _run(capsys, "build", "--prebuilt", "-c", "h100_64x64", "-o", str(tmp_path / "pre"))
    doc = json.loads((tmp_path / "pre" / "manifest.json").read_text())
    assert rc == 0 and list(doc["images"]) == ["h100_64x64"] and doc["min_driver"] == 13000
    assert (tmp_path / "pre" / "h100_64x64.img.zlib").is_file()
    assert out.splitlines()[0].startswith("h100_64x64 (sm_90a): h100_64x64.img.zlib, ")


@pytest.mark.parametrize("stage, error", [("ptxgen.check.verify.verify", VerifyError("full[0]: 3 arrivals, init 2")),
                                          ("ptxgen.assemble.assemble", AssembleError("ptxas: syntax error, line 7"))])
def test_build_writes_nothing_when_one_kernel_fails(capsys, monkeypatch, tmp_path, stage, error):
    import importlib

    module, _, attr = stage.rpartition(".")
    mod = importlib.import_module(module)
    real = getattr(mod, attr)

    def fail_on_level2(*args, **kwargs):
        kernel_or_ptx = args[0]
        if getattr(kernel_or_ptx, "config_name", None) == "level2" or (
                isinstance(kernel_or_ptx, str) and "level2" in kernel_or_ptx[:2000]):
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, attr, fail_on_level2)
    out_dir = tmp_path / "out"
    rc, out, err = _run(capsys, "build", "-c", "level1", "-c", "level2", "-o", str(out_dir))
    assert rc == 1 and out == ""
    assert _one_error_line(err) == f"ptxgen: error: {type(error).__name__}: level2: {error.args[0].split(': ', 1)[-1]}" \
        or _one_error_line(err).startswith(f"ptxgen: error: {type(error).__name__}: level2: ")
    assert not out_dir.exists()  # level1 built fine, but nothing is written


def test_shipped_name_is_not_overwritten(capsys, monkeypatch, tmp_path, fast_assemble):
    monkeypatch.chdir(tmp_path)
    mine = _config_file(tmp_path / "mine.yaml", **{"pipeline.stages": 2})  # name: level1, but not level1
    rc, _, err = _run(capsys, "build", "-c", str(mine))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: ConfigError: {mine}: name 'level1' is a shipped config's; "
                                    "building it into generated/ would overwrite the shipped kernel's files: "
                                    "rename it or pass -o DIR")
    assert not (tmp_path / "generated").exists()
    rc, _, _ = _run(capsys, "build", "-c", str(mine), "-o", "elsewhere")  # another folder: allowed
    assert rc == 0 and (tmp_path / "elsewhere" / "level1.ptx").is_file()
    same = _config_file(tmp_path / "copy.yaml")  # an exact copy of level1 writes level1's own bytes: allowed
    rc, _, _ = _run(capsys, "build", "-c", str(same))
    assert rc == 0 and (tmp_path / "generated" / "level1.ptx").read_text() == (ROOT / "generated" / "level1.ptx").read_text()


def test_two_builds_with_one_name_are_refused(capsys, tmp_path, fast_assemble):
    a = _config_file(tmp_path / "a.yaml", name="twin")
    b = _config_file(tmp_path / "b.yaml", name="twin", **{"pipeline.stages": 2})
    rc, _, err = _run(capsys, "build", "-c", str(a), "-c", str(b), "-o", str(tmp_path / "out"))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: ConfigError: two configs named 'twin' in one build ({a} and {b}) "
                                    f"would both write {tmp_path / 'out' / 'twin'}.ptx; give them different names")
    assert not (tmp_path / "out").exists()


def test_output_directory_problems(capsys, monkeypatch, tmp_path, fast_assemble):
    afile = tmp_path / "afile"
    afile.write_text("")
    rc, _, err = _run(capsys, "build", "-c", "level1", "-o", str(afile))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: OutputError: output directory {str(afile)!r}: exists and is not "
                                    "a directory; pass -o DIR with a directory")
    rc, _, err = _run(capsys, "build", "-c", "level1", "-o", str(afile / "sub"))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: OutputError: cannot write {afile / 'sub'} (Not a directory); "
                                    "pass -o DIR with a writable directory")
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # root can write anywhere: fake the answer
    rc, _, err = _run(capsys, "build", "-c", "level1", "-o", str(tmp_path))
    assert rc == 1
    assert _one_error_line(err) == (f"ptxgen: error: OutputError: output directory {str(tmp_path)!r}: not writable; "
                                    "pass -o DIR with a writable directory")


# --------------------------------------------------------------------------- check --ptx


def test_check_ptx_passes_on_a_shipped_config(capsys):
    rc, out, _ = _run(capsys, "check", "--ptx", "--config", "level1")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 16  # 2 threads x 2 role ranges x 4 CTAs (first and last cluster)
    assert all(line.endswith(": PTX effects equal IR effects") for line in lines)
    assert lines[0] == "level1 253x248x184: CTA 0 thread 0 (init/mainloop/producer): PTX effects equal IR effects"


def test_check_ptx_chosen_thread_and_shape(capsys):
    rc, out, _ = _run(capsys, "check", "--ptx", "--config", "level1", "--thread", "1:64", "--shape", "300x300x300")
    assert (rc, out) == (0, "level1 300x300x300: CTA 1 thread 64 (tmem_alloc/tmem_dealloc): PTX effects equal IR "
                            "effects\n")
    rc, _, err = _run(capsys, "check", "--ptx", "--config", "level1", "--thread", "99:0")
    assert rc == 1 and "--thread 99:0: level1 at 253x248x184 has CTAs 0-7" in err


def test_check_ptx_fails_on_a_planted_emitter_bug(capsys, monkeypatch):
    """TMA load coordinates emitted as {row, col}: the first producer thread's effects differ; exit 1."""
    import dataclasses

    import emitters
    from ptxgen.ir import ops

    for table in emitters.TABLES.values():
        if ops.TmaLoad in table:
            f = table[ops.TmaLoad]
            monkeypatch.setitem(table, ops.TmaLoad,
                                lambda lw, op, f=f: f(lw, dataclasses.replace(op, col=op.row, row=op.col)))
    rc, out, err = _run(capsys, "check", "--ptx", "--config", "level1")
    assert rc == 1 and out == ""
    assert err.startswith("level1 253x248x184: CTA 0 thread 0 (init/mainloop/producer): PTX != IR at effect #")
    assert "tma.load" in err
