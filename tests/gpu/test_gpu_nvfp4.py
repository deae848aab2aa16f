"""GPU (any CUDA device, e.g. H100): the driver encodes the seven NVFP4 tensor maps; the API refuses off 10.x.

Run on a GPU machine: ``python -m pytest -q -m gpu tests/gpu/test_gpu_nvfp4.py``.
"""

from __future__ import annotations

import pytest

from ptxgen.build import build
from ptxgen.errors import ConfigError
from ptxgen.runtime.fastpath import encode_map_bytes
from ptxgen.runtime.nvfp4 import map_slots, nvfp4_configs

pytestmark = pytest.mark.gpu

SHAPES = [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]


@pytest.mark.parametrize("config", nvfp4_configs())
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_encode_all_maps(m: int, n: int, k: int, config: str) -> None:
    """cuTensorMapEncodeTiled accepts every map of the shipped configs' launch specs (packed e2m1 and scale
    bytes as UINT8, C as FLOAT16) for the problem's shapes: the host side of a launch, short of sm_100."""
    import torch

    dev = torch.device("cuda")
    tensors = {
        "a": torch.empty(m, k // 2, dtype=torch.uint8, device=dev),
        "b1": torch.empty(n, k // 2, dtype=torch.uint8, device=dev),
        "b2": torch.empty(n, k // 2, dtype=torch.uint8, device=dev),
        "sfa": torch.empty(m, k // 16, dtype=torch.float8_e4m3fn, device=dev),
        "sfb1": torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device=dev),
        "sfb2": torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device=dev),
        "out": torch.empty(m, n, dtype=torch.float16, device=dev),
    }
    spec = build(config).launch
    slots = map_slots(spec, m, n, k, {name: t.data_ptr() for name, t in tensors.items()})
    assert len(slots) == 7
    for name, slot in slots.items():  # the launch path's encoder (the Launcher's tensor-map cache calls it)
        assert len(encode_map_bytes(*slot, spec.tensor_maps[name])) == 128, name


def test_api_refuses_off_sm100() -> None:
    import torch

    cap = torch.cuda.get_device_capability()
    if cap[0] == 10:
        pytest.skip("device is compute capability 10.x: the refusal does not apply")
    dev = torch.device("cuda")
    m, n, k = 256, 256, 512
    fp4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
    a = torch.zeros(m, k // 2, dtype=torch.uint8, device=dev).view(fp4)
    b = torch.zeros(n, k // 2, dtype=torch.uint8, device=dev).view(fp4)
    sf = torch.zeros(m, k // 16, dtype=torch.float8_e4m3fn, device=dev)
    out = torch.full((m, n), 3.0, dtype=torch.float16, device=dev)
    import ptxgen

    with pytest.raises(ConfigError, match=rf"dual_gemm_nvfp4 needs compute capability 10\.x .* has {cap[0]}\.{cap[1]}"):
        ptxgen.dual_gemm_nvfp4(a, b, b.clone(), sf, sf.clone(), sf.clone(), out=out, sf_layout="rowmajor")
    assert bool((out == 3).all())
