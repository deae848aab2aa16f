"""Environment knobs (ptxgen.knobs): parsing, and the README table that documents each."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgen.errors import ConfigError
from tests.helpers import ROOT


def test_knobs_parse():
    from ptxgen import knobs

    k = knobs.read({"PTXGEN_CACHE_DIR": "~/c", "PTXGEN_NO_CACHE": "Yes", "PTXGEN_DUMP": "/d",
                    "PTXGEN_OVERRIDE_PTX": "x.ptx"})
    assert k.cache_dir == Path("~/c").expanduser() and k.no_cache is True
    assert k.dump_dir == Path("/d") and k.override_ptx == Path("x.ptx")
    assert knobs.read({}) == knobs.Knobs()  # PTXGEN_JIT unset: auto
    for off in ("", "0", "false", "OFF", "no"):
        assert knobs.read({"PTXGEN_NO_CACHE": off}).no_cache is False
    with pytest.raises(ConfigError, match=r"^PTXGEN_NO_CACHE='maybe': must be one of 1, true"):
        knobs.read({"PTXGEN_NO_CACHE": "maybe"})


def test_readme_documents_every_knob():
    from ptxgen import knobs

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Environment knobs", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `PTXGEN_")}
    assert rows == set(knobs.KNOBS)


def test_jit_knob_names_a_compiler():
    from ptxgen import knobs

    assert knobs.read({}).jit == "auto"
    for name in ("auto", "ptxas", "driver", "nvjitlink"):
        assert knobs.read({"PTXGEN_JIT": name.upper()}).jit == name
    with pytest.raises(ConfigError, match=r"^PTXGEN_JIT='nvcc': must be one of auto, ptxas, driver, nvjitlink$"):
        knobs.read({"PTXGEN_JIT": "nvcc"})


def test_auto_jit_is_ptxas_when_the_wheel_is_found(monkeypatch):
    import ptxgen.assemble as asm
    from ptxgen.errors import AssembleError
    from ptxgen.runtime import module

    module.resolve_jit.cache_clear()
    monkeypatch.setattr(asm, "_tool", lambda name: "/x/ptxas")
    assert module.resolve_jit("auto") == "ptxas" and module.compiler("driver") is module.jit_ptx

    def missing(name):
        raise AssembleError("ptxas not found")

    module.resolve_jit.cache_clear()
    monkeypatch.setattr(asm, "_tool", missing)
    assert module.resolve_jit("auto") == "driver"
    module.resolve_jit.cache_clear()


def test_auto_jit_looks_for_ptxas_only_when_it_compiles(monkeypatch):
    """A cache hit of an ``auto`` image must not pay the tool lookup (cuda.pathfinder, ``ptxas --version``)."""
    import ptxgen.assemble as asm
    from ptxgen.runtime import module

    looked = []
    module.resolve_jit.cache_clear()
    monkeypatch.setattr(asm, "_tool", lambda name: looked.append(name) or "/x/ptxas")
    monkeypatch.setattr(asm, "compile_ptx", lambda ptx, target, backend: f"{backend}:{target}".encode())
    jit = module.compiler("auto")
    assert looked == []
    assert jit(".version 8.8\n.target sm_90a\n") == b"ptxas:sm_90a" and looked == ["ptxas"]
    module.resolve_jit.cache_clear()


def test_image_key_names_the_compiler_knob_without_resolving_it(monkeypatch):
    import ptxgen.assemble as asm
    from ptxgen import knobs
    from ptxgen.runtime import loader

    seen = {}

    def cached_image(config, key, jit, **kw):
        seen["key"] = key
        raise StopIteration

    monkeypatch.setattr(loader, "cached_image", cached_image)
    monkeypatch.setattr(asm, "toolchain_version", lambda backend: f"{backend} 13.5")
    for jit, tail in (("auto", "jit=auto"), ("ptxas", "jit=ptxas 13.5"), ("driver", None)):
        with pytest.raises(StopIteration):
            loader.load_image("h100_128x128", 13000, (9, 0), None, knobs.Knobs(jit=jit))
        assert (seen["key"][-1] == tail) if tail else not any(str(p).startswith("jit=") for p in seen["key"])
