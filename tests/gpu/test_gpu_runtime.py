"""GPU tests of the runtime plumbing that need no generated kernel (marked ``gpu``).

A small hand-written sm_90a kernel with the fixed GEMM signature exercises the
whole path: driver JIT through the disk cache, module load, the dynamic
shared-memory attribute, ``cuTensorMapEncodeTiled`` for three maps (128B
swizzle, out-of-bounds rows), parameter packing (3 x 128-byte tensor maps by
value, u64, 3 x u32) and ``cuLaunchKernelEx`` with a 2-CTA cluster attribute
on torch's current stream.  The kernel TMA-loads a 64x64 box of A and of B
into shared memory through one mbarrier, writes A back un-swizzled with plain
stores to ``d_ptr``, writes B to D with a TMA store, and records per CTA its
cluster rank, the cluster size, ``m + n + k`` and a status word.
"""

from __future__ import annotations

import time

import pytest

from ptxgen.errors import CudaError
from ptxgen.launch import GridPolicy, LaunchSpec, TensorMapSpec

pytestmark = pytest.mark.gpu

SMOKE_PTX = r""".version 8.8
.target sm_90a
.address_size 64

// Runtime smoke kernel: the GEMM signature, TMA loads of an A box and a B box
// (128B swizzle) into shared memory through one mbarrier, A written back
// un-swizzled with plain stores to d_ptr, B written to D with a TMA store, and
// per-CTA info (cluster rank, cluster size, m+n+k, status) after the tiles.
.extern .shared .align 1024 .b8 smem[];

.visible .entry ptxgen_smoke(
    .param .align 128 .b8 tmap_a[128],
    .param .align 128 .b8 tmap_b[128],
    .param .align 128 .b8 tmap_d[128],
    .param .u64 d_ptr,
    .param .u32 m,
    .param .u32 n,
    .param .u32 k
)
.maxntid 128, 1, 1
{
    .reg .pred  %p<8>;
    .reg .b32   %r<48>;
    .reg .b64   %rd<24>;

    mov.u32         %r0, %tid.x;
    mov.u32         %r1, %ctaid.x;
    mov.u32         %r2, %nctaid.x;
    mov.u32         %r3, smem;                  // A tile, 8192 B
    add.u32         %r4, %r3, 8192;             // B tile, 8192 B
    add.u32         %r5, %r3, 16384;            // mbarrier
    shl.b32         %r6, %r1, 6;                // first row of this CTA's boxes
    mov.u32         %r7, 0;                     // first column
    mov.u32         %r40, 1;                    // status: ok
    setp.eq.u32     %p0, %r0, 0;
    ld.param.u64    %rd20, [d_ptr];
    cvta.to.global.u64 %rd20, %rd20;

    @!%p0 bra       INIT_DONE;
    mbarrier.init.shared::cta.b64 [%r5], 1;
    fence.mbarrier_init.release.cluster;
INIT_DONE:
    bar.sync        0;

    @!%p0 bra       ISSUED;
    mov.b64         %rd0, tmap_a;
    cvta.param.u64  %rd0, %rd0;
    mov.b64         %rd1, tmap_b;
    cvta.param.u64  %rd1, %rd1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5], 16384;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd0, {%r7, %r6}], [%r5];
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd1, {%r7, %r6}], [%r5];
ISSUED:
    mov.u32         %r8, 0;
WAIT:                                           // bounded wait: a lost transaction reports, never hangs
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r5], 0;
    @%p1 bra        LOADED;
    add.u32         %r8, %r8, 1;
    setp.lt.u32     %p2, %r8, 2000000;
    @%p2 bra        WAIT;
    mov.u32         %r40, 57005;                // 0xDEAD: timed out
    bra             INFO;

LOADED:
    mov.u32         %r9, %r0;                   // 16-byte chunk index q = row * 8 + j
COPY:
    shr.u32         %r10, %r9, 3;               // row in box
    and.b32         %r11, %r9, 7;               // chunk j in row
    and.b32         %r12, %r10, 7;
    xor.b32         %r13, %r11, %r12;           // 128B swizzle: chunk j of row r sits at j ^ (r % 8)
    shl.b32         %r14, %r10, 7;
    shl.b32         %r15, %r13, 4;
    add.u32         %r16, %r3, %r14;
    add.u32         %r16, %r16, %r15;
    ld.shared.v4.b32 {%r20, %r21, %r22, %r23}, [%r16];
    add.u32         %r17, %r6, %r10;            // global row
    mul.wide.u32    %rd2, %r17, 128;
    mul.wide.u32    %rd3, %r11, 16;
    add.u64         %rd4, %rd2, %rd3;
    add.u64         %rd5, %rd20, %rd4;
    st.global.v4.b32 [%rd5], {%r20, %r21, %r22, %r23};
    add.u32         %r9, %r9, 128;
    setp.lt.u32     %p3, %r9, 512;
    @%p3 bra        COPY;

    @!%p0 bra       DONE;
    mov.b64         %rd6, tmap_d;
    cvta.param.u64  %rd6, %rd6;
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd6, {%r7, %r6}], [%r4];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;

INFO:
    @!%p0 bra       DONE;
    mov.u32         %r30, %cluster_ctarank;
    mov.u32         %r31, %cluster_nctarank;
    ld.param.u32    %r32, [m];
    ld.param.u32    %r33, [n];
    ld.param.u32    %r34, [k];
    add.u32         %r35, %r32, %r33;
    add.u32         %r35, %r35, %r34;
    mul.wide.u32    %rd7, %r2, 8192;            // info follows all tiles
    mul.wide.u32    %rd8, %r1, 16;
    add.u64         %rd9, %rd20, %rd7;
    add.u64         %rd9, %rd9, %rd8;
    st.global.v4.u32 [%rd9], {%r30, %r31, %r35, %r40};
DONE:
    ret;
}
"""

CTAS = 4
TILE_BYTES = 64 * 64 * 2
STATUS_OK, STATUS_TIMEOUT = 1, 0xDEAD


def smoke_spec(dynamic_smem_bytes: int = 96 * 1024) -> LaunchSpec:
    """LaunchSpec of the smoke kernel: 128 threads, 2-CTA clusters, one 64-row box per CTA."""
    return LaunchSpec(
        name="smoke",
        arch="sm_90a",
        kernel="ptxgen_smoke",
        block=(128, 1, 1),
        cluster=(2, 1, 1),
        dynamic_smem_bytes=dynamic_smem_bytes,
        grid=GridPolicy(persistent=False, tile_rows=128, tile_cols=64, cluster_size=2),
        tensor_maps={
            "a": TensorMapSpec("a", (64, 64), "128B", "256B"),
            "b": TensorMapSpec("b", (64, 64), "128B", "128B"),
            "d": TensorMapSpec("d", (64, 64), "128B", "none"),
        },
    )


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.driver")
    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        pytest.skip("the smoke kernel is sm_90a: needs a compute capability 9.0 GPU")
    return torch


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXGEN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_device_info(torch):
    from ptxgen.runtime import driver

    ordinal = driver.ensure_context()
    info = driver.device_info(ordinal)
    print(f"\ndevice {info}; driver version {driver.driver_version()}")
    assert info.capability == (9, 0)
    assert info.sm_count == torch.cuda.get_device_properties(ordinal).multi_processor_count
    assert info.max_smem_optin >= 200 * 1024


def test_smoke_kernel_tma_cluster_launch(torch, cache_dir, monkeypatch):
    from ptxgen.runtime import driver, module
    from ptxgen.runtime.module import Kernel, KernelParams
    from ptxgen.runtime.tensormap import encode_tiled

    dev = torch.device("cuda", driver.ensure_context())
    rows_a, rows_b, cols_a = 64 * CTAS - 3, 64 * CTAS - 7, 96
    a = torch.randn(rows_a, cols_a, device=dev).to(torch.bfloat16)
    b = torch.randn(rows_b, 64, device=dev).to(torch.bfloat16)
    d = torch.full((rows_b, 64), float("nan"), device=dev, dtype=torch.bfloat16)
    buf = torch.full((CTAS * TILE_BYTES + CTAS * 16,), 0xFF, device=dev, dtype=torch.uint8)

    spec = smoke_spec()
    kernel = Kernel.from_ptx(SMOKE_PTX, spec)
    maps = spec.tensor_maps
    params = KernelParams((encode_tiled(a, maps["a"]), encode_tiled(b, maps["b"]), encode_tiled(d, maps["d"])),
                          buf.data_ptr(), rows_a, rows_b, cols_a)
    grid_x = spec.grid.grid_x(rows_a, 64, kernel.device.sm_count)
    assert grid_x == CTAS
    kernel.launch(grid_x, params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()

    info = buf[CTAS * TILE_BYTES:].view(torch.int32).view(CTAS, 4).cpu().tolist()
    print(f"\nper-CTA info [cluster_ctarank, cluster_nctarank, m+n+k, status]: {info}")
    assert [row[3] for row in info] == [STATUS_OK] * CTAS, "mbarrier wait timed out (0xDEAD) or CTA did not run"
    assert [row[0] for row in info] == [i % 2 for i in range(CTAS)]
    assert [row[1] for row in info] == [2] * CTAS
    assert [row[2] for row in info] == [rows_a + rows_b + cols_a] * CTAS

    tile = buf[: CTAS * TILE_BYTES].view(torch.bfloat16).view(CTAS * 64, 64)
    expected = torch.zeros(CTAS * 64, 64, device=dev, dtype=torch.bfloat16)
    expected[:rows_a] = a[:, :64]
    assert torch.equal(tile.view(torch.int16), expected.view(torch.int16)), "TMA load / 128B swizzle mismatch"
    assert torch.equal(d.view(torch.int16), b.view(torch.int16)), "TMA store through tmap_d mismatch"

    # a second process-level load of the same PTX comes from the disk cache, not the JIT
    entries = list(cache_dir.rglob("*.bin"))
    assert len(entries) == 1
    monkeypatch.setattr(module, "jit_ptx", lambda ptx: pytest.fail("JIT ran on a cache hit"))
    again = Kernel.from_ptx(SMOKE_PTX, spec)
    d.fill_(float("nan"))
    again.launch(grid_x, params, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(d.view(torch.int16), b.view(torch.int16))

    stream = torch.cuda.current_stream().cuda_stream
    start = time.perf_counter()
    for _ in range(1000):
        kernel.launch(grid_x, params, stream)
    host_us = (time.perf_counter() - start) * 1e3
    torch.cuda.synchronize()
    print(f"host cost of Kernel.launch: {host_us:.1f} us per launch (1000 launches)")


def test_jit_error_log_in_cuda_error(torch, cache_dir):
    from ptxgen.runtime.module import Kernel

    bad = SMOKE_PTX.replace("    bar.sync        0;\n", "    frobnicate.u32  %r1, %r2;\n    bar.sync        0;\n", 1)
    assert bad != SMOKE_PTX
    with pytest.raises(CudaError) as info:
        Kernel.from_ptx(bad, smoke_spec())
    err = info.value
    print(f"\nCudaError: call={err.call} code={err.code}\n{err}")
    assert err.call in ("cuLinkAddData", "cuLinkComplete")
    assert err.code.startswith("CUDA_ERROR_")
    assert "frobnicate" in str(err)
    assert list(cache_dir.rglob("*.bin")) == []


def test_too_much_shared_memory_is_a_cuda_error(torch, cache_dir):
    from ptxgen.runtime.module import Kernel

    with pytest.raises(CudaError) as info:
        Kernel.from_ptx(SMOKE_PTX, smoke_spec(dynamic_smem_bytes=400 * 1024))
    print(f"\nCudaError: {info.value}")
    assert info.value.call == "cuFuncSetAttribute"
    assert info.value.code == "CUDA_ERROR_INVALID_VALUE"
