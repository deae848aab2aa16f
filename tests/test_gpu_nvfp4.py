"""GPU (any CUDA device, e.g. H100): the driver encodes the six NVFP4 tensor maps; the API refuses off 10.x.

Run through the device tool: ``python -m pytest -q -m gpu tests/test_gpu_nvfp4.py``.
"""

from __future__ import annotations

import pytest

from ptxgen.errors import ConfigError
from ptxgen.runtime.nvfp4 import TILES, encode_map, map_args

pytestmark = pytest.mark.gpu

SHAPES = [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_encode_all_maps(m: int, n: int, k: int, tile: str) -> None:
    import torch

    dev = torch.device("cuda")
    tensors = {
        "a": torch.empty(m, k // 2, dtype=torch.uint8, device=dev),
        "b1": torch.empty(n, k // 2, dtype=torch.uint8, device=dev),
        "b2": torch.empty(n, k // 2, dtype=torch.uint8, device=dev),
        "sfa": torch.empty(m, k // 16, dtype=torch.float8_e4m3fn, device=dev),
        "sfb1": torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device=dev),
        "sfb2": torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device=dev),
    }
    maps = map_args(m, n, k, TILES[tile], {name: t.data_ptr() for name, t in tensors.items()})
    for name, args in maps.items():
        tmap = encode_map(args)
        assert tmap is not None, name


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

    with pytest.raises(ConfigError, match=rf"has {cap[0]}\.{cap[1]}"):
        ptxgen.dual_gemm_nvfp4(a, b, b.clone(), sf, sf.clone(), sf.clone(), out=out)
    assert bool((out == 3).all())
