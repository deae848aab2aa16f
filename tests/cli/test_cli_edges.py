"""Command-line edges: counts, exclusive options, empty paths, bounded CPU checks, writes under a closed pipe."""

import subprocess
import sys

import pytest

from ptxgen.cli import MAX_CHECK_MNK, main


def usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--iters", "0"], "argument --iters: 0: must be >= 1"),
    (["bench", "--iters", "-5"], "argument --iters: -5: must be >= 1"),
    (["bench", "--warmup", "-1"], "argument --warmup: -1: must be >= 0"),
    (["bench", "--rounds", "0"], "argument --rounds: 0: must be >= 1"),
    (["bench", "--calls", "0"], "argument --calls: 0: must be >= 1"),
    (["tune", "--iters", "0"], "argument --iters: 0: must be >= 1"),
    (["tune", "--warmup", "x"], "argument --warmup: 'x': expected an integer >= 0"),
    (["build", "--all", "-c", "nosuch.yaml"], "build: --all and --config nosuch.yaml: pass one of them"),
    (["check", "--all", "-c", "level1"], "check: --all and --config level1: pass one of them"),
    (["check", "-c", "level1", "--shape", "1000000000000x256x256"],
     f"check: --shape 1000000000000x256x256: M*N*K = {10**12 * 256 * 256} exceeds {MAX_CHECK_MNK} (1024^3)"),
    (["build", "-o", ""], "argument -o/--output: '': empty; pass a path"),
    (["tune", "-o", " "], "argument -o/--output: ' ': empty; pass a path"),
    (["inspect", "-c", "level1", "-c", "level2"], "inspect: one --config at a time (got level1, level2)"),
])
def test_usage_errors_name_the_argument(capsys, argv, message):
    assert message in usage_error(capsys, argv)


def test_the_check_bound_is_1024_cubed():
    assert MAX_CHECK_MNK == 1024 ** 3


@pytest.mark.compile
def test_build_writes_every_file_before_a_closed_pipe_stops_the_report(tmp_path):
    cmd = [sys.executable, "-m", "ptxgen", "build", "-c", "level1", "-c", "level2", "-c", "h100_128x128",
           "-o", str(tmp_path)]
    proc = subprocess.run(f"{' '.join(cmd)} | head -c 1", shell=True, capture_output=True, text=True,
                          env={**__import__('os').environ, "PYTHONUNBUFFERED": "1"})
    assert "Traceback" not in proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["h100_128x128.json", "h100_128x128.ptx", "level1.json", "level1.ptx",
                       "level2.json", "level2.ptx"]
