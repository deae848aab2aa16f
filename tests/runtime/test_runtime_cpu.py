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
from ptxgen.shipped import shipped_configs
from tests.helpers import ROOT

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
    row = dict(config="c", kernel="h100_x", m=1, n=2, k=8, api_ms=0.5, torch_ms=0.25, prepared_ms=0.4,
               torch_kernel_ms=0.2, api_tflops=1.0, ratio=0.5, kernel_ratio=0.5, rel_err_vs_torch=1e-3)
    table = bench.format_table([row]).splitlines()
    assert table[0].split()[:5] == ["config", "kernel", "M", "N", "K"] and table[2].split()[:2] == ["c", "h100_x"]


def test_time_interleaved_alternates_call_by_call(torch_mod, monkeypatch):
    """Timed calls alternate A B B A ... (drift hits both sides alike), consecutive calls never share an input set,
    and each side's median is over its own calls (faked CUDA events: a call's elapsed time is its set index)."""
    from ptxgen import bench

    log = []

    class Event:  # records the input set of the last call enqueued before it
        def __init__(self, enable_timing=False):
            self.set = None

        def record(self):
            self.set = log[-1][1] if log else None

        def elapsed_time(self, end):
            return float(end.set)

    def side(name):
        return lambda i: log.append((name, i))

    monkeypatch.setattr(torch_mod.cuda, "Event", Event)
    monkeypatch.setattr(torch_mod.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch_mod.cuda, "_sleep", lambda cycles: None, raising=False)
    medians = bench.time_interleaved({"a": side("a"), "b": side("b")}, 3, warmup=2, iters=4)
    timed = log[4:]  # after 2 warm-up calls of each side
    assert [name for name, _ in timed] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [i for _, i in timed] == [(2 + k) % 3 for k in range(8)]  # consecutive calls: different sets
    assert medians == {"a": 1.0, "b": 1.0}  # a: sets 2, 2, 0, 0; b: 0, 1, 1, 2
    log.clear()
    bench.time_interleaved({"a": side("a"), "b": side("b")}, 3, warmup=0, iters=4, rounds=2)
    assert [name for name, _ in log] == ["a", "a", "b", "b", "b", "b", "a", "a"]


def test_driver_init_raises_only_cuda_error():
    """Without a driver (CPU CI), cuInit's library failure surfaces as CudaError, not a raw RuntimeError."""
    pytest.importorskip("cuda.bindings.driver")
    from ptxgen.runtime import driver

    try:
        driver.init()
    except CudaError as err:
        assert err.call == "cuInit" and err.code.startswith("CUDA_")


# --------------------------------------------------------------------------- knobs


def test_knobs_parse():
    from ptxgen import knobs

    k = knobs.read({"PTXGEN_CACHE_DIR": "~/c", "PTXGEN_NO_CACHE": "Yes", "PTXGEN_DUMP": "/d",
                    "PTXGEN_OVERRIDE_PTX": "x.ptx"})
    assert k.cache_dir == Path("~/c").expanduser() and k.no_cache is True
    assert k.dump_dir == Path("/d") and k.override_ptx == Path("x.ptx")
    assert knobs.read({}) == knobs.Knobs()
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


# --------------------------------------------------------------------------- cache: no-cache, locking


def test_no_cache_knob_bypasses_disk(cache_root, monkeypatch):
    monkeypatch.setenv("PTXGEN_NO_CACHE", "1")
    build = Counter()
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2 and not cache_root.exists()


def _slow_build_in_process(args):
    """Child of the concurrency test: get_or_build with a build that takes a while and logs itself."""
    root, log = args
    import os as _os
    import time as _time

    _os.environ["PTXGEN_CACHE_DIR"] = root
    from ptxgen.runtime import cache as _cache

    def build():
        with open(log, "a") as f:
            f.write(f"{_os.getpid()}\n")
        _time.sleep(0.5)
        return b"payload-" + b"x" * 100_000

    return _cache.get_or_build(["shared-key"], build)


def test_concurrent_processes_build_once(tmp_path):
    """Four processes miss together: exactly one builds (filelock), all get the same intact payload."""
    pytest.importorskip("filelock")
    import multiprocessing

    root, log = str(tmp_path / "kcache"), str(tmp_path / "builds.log")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_slow_build_in_process, [(root, log)] * 4)
    assert all(r == b"payload-" + b"x" * 100_000 for r in results)
    assert len(Path(log).read_text().split()) == 1
    assert [p.suffix for p in entry_files(Path(root))] == [".bin"]


def test_lock_unavailable_still_builds(cache_root, monkeypatch):
    """A lock that cannot be taken (read-only directory, timeout) degrades to an unlocked build."""
    filelock = pytest.importorskip("filelock")

    def refuse(self, *a, **kw):
        raise filelock.Timeout(str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    build = Counter()
    assert cache.get_or_build(["k"], build) == b"cubin-bytes" and build.calls == 1
    assert cache.get_or_build(["k"], build) == b"cubin-bytes" and build.calls == 1


# --------------------------------------------------------------------------- loader: kernel images


@pytest.fixture(scope="module")
def built_h100():
    from ptxgen.build import build

    return build("h100_128x128")


def fake_jit(calls):
    def jit(ptx):
        calls.append(ptx)
        return b"CUBIN:" + ptx[:64].encode()

    return jit


def test_image_pack_roundtrip(built_h100):
    from ptxgen.runtime import loader

    img = loader.KernelImage(built_h100.launch, built_h100.ptx, b"\x7fELF" + bytes(100))
    assert loader.unpack_image(loader.pack_image(img)) == img
    blob = loader.pack_image(img)
    for bad in (blob[:-1], blob[:10], b"", b"PTXGIMG1" + bytes(24), blob.replace(b'"arch"', b'"arkh"')):
        assert loader.unpack_image(bad) is None


def test_image_cache_hit_skips_build(cache_root, built_h100, monkeypatch):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    key = loader.image_key(cfg, 13000, (9, 0))
    calls = []
    first = loader.cached_image(cfg, key, fake_jit(calls))
    assert first.spec == built_h100.launch and first.ptx == built_h100.ptx and len(calls) == 1
    monkeypatch.setattr(loader, "build_image", lambda *a: pytest.fail("rebuilt on a cache hit"))
    again = loader.cached_image(cfg, key, fake_jit(calls))
    assert again == first and len(calls) == 1


def test_image_key_parts(built_h100):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    base = loader.image_key(cfg, 13000, (9, 0))
    assert base == loader.image_key(cfg.replace(), 13000, (9, 0))  # equal content, other object
    assert base != loader.image_key(cfg.replace(**{"pipeline.stages": 3}), 13000, (9, 0))
    assert base != loader.image_key(cfg, 13010, (9, 0))
    assert base != loader.image_key(cfg, 13000, (10, 0))
    assert loader.source_fingerprint() in "".join(base)


def test_image_key_of_a_name_is_its_yaml_text(tmp_path):
    from ptxgen.runtime import loader
    from ptxgen.shipped import configs_dir

    text = (configs_dir() / "h100_128x128.yaml").read_text()
    assert loader.config_content("h100_128x128") == loader.config_content("h100_128x128.yaml") == \
        "yaml:h100_128x128\n" + text
    copy = tmp_path / "h100_128x128.yaml"
    copy.write_text(text)
    assert loader.image_key(str(copy), 13000, (9, 0)) == loader.image_key("h100_128x128", 13000, (9, 0))
    copy.write_text(text.replace("stages: 4", "stages: 3"))
    assert loader.image_key(copy, 13000, (9, 0)) != loader.image_key("h100_128x128", 13000, (9, 0))
    # a YAML without ``name`` is named after its file: same text, other stem, other kernel
    (tmp_path / "a.yaml").write_text("arch: sm_90a\n")
    (tmp_path / "b.yaml").write_text("arch: sm_90a\n")
    assert loader.config_content(tmp_path / "a.yaml") != loader.config_content(tmp_path / "b.yaml")
    with pytest.raises(ConfigError, match="no such file, and not a shipped config"):
        loader.config_content(tmp_path / "absent.yaml")


def test_warm_hit_by_name_never_imports_the_config_schema(cache_root):
    """A cache hit for a config given by name reads its YAML text and the stored image: no pydantic, no plan."""
    import subprocess
    import sys

    child = f"""
import sys
from ptxgen.runtime import loader
calls = []
def jit(ptx):
    calls.append(1)
    return b"cubin"
seen = []
img = loader.load_image("h100_128x128", 13000, (9, 0), jit, accept=seen.append)
print(len(calls), len(seen), img.spec.name, img.cubin.decode(), "ptxgen.config" in sys.modules, "pydantic" in sys.modules)
"""
    env = {**os.environ, "PTXGEN_CACHE_DIR": str(cache_root)}
    run = lambda: subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True)
    assert run().stdout.split() == ["1", "1", "h100_128x128", "cubin", "True", "True"]  # miss: built, validated
    assert run().stdout.split() == ["0", "1", "h100_128x128", "cubin", "False", "False"]  # hit: neither


def test_accept_refuses_before_the_jit(cache_root):
    from ptxgen.runtime import loader

    calls = []

    def refuse(spec):
        raise ConfigError(f"config {spec.name}: not on this device")

    with pytest.raises(ConfigError, match="config level9: not on this device"):
        loader.load_image("level9", 13000, (9, 0), fake_jit(calls), accept=refuse)
    assert calls == []


def test_corrupt_image_payload_is_rebuilt(cache_root, built_h100):
    from ptxgen.runtime import loader

    cfg = built_h100.config
    key = loader.image_key(cfg, 13000, (9, 0))
    path = cache.entry_path(cache.cache_key(key))
    cache.write_entry(path, b"valid entry, not an image")
    calls = []
    img = loader.cached_image(cfg, key, fake_jit(calls))
    assert img.spec == built_h100.launch and len(calls) == 1
    assert loader.unpack_image(cache.read_entry(path)) == img  # repaired


def test_image_without_cache(cache_root, built_h100):
    from ptxgen.runtime import loader

    calls = []
    loader.cached_image(built_h100.config, ("k",), fake_jit(calls), use_cache=False)
    loader.cached_image(built_h100.config, ("k",), fake_jit(calls), use_cache=False)
    assert len(calls) == 2 and not cache_root.exists()


# --------------------------------------------------------------------------- PTXGEN_OVERRIDE_PTX


def test_ptx_header_of_generated_kernels():
    from ptxgen.build import build
    from ptxgen.runtime import loader

    for name in ("h100_128x256", "level9"):
        res = build(name)
        h = loader.parse_ptx_header(res.ptx)
        assert h.entry == res.launch.kernel and h.target == res.launch.arch
        assert h.params == tuple(tuple(p) for p in res.launch.params)
        assert h.reqntid == tuple(res.launch.block)
        assert (h.cluster or (1, 1, 1)) == tuple(res.launch.cluster)
        loader.check_override(res.ptx, res.launch, "x.ptx")  # the generated PTX always passes


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: p.replace(".entry ptxgen_gemm_h100_128x256", ".entry my_kernel"),
         r"\.entry my_kernel != launch spec kernel ptxgen_gemm_h100_128x256"),
        (lambda p: p.replace("    .param .u32 k\n", "").replace(".param .u32 n,", ".param .u32 n"),
         r"params \[.*\] != launch spec params"),
        (lambda p: p.replace(".reqntid 384, 1, 1", ".reqntid 256, 1, 1"), r"\.reqntid \(256, 1, 1\) != launch block"),
        (lambda p: p.replace(".reqntid 384, 1, 1", ""), r"\.reqntid \(none\) != launch block \(384, 1, 1\)"),
        (lambda p: p.replace(".reqnctapercluster 2, 1, 1", ".reqnctapercluster 4, 1, 1"),
         r"\.reqnctapercluster \(4, 1, 1\) != launch cluster \(2, 1, 1\)"),
        (lambda p: p.replace(".target sm_90a", ".target sm_100a"), r"\.target sm_100a != config arch sm_90a"),
        (lambda p: p.replace(".extern .shared .align 1024 .b8 smem[];",
                             ".extern .shared .align 1024 .b8 smem[];\n.shared .align 16 .b8 extra[8192];"),
         r"static \.shared 8192 B \+ dynamic \d+ B = \d+ B > 232448 B per CTA"),
    ],
)
def test_override_with_other_metadata_is_refused(edit, match):
    from ptxgen.build import build
    from ptxgen.runtime import loader

    res = build("h100_128x256")
    bad = edit(res.ptx)
    assert bad != res.ptx
    with pytest.raises(ConfigError, match=r"^PTXGEN_OVERRIDE_PTX=x\.ptx: launch metadata does not match config "
                                          r"'h100_128x256': .*" + match):
        loader.check_override(bad, res.launch, "x.ptx")


def test_override_file_and_dir(tmp_path, built_h100, cache_root):
    from ptxgen import knobs
    from ptxgen.runtime import loader

    spec, ptx = built_h100.launch, built_h100.ptx
    edited = ptx.replace("// tile", "// hand-edited tile", 1)
    f = tmp_path / "mine.ptx"
    f.write_text(edited)
    assert loader.override_for(spec, f) == (edited, f)
    d = tmp_path / "dir"
    d.mkdir()
    assert loader.override_for(spec, d) is None  # no <name>.ptx there: generated PTX is used
    (d / f"{spec.name}.ptx").write_text(edited)
    assert loader.override_for(spec, d)[0] == edited
    with pytest.raises(ConfigError, match=r"PTXGEN_OVERRIDE_PTX=.*nope\.ptx: no such file or directory"):
        loader.override_for(spec, tmp_path / "nope.ptx")

    calls = []
    img = loader.load_image(built_h100.config, 13000, (9, 0), fake_jit(calls), knobs.Knobs(override_ptx=f))
    assert img.ptx == edited and calls[-1] == edited and img.spec == spec


def test_dump_writes_ptx_cubin_sass_json(tmp_path, built_h100, cache_root):
    from ptxgen import knobs
    from ptxgen.runtime import loader

    try:
        from ptxgen.assemble import assemble

        cubin = assemble(built_h100.ptx, "sm_90a").cubin
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"assembler wheels unavailable: {exc}")
    img = loader.load_image(built_h100.config, 13000, (9, 0), lambda ptx: cubin, knobs.Knobs(dump_dir=tmp_path / "d"))
    name = built_h100.launch.name
    d = tmp_path / "d"
    assert (d / f"{name}.ptx").read_text() == built_h100.ptx
    assert (d / f"{name}.cubin").read_bytes() == cubin == img.cubin
    assert "HGMMA" in (d / f"{name}.sass").read_text()
    assert (d / f"{name}.json").read_text() == built_h100.launch.to_json()


def test_dump_without_disassembler_still_writes_the_rest(tmp_path, built_h100):
    from ptxgen.runtime import loader

    img = loader.KernelImage(built_h100.launch, built_h100.ptx, b"not an ELF")
    written = loader.dump(img, tmp_path)
    assert sorted(p.suffix for p in written) == [".cubin", ".json", ".ptx"]


# --------------------------------------------------------------------------- fast path


GEMM_KINDS = ["tensor_map", "tensor_map", "tensor_map", "u64", "u32", "u32", "u32"]


def test_param_layout_gemm():
    from ptxgen.runtime.fastpath import ParamLayout

    lay = ParamLayout(GEMM_KINDS)
    assert lay.offsets == (0, 128, 256, 384, 392, 396, 400) and lay.size == 404
    assert ParamLayout(["u32", "tensor_map", "u64"]).offsets == (128, 0, 136)
    with pytest.raises(ValueError, match=r"parameter kind 'f16'"):
        ParamLayout(["f16"])


class FakeLaunch:
    """Stands in for cuLaunchKernelEx: records the launch config and the parameter bytes."""

    def __init__(self, launcher_ref, result=0):
        self.launches = []
        self.launcher_ref = launcher_ref
        self.result = result

    def __call__(self, config, function, params_address, extra):
        ptrs = (ctypes.c_void_p * 7).from_address(params_address)
        sizes = [128, 128, 128, 8, 4, 4, 4]
        self.launches.append((config.gridDimX, config.hStream, function,
                              [ctypes.string_at(ptrs[i], sizes[i]) for i in range(7)]))
        return (self.result,)


def make_launcher(capacity=1024, result=0):
    from types import SimpleNamespace

    from ptxgen.runtime.fastpath import Launcher

    encodes = []

    def encoder(address, rows, cols, row_stride, spec):
        encodes.append((address, rows, cols, row_stride, spec.tensor))
        return struct.pack("<QQQQ", address, rows, cols, row_stride) + spec.tensor.encode() * 96

    def check(res, call, detail):
        raise CudaError(f"{call} failed: {res[0]}\n{detail}", call=call, code=str(res[0]))

    fake = FakeLaunch(None, result)
    specs = [spec(tensor=t) for t in "abd"]
    launcher = Launcher("fn", SimpleNamespace(gridDimX=1, hStream=None), GEMM_KINDS, specs, launch_fn=fake,
                        encoder=encoder, check=check, capacity=capacity, name="fake")
    return launcher, fake, encodes


def expected_map(address, rows, cols, stride, tensor):
    return struct.pack("<QQQQ", address, rows, cols, stride) + tensor.encode() * 96


def test_launcher_packs_parameters_and_launches_once():
    launcher, fake, encodes = make_launcher()
    maps = ((0x1000, 64, 128, 128), (0x2000, 32, 128, 128), (0x3000, 64, 32, 32))
    launcher.launch(12, maps, (0x3000, 64, 32, 128), stream=77)
    (grid, stream, fn, params), = fake.launches
    assert (grid, stream, fn) == (12, 77, "fn")
    assert params[:3] == [expected_map(*m, t) for m, t in zip(maps, "abd")]
    assert params[3:] == [struct.pack("<Q", 0x3000), *(struct.pack("<I", v) for v in (64, 32, 128))]
    assert [launcher.param_bytes(i) for i in range(7)] == params


def test_tensor_map_cache_hits_and_new_shape_same_pointer():
    launcher, fake, encodes = make_launcher()
    a, b = (0x1000, 64, 128, 128), (0x2000, 32, 128, 128)
    for _ in range(3):
        launcher.launch(1, (a, b, None), (0, 64, 32, 128), stream=0)
    assert len(encodes) == 2  # a and b once each; D unused (zeros)
    assert fake.launches[-1][3][2] == bytes(128)
    # same pointer, different shape: a new map, never the stale one
    a2 = (0x1000, 32, 64, 64)
    launcher.launch(1, (a2, b, None), (0, 32, 32, 64), stream=0)
    assert fake.launches[-1][3][0] == expected_map(*a2, "a") != fake.launches[0][3][0]
    assert len(encodes) == 3
    # back to the first shape: a cache hit, and the bytes are right again
    launcher.launch(1, (a, b, None), (0, 64, 32, 128), stream=0)
    assert fake.launches[-1][3][0] == expected_map(*a, "a") and len(encodes) == 3
    assert launcher.maps.hits >= 1


def test_tensor_map_cache_is_lru():
    from ptxgen.runtime.fastpath import TensorMapCache

    calls = []
    cache_ = TensorMapCache([spec()], capacity=2, encoder=lambda *a: calls.append(a[:4]) or bytes(128))
    x, y, z = (16, 1, 8, 8), (32, 1, 8, 8), (48, 1, 8, 8)
    cache_.get(0, x), cache_.get(0, y), cache_.get(0, x)  # x most recent
    cache_.get(0, z)  # evicts y
    assert len(cache_) == 2
    cache_.get(0, x)
    cache_.get(0, y)
    assert calls == [x, y, z, y]


def test_launch_failure_raises_cuda_error():
    launcher, fake, _ = make_launcher(result=1)
    with pytest.raises(CudaError, match=r"cuLaunchKernelEx failed.*\nfake: grid 3"):
        launcher.launch(3, ((16, 1, 8, 8), (16, 1, 8, 8), None), (0, 1, 1, 8), stream=0)


def test_encode_failure_launches_nothing_and_recovers():
    launcher, fake, encodes = make_launcher()
    good = ((16, 1, 8, 8), (32, 1, 8, 8), None)
    launcher.launch(1, good, (0, 1, 1, 8), stream=0)

    def failing(*a):
        raise ShapeError("tensor map 'b': bad")

    launcher.maps._encoder = failing
    with pytest.raises(ShapeError):
        launcher.launch(1, ((16, 1, 8, 8), (48, 1, 8, 8), None), (0, 1, 1, 8), stream=0)
    assert len(fake.launches) == 1
    launcher.launch(1, good, (0, 1, 1, 8), stream=0)  # all from the cache; every slot rewritten
    assert fake.launches[-1][3] == fake.launches[0][3]


def test_scalar_out_of_range_is_an_error():
    launcher, fake, _ = make_launcher()
    with pytest.raises(struct.error):
        launcher.launch(1, (None, None, None), (0, 1 << 32, 1, 8), stream=0)
    assert fake.launches == []


# --------------------------------------------------------------------------- gemm's per-call cache


class FakeLauncher:
    def __init__(self):
        self.calls = []

    def launch(self, grid_x, maps, scalars, stream):
        self.calls.append((grid_x, maps, scalars, stream))


@pytest.fixture
def fake_setup(monkeypatch, torch_mod):
    """gemm with the driver replaced: counts the full (slow) setups, records the fast launches."""
    from ptxgen.launch import GridPolicy, LaunchSpec
    from ptxgen.runtime import api, driver

    launch_spec = LaunchSpec(name="fake", arch="sm_90a", kernel="k", block=(128, 1, 1), cluster=(1, 1, 1),
                             dynamic_smem_bytes=0, grid=GridPolicy(True, 128, 128, 1),
                             tensor_maps={t: spec(tensor=t) for t in "abd"})
    launcher = FakeLauncher()
    setups = []

    def setup(family, a, bs, out, config):
        m, n, k = api.check_gemm_inputs(a, bs[0], out, require_cuda=False)
        setups.append((tuple(a.shape), tuple(bs[0].shape), config))
        return api.LoadedKernel(None, launcher, launch_spec), 0, m, n, k, 7

    monkeypatch.setattr(api, "_checked_setup", setup)
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 99)
    monkeypatch.setattr(api, "_current_device", lambda: 0)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 0)
    monkeypatch.setattr(api, "_calls", {})
    return launcher, setups


def test_gemm_signature_cache(fake_setup):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    a, b, out = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    assert api.gemm(a, b, out=out, config="c") is out
    assert api.gemm(a, b, out=out, config="c") is out
    assert len(setups) == 1 and len(launcher.calls) == 2
    grid, maps, scalars, stream = launcher.calls[-1]
    assert (grid, stream) == (7, 99)
    assert maps == ((a.data_ptr(), 64, 32, 32), (b.data_ptr(), 48, 32, 32), (out.data_ptr(), 64, 48, 48))
    assert scalars == (out.data_ptr(), 64, 48, 32)
    # new tensors, same signature: still cached, new pointers
    a2, b2, out2 = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    api.gemm(a2, b2, out=out2, config="c")
    assert len(setups) == 1 and launcher.calls[-1][1][0][0] == a2.data_ptr()
    # another shape, another config, N not a multiple of 8 (no D map): new setups
    api.gemm(bf16(64, 40), bf16(20, 40), config="c")
    assert launcher.calls[-1][1][2] is None
    api.gemm(a, b, out=out, config="other")
    assert len(setups) == 3


def test_gemm_cached_signature_still_checks_pointers(fake_setup):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    a, b, out = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    api.gemm(a, b, out=out, config="c")
    n_launches = len(launcher.calls)
    base = bf16(64 * 48 + 8)
    shifted = base[1:1 + 64 * 48].view(64, 48)  # same signature, misaligned by 2 bytes
    with pytest.raises(ShapeError):
        api.gemm(a, b, out=shifted, config="c")
    big = bf16(64, 48)
    a_alias = big.view(-1)[: 64 * 32].view(64, 32)  # A inside D's memory
    with pytest.raises(ShapeError):
        api.gemm(a_alias, b, out=big, config="c")
    assert len(launcher.calls) == n_launches


def test_gemm_config_objects_are_keyed_by_identity(fake_setup, built_h100):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    cfg = built_h100.config
    a, b = bf16(64, 32), bf16(48, 32)
    api.gemm(a, b, config=cfg)
    api.gemm(a, b, config=cfg)
    assert len(setups) == 1
    api.gemm(a, b, config=cfg.replace())  # an equal but distinct object: checked again
    assert len(setups) == 2


def test_gemm_non_tensor_reaches_the_full_check(fake_setup):
    from ptxgen.runtime import api

    with pytest.raises(ShapeError, match=r"^a: got list"):
        api.gemm([[1.0]], bf16(4, 8))


# --------------------------------------------------------------------------- chooser


@pytest.fixture
def fresh_choice(cache_root):
    from ptxgen.runtime import choose

    choose.choose_cached.cache_clear()
    yield choose
    choose.choose_cached.cache_clear()


def test_candidates_are_every_shipped_config_of_the_arch():
    from ptxgen.config import load_config, shipped_configs
    from ptxgen.runtime import choose

    names = [c.name for c in choose.candidates("sm_90a")]
    gemms = [n for n in shipped_configs() if load_config(n).arch == "sm_90a" and load_config(n).kernel == "gemm"]
    # ping-pong configs are shipped but measured slower: never chosen (docs/performance.md, "Ping-pong consumers")
    assert names == [n for n in gemms if load_config(n).mma.consumers == "cooperative"] and len(names) < len(gemms)
    assert names and all(n.startswith("h100_") for n in names)
    duals = [c.name for c in choose.candidates("sm_90a", "dual_gemm")]
    assert duals and all(n.startswith("dual_h100_") for n in duals)
    # the NVFP4 dual GEMM configs are never chosen for a bf16 ptxgen.dual_gemm (they have dual_gemm_nvfp4)
    assert [c.name for c in choose.candidates("sm_100a", "dual_gemm")] == ["dual_sm100_256x128"]


@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_candidate_agrees_with_load_config(name):
    from ptxgen.config import load_config
    from ptxgen.runtime.choose import Candidate, shipped_candidate

    cfg = load_config(name)
    assert shipped_candidate(name) == Candidate(name, cfg.arch, cfg.tile.block_m, cfg.tile.block_n, cfg.tile.block_k,
                                                cfg.pipeline.stages, cfg.cluster.size, cfg.kernel, cfg.operands,
                                                cfg.mma.consumers, cfg.schedule.split_k)


def test_cost_model_waves_and_tail():
    from ptxgen.runtime.choose import Candidate, predict

    c = Candidate("x", "sm_90a", 128, 256, 64, 4, 2)
    p = predict(c, 4096, 4096, 4096, 132)
    assert p["tiles"] == 32 * 16 and p["waves"] == 4 and p["tail"] == pytest.approx(512 / (4 * 132))
    small = predict(c, 128, 256, 4096, 132)
    assert small["tiles"] == 1 and small["waves"] == 1
    assert predict(c, 4096, 4096, 8192, 132)["us"] > p["us"]  # more K, more time
    wide = Candidate("w", "sm_90a", 256, 128, 64, 4, 1)
    narrow = Candidate("n", "sm_90a", 128, 128, 64, 4, 1)
    assert predict(narrow, 8192, 8192, 8192, 132)["bytes_per_flop"] > predict(wide, 8192, 8192, 8192, 132)["bytes_per_flop"]


def test_choice_prefers_user_table_then_shipped_then_model(fresh_choice, monkeypatch):
    choose = fresh_choice
    shipped = choose.read_table(choose.shipped_table_path("sm_90a"))
    assert len(shipped) == 11 and shipped[(4096, 4096, 4096)] in {c.name for c in choose.candidates("sm_90a")}
    assert choose.choose_cached(4096, 4096, 4096, (9, 0), 132) == (shipped[(4096, 4096, 4096)], "shipped table")
    name, why = choose.choose_cached(1000, 1000, 1000, (9, 0), 132)
    assert why == "cost model" and name in {c.name for c in choose.candidates("sm_90a")}

    doc = choose.table_doc("sm_90a", "test", [{"m": 4096, "n": 4096, "k": 4096, "config": "h100_128x128"},
                                               {"m": 1, "n": 1, "k": 8, "config": "not_shipped"}], "test")
    choose.write_table(choose.user_table_path("sm_90a"), doc)  # clears the memo
    assert choose.choose_cached(4096, 4096, 4096, (9, 0), 132) == ("h100_128x128", "user table")
    assert choose.choose_cached(1, 1, 8, (9, 0), 132)[1] == "cost model"  # unknown config ignored

    reads = []
    monkeypatch.setattr(choose, "read_table", lambda p: reads.append(p) or {})
    choose.choose_cached(4096, 4096, 4096, (9, 0), 132)
    assert reads == []  # memoized per (M, N, K, device)


def test_choice_on_unsupported_device(fresh_choice):
    with pytest.raises(ConfigError, match=r"compute capability 8.0: no default config"):
        fresh_choice.choose_cached(64, 64, 64, (8, 0), 108)


def test_broken_user_table_is_ignored(fresh_choice):
    choose = fresh_choice
    path = choose.user_table_path("sm_90a")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert choose.choose_cached(4096, 4096, 4096, (9, 0), 132)[1] == "shipped table"


# --------------------------------------------------------------------------- bench and CLI wiring


def test_bench_defaults_and_summary():
    from ptxgen import bench

    assert len(bench.DEFAULT_SHAPES) == 11 and (4096, 576, 7168) in bench.DEFAULT_SHAPES
    assert bench.geomean([1.0, 4.0]) == pytest.approx(2.0)
    rows = [dict(config="auto", ratio=r, kernel_ratio=r * 2) for r in (0.5, 2.0)]
    s = bench.summary(rows)["auto"]
    assert s["geomean_ratio"] == pytest.approx(1.0) and s["min_ratio"] == 0.5
    assert s["geomean_kernel_ratio"] == pytest.approx(2.0)
    assert bench.config_label(None) == "auto" and bench.config_label("h100_128x128") == "h100_128x128"


def test_bench_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from ptxgen import bench

    rows = [dict(config=c, m=4096, n=n, k=4096, ratio=0.9, kernel_ratio=1.0) for c in ("auto", "x") for n in (1, 2)]
    path = tmp_path / "b.png"
    assert bench.plot(rows, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_run_and_bench_default_to_chosen_config(monkeypatch):
    from ptxgen import bench, cli

    seen = []
    monkeypatch.setattr(cli, "_require_gpu", lambda: None)  # the CPU torch build: run/bench are stubbed here
    monkeypatch.setattr(bench, "run_one", lambda config, m, n, k: seen.append(config) or
                        dict(config="h100_x", rel_err=0.0, ms=1.0, tflops=1.0))
    assert cli.main(["run", "--shape", "64x64x64"]) == 0
    monkeypatch.setattr(bench, "bench", lambda configs, shapes, **kw: seen.append((configs, shapes, kw)))
    assert cli.main(["bench", "--plot", "p.png"]) == 0
    assert seen[0] is None
    configs, shapes, kw = seen[1]
    assert configs == [None] and shapes == bench.DEFAULT_SHAPES and kw["plot_path"] == "p.png" and kw["host"]


def test_launcher_for_a_generated_kernel(built_h100):
    """Built from a real launch spec (no GPU): slots in signature order, launch config pre-filled."""
    pytest.importorskip("cuda.bindings.driver")
    from types import SimpleNamespace

    from ptxgen.runtime.fastpath import Launcher

    spec = built_h100.launch
    launcher = Launcher.for_kernel(SimpleNamespace(function="f", spec=spec))
    assert launcher.maps.specs == (spec.tensor_maps["a"], spec.tensor_maps["b"], spec.tensor_maps["d"])
    assert launcher.layout.offsets == (0, 128, 256, 384, 392, 396, 400)
    cfg = launcher._config
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == tuple(spec.block)
    assert cfg.sharedMemBytes == spec.dynamic_smem_bytes and cfg.numAttrs == 1
