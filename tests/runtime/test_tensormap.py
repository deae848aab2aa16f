"""Tensor-map arguments (ptxgen.runtime.tensormap): box, swizzle, L2 promotion, stride and address rules."""

from __future__ import annotations

import pytest

from ptxgen.errors import ShapeError
from tests.helpers.runtime import bench_module, bf16, spec, torch_needed


def test_tiled_args_valid():
    from ptxgen.runtime.tensormap import tiled_args

    args = tiled_args(0x1000, rows=300, cols=136, row_stride_elems=136, spec=spec())
    assert args.dims == (136, 300)  # innermost first
    assert args.strides == (272,)
    assert args.box == (64, 64)
    assert args.dtype == "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"
    assert args.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert args.l2_promotion == "CU_TENSOR_MAP_L2_PROMOTION_L2_128B"  # 272-byte rows straddle L2 lines: capped


@pytest.mark.parametrize("stride, promotion, expect", [
    (7040, "256B", "256B"), (7104, "256B", "256B"),  # 128-byte multiples: each 128-byte box row is one L2 line
    (7000, "256B", "128B"), (4072, "256B", "128B"), (1240, "256B", "128B"),  # rows straddle lines: capped at 128 B
    (7000, "none", "none"), (7000, "64B", "64B"), (7000, "128B", "128B")])  # below the cap: as the spec says
def test_l2_promotion_capped_for_unaligned_row_strides(stride, promotion, expect):
    """docs/performance.md, "Ragged K": 256-byte promotion on rows that straddle L2 lines is what halves the kernel."""
    from ptxgen.runtime.tensormap import tiled_args

    args = tiled_args(0x1000, rows=64, cols=stride - 8, row_stride_elems=stride, spec=spec(l2=promotion))
    assert args.l2_promotion == f"CU_TENSOR_MAP_L2_PROMOTION_{'NONE' if expect == 'none' else 'L2_' + expect}"


@pytest.mark.parametrize("a, b, stride, expect", [
    ("128B", "none", 7000, {"a": "L2_128B", "b": "NONE", "b2": "NONE", "d": "L2_128B"}),
    ("256B", "keep", 7000, {"a": "L2_256B", "b": "L2_128B", "b2": "L2_128B", "d": "L2_128B"}),  # past the cap
    ("none", "64B", 7040, {"a": "NONE", "b": "L2_64B", "b2": "L2_64B", "d": "L2_256B"}),
    ("keep", "keep", 7000, {"a": "L2_128B", "b": "L2_128B", "b2": "L2_128B", "d": "L2_128B"})])
def test_promotion_split_sets_each_operand(monkeypatch, a, b, stride, expect):
    """bench/promotion_split.py (docs/performance.md, "Ragged K"): the probe encodes A's map with ``--a`` and B's (and B2's) with ``--b`` whatever the stride, D's as the runtime."""
    from ptxgen.runtime import tensormap

    monkeypatch.setattr(tensormap, "tiled_args", tensormap.tiled_args)  # restored after the test
    bench_module("promotion_split").split_promotion(a, b)
    for tensor, promotion in expect.items():
        args = tensormap.tiled_args(0x1000, rows=64, cols=stride - 8, row_stride_elems=stride, spec=spec(tensor=tensor))
        assert args.l2_promotion == f"CU_TENSOR_MAP_L2_PROMOTION_{promotion}", tensor


def test_promotion_split_rejects_unknown_promotion(monkeypatch):
    from ptxgen.runtime import tensormap

    monkeypatch.setattr(tensormap, "tiled_args", tensormap.tiled_args)
    with pytest.raises(SystemExit, match="promotion '512B': must be keep or one of"):
        bench_module("promotion_split").split_promotion("512B", "none")


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(box=(64, 257)), r"tensor map 'a': box\[1\]=257: must be in \[1, 256\]"),
        (dict(box=(0, 64)), r"box\[0\]=0: must be in \[1, 256\]"),
        (dict(box=(128, 64)), r"box\[0\]=128 \(256 B\): with 128B swizzle the inner box must be at most 128 bytes"),
        (dict(box=(64, 64), swizzle="64B"), r"with 64B swizzle .* at most 64 bytes \(32 elements\)"),
        (dict(box=(4, 64), swizzle="none"), r"box\[0\]=4 \(8 B\): inner box must be a multiple of 16 bytes"),
        (dict(swizzle="96B"), r"swizzle='96B': must be one of"),
        (dict(l2="512B"), r"l2_promotion='512B': must be one of"),
        (dict(dtype="fp8"), r"dtype='fp8': must be one of"),
    ],
)
def test_tensor_map_spec_rejected(bad, match):
    from ptxgen.runtime.tensormap import tiled_args

    with pytest.raises(ValueError, match=match):
        tiled_args(0x1000, rows=256, cols=256, row_stride_elems=256, spec=spec(**bad))


def test_no_swizzle_allows_wide_box():
    from ptxgen.runtime.tensormap import tiled_args

    assert tiled_args(0, 256, 256, 256, spec(box=(256, 8), swizzle="none")).box == (256, 8)


def test_tensor_map_stride_not_16_bytes():
    from ptxgen.runtime.tensormap import tiled_args

    with pytest.raises(ShapeError, match=r"row stride 12 elements = 24 B: must be a multiple of 16 bytes \(8 bf16"):
        tiled_args(0x1000, rows=8, cols=12, row_stride_elems=12, spec=spec())


def test_tensor_map_misaligned_address():
    from ptxgen.runtime.tensormap import tiled_args

    with pytest.raises(ShapeError, match=r"data address 0x1008: must be 16-byte aligned"):
        tiled_args(0x1008, rows=8, cols=64, row_stride_elems=64, spec=spec())


def test_tensor_map_empty_dim():
    from ptxgen.runtime.tensormap import tiled_args

    with pytest.raises(ShapeError, match=r"rows=0: must be in \[1, 2\*\*32\]"):
        tiled_args(0x1000, rows=0, cols=64, row_stride_elems=64, spec=spec())


@torch_needed
def test_tensor_args_from_tensor(torch_mod):
    from ptxgen.runtime.tensormap import tensor_args

    t = bf16(100, 72)
    args = tensor_args(t, spec())
    assert args.dims == (72, 100) and args.strides == (144,) and args.address == t.data_ptr()
    with pytest.raises(ShapeError, match=r"dtype=torch.float32: must be torch.bfloat16"):
        tensor_args(torch_mod.zeros(8, 64), spec())
    with pytest.raises(ShapeError, match=r"innermost stride must be 1"):
        tensor_args(bf16(64, 64).T, spec())
    with pytest.raises(ShapeError, match=r"must be 2-D"):
        tensor_args(bf16(2, 8, 64), spec())
