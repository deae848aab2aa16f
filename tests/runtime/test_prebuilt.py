"""Kernel images compiled ahead of time (ptxgen.aot writes, ptxgen.runtime.prebuilt reads): a fresh entry is used
without the build or the config schema, and a stale, corrupt, wrong-arch, too-new or other-compiler entry is a miss.
Images here come from a fake compiler; the shipped folder is checked for its form, not its freshness."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zlib
from types import SimpleNamespace

import pytest

from ptxgen import knobs
from ptxgen.errors import CudaError
from ptxgen.runtime import cache, loader, prebuilt

NAME = "h100_128x128"
COMPILER = "ptxas cuda_13.5.r13.5/compiler.0_0 -O3"


def fake_compile(ptx: str, target: str) -> bytes:
    return f"AOT-CUBIN:{target}:".encode() + ptx[:32].encode()


def refuse_jit(ptx: str) -> bytes:
    raise AssertionError("built and compiled although a fresh image is shipped")


@pytest.fixture(scope="module")
def shelf_dir(tmp_path_factory):
    from ptxgen.aot import write_prebuilt

    folder = tmp_path_factory.mktemp("prebuilt")
    write_prebuilt(folder, [NAME], compile_ptx=fake_compile, compiler=COMPILER)
    return folder


@pytest.fixture
def shelf_copy(shelf_dir, tmp_path):
    """A private copy of the shelf folder, for tests that damage it."""
    return shutil.copytree(shelf_dir, tmp_path / "prebuilt")


def manifest_of(folder):
    return json.loads((folder / prebuilt.MANIFEST).read_text())


def edit_manifest(folder, **changes):
    doc = manifest_of(folder)
    doc.update(changes)
    (folder / prebuilt.MANIFEST).write_text(json.dumps(doc))


def find(folder, name=NAME, capability=(9, 0), driver=13000, compiler="auto"):
    return prebuilt.Shelf(folder).find(loader.config_content(name), capability, driver, compiler)


def test_fresh_entry_is_found(shelf_dir):
    image = find(shelf_dir)
    assert image is not None and image.origin == "prebuilt" and image.spec.name == NAME
    assert image.cubin.startswith(b"AOT-CUBIN:sm_90a:")
    assert find(shelf_dir, compiler=COMPILER) == image  # PTXGEN_JIT=ptxas of the very same build
    assert find(shelf_dir, driver=13050) == image
    assert find(shelf_dir, name="h100_64x64") is None  # not shipped in this folder


def test_config_object_and_path_of_the_same_text_find_it(shelf_dir, tmp_path):
    from ptxgen.config import load_config
    from ptxgen.shipped import resolve_config_path

    assert find(shelf_dir, name=load_config(NAME)) is not None
    copy = tmp_path / f"{NAME}.yaml"
    copy.write_text(resolve_config_path(NAME).read_text())
    assert find(shelf_dir, name=copy) is not None
    copy.write_text(copy.read_text() + "\n# edited\n")
    assert find(shelf_dir, name=copy) is None  # other text: other content hash


def test_fresh_entry_is_used_without_the_build_or_the_schema(shelf_dir, cache_root):
    """In a fresh process: the shipped image loads with no import of ptxgen.build, the config schema, pydantic
    or the emitters; it is stored in the user cache, so the next process is a warm hit."""
    child = f"""
import sys
from ptxgen.runtime import loader, prebuilt
def jit(ptx):
    raise SystemExit("compiled")
seen = []
img = loader.load_image({NAME!r}, 13000, (9, 0), jit, accept=seen.append, prebuilt=prebuilt.Shelf({str(shelf_dir)!r}).find)
print(img.origin, len(seen), img.spec.name, img.cubin[:10].decode(),
      *(m for m in ("ptxgen.build", "ptxgen.config", "pydantic", "emitters", "jinja2", "yaml") if m in sys.modules))
"""
    env = {**os.environ, "PTXGEN_CACHE_DIR": str(cache_root)}
    run = lambda: subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True)
    assert run().stdout.split() == ["prebuilt", "1", NAME, "AOT-CUBIN:"]
    assert run().stdout.split() == ["cache", "1", NAME, "AOT-CUBIN:"]


def test_stale_source_hash_is_ignored(shelf_copy, cache_root):
    edit_manifest(shelf_copy, sources="0" * 64)
    assert find(shelf_copy) is None
    assert prebuilt.Shelf(shelf_copy).candidates() is None
    calls = []
    image = loader.load_image(NAME, 13000, (9, 0), lambda ptx: calls.append(ptx) or b"built",
                              prebuilt=prebuilt.Shelf(shelf_copy).find)
    assert image.origin == "built" and image.cubin == b"built" and len(calls) == 1


def test_other_sources_than_the_running_ones_are_ignored(shelf_dir):
    assert prebuilt.Shelf(shelf_dir, sources="f" * 64).find(loader.config_content(NAME), (9, 0), 13000, "auto") is None
    assert prebuilt.Shelf(shelf_dir).candidates() is not None


@pytest.mark.parametrize("field, value", [("ptxgen", "0.0.0"), ("format", "ptxgen-prebuilt-v0"),
                                          ("image_format", "ptxgen-kernel-image-v0")])
def test_stale_format_or_version_is_ignored(shelf_copy, field, value):
    edit_manifest(shelf_copy, **{field: value})
    assert find(shelf_copy) is None


def image_path(folder):
    return folder / manifest_of(folder)["images"][NAME]["file"]


@pytest.mark.parametrize("damage", [
    lambda b: b[:-1],  # truncated
    lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:],  # one bit
    lambda b: b"",
])
def test_corrupt_image_file_is_ignored(shelf_copy, damage):
    path = image_path(shelf_copy)
    path.write_bytes(damage(path.read_bytes()))
    assert find(shelf_copy) is None


def test_image_that_matches_its_hash_but_not_its_entry_is_ignored(shelf_copy):
    """A file whose sha256 the manifest records but that does not unpack, or holds another config's kernel."""
    path = image_path(shelf_copy)
    doc = manifest_of(shelf_copy)
    for payload in (zlib.compress(b"not an image"), b"not zlib at all"):
        path.write_bytes(payload)
        doc["images"][NAME]["sha256"] = hashlib.sha256(payload).hexdigest()
        (shelf_copy / prebuilt.MANIFEST).write_text(json.dumps(doc))
        assert find(shelf_copy) is None


@pytest.mark.parametrize("field, value", [("name", "h100_64x64"), ("arch", "sm_100a")])
def test_image_of_another_config_under_this_name_is_ignored(shelf_copy, field, value):
    image = find(shelf_copy)
    spec = json.loads(image.spec.to_json())
    spec[field] = value
    from ptxgen.launch import LaunchSpec

    payload = zlib.compress(loader.pack_image(loader.KernelImage(LaunchSpec.from_json(json.dumps(spec)), image.ptx,
                                                                 image.cubin)))
    image_path(shelf_copy).write_bytes(payload)
    doc = manifest_of(shelf_copy)
    doc["images"][NAME]["sha256"] = hashlib.sha256(payload).hexdigest()
    (shelf_copy / prebuilt.MANIFEST).write_text(json.dumps(doc))
    assert find(shelf_copy) is None


def test_unreadable_or_malformed_manifest_is_ignored(shelf_copy):
    good = manifest_of(shelf_copy)
    for text in ("{ not json", json.dumps([good]), json.dumps({**good, "images": None}),
                 json.dumps({**good, "min_driver": "thirteen"})):
        (shelf_copy / prebuilt.MANIFEST).write_text(text)
        assert find(shelf_copy) is None, text[:40]
    (shelf_copy / prebuilt.MANIFEST).write_text(json.dumps(good))
    assert find(shelf_copy) is not None  # the same folder, its manifest restored


def test_missing_folder_is_a_quiet_miss(tmp_path):
    assert find(tmp_path / "none") is None and prebuilt.Shelf(tmp_path / "none").candidates() is None


def test_wrong_arch_is_ignored(shelf_copy):
    assert find(shelf_copy, capability=(10, 0)) is None  # an sm_90a image on a Blackwell device
    assert find(shelf_copy, capability=(8, 0)) is None
    doc = manifest_of(shelf_copy)
    doc["images"][NAME]["capability"] = [10, 0]  # a manifest that says another device than this one
    (shelf_copy / prebuilt.MANIFEST).write_text(json.dumps(doc))
    assert find(shelf_copy) is None


def test_older_driver_or_other_compiler_is_ignored(shelf_dir):
    assert find(shelf_dir, driver=12080) is None  # a 13.x cubin on a 12.x driver
    assert find(shelf_dir, compiler="ptxas cuda_13.4.r13.4/compiler.0_0 -O3") is None
    assert find(shelf_dir, compiler="driver") is None


@pytest.mark.parametrize("settings", [knobs.Knobs(no_cache=True), knobs.Knobs(watchdog_ns=10 ** 9),
                                      knobs.Knobs(jit="driver"), knobs.Knobs(jit="nvjitlink")])
def test_knobs_that_want_a_build_never_ask_for_shipped_images(cache_root, settings, monkeypatch):
    monkeypatch.setattr("ptxgen.assemble.toolchain_version", lambda backend="ptxas": f"{backend} 0.0")
    asked = []
    image = loader.load_image(NAME, 13000, (9, 0), lambda ptx: b"built", settings,
                              prebuilt=lambda *a: asked.append(a))
    assert asked == [] and image.cubin == b"built"


def test_shipped_image_is_stored_in_the_cache_and_rebuild_replaces_it(shelf_dir, cache_root):
    shelf = prebuilt.Shelf(shelf_dir)
    first = loader.load_image(NAME, 13000, (9, 0), refuse_jit, prebuilt=shelf.find)
    assert first.origin == "prebuilt"
    again = loader.load_image(NAME, 13000, (9, 0), refuse_jit)  # no shelf: the cache has it
    assert again == first._replace(origin="cache")
    rebuilt = loader.load_image(NAME, 13000, (9, 0), lambda ptx: b"built", prebuilt=shelf.find, rebuild=True)
    assert rebuilt.origin == "built" and rebuilt.cubin == b"built"
    assert loader.load_image(NAME, 13000, (9, 0), refuse_jit).cubin == b"built"  # the entry was overwritten


def test_driver_refusing_a_shipped_cubin_gets_a_built_one(shelf_dir, cache_root, monkeypatch):
    from ptxgen.runtime import api, driver, fastpath, module

    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 0)
    monkeypatch.setattr(driver, "device_info", lambda ordinal: SimpleNamespace(capability=(9, 0)))
    monkeypatch.setattr(driver, "driver_version", lambda: 13000)
    monkeypatch.setattr(prebuilt, "find", prebuilt.Shelf(shelf_dir).find)
    monkeypatch.setattr(module, "compiler", lambda name: lambda ptx: b"built")
    monkeypatch.setattr(fastpath.Launcher, "for_kernel", classmethod(lambda cls, kernel: "launcher"))
    loaded = []

    def from_cubin(cls, cubin, spec, ordinal=None):
        loaded.append(cubin)
        if cubin.startswith(b"AOT-CUBIN"):
            raise CudaError("cuModuleLoadData failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        return SimpleNamespace(spec=spec)

    monkeypatch.setattr(module.Kernel, "from_cubin", classmethod(from_cubin))
    monkeypatch.setattr(api, "_loaded", {})
    found = api.loaded_kernel(NAME, 0)
    assert [c[:9] for c in loaded] == [b"AOT-CUBIN", b"built"] and found.spec.name == NAME
    assert loader.load_image(NAME, 13000, (9, 0), refuse_jit).cubin == b"built"  # the cache holds the built one


def test_source_content_hash_reads_bytes_not_mtimes(tmp_path, monkeypatch):
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    monkeypatch.setattr(loader, "source_files", lambda: (("ptxgen/a.py", str(src)),))
    digest = loader.source_content_hash.__wrapped__
    before = digest()
    os.utime(src, (1, 1))
    assert digest() == before  # an install or a copy changes mtimes only
    src.write_text("x = 2\n")
    assert digest() != before


def test_source_files_leave_out_bytecode_and_the_images():
    rels = [rel for rel, _ in loader.source_files()]
    assert "ptxgen/runtime/prebuilt.py" in rels and "emitters/__init__.py" in rels
    assert any(r.startswith("emitters/templates/") and r.endswith(".j2") for r in rels)
    assert not [r for r in rels if "__pycache__" in r or r.startswith("ptxgen/prebuilt/")]


def test_writer_is_deterministic_and_needs_both_compiler_arguments(shelf_dir, tmp_path):
    from ptxgen.aot import write_prebuilt

    write_prebuilt(tmp_path / "again", [NAME], compile_ptx=fake_compile, compiler=COMPILER)
    for path in shelf_dir.iterdir():
        assert (tmp_path / "again" / path.name).read_bytes() == path.read_bytes()
    with pytest.raises(ValueError, match="give both or neither"):
        write_prebuilt(tmp_path / "x", [NAME], compile_ptx=fake_compile)


def test_shipped_folder_is_well_formed_and_covers_the_gemm_choices():
    """The package's folder (not its freshness: a stale folder only costs speed): every image file present with
    its recorded sha256, and an image for every config the GEMM, dual-GEMM and FP8 choosers can pick on sm_90a."""
    from ptxgen.runtime.choose import FP8_PAIR_TILES, candidates, default_config_name

    doc = json.loads(open(os.path.join(prebuilt.FOLDER, prebuilt.MANIFEST), encoding="utf-8").read())
    assert doc["format"] == prebuilt.MANIFEST_FORMAT and doc["min_driver"] == prebuilt.min_driver_version(doc["compiler"])
    for name, entry in doc["images"].items():
        with open(os.path.join(prebuilt.FOLDER, entry["file"]), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == entry["sha256"], name
    pickable = {c.name for kind in ("gemm", "dual_gemm") for c in candidates("sm_90a", kind)}
    pickable |= {name for name, *_ in FP8_PAIR_TILES} | {"fp8_h100_64x128"}
    pickable |= {default_config_name((9, 0), kind) for kind in ("gemm", "dual_gemm", "gemm_fp8")}
    assert pickable - set(doc["images"]) == set()


def test_shipped_folder_is_fresh():
    """The package's images were compiled from these sources: a stale folder is ignored at run time (every first
    call with an empty cache then builds and compiles, 0.6-0.8 s on an H100 host against about 60 ms), so a change
    to any ptxgen or emitters source must come with ``python3 -m ptxgen build --prebuilt``."""
    from ptxgen import __version__

    doc = json.loads(open(os.path.join(prebuilt.FOLDER, prebuilt.MANIFEST), encoding="utf-8").read())
    assert doc["ptxgen"] == __version__
    assert doc["sources"] == loader.source_content_hash(), "stale ptxgen/prebuilt: run python3 -m ptxgen build --prebuilt"


def test_min_driver_version_of_a_compiler():
    assert prebuilt.min_driver_version(COMPILER) == 13000
    with pytest.raises(ValueError, match="names no cuda_MAJOR.MINOR"):
        prebuilt.min_driver_version("ptxas 13.5")
