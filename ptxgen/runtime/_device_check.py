"""Throwaway device checks (versions, kernelParams tuple form, bench); deleted after the device run."""

from __future__ import annotations

import ctypes
import os
import sys
import traceback

import torch


def versions() -> None:
    import cuda.bindings

    from ptxgen.runtime import driver

    ordinal = driver.ensure_context()
    print(f"torch {torch.__version__}, cuda.bindings {cuda.bindings.__version__}, "
          f"driver {driver.driver_version()}, {driver.device_info(ordinal)}", flush=True)


def tuple_form_probe() -> None:
    from cuda.bindings import driver as cu

    from ptxgen.runtime.module import Kernel
    from ptxgen.runtime.tensormap import encode_tiled
    import importlib.util

    spec_file = importlib.util.spec_from_file_location("smoke_tests", "tests/test_gpu_runtime.py")
    smoke = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(smoke)
    SMOKE_PTX, TILE_BYTES, smoke_spec = smoke.SMOKE_PTX, smoke.TILE_BYTES, smoke.smoke_spec

    spec = smoke_spec()
    kernel = Kernel.from_ptx(SMOKE_PTX, spec)
    a = torch.randn(256, 64, device="cuda").to(torch.bfloat16)
    b = torch.randn(256, 64, device="cuda").to(torch.bfloat16)
    d = torch.zeros_like(b)
    buf = torch.zeros(4 * TILE_BYTES + 64, device="cuda", dtype=torch.uint8)
    maps = [encode_tiled(t, spec.tensor_maps[x]) for x, t in (("a", a), ("b", b), ("d", d))]
    cfg = kernel._config
    cfg.gridDimX = 4
    cfg.hStream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    values = (*maps, buf.data_ptr(), 256, 256, 64)
    types = (None, None, None, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32)
    err = cu.cuLaunchKernelEx(cfg, kernel.function, (values, types), 0)
    torch.cuda.synchronize()
    tile = buf[: 4 * TILE_BYTES].view(torch.bfloat16).view(256, 64)
    print(f"tuple-form kernelParams: {err}, A round trip {torch.equal(tile, a)}, D == B {torch.equal(d, b)}",
          flush=True)


def bench_all() -> None:
    from ptxgen.bench import bench
    from ptxgen.errors import PtxgenError

    out = os.environ.get("OUT", "/tmp")
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048)]
    for config in ("h100_128x256", "h100_128x128", "h100_256x128"):
        try:
            bench([config], shapes, warmup=5, iters=20, json_path=f"{out}/bench_{config}.json")
        except PtxgenError as exc:
            print(f"bench {config}: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    for step in sys.argv[1:]:
        print(f"== {step}", flush=True)
        try:
            globals()[step]()
        except Exception:  # throwaway diagnostics: report and go on to the next step
            traceback.print_exc()
