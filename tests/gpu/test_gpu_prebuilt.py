"""GPU tests of the kernel images compiled ahead of time (marked ``gpu``; need a compute capability 9.0 GPU).

- every shipped image the chooser can pick loads from the package folder on this driver and computes the GEMM
  (skipped when the folder is stale: a stale folder is a build, tested elsewhere);
- a shipped cubin the driver refuses is replaced by a built one, which runs and is what the cache then holds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zlib

import pytest

from tests.gpu.test_gpu_fastpath import operands, rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh_process(monkeypatch, tmp_path):
    """An empty kernel cache and no kernel loaded yet in this process (as a fresh one)."""
    from ptxgen.runtime import api

    monkeypatch.setenv("PTXGEN_CACHE_DIR", str(tmp_path / "kcache"))
    monkeypatch.setattr(api, "_loaded", {})
    monkeypatch.setattr(api, "_calls", {})
    return tmp_path


@pytest.mark.parametrize("config", ["h100_256x128", "h100_128x256", "h100_64x128_sk2"])
def test_shipped_image_loads_and_computes(torch, fresh_process, config):
    from ptxgen.runtime import driver, gemm, loader, prebuilt

    if prebuilt.shelf().manifest is None:
        pytest.skip("ptxgen/prebuilt is stale for these sources (python3 -m ptxgen build --prebuilt)")
    info = driver.device_info(torch.cuda.current_device())
    image = loader.load_image(config, driver.driver_version(), info.capability,
                              lambda ptx: pytest.fail("compiled although shipped"), prebuilt=prebuilt.find)
    assert image.origin == "prebuilt"
    a, b = operands(torch, 1000, 1032, 512, seed=3)
    out = torch.full((1000, 1032), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm(a, b, out=out, config=config)  # the cache entry just written: the shipped cubin
    torch.cuda.synchronize()
    assert rel_err(torch, out, a, b) < 1e-2


def test_refused_shipped_cubin_falls_back_to_a_build(torch, fresh_process, monkeypatch):
    from ptxgen.runtime import api, driver, gemm, loader, prebuilt

    if prebuilt.shelf().manifest is None:
        pytest.skip("ptxgen/prebuilt is stale for these sources (python3 -m ptxgen build --prebuilt)")
    config = "h100_128x128"
    folder = shutil.copytree(prebuilt.FOLDER, fresh_process / "prebuilt")
    doc = json.loads((folder / prebuilt.MANIFEST).read_text())
    entry = doc["images"][config]
    image = loader.unpack_image(zlib.decompress((folder / entry["file"]).read_bytes()))
    bad = zlib.compress(loader.pack_image(loader.KernelImage(image.spec, image.ptx, b"\x7fELF" + bytes(60))))
    (folder / entry["file"]).write_bytes(bad)
    entry["sha256"] = hashlib.sha256(bad).hexdigest()
    (folder / prebuilt.MANIFEST).write_text(json.dumps(doc))
    monkeypatch.setattr(prebuilt, "find", prebuilt.Shelf(folder).find)
    a, b = operands(torch, 512, 512, 256, seed=4)
    out = gemm(a, b, config=config)
    torch.cuda.synchronize()
    assert rel_err(torch, out, a, b) < 1e-2
    info = driver.device_info(torch.cuda.current_device())
    stored = loader.load_image(config, driver.driver_version(), info.capability, lambda ptx: pytest.fail("rebuilt"))
    assert stored.origin == "cache" and stored.cubin != b"\x7fELF" + bytes(60)
    assert api._loaded  # loaded once, through the fallback
