"""Kernel images (ptxgen.runtime.loader): pack format, cache keys, warm hits, PTXGEN_OVERRIDE_PTX and
PTXGEN_DUMP."""

from __future__ import annotations

import os

import pytest

from ptxgen.errors import ConfigError
from ptxgen.runtime import cache


# --------------------------------------------------------------------------- loader: kernel images


def fake_jit(calls):
    def jit(ptx):
        calls.append(ptx)
        return b"CUBIN:" + ptx[:64].encode()

    return jit


def test_image_pack_roundtrip(built_h100):
    from ptxgen.runtime import loader

    img = loader.KernelImage(built_h100.launch, built_h100.ptx, b"\x7fELF" + bytes(100))
    assert loader.unpack_image(loader.pack_image(img)) == img._replace(origin="cache")
    blob = loader.pack_image(img)
    for bad in (blob[:-1], blob[:10], b"", b"PTXGIMG1" + bytes(24), blob.replace(b'"arch"', b'"arkh"')):
        assert loader.unpack_image(bad) is None


def test_image_cache_hit_skips_build(cache_root, built_h100, monkeypatch):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    key = loader.image_key(cfg, 13000, (9, 0))
    calls = []
    first = loader.cached_image(cfg, key, fake_jit(calls))
    assert first.spec == built_h100.launch and first.ptx == built_h100.ptx and len(calls) == 1
    monkeypatch.setattr(loader, "build_image", lambda *a: pytest.fail("rebuilt on a cache hit"))
    again = loader.cached_image(cfg, key, fake_jit(calls))
    assert again == first._replace(origin="cache") and len(calls) == 1


def test_image_key_parts(built_h100):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    base = loader.image_key(cfg, 13000, (9, 0))
    assert base == loader.image_key(cfg.replace(), 13000, (9, 0))  # equal content, other object
    assert base != loader.image_key(cfg.replace(**{"pipeline.stages": 3}), 13000, (9, 0))
    assert base != loader.image_key(cfg, 13010, (9, 0))
    assert base != loader.image_key(cfg, 13000, (10, 0))
    assert loader.source_fingerprint() in "".join(base)


def test_image_key_of_a_name_is_its_yaml_text(tmp_path):
    from ptxgen.runtime import loader
    from ptxgen.shipped import configs_dir

    text = (configs_dir() / "h100_128x128.yaml").read_text()
    assert loader.config_content("h100_128x128") == loader.config_content("h100_128x128.yaml") == \
        "yaml:h100_128x128\n" + text
    copy = tmp_path / "h100_128x128.yaml"
    copy.write_text(text)
    assert loader.image_key(str(copy), 13000, (9, 0)) == loader.image_key("h100_128x128", 13000, (9, 0))
    copy.write_text(text.replace("stages: 4", "stages: 3"))
    assert loader.image_key(copy, 13000, (9, 0)) != loader.image_key("h100_128x128", 13000, (9, 0))
    # a YAML without ``name`` is named after its file: same text, other stem, other kernel
    (tmp_path / "a.yaml").write_text("arch: sm_90a\n")
    (tmp_path / "b.yaml").write_text("arch: sm_90a\n")
    assert loader.config_content(tmp_path / "a.yaml") != loader.config_content(tmp_path / "b.yaml")
    with pytest.raises(ConfigError, match="no such file, and not a shipped config"):
        loader.config_content(tmp_path / "absent.yaml")


def test_warm_hit_by_name_never_imports_the_config_schema(cache_root):
    """A cache hit for a config given by name reads its YAML text and the stored image: no pydantic, no plan, and
    none of the modules only a miss, a knob or another entry point needs (docs/performance.md, "First call")."""
    import subprocess
    import sys

    child = f"""
import sys
import ptxgen
from ptxgen.runtime import loader, prebuilt
calls = []
def jit(ptx):
    calls.append(1)
    return b"cubin"
seen = []
img = loader.load_image("h100_128x128", 13000, (9, 0), jit, accept=seen.append, prebuilt=prebuilt.find)
print(len(calls), len(seen), img.spec.name, img.origin, *sorted(m for m in WARM_ABSENT if m in sys.modules))
"""
    env = {**os.environ, "PTXGEN_CACHE_DIR": str(cache_root), "PTXGEN_JIT": "driver"}  # a driver JIT: no shipped image
    run = lambda: subprocess.run([sys.executable, "-c", f"WARM_ABSENT = {WARM_ABSENT!r}\n" + child], env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
    miss = run()
    assert miss[:4] == ["1", "1", "h100_128x128", "built"]  # built, validated
    assert {"ptxgen.config", "pydantic", "ptxgen.build"} <= set(miss[4:])  # the list names what a miss imports
    assert run() == ["0", "1", "h100_128x128", "cache"]  # hit: none of them


#: modules a warm hit (a config by name, its image in the cache) never imports: the config schema and the build
#: (pydantic, plan, IR, emitters), PyYAML, the cache's lock (a miss only), the PTXGEN_OVERRIDE_PTX / PTXGEN_DUMP
#: module, grouped GEMMs and the fused-epilogue language
WARM_ABSENT = ("ptxgen.config", "pydantic", "ptxgen.build", "ptxgen.plan", "ptxgen.ir", "emitters", "yaml",
               "filelock", "jinja2", "ptxgen.runtime.override", "ptxgen.runtime.grouped", "ptxgen.epi")


#: what a warm first call of ``ptxgen.gemm`` (config chosen) must not import: the compile stack (the config schema
#: and pydantic, plan, builders, IR, emitters, Jinja2, PyYAML, the assembler), the checks, the shipped images'
#: module (a miss only), the cache's lock, and importlib.resources / importlib.metadata (the package's own folder
#: is a path beside its modules)
WARM_CALL_ABSENT = ("ptxgen.config", "pydantic", "ptxgen.plan", "ptxgen.builders", "ptxgen.ir", "emitters", "jinja2",
                    "yaml", "ptxgen.build", "ptxgen.assemble", "ptxgen.check", "ptxgen.runtime.prebuilt", "filelock",
                    "importlib.resources", "importlib.metadata")


#: the dataclasses a warm first call may define: none.  ``dataclasses`` compiles five or six methods of each from text
#: when its class is created (0.2-0.8 ms each on the CPU host, about 10 ms for the fifteen records the path held:
#: docs/performance.md, "The warm path's host work"), so the path's records are ``typing.NamedTuple`` classes, whose
#: definition compiles one small function; a dataclass added to a module on the path costs every process its
#: definition
WARM_CALL_DATACLASSES: tuple[str, ...] = ()

#: the host side of a warm first ``ptxgen.gemm(a, b)`` at 4096^3 (import, the chooser on an H100's 132 SMs, the image
#: from the cache, the launcher's modules; only the driver calls left out): prints the image's origin, the modules of
#: ``ABSENT`` it imported and the dataclasses its new ptxgen modules define, one JSON line
WARM_CALL_CHILD = """
import json, sys
before = set(sys.modules)
import ptxgen
from ptxgen.runtime import api, loader
from ptxgen.runtime.choose import choose
from ptxgen.runtime.driver import DeviceInfo
name = choose(4096, 4096, 4096, DeviceInfo(0, "NVIDIA H100 80GB HBM3", 132, (9, 0), 232448, 50 << 20))
img = loader.load_image(name, 13000, (9, 0), lambda ptx: b"cubin", prebuilt=api._shipped_image)
import ptxgen.runtime.fastpath, ptxgen.runtime.module, ptxgen.runtime.tensormap
new = set(sys.modules) - before
defined = sorted(f"{mod}.{cls.__qualname__}" for mod in new if mod.split(".")[0] == "ptxgen"
                 for cls in vars(sys.modules[mod]).values()
                 if isinstance(cls, type) and cls.__module__ == mod and "__dataclass_fields__" in vars(cls))
print(json.dumps({"origin": img.origin, "imported": sorted(m for m in ABSENT if m in new), "dataclasses": defined}))
"""


def warm_call_child(cache_root, planted: str = "") -> list[dict]:
    """Two runs of :data:`WARM_CALL_CHILD` on one cache (a miss built with a stand-in JIT, then the warm hit), each a
    fresh interpreter; ``planted``: code run first on the path (a planted bug)."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "PTXGEN_CACHE_DIR": str(cache_root), "PTXGEN_JIT": "driver"}  # a driver JIT: no shipped image
    start = "before = set(sys.modules)\n"
    code = f"ABSENT = {WARM_CALL_ABSENT!r}\n" + WARM_CALL_CHILD.replace(start, start + planted)
    return [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1]) for _ in range(2)]


def test_warm_first_call_imports_no_compile_stack(cache_root):
    """A warm first ``ptxgen.gemm(a, b)`` (:data:`WARM_CALL_CHILD`) imports none of :data:`WARM_CALL_ABSENT` beyond
    what the interpreter had before (docs/performance.md, "First call"); a miss (first run: built with a stand-in
    JIT) imports the compile stack, so the list names real imports."""
    miss, hit = warm_call_child(cache_root)
    compile_stack = {"ptxgen.config", "ptxgen.builders", "emitters", "jinja2"}
    assert miss["origin"] == "built" and compile_stack <= set(miss["imported"])
    assert hit["origin"] == "cache" and hit["imported"] == []


def test_warm_first_call_defines_no_dataclass(cache_root):
    """A warm first call defines the dataclasses of :data:`WARM_CALL_DATACLASSES` (none), no more: each costs every
    process its definition (docs/performance.md, "The warm path's host work")."""
    _, hit = warm_call_child(cache_root)
    assert hit["dataclasses"] == sorted(WARM_CALL_DATACLASSES)


def test_warm_call_checks_fail_on_planted_imports_and_dataclasses(cache_root):
    """Planted: the chooser's module importing PyYAML and defining one more dataclass: the import check names
    ``yaml``, the dataclass check the class (both checks can fail)."""
    planted = ("import ptxgen.runtime.choose as chooser, dataclasses, yaml\n"
               "chooser.Planted = dataclasses.make_dataclass('Planted', ['x'])\n"
               "chooser.Planted.__module__ = 'ptxgen.runtime.choose'\n")
    _, hit = warm_call_child(cache_root, planted)
    assert hit["imported"] == ["yaml"]
    assert set(hit["dataclasses"]) - set(WARM_CALL_DATACLASSES) == {"ptxgen.runtime.choose.Planted"}


def test_accept_refuses_before_the_jit(cache_root):
    from ptxgen.runtime import loader

    calls = []

    def refuse(spec):
        raise ConfigError(f"config {spec.name}: not on this device")

    with pytest.raises(ConfigError, match="config level9: not on this device"):
        loader.load_image("level9", 13000, (9, 0), fake_jit(calls), accept=refuse)
    assert calls == []


def test_corrupt_image_payload_is_rebuilt(cache_root, built_h100):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    key = loader.image_key(cfg, 13000, (9, 0))
    path = cache.entry_path(cache.cache_key(key))
    cache.write_entry(path, b"valid entry, not an image")
    calls = []
    img = loader.cached_image(cfg, key, fake_jit(calls))
    assert img.spec == built_h100.launch and len(calls) == 1
    assert loader.unpack_image(cache.read_entry(path)) == img._replace(origin="cache")  # repaired


def test_image_without_cache(cache_root, built_h100):
    from ptxgen.runtime import loader

    calls = []
    loader.cached_image(built_h100.config, ("k",), fake_jit(calls), use_cache=False)
    loader.cached_image(built_h100.config, ("k",), fake_jit(calls), use_cache=False)
    assert len(calls) == 2 and not cache_root.exists()


# --------------------------------------------------------------------------- PTXGEN_OVERRIDE_PTX


def test_ptx_header_of_generated_kernels():
    from ptxgen.build import build
    from ptxgen.runtime import override

    for name in ("h100_128x256", "level9"):
        res = build(name)
        h = override.parse_ptx_header(res.ptx)
        assert h.entry == res.launch.kernel and h.target == res.launch.arch
        assert h.params == tuple(tuple(p) for p in res.launch.params)
        assert h.reqntid == tuple(res.launch.block)
        assert (h.cluster or (1, 1, 1)) == tuple(res.launch.cluster)
        override.check_override(res.ptx, res.launch, "x.ptx")  # the generated PTX always passes


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: p.replace(".entry ptxgen_gemm_h100_128x256", ".entry my_kernel"),
         r"\.entry my_kernel != launch spec kernel ptxgen_gemm_h100_128x256"),
        (lambda p: p.replace("    .param .u32 k\n", "").replace(".param .u32 n,", ".param .u32 n"),
         r"params \[.*\] != launch spec params"),
        (lambda p: p.replace(".reqntid 384, 1, 1", ".reqntid 256, 1, 1"), r"\.reqntid \(256, 1, 1\) != launch block"),
        (lambda p: p.replace(".reqntid 384, 1, 1", ""), r"\.reqntid \(none\) != launch block \(384, 1, 1\)"),
        (lambda p: p.replace(".reqnctapercluster 2, 1, 1", ".reqnctapercluster 4, 1, 1"),
         r"\.reqnctapercluster \(4, 1, 1\) != launch cluster \(2, 1, 1\)"),
        (lambda p: p.replace(".target sm_90a", ".target sm_100a"), r"\.target sm_100a != config arch sm_90a"),
        (lambda p: p.replace(".extern .shared .align 1024 .b8 smem[];",
                             ".extern .shared .align 1024 .b8 smem[];\n.shared .align 16 .b8 extra[8192];"),
         r"static \.shared 8192 B \+ dynamic \d+ B = \d+ B > 232448 B per CTA"),
    ],
)
def test_override_with_other_metadata_is_refused(edit, match):
    from ptxgen.build import build
    from ptxgen.runtime import override

    res = build("h100_128x256")
    bad = edit(res.ptx)
    assert bad != res.ptx
    with pytest.raises(ConfigError, match=r"^PTXGEN_OVERRIDE_PTX=x\.ptx: launch metadata does not match config "
                                          r"'h100_128x256': .*" + match):
        override.check_override(bad, res.launch, "x.ptx")


def test_override_file_and_dir(tmp_path, built_h100, cache_root):
    from ptxgen import knobs
    from ptxgen.runtime import loader, override

    spec, ptx = built_h100.launch, built_h100.ptx
    edited = ptx.replace("// tile", "// hand-edited tile", 1)
    f = tmp_path / "mine.ptx"
    f.write_text(edited)
    assert override.override_for(spec, f) == (edited, f)
    d = tmp_path / "dir"
    d.mkdir()
    assert override.override_for(spec, d) is None  # no <name>.ptx there: generated PTX is used
    (d / f"{spec.name}.ptx").write_text(edited)
    assert override.override_for(spec, d)[0] == edited
    with pytest.raises(ConfigError, match=r"PTXGEN_OVERRIDE_PTX=.*nope\.ptx: no such file or directory"):
        override.override_for(spec, tmp_path / "nope.ptx")

    calls = []
    img = loader.load_image(built_h100.config, 13000, (9, 0), fake_jit(calls), knobs.Knobs(override_ptx=f))
    assert img.ptx == edited and calls[-1] == edited and img.spec == spec


def test_dump_writes_ptx_cubin_sass_json(tmp_path, built_h100, cache_root):
    from ptxgen import knobs
    from ptxgen.runtime import loader

    from ptxgen.assemble import assemble  # the cuda extra is part of the test install: a failure here is a failure

    cubin = assemble(built_h100.ptx, "sm_90a").cubin
    img = loader.load_image(built_h100.config, 13000, (9, 0), lambda ptx: cubin, knobs.Knobs(dump_dir=tmp_path / "d"))
    name = built_h100.launch.name
    d = tmp_path / "d"
    assert (d / f"{name}.ptx").read_text() == built_h100.ptx
    assert (d / f"{name}.cubin").read_bytes() == cubin == img.cubin
    assert "HGMMA" in (d / f"{name}.sass").read_text()
    assert (d / f"{name}.json").read_text() == built_h100.launch.to_json()


def test_dump_without_disassembler_still_writes_the_rest(tmp_path, built_h100):
    from ptxgen.runtime import loader, override

    img = loader.KernelImage(built_h100.launch, built_h100.ptx, b"not an ELF")
    written = override.dump(img, tmp_path)
    assert sorted(p.suffix for p in written) == [".cubin", ".json", ".ptx"]
