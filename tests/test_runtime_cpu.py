"""Runtime tests that need no GPU: input checks, the kernel cache, tensor-map validation,
the grid policy, parameter packing, driver error mapping and benchmark helpers."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

import pytest

from ptxgen.errors import ConfigError, CudaError, PtxgenError, ShapeError
from ptxgen.launch import GridPolicy, TensorMapSpec
from ptxgen.runtime import cache

# --------------------------------------------------------------------------- input checks

torch_needed = pytest.mark.usefixtures("torch_mod")


@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch")


def bf16(*shape, device="cpu"):
    import torch

    return torch.zeros(shape, dtype=torch.bfloat16, device=device)


def check(a, b, out=None, k_multiple=8, **kw):
    from ptxgen.runtime import check_gemm_inputs

    kw.setdefault("require_cuda", False)
    return check_gemm_inputs(a, b, out, k_multiple, **kw)


def expect_shape_error(match, *args, **kw):
    with pytest.raises(ShapeError, match=match) as info:
        check(*args, **kw)
    assert isinstance(info.value, PtxgenError)
    return str(info.value)


@torch_needed
def test_valid_inputs_return_mnk():
    assert check(bf16(5, 16), bf16(7, 16), bf16(5, 7)) == (5, 7, 16)


@torch_needed
def test_size_one_dims_are_accepted():
    assert check(bf16(1, 8), bf16(1, 8), bf16(1, 1)) == (1, 1, 8)


@torch_needed
def test_a_not_a_tensor():
    expect_shape_error(r"^a: got list: must be a torch.Tensor", [[1.0]], bf16(4, 8))


@torch_needed
def test_b_not_a_tensor():
    expect_shape_error(r"^b: got NoneType: must be a torch.Tensor", bf16(4, 8), None)


@torch_needed
def test_a_not_2d():
    expect_shape_error(r"^a: shape=\(2, 4, 8\): must be 2-D \[M, K\]", bf16(2, 4, 8), bf16(4, 8))


@torch_needed
def test_b_not_2d():
    expect_shape_error(r"^b: shape=\(8,\): must be 2-D \[N, K\]", bf16(4, 8), bf16(8))


@torch_needed
def test_a_wrong_dtype(torch_mod):
    a = torch_mod.zeros(4, 8, dtype=torch_mod.float16)
    expect_shape_error(r"^a: dtype=torch.float16: must be torch.bfloat16", a, bf16(4, 8))


@torch_needed
def test_b_wrong_dtype(torch_mod):
    b = torch_mod.zeros(4, 8, dtype=torch_mod.float32)
    expect_shape_error(r"^b: dtype=torch.float32: must be torch.bfloat16", bf16(4, 8), b)


@torch_needed
def test_cpu_tensor_rejected_when_cuda_required():
    expect_shape_error(r"^a: device=cpu: must be a CUDA tensor", bf16(4, 8), bf16(4, 8), require_cuda=True)


@torch_needed
def test_b_on_another_device():
    expect_shape_error(r"^b: device=meta: must be on a's device cpu", bf16(4, 8), bf16(4, 8, device="meta"))


@torch_needed
def test_a_not_row_major():
    a = bf16(16, 8).T  # [8, 16] with strides (1, 8)
    msg = expect_shape_error(r"^a: shape=\(8, 16\) stride=\(1, 8\): must be row-major contiguous", a, bf16(4, 16))
    assert ".contiguous()" in msg


@torch_needed
def test_b_padded_rows_rejected():
    b = bf16(4, 24)[:, :16]  # stride(0) = 24 != 16
    expect_shape_error(r"^b: shape=\(4, 16\) stride=\(24, 1\): .*stride\(0\) == 16", bf16(4, 16), b)


@torch_needed
def test_a_misaligned_data_ptr():
    base = bf16(4 * 8 + 8)
    a = base[1:33].view(4, 8)  # 2-byte offset from an aligned allocation
    assert a.data_ptr() % 16
    expect_shape_error(r"^a: data_ptr=0x[0-9a-f]+: must be 16-byte aligned", a, bf16(4, 8))


@torch_needed
def test_k_mismatch():
    expect_shape_error(r"^b: shape=\(4, 16\): K=16 must equal a's K=8 .*pass B, not B.T", bf16(4, 8), bf16(4, 16))


@torch_needed
def test_m_zero():
    expect_shape_error(r"^M=0: must be >= 1", bf16(0, 8), bf16(4, 8))


@torch_needed
def test_n_zero():
    expect_shape_error(r"^N=0: must be >= 1", bf16(4, 8), bf16(0, 8))


@torch_needed
def test_k_zero():
    expect_shape_error(r"^K=0: must be >= 1", bf16(4, 0), bf16(4, 0))


@torch_needed
def test_k_not_16_byte_multiple():
    expect_shape_error(r"^K=12: must be a multiple of 8 \(K\*2=24 bytes; TMA needs 16-byte row strides\)",
                       bf16(4, 12), bf16(4, 12))


@torch_needed
def test_k_not_config_multiple():
    expect_shape_error(r"^K=72: must be a multiple of 64", bf16(4, 72), bf16(4, 72), k_multiple=64)


@torch_needed
def test_n_not_multiple_when_d_stored_by_tma():
    expect_shape_error(r"^N=5: must be a multiple of 8 for this config", bf16(4, 8), bf16(5, 8), n_multiple=8)


@torch_needed
def test_out_not_a_tensor():
    expect_shape_error(r"^out: got int: must be a torch.Tensor", bf16(4, 8), bf16(4, 8), 3)


@torch_needed
def test_out_wrong_shape():
    expect_shape_error(r"^out: shape=\(4, 5\): must be \[M, N\] = \(4, 6\)", bf16(4, 8), bf16(6, 8), bf16(4, 5))


@torch_needed
def test_out_wrong_dtype(torch_mod):
    out = torch_mod.zeros(4, 6, dtype=torch_mod.float32)
    expect_shape_error(r"^out: dtype=torch.float32: must be torch.bfloat16", bf16(4, 8), bf16(6, 8), out)


@torch_needed
def test_out_wrong_device():
    expect_shape_error(r"^out: device=meta: must be on a's device cpu", bf16(4, 8), bf16(6, 8),
                       bf16(4, 6, device="meta"))


@torch_needed
def test_out_not_contiguous():
    out = bf16(6, 4).T
    expect_shape_error(r"^out: shape=\(4, 6\) stride=\(1, 4\): must be row-major contiguous", bf16(4, 8),
                       bf16(6, 8), out)


@torch_needed
@pytest.mark.parametrize("operand", ["a", "b"])
def test_out_aliasing_an_input(operand):
    a, b = bf16(8, 8), bf16(8, 8)
    out = a if operand == "a" else b
    expect_shape_error(rf"^out: memory overlaps {operand}: D must not alias an input", a, b, out)


@torch_needed
def test_gemm_rejects_cpu_inputs_before_any_driver_call(monkeypatch):
    from ptxgen.runtime import api, driver

    def no_driver():
        raise AssertionError("driver touched")

    monkeypatch.setattr(driver, "cu", no_driver)
    monkeypatch.setattr(api, "built_config", no_driver)
    with pytest.raises(ShapeError, match=r"^a: device=cpu: must be a CUDA tensor"):
        api.gemm(bf16(4, 8), bf16(4, 8))


def test_default_config_by_capability():
    from ptxgen.runtime import api

    assert api.default_config_name((9, 0)) == api.DEFAULT_SM90 == "h100_256x128"
    assert api.default_config_name((10, 0)) == api.DEFAULT_SM100 == "level9"
    with pytest.raises(ConfigError, match=r"compute capability 8.0: no default config"):
        api.default_config_name((8, 0))


def test_arch_must_match_device():
    from ptxgen.runtime import api

    api.check_arch("x", "sm_90a", (9, 0))
    with pytest.raises(ConfigError, match=r"config x: arch=sm_100a needs compute capability 10.0, the device has 9.0"):
        api.check_arch("x", "sm_100a", (9, 0))
    with pytest.raises(ConfigError, match=r"arch='sm_80'"):
        api.check_arch("x", "sm_80", (8, 0))


# --------------------------------------------------------------------------- cache


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "kcache"
    monkeypatch.setenv(cache.ENV_VAR, str(root))
    return root


class Counter:
    """A build_fn that counts its calls."""

    def __init__(self, payload=b"cubin-bytes"):
        self.calls = 0
        self.payload = payload

    def __call__(self):
        self.calls += 1
        return self.payload


def entry_files(root: Path) -> list[Path]:
    """Every file under the cache root except the build locks (``<entry>.lock``, kept by design)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")


def test_cache_dir_env_var_honoured(cache_root):
    assert cache.cache_dir() == cache_root
    cache.get_or_build(["k"], Counter())
    files = entry_files(cache_root)
    assert len(files) == 1 and files[0].suffix == ".bin"


def test_cache_dir_default(monkeypatch, tmp_path):
    """Without PTXGEN_CACHE_DIR: the platform convention (XDG on Linux)."""
    monkeypatch.delenv(cache.ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    pytest.importorskip("platformdirs")
    import platformdirs

    assert cache.cache_dir() == Path(platformdirs.user_cache_dir("ptxgen", appauthor=False))
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert cache.cache_dir() == tmp_path / ".cache" / "ptxgen"
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_dir() == tmp_path / "xdg" / "ptxgen"


def test_cache_miss_then_hit(cache_root):
    build = Counter()
    assert cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build) == b"cubin-bytes"
    assert cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build) == b"cubin-bytes"
    assert build.calls == 1


def test_cache_key_parts_are_separated(cache_root):
    assert cache.cache_key(["ab", "c"]) != cache.cache_key(["a", "bc"])
    assert cache.cache_key(["x"]) == cache.cache_key([b"x"])
    build = Counter()
    cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build)
    cache.get_or_build(["ptx", "sm_90a", "driver=12080"], build)
    assert build.calls == 2


def test_cache_key_rejects_other_types():
    with pytest.raises(TypeError, match="str or bytes"):
        cache.cache_key([1])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda blob: blob[:-3], id="truncated-payload"),
        pytest.param(lambda blob: blob[:20], id="truncated-header"),
        pytest.param(lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]), id="flipped-bit"),
        pytest.param(lambda blob: b"", id="empty"),
        pytest.param(lambda blob: b"not a cache entry at all" * 4, id="foreign"),
    ],
)
def test_corrupt_entry_is_rebuilt(cache_root, damage):
    build = Counter()
    cache.get_or_build(["k"], build)
    (path,) = entry_files(cache_root)
    path.write_bytes(damage(path.read_bytes()))
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2
    assert cache.read_entry(path) == b"cubin-bytes"  # repaired on disk
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2


def test_entry_header_format():
    blob = cache.encode_entry(b"abc")
    magic, length = struct.unpack_from("<8sQ", blob)
    assert magic == b"PTXGENC1" and length == 3 and len(blob) == 48 + 3
    assert cache.decode_entry(blob) == b"abc"


def test_atomic_write_leaves_no_temp_files(cache_root):
    for i in range(5):
        cache.get_or_build([f"k{i}"], Counter(payload=os.urandom(1000)))
    files = entry_files(cache_root)
    assert len(files) == 5
    assert all(p.suffix == ".bin" and not p.name.startswith(".") for p in files)


def test_failed_write_cleans_up_and_still_returns(cache_root, monkeypatch):
    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "replace", broken_replace)
    build = Counter()
    with pytest.warns(RuntimeWarning, match="could not write"):
        assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert entry_files(cache_root) == []  # the temp file was removed


def test_build_fn_must_return_bytes(cache_root):
    with pytest.raises(TypeError, match="must return bytes"):
        cache.get_or_build(["k"], lambda: "text")


def test_build_fn_errors_propagate_and_store_nothing(cache_root):
    def failing():
        raise CudaError("cuLinkAddData failed: CUDA_ERROR_INVALID_PTX", call="cuLinkAddData",
                        code="CUDA_ERROR_INVALID_PTX")

    with pytest.raises(CudaError):
        cache.get_or_build(["k"], failing)
    assert entry_files(cache_root) == []


# --------------------------------------------------------------------------- tensor maps


def spec(box=(64, 64), swizzle="128B", l2="256B", tensor="a", dtype="bf16"):
    return TensorMapSpec(tensor=tensor, box=box, swizzle=swizzle, l2_promotion=l2, dtype=dtype)


def test_tiled_args_valid():
    from ptxgen.runtime.tensormap import tiled_args

    args = tiled_args(0x1000, rows=300, cols=136, row_stride_elems=136, spec=spec())
    assert args.dims == (136, 300)  # innermost first
    assert args.strides == (272,)
    assert args.box == (64, 64)
    assert args.dtype == "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"
    assert args.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert args.l2_promotion == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"


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


# --------------------------------------------------------------------------- grid policy


@pytest.mark.parametrize(
    "persistent, m, n, sms, expected",
    [
        (False, 128, 256, 132, 2),  # one cluster tile, 2 CTAs
        (False, 129, 256, 132, 4),  # rows spill into a second tile
        (False, 1, 1, 132, 2),
        (False, 4096, 4096, 132, 2 * 32 * 16),
        (True, 4096, 4096, 132, 132),  # capped at one cluster per 2 SMs
        (True, 128, 256, 132, 2),  # fewer tiles than SMs
        (True, 8192, 8192, 1, 2),  # at least one cluster
    ],
)
def test_grid_x(persistent, m, n, sms, expected):
    policy = GridPolicy(persistent=persistent, tile_rows=128, tile_cols=256, cluster_size=2)
    assert policy.grid_x(m, n, sms) == expected
    assert policy.grid_x(m, n, sms) % policy.cluster_size == 0


def test_cluster_tiles_round_up():
    policy = GridPolicy(persistent=False, tile_rows=128, tile_cols=128, cluster_size=1)
    assert policy.cluster_tiles(257, 1) == 3
    assert policy.cluster_tiles(128, 129) == 2


# --------------------------------------------------------------------------- parameter packing


def test_kernel_params_layout():
    from ptxgen.runtime.module import KernelParams

    maps = [bytes([i]) * 128 for i in (1, 2, 3)]
    params = KernelParams(tuple(maps), 0xDEADBEEF00, 7, 8, 4096)
    for i in range(3):
        assert params.slot_bytes(i) == maps[i]
    assert params.slot_bytes(3) == struct.pack("<Q", 0xDEADBEEF00)
    assert [params.slot_bytes(i) for i in (4, 5, 6)] == [struct.pack("<I", v) for v in (7, 8, 4096)]
    ptrs = (ctypes.c_void_p * 7).from_address(params.address)
    assert ctypes.string_at(ptrs[1], 128) == maps[1]


def test_kernel_params_unused_map_is_zero():
    from ptxgen.runtime.module import KernelParams

    params = KernelParams((b"\1" * 128, b"\2" * 128, None), 0, 1, 1, 8)
    assert params.slot_bytes(2) == bytes(128)


def test_kernel_params_reject_bad_values():
    from ptxgen.runtime.module import KernelParams

    maps = (bytes(128),) * 3
    with pytest.raises(ValueError, match=r"m=4294967296: must fit in u32"):
        KernelParams(maps, 0, 1 << 32, 1, 8)
    with pytest.raises(ValueError, match=r"tensor map must be 128 bytes, got 64"):
        KernelParams((bytes(64),) * 3, 0, 1, 1, 8)


def test_kernel_params_from_cu_tensor_map():
    pytest.importorskip("cuda.bindings.driver")
    from cuda.bindings import driver as cu

    from ptxgen.runtime.module import KernelParams, tensor_map_bytes

    tmap = cu.CUtensorMap()
    ctypes.memmove(tmap.getPtr(), bytes(range(128)), 128)
    assert tensor_map_bytes(tmap) == bytes(range(128))
    assert KernelParams((tmap, tmap, tmap), 0, 1, 1, 8).slot_bytes(0) == bytes(range(128))


def test_ptx_target():
    from ptxgen.runtime.module import ptx_target

    assert ptx_target(".version 8.8\n.target sm_90a\n.address_size 64\n") == "sm_90a"
    assert ptx_target("// nothing") == ""


# --------------------------------------------------------------------------- driver error mapping


@pytest.fixture
def fake_names(monkeypatch):
    pytest.importorskip("cuda.bindings.driver")
    from ptxgen.runtime import driver

    monkeypatch.setattr(driver, "error_name", lambda r: r.name)
    monkeypatch.setattr(driver, "error_string", lambda r: "invalid argument")
    return driver


def test_check_unwraps_outputs(fake_names):
    ok = fake_names.cu().CUresult.CUDA_SUCCESS
    assert fake_names.check((ok,), "cuA") is None
    assert fake_names.check((ok, 5), "cuB") == 5
    assert fake_names.check((ok, 5, 6), "cuC") == (5, 6)
    assert fake_names.check(ok, "cuD") is None


def test_check_raises_cuda_error(fake_names):
    bad = fake_names.cu().CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaError) as info:
        fake_names.check((bad, None), "cuLaunchKernelEx", detail="grid 4")
    err = info.value
    assert err.call == "cuLaunchKernelEx" and err.code == "CUDA_ERROR_INVALID_VALUE"
    assert str(err) == "cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE (invalid argument)\ngrid 4"


# --------------------------------------------------------------------------- bench helpers


def test_bench_helpers(torch_mod):
    from ptxgen import bench

    assert bench.tflops(8192, 8192, 8192, 1.0) == pytest.approx(1099.5, rel=1e-3)
    gib = 1 << 30
    assert bench.input_sets_needed(3 * 8192 * 8192 * 2, 50 << 20, 80 * gib) == 2
    assert bench.input_sets_needed(1 << 20, 50 << 20, 80 * gib) == 101
    assert bench.input_sets_needed(16, 50 << 20, 80 * gib) == bench.MAX_SETS
    with pytest.raises(MemoryError):
        bench.input_sets_needed(10 * gib, 50 << 20, 8 * gib)
    ref = torch_mod.ones(4, 4)
    assert bench.relative_error(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-4)
    row = dict(config="c", m=1, n=2, k=8, ours_ms=0.5, torch_ms=0.25, ours_tflops=1.0, torch_tflops=2.0,
               ratio=0.5, rel_err_vs_torch=1e-3)
    table = bench.format_table([row]).splitlines()
    assert table[0].split()[:4] == ["config", "M", "N", "K"] and table[2].split()[0] == "c"


def test_driver_init_raises_only_cuda_error():
    """Without a driver (CPU CI), cuInit's library failure surfaces as CudaError, not a raw RuntimeError."""
    pytest.importorskip("cuda.bindings.driver")
    from ptxgen.runtime import driver

    try:
        driver.init()
    except CudaError as err:
        assert err.call == "cuInit" and err.code.startswith("CUDA_")
