"""ptxgen.dual_gemm_nvfp4 input rules and the NVFP4 tensor-map arguments, on CPU (no driver call)."""

from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch")

import ptxgen
from ptxgen.errors import ConfigError, ShapeError
from ptxgen.build import build
from ptxgen.runtime.nvfp4 import check_capability, check_nvfp4_inputs, map_args, map_slots, resolve_config
from ptxgen.formats import sf_from_blocked, sf_to_blocked

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
    assert check_nvfp4_inputs(*inputs(), sf_layout="blocked") == (256, 256, 512)
    assert check_nvfp4_inputs(*inputs(fp4=torch.uint8), sf_layout="blocked") == (256, 256, 512)
    out = torch.empty(256, 256, dtype=torch.float16)
    assert check_nvfp4_inputs(*inputs(), out=out, sf_layout="blocked") == (256, 256, 512)


def test_problem_permuted_scale_view_accepted() -> None:
    # the problem's sf layout: (32, 4, rest_m, 4, rest_k, l) view of a contiguous (l, rest_m, rest_k, 32, 4, 4) buffer
    m, k = 256, 512
    rest_m, rest_k = m // 128, k // 64
    buf = torch.arange(m * k // 16, dtype=torch.uint8).view(torch.float8_e4m3fn)
    view = buf.reshape(1, rest_m, rest_k, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)
    args = inputs(m, 256, k)
    args[3] = view
    assert check_nvfp4_inputs(*args, sf_layout="blocked") == (m, 256, k)
    # the view's logical element (i32, i4, rm, j4, rk) is scale (128 rm + 32 i4 + i32, 4 rk + j4)
    sf = sf_from_blocked(buf.view(torch.uint8).numpy(), m, k // 16)
    assert int(view[5, 2, 1, 3, 6, 0].view(torch.uint8)) == sf[128 + 64 + 5, 4 * 6 + 3]
    args[3] = view.contiguous()  # same shape, wrong strides: the bytes are no longer blocked
    with pytest.raises(ShapeError, match="sfa: shape=.*permuted view"):
        check_nvfp4_inputs(*args, sf_layout="blocked")


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
        check_nvfp4_inputs(*args, sf_layout="blocked")


@pytest.mark.parametrize(("m", "n", "k", "match"), [
    (256, 256, 384, r"K=384 \(a.shape\[1\]=192 bytes\): must be a positive multiple of 256"),
    (192, 256, 512, r"M=192: must be a positive multiple of 128 \(whole 128-row scale atoms\)"),
    (256, 320, 512, "N=320: must be a positive multiple of 128"),
])
def test_divisibility(m: int, n: int, k: int, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        check_nvfp4_inputs(*inputs(m, n, k), sf_layout="blocked")


def test_k_multiple_is_the_configs() -> None:
    with pytest.raises(ShapeError, match="K=512 .*: must be a positive multiple of 1024"):
        check_nvfp4_inputs(*inputs(), k_multiple=1024, sf_layout="blocked")


def test_out_rules() -> None:
    args = inputs()
    with pytest.raises(ShapeError, match="out: dtype=torch.bfloat16"):
        check_nvfp4_inputs(*args, out=torch.empty(256, 256, dtype=torch.bfloat16), sf_layout="blocked")
    with pytest.raises(ShapeError, match=r"out: shape=\(256, 128\)"):
        check_nvfp4_inputs(*args, out=torch.empty(256, 128, dtype=torch.float16), sf_layout="blocked")
    big = torch.zeros(256 * 256 * 2, dtype=torch.uint8)
    args[0] = big[: 256 * 256].view(256, 256).view(FP4)
    with pytest.raises(ShapeError, match="out overlaps a"):
        check_nvfp4_inputs(*args, out=big.view(torch.float16).view(256, 256), sf_layout="blocked")


def test_capability_and_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"NVIDIA H100 80GB HBM3 has 9\.0"):
        check_capability((9, 0), "NVIDIA H100 80GB HBM3")
    check_capability((10, 0))
    check_capability((10, 3))
    assert resolve_config(None).name == "nvfp4_dual_128x128"
    assert resolve_config("nvfp4_dual_256x128").cluster.size == 2
    with pytest.raises(ConfigError, match=r"config level9: operands=bf16: dual_gemm_nvfp4 needs an NVFP4 config "
                                          r"\(operands: nvfp4\): nvfp4_dual_128x128, nvfp4_dual_256x128"):
        resolve_config("level9")
    with pytest.raises(ConfigError, match="no such file, and not a shipped config"):
        resolve_config("nvfp4_dual_999")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_api_on_cpu_only_machine() -> None:
    with pytest.raises(ConfigError, match="no CUDA device"):
        ptxgen.dual_gemm_nvfp4(*inputs(), sf_layout="blocked")
    # input errors come first
    args = inputs()
    args[3] = args[3][:, :16]
    out = torch.full((256, 256), 7.0, dtype=torch.float16)
    with pytest.raises(ShapeError, match="sfa"):
        ptxgen.dual_gemm_nvfp4(*args, out=out, sf_layout="blocked")
    assert (out == 7).all()


# --- tensor maps ------------------------------------------------------------------------

ADDRS = {name: 0x10000 * (i + 1) for i, name in enumerate(("a", "b1", "b2", "sfa", "sfb1", "sfb2", "out"))}


@pytest.mark.parametrize("name", ["nvfp4_dual_128x128", "nvfp4_dual_256x128"])
def test_map_args_of_every_map(name) -> None:
    spec = build(name).launch
    m, n, k = 512, 3072, 7168
    maps = map_args(spec, m, n, k, ADDRS)
    assert set(maps) == {"a", "b", "b2", "sfa", "sfb", "sfb2", "d"}
    a, sfa, d = maps["a"], maps["sfa"], maps["d"]
    assert a.dims == (3584, 512) and a.strides == (3584,) and a.box == (128, 128)
    assert a.dtype == "CU_TENSOR_MAP_DATA_TYPE_UINT8" and a.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    # scales: the blocked buffer as 128-byte lines; a box is the 16 lines (4 atoms) of one row block's stage
    assert sfa.dims == (128, m * k // 16 // 128) and sfa.strides == (128,) and sfa.box == (128, 16)
    assert sfa.swizzle == "CU_TENSOR_MAP_SWIZZLE_NONE" and maps["sfb"].dims == (128, n * k // 16 // 128)
    assert d.dtype == "CU_TENSOR_MAP_DATA_TYPE_FLOAT16" and d.dims == (n, m)
    # the bytes one stage's boxes move are the plan's expect_tx share of one CTA
    box_bytes = sum(spec.tensor_maps[t].box_bytes for t in ("a", "b", "b2", "sfa", "sfb", "sfb2"))
    assert box_bytes == build(name).plan.loads.load_bytes
    with pytest.raises(ShapeError, match="tensor map 'a': data address 0x10008"):
        map_args(spec, m, n, k, {**ADDRS, "a": 0x10008})


def test_scale_box_is_the_blocked_atoms_of_one_stage() -> None:
    """Emulate the TMA box on the blocked bytes at the kernel's coordinates (row block rb, k-block s): it must be
    atoms (rb, 4s .. 4s+3) of the scale matrix."""
    spec = build("nvfp4_dual_128x128").launch
    m, k, s, rb = 256, 1024, 2, 1
    sf = np.random.default_rng(0).integers(0, 256, size=(m, k // 16), dtype=np.uint8)
    _, rows, cols, _ = map_slots(spec, m, 128, k, ADDRS)["sfa"]
    lines = sf_to_blocked(sf).reshape(rows, cols)
    box_rows = spec.tensor_maps["sfa"].box[1]
    row = rb * (k // 16) + s * box_rows  # the producer's coordinate: (m_row / 128) * (K / 16) + kb * 16
    box = lines[row: row + box_rows].reshape(-1)
    for kb in range(4):
        atom = box[512 * kb: 512 * kb + 512].reshape(32, 4, 4)  # [r, i, c]: row 32 i + r, scale column c
        for i in range(4):
            np.testing.assert_array_equal(atom[:, i, :], sf[128 * rb + 32 * i: 128 * rb + 32 * i + 32,
                                                           4 * (4 * s + kb): 4 * (4 * s + kb) + 4])


def test_launch_packs_the_kernel_signature(monkeypatch) -> None:
    """The launch path without a driver: maps in the kernel's parameter order, scalars d_ptr, m, n, k, fp16 out."""
    from types import SimpleNamespace

    import ptxgen.runtime.api as api
    import ptxgen.runtime.driver as driver
    from ptxgen.runtime import nvfp4

    spec = build("nvfp4_dual_256x128").launch
    calls = []
    launcher = SimpleNamespace(launch=lambda grid_x, maps, scalars, stream: calls.append((grid_x, maps, scalars)))
    monkeypatch.setattr(api, "loaded_kernel", lambda cfg, ordinal: SimpleNamespace(spec=spec, launcher=launcher))
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal: None)
    monkeypatch.setattr(driver, "device_info", lambda ordinal: SimpleNamespace(sm_count=148))
    monkeypatch.setattr(driver, "current_stream", lambda ordinal: 0)
    a, b1, b2, sfa, sfb1, sfb2 = inputs(512, 384, 768)
    out = nvfp4._launch(resolve_config("nvfp4_dual_256x128"), 0, 512, 384, 768,
                        dict(a=a, b1=b1, b2=b2, sfa=sfa, sfb1=sfb1, sfb2=sfb2, out=None))
    assert out.dtype == torch.float16 and tuple(out.shape) == (512, 384)
    (grid_x, maps, scalars), = calls
    assert grid_x == spec.grid.grid_x(512, 384, 148) == 12  # 2 x 3 cluster tiles of 256 x 128, 2 CTAs each
    assert [name for name, kind in spec.params if kind == "tensor_map"] == [
        "tmap_a", "tmap_b", "tmap_b2", "tmap_sfa", "tmap_sfb", "tmap_sfb2", "tmap_d"]
    assert maps[0] == (a.data_ptr(), 512, 384, 384) and maps[2] == (b2.data_ptr(), 384, 384, 384)
    assert maps[5] == (sfb2.data_ptr(), 384 * 48 // 128, 128, 128) and maps[6] == (out.data_ptr(), 512, 384, 384)
    assert scalars == (out.data_ptr(), 512, 384, 768)
