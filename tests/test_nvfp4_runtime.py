"""ptxgen.dual_gemm_nvfp4 input rules and the NVFP4 tensor-map arguments, on CPU (no driver call)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ptxgen
from ptxgen.errors import ConfigError, ShapeError
from ptxgen.runtime.nvfp4 import (
    TILES,
    check_capability,
    check_nvfp4_inputs,
    map_args,
    operand_map_args,
    scale_map_args,
    tile_for,
)
from ptxgen.sim.nvfp4 import sf_from_blocked

FP4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)


def inputs(m: int = 256, n: int = 256, k: int = 512, fp4=FP4):
    a = torch.zeros(m, k // 2, dtype=torch.uint8).view(fp4)
    b1 = torch.zeros(n, k // 2, dtype=torch.uint8).view(fp4)
    b2 = torch.zeros(n, k // 2, dtype=torch.uint8).view(fp4)
    sfa = torch.zeros(m, k // 16, dtype=torch.float8_e4m3fn)
    sfb1 = torch.zeros(n, k // 16, dtype=torch.float8_e4m3fn)
    sfb2 = torch.zeros(n, k // 16, dtype=torch.float8_e4m3fn)
    return [a, b1, b2, sfa, sfb1, sfb2]


def test_valid_inputs() -> None:
    assert check_nvfp4_inputs(*inputs()) == (256, 256, 512)
    assert check_nvfp4_inputs(*inputs(fp4=torch.uint8)) == (256, 256, 512)
    out = torch.empty(256, 256, dtype=torch.float16)
    assert check_nvfp4_inputs(*inputs(), out=out) == (256, 256, 512)


def test_problem_permuted_scale_view_accepted() -> None:
    # the problem's sf layout: (32, 4, rest_m, 4, rest_k, l) view of a contiguous (l, rest_m, rest_k, 32, 4, 4) buffer
    m, k = 256, 512
    rest_m, rest_k = m // 128, k // 64
    buf = torch.arange(m * k // 16, dtype=torch.uint8).view(torch.float8_e4m3fn)
    view = buf.reshape(1, rest_m, rest_k, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)
    args = inputs(m, 256, k)
    args[3] = view
    assert check_nvfp4_inputs(*args) == (m, 256, k)
    # the view's logical element (i32, i4, rm, j4, rk) is scale (128 rm + 32 i4 + i32, 4 rk + j4)
    sf = sf_from_blocked(buf.view(torch.uint8).numpy(), m, k // 16)
    assert int(view[5, 2, 1, 3, 6, 0].view(torch.uint8)) == sf[128 + 64 + 5, 4 * 6 + 3]
    args[3] = view.contiguous()  # same shape, wrong strides: the bytes are no longer blocked
    with pytest.raises(ShapeError, match="sfa: shape=.*permuted view"):
        check_nvfp4_inputs(*args)


@pytest.mark.parametrize(("index", "bad", "match"), [
    (0, lambda t: t.view(torch.uint8).to(torch.int8), "a: dtype=torch.int8"),
    (0, lambda t: t.view(torch.uint8)[:, :128].reshape(-1), "a: shape=.*2-D"),
    (0, lambda t: t.view(torch.uint8).t().contiguous().t(), "a: stride"),
    (1, lambda t: t.view(torch.uint8)[:128], r"b1: shape=\(128, 256\).*|b2: shape"),
    (3, lambda t: t.view(torch.uint8), "sfa: dtype=torch.uint8"),
    (3, lambda t: t[:, :16], r"sfa: shape=\(256, 16\)"),
    (4, lambda t: t.reshape(-1), "sfb1: shape"),
    ("x", lambda t: t, "must be a torch.Tensor"),
])
def test_input_errors(index, bad, match: str) -> None:
    args = inputs()
    if index == "x":
        args[2] = np.zeros((256, 256), np.uint8)
    else:
        args[index] = bad(args[index])
    with pytest.raises(ShapeError, match=match):
        check_nvfp4_inputs(*args)


@pytest.mark.parametrize(("m", "n", "k", "match"), [
    (256, 256, 384, r"K=384 \(a.shape\[1\]=192 bytes\): must be a positive multiple of 256"),
    (192, 256, 512, "M=192: must be a positive multiple of 128"),
    (256, 320, 512, "N=320: must be a positive multiple of 128"),
])
def test_divisibility(m: int, n: int, k: int, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        check_nvfp4_inputs(*inputs(m, n, k))


def test_two_cta_tile_needs_m_multiple_of_256() -> None:
    with pytest.raises(ShapeError, match="M=384: must be a positive multiple of 256"):
        check_nvfp4_inputs(*inputs(384, 256, 512), tile=TILES["nvfp4_dual_256x128_c2"])


def test_out_rules() -> None:
    args = inputs()
    with pytest.raises(ShapeError, match="out: dtype=torch.bfloat16"):
        check_nvfp4_inputs(*args, out=torch.empty(256, 256, dtype=torch.bfloat16))
    with pytest.raises(ShapeError, match=r"out: shape=\(256, 128\)"):
        check_nvfp4_inputs(*args, out=torch.empty(256, 128, dtype=torch.float16))
    big = torch.zeros(256 * 256 * 2, dtype=torch.uint8)
    args[0] = big[: 256 * 256].view(256, 256).view(FP4)
    with pytest.raises(ShapeError, match="out overlaps a"):
        check_nvfp4_inputs(*args, out=big.view(torch.float16).view(256, 256))


def test_capability_and_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"NVIDIA H100 80GB HBM3 has 9\.0"):
        check_capability((9, 0), "NVIDIA H100 80GB HBM3")
    check_capability((10, 0))
    check_capability((10, 3))
    with pytest.raises(ConfigError, match="configs are"):
        tile_for("level9")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_api_on_cpu_only_machine() -> None:
    with pytest.raises(ConfigError, match="no CUDA device"):
        ptxgen.dual_gemm_nvfp4(*inputs())
    # input errors come first
    args = inputs()
    args[3] = args[3][:, :16]
    out = torch.full((256, 256), 7.0, dtype=torch.float16)
    with pytest.raises(ShapeError, match="sfa"):
        ptxgen.dual_gemm_nvfp4(*args, out=out)
    assert (out == 7).all()


# --- tensor maps ------------------------------------------------------------------------


def test_operand_map() -> None:
    args = operand_map_args("a", 0x10000, 512, 7168, 128)
    assert args.dims == (3584, 512) and args.strides == (3584,) and args.box == (128, 128)
    assert args.dtype == "CU_TENSOR_MAP_DATA_TYPE_UINT8" and args.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert args.box_bytes == 16384  # 128 rows x 128 B: one stage of A (K = 256)


def test_scale_map() -> None:
    args = scale_map_args("sfa", 0x10000, 512, 7168, 128)
    # 112 atoms along K per 128-row block, 4 lines of 128 B each; 4 row blocks
    assert args.dims == (128, 448, 4) and args.strides == (128, 112 * 512) and args.box == (128, 16, 1)
    assert args.box_bytes == 2048 and args.swizzle == "CU_TENSOR_MAP_SWIZZLE_NONE"
    assert scale_map_args("sfb", 0, 256, 256, 256).box_bytes == 4096


def test_scale_map_box_is_the_blocked_atoms_of_one_stage() -> None:
    """Emulate the TMA box on the blocked bytes: it must be atoms (rb, 4s .. 4s+3) of the scale matrix."""
    m, k, s, rb = 256, 1024, 2, 1
    sf = np.random.default_rng(0).integers(0, 256, size=(m, k // 16), dtype=np.uint8)
    from ptxgen.sim.nvfp4 import sf_to_blocked

    blk = sf_to_blocked(sf)
    args = scale_map_args("sfa", 0, m, k, 128)
    d0, d1, _ = args.dims
    view = blk.reshape(args.dims[::-1])  # (row blocks, lines, 128 B)
    box = view[rb, 16 * s: 16 * s + 16, :].reshape(-1)  # what the box at coords (0, 16 s, rb) lands
    for kb in range(4):
        atom = box[512 * kb: 512 * kb + 512].reshape(32, 4, 4)  # [r, i, c]: row 32 i + r, scale column c
        for i in range(4):
            np.testing.assert_array_equal(atom[:, i, :], sf[128 * rb + 32 * i: 128 * rb + 32 * i + 32,
                                                           4 * (4 * s + kb): 4 * (4 * s + kb) + 4])


def test_map_args_all_six_and_rules() -> None:
    addrs = {name: 0x1000 * (i + 1) for i, name in enumerate(("a", "b1", "b2", "sfa", "sfb1", "sfb2"))}
    maps = map_args(512, 3072, 7168, TILES["nvfp4_dual_128x128"], addrs)
    assert set(maps) == set(addrs)
    # bytes per stage = expect_tx: A + B1 + B2 (16 KiB each) + 3 scale tiles (2 KiB each)
    assert sum(mp.box_bytes for mp in maps.values()) == 3 * 16384 + 3 * 2048
    with pytest.raises(ShapeError, match="address 0x1008"):
        operand_map_args("a", 0x1008, 128, 256, 128)
    with pytest.raises(ShapeError, match="box\\[1\\]=512"):
        operand_map_args("a", 0, 1024, 256, 512)
