"""Staging in ``gemm``/``dual_gemm`` without a GPU: which operand the call copies for each layout torch accepts,
that legal inputs take the unstaged call, and the errors that remain.

The driver is replaced by a launcher that checks every tensor map against the TMA rules
(:func:`ptxgen.runtime.tensormap.tiled_args`) and then does the kernel's work on the CPU from the raw addresses:
A and B are read through their maps (columns past the map's K read as zeros, rows past its rows as zeros, as TMA
fills them) and D is written ``[M, n]`` with pitch ``n``, so a wrong pitch, offset or copy shows up in the result.
"""

from __future__ import annotations

import ctypes
import functools
from types import SimpleNamespace

import pytest

from ptxgen.errors import ShapeError
from ptxgen.launch import GridPolicy, LaunchSpec, TensorMapSpec

torch = pytest.importorskip("torch")


def bf16(*shape):
    return torch.randn(shape).to(torch.bfloat16)


def raw(address, rows, cols, pitch):
    """The ``[rows, cols]`` tensor of pitch ``pitch`` at a CPU address (shares the memory)."""
    count = (rows - 1) * pitch + cols
    flat = torch.frombuffer((ctypes.c_uint16 * count).from_address(address), dtype=torch.bfloat16)
    return flat.as_strided((rows, cols), (pitch, 1))


def map_spec(tensor):
    return TensorMapSpec(tensor=tensor, box=(64, 64), swizzle="128B", l2_promotion="256B", dtype="bf16")


class KernelOnCpu:
    """A launcher that checks the maps and computes D = A @ B.T (or the SwiGLU of two B) from the addresses; the
    operands named in ``mn`` are read MN-major (their map is the ``[K, rows]`` view)."""

    def __init__(self):
        self.calls = []
        self.mn: set[str] = set()

    def launch(self, grid_x, maps, scalars, stream):
        from ptxgen.runtime.tensormap import tiled_args

        pd, m, n, k = scalars[:4]
        loaded = []
        for args, name in zip(maps[:-1], "abc"):
            tiled_args(*args, map_spec(name))  # a TMA rule broken raises here
            address, rows, cols, pitch = args
            full = torch.zeros((n if name != "a" else m, k), dtype=torch.float32)
            if name in self.mn:
                full[:cols, :rows] = raw(address, rows, cols, pitch).float().T
            else:
                full[:rows, :cols] = raw(address, rows, cols, pitch).float()
            loaded.append(full)
        if maps[-1] is not None:
            tiled_args(*maps[-1], map_spec("d"))
            assert maps[-1] == (pd, m, n, n)
        a, *bs = loaded
        d = a @ bs[0].T if len(bs) == 1 else torch.nn.functional.silu(a @ bs[0].T) * (a @ bs[1].T)
        raw(pd, m, n, n).copy_(d.to(torch.bfloat16))
        self.calls.append((maps, scalars))


@pytest.fixture
def fake(monkeypatch):
    """gemm/dual_gemm with the real setup and staging over CPU tensors; config "tma" stores D through a tensor map
    (``n_multiple`` 8, as the sm_100a kernels), "direct" stores directly (``n_multiple`` 1, as the sm_90a ones)."""
    from ptxgen.runtime import api, driver

    launcher = KernelOnCpu()

    def launch_spec(name, n_multiple, maps):
        return LaunchSpec(name=name, arch="sm_90a", kernel="k", block=(128, 1, 1), cluster=(1, 1, 1),
                          dynamic_smem_bytes=0, grid=GridPolicy(True, 128, 128, 1),
                          tensor_maps={t: map_spec(t) for t in maps}, n_multiple=n_multiple)

    specs = {"tma": launch_spec("tma", 8, ("a", "b", "d")), "direct": launch_spec("direct", 1, ("a", "b", "d")),
             "dual": launch_spec("dual", 8, ("a", "b", "b2", "d"))}
    lenient = functools.partial(api.check_gemm_operands, require_cuda=False)
    lenient_dual = functools.partial(api.check_dual_gemm_operands, require_cuda=False)
    monkeypatch.setattr(api, "_GEMM", api._Family("gemm", lenient, api._gemm_refuses))
    monkeypatch.setattr(api, "_DUAL", api._Family("dual_gemm", lenient_dual, api._dual_refuses))
    monkeypatch.setattr(api, "_ordinal", lambda a: 0)
    monkeypatch.setattr(api, "resolve_config", lambda config, *a: config or "direct")
    monkeypatch.setattr(api, "loaded_kernel", lambda config, ordinal: api.LoadedKernel(None, launcher, specs[config]))
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 99)
    monkeypatch.setattr(api, "_current_device", lambda: 0)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 0)
    monkeypatch.setattr(driver, "device_info", lambda ordinal: SimpleNamespace(capability=(9, 0), sm_count=132))
    monkeypatch.setattr(api, "_calls", {})
    return launcher


def reference(a, b, b2=None):
    if b2 is None:
        return a.float() @ b.float().T
    return torch.nn.functional.silu(a.float() @ b.float().T) * (a.float() @ b2.float().T)


def assert_close(out, ref):
    assert not torch.isnan(out.float()).any()
    err = torch.linalg.norm(out.float() - ref) / max(torch.linalg.norm(ref), 1e-30)
    assert err < 1e-2, err


def cached_call():
    from ptxgen.runtime import api

    (call,) = api._calls.values()
    return call


def read_in_place(launcher, *tensors):
    """Per input: whether the last launch read it in place (its own address in the map)."""
    maps = launcher.calls[-1][0]
    return tuple(args[0] == t.data_ptr() for args, t in zip(maps, tensors))


def transposed(rows, cols):
    return bf16(cols, rows).T


def strided(rows, cols):
    return bf16(rows, 2 * cols)[:, ::2]


def offset(rows, cols):
    return bf16(rows + 1, cols + 3)[1:, 3:]  # row-major pitch cols + 3, 2-byte-misaligned base


def padded(rows, cols):
    return bf16(rows, cols + 8 - cols % 8 + 8)[:, :cols]  # a 16-byte-multiple pitch: read in place


@pytest.mark.parametrize("k", [64, 4095, 4100, 1, 7])
@pytest.mark.parametrize("config", ["tma", "direct"])
def test_contiguous_inputs_stage_only_for_k(fake, k, config):
    from ptxgen.runtime import api

    a, b = bf16(33, k), bf16(40, k)
    out = api.gemm(a, b, config=config)
    assert_close(out, reference(a, b))
    legal = k % 8 == 0
    assert type(cached_call()) is (api._Call if legal else api._StagedCall)
    assert read_in_place(fake, a, b) == (legal, legal)
    maps, scalars = fake.calls[-1]
    assert scalars[3] == -(-k // 8) * 8 and maps[0][2] == k  # the kernel runs K up to 8; the map keeps K


@pytest.mark.parametrize("a_kind, b_kind, in_place", [
    ("transposed", "contiguous", (False, True)),
    ("contiguous", "transposed", (True, False)),
    ("strided", "offset", (False, False)),
    ("padded", "padded", (True, True)),
    ("offset", "padded", (False, True)),
])
@pytest.mark.parametrize("k", [96, 99])
def test_views_stage_the_operands_tma_cannot_read(fake, a_kind, b_kind, in_place, k):
    from ptxgen.runtime import api

    kinds = {"transposed": transposed, "strided": strided, "offset": offset, "padded": padded,
             "contiguous": lambda r, c: bf16(r, c)}
    a, b = kinds[a_kind](50, k), kinds[b_kind](24, k)
    out = api.gemm(a, b, config="tma")
    assert_close(out, reference(a, b))
    contiguous_ok = k % 8 == 0  # a contiguous operand's pitch is K
    expected = tuple(ok and (kind != "contiguous" or contiguous_ok) for ok, kind in zip(in_place, (a_kind, b_kind)))
    assert read_in_place(fake, a, b) == expected
    assert type(cached_call()) is (api._Call if all(expected) else api._StagedCall)  # no copy: the fast call


def test_legal_inputs_take_the_unstaged_call(fake):
    from ptxgen.runtime import api

    a, b, out = bf16(64, 32), bf16(48, 32), torch.empty(64, 48, dtype=torch.bfloat16)
    api.gemm(a, b, out=out, config="tma")
    assert type(cached_call()) is api._Call and cached_call().staged is None
    maps, scalars = fake.calls[-1]
    assert maps == ((a.data_ptr(), 64, 32, 32), (b.data_ptr(), 48, 32, 32), (out.data_ptr(), 64, 48, 48))
    assert_close(out, reference(a, b))


@pytest.mark.parametrize("m, n", [(1, 40), (40, 1), (1, 1), (7, 13)])
def test_m_or_n_one_and_n_off_eight(fake, m, n):
    from ptxgen.runtime import api

    a, b = bf16(m, 24), bf16(n, 24)
    for config in ("tma", "direct"):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        assert api.gemm(a, b, out=out, config=config) is out
        assert_close(out, reference(a, b))
        stage_d = config == "tma" and n % 8 != 0  # only a TMA-store D needs N to be a multiple of 8
        maps, scalars = fake.calls[-1]
        assert (scalars[0] != out.data_ptr()) == stage_d and scalars[2] == (-(-n // 8) * 8 if stage_d else n)


def test_n_off_eight_without_out_returns_a_contiguous_d(fake):
    from ptxgen.runtime import api

    a, b = bf16(20, 16), bf16(13, 16)
    out = api.gemm(a, b, config="tma")
    assert out.shape == (20, 13) and out.is_contiguous()
    assert_close(out, reference(a, b))


@pytest.mark.parametrize("make_out", [
    lambda m, n: torch.full((m, 2 * n), float("nan"), dtype=torch.bfloat16)[:, ::2],
    lambda m, n: torch.full((m + 1, n + 3), float("nan"), dtype=torch.bfloat16)[1:, 3:],
    lambda m, n: torch.full((n, m), float("nan"), dtype=torch.bfloat16).T,
])
def test_strided_out_is_written_through_a_staging_d(fake, make_out):
    from ptxgen.runtime import api

    a, b = bf16(30, 40), bf16(24, 40)
    out = make_out(30, 24)
    base = out._base
    assert api.gemm(a, b, out=out, config="direct") is out
    assert_close(out, reference(a, b))
    assert fake.calls[-1][1][0] != out.data_ptr()  # D's address: the staging D
    if out.stride(1) == 2:  # the columns between out's stay untouched
        assert torch.isnan(base[:, 1::2].float()).all()


@pytest.mark.parametrize("k", [96, 99])
def test_views_read_in_place_take_the_fast_call(fake, monkeypatch, k):
    """A padded A (a 16-byte-multiple row pitch; K = 99: short of the kernel's 104, which TMA fills with zeros) and a
    transposed B read MN-major copy nothing, so their signature keeps the
    fast :class:`_Call` (per call: the pointer checks and one launch, not the family's check; a staged call's host
    path made 15-20 us kernels host-bound: docs/performance.md, "K-major against MN-major B at small M"); the maps
    are the views as they lie, and a later call of the signature whose B is 2 bytes off is copied MN-major."""
    from ptxgen.runtime import api

    loaded = api.loaded_kernel
    mnb = LaunchSpec(name="tma_mnb", arch="sm_90a", kernel="k", block=(128, 1, 1), cluster=(1, 1, 1),
                     dynamic_smem_bytes=0, grid=GridPolicy(True, 128, 128, 1), n_multiple=8,
                     tensor_maps={"a": map_spec("a"), "b": map_spec("b")._replace(major="mn"), "d": map_spec("d")})
    monkeypatch.setattr(api, "majors_config", lambda config, mn_a, mn_b: "tma_mnb" if mn_b and not mn_a else None)
    monkeypatch.setattr(api, "loaded_kernel", lambda config, ordinal: (
        api.LoadedKernel(None, fake, mnb) if config == "tma_mnb" else loaded(config, ordinal)))
    fake.mn = {"b"}
    m, n = 50, 24
    a, b = padded(m, k), transposed(n, k)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    assert api.gemm(a, b, out=out, config="tma") is out
    assert_close(out, reference(a, b))
    call = cached_call()
    assert type(call) is api._Call and call.staged is None
    maps, scalars = fake.calls[-1]
    assert maps == ((a.data_ptr(), m, k, a.stride(0)), (b.data_ptr(), k, n, b.stride(1)), (out.data_ptr(), m, n, n))
    assert scalars[3] == -(-k // 8) * 8  # the kernel's K
    flat = bf16((k - 1) * n + n + 8)
    shifted = flat[1:1 + k * n].view(k, n).T  # the same signature, 2 bytes off
    out2 = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    assert api.gemm(a, shifted, out=out2, config="tma") is out2
    assert_close(out2, reference(a, shifted))
    assert read_in_place(fake, a, shifted) == (True, False) and type(cached_call()) is api._Call


def test_misaligned_input_with_a_cached_signature_is_copied(fake):
    from ptxgen.runtime import api

    a, b = bf16(64, 32), bf16(48, 32)
    api.gemm(a, b, config="tma")
    flat = bf16(64 * 32 + 8)
    shifted = flat[1:1 + 64 * 32].view(64, 32)  # the same signature, 2 bytes off
    out = api.gemm(shifted, b, config="tma")
    assert_close(out, reference(shifted, b))
    assert read_in_place(fake, shifted, b) == (False, True)
    assert type(cached_call()) is api._Call  # the signature keeps its unstaged call


def test_dual_gemm_stages_each_b(fake):
    from ptxgen.runtime import api

    a, b1, b2 = bf16(40, 99), transposed(24, 99), bf16(24, 99)
    out = api.dual_gemm(a, b1, b2, config="dual")
    assert_close(out, reference(a, b1, b2))
    assert read_in_place(fake, a, b1, b2) == (False, False, False)  # K = 99: every input gets pitch 104
    a, b1, b2 = bf16(40, 96), transposed(24, 96), bf16(24, 96)
    out = api.dual_gemm(a, b1, b2, config="dual")
    assert_close(out, reference(a, b1, b2))
    assert read_in_place(fake, a, b1, b2) == (True, False, True)


@pytest.mark.parametrize("m, n, k", [(0, 5, 8), (5, 0, 8), (5, 6, 0), (0, 0, 0)])
def test_empty_dims_launch_nothing(fake, m, n, k):
    from ptxgen.runtime import api

    a, b = bf16(m, k), bf16(n, k)
    ref = a.float() @ b.float().T  # torch computes these too
    out = api.gemm(a, b)
    assert out.shape == ref.shape and torch.equal(out.float(), ref)
    given = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    assert api.gemm(a, b, out=given) is given and torch.equal(given.float(), ref)
    assert fake.calls == []


def bad_cases():
    a, b = bf16(16, 24), bf16(8, 24)
    base = torch.full((16, 40), 7.0, dtype=torch.bfloat16)
    flat = torch.full((16 * 8 + 8,), 7.0, dtype=torch.bfloat16)
    return {
        "a_fp16": ((a.half(), b, None), r"^a: dtype=torch.float16: must be torch.bfloat16"),
        "b_on_meta": ((a, torch.empty(8, 24, dtype=torch.bfloat16, device="meta"), None),
                      r"^b: device=meta: must be on a's device cpu"),
        "k_mismatch": ((a, bf16(8, 16), None), r"^b: shape=\(8, 16\): K=16 must equal a's K=24"),
        "b_given_as_b_t": ((a, bf16(24, 8), None), r"^b: shape=\(24, 8\): K=8 must equal a's K=24"),
        "a_3d": ((bf16(2, 16, 24), b, None), r"^a: shape=\(2, 16, 24\): must be 2-D"),
        "out_shape": ((a, b, torch.zeros(16, 9, dtype=torch.bfloat16)), r"^out: shape=\(16, 9\): must be"),
        "out_overlaps_a": ((base[:, :24], b, base[:, 24:32]), r"^out: memory overlaps a"),
        "out_strided_overlaps_b": ((a, base[:8, 16:], base[:16, :8]), r"^out: memory overlaps b"),
        "out_self_overlapping": ((a, b, torch.zeros(1, 8, dtype=torch.bfloat16).expand(16, 8)),
                                 r"^out: shape=\(16, 8\) stride=\(0, 1\): elements share memory"),
        "out_misaligned": ((a, b, flat[1:1 + 16 * 8].view(16, 8)), r"^out: data_ptr=0x[0-9a-f]+: must be 16-byte"),
    }


@pytest.mark.parametrize("case", sorted(bad_cases()))
def test_bad_input_raises_before_any_launch(fake, case):
    from ptxgen.runtime import api

    (a, b, out), match = bad_cases()[case]
    before = None if out is None or out.device.type == "meta" else out.clone()
    with pytest.raises(ShapeError, match=match):
        api.gemm(a, b, out=out, config="tma")
    assert fake.calls == []
    if before is not None:
        assert torch.equal(out, before)


def test_bad_pointer_with_a_cached_staged_signature_raises(fake):
    from ptxgen.runtime import api

    a, b = transposed(16, 24), bf16(8, 24)
    out = torch.empty(16, 8, dtype=torch.bfloat16)
    api.gemm(a, b, out=out, config="tma")
    big = torch.full((16 * 8 + 8 * 24,), 7.0, dtype=torch.bfloat16)
    alias_out, alias_b = big[:16 * 8].view(16, 8), big[16 * 8 - 8:16 * 8 - 8 + 8 * 24].view(8, 24)
    before = big.clone()
    n = len(fake.calls)
    with pytest.raises(ShapeError, match=r"^out: memory overlaps b"):
        api.gemm(a, alias_b, out=alias_out, config="tma")
    assert len(fake.calls) == n and torch.equal(big, before)


def test_staging_plan_is_pure():
    from ptxgen.runtime.api import Staging, staging_plan

    spec = SimpleNamespace(k_multiple=8, n_multiple=8, tensor_maps={}, extra={})  # no MN-major map, no swap-AB
    a, b = bf16(4, 12), bf16(6, 12)
    assert staging_plan(spec, a, (b,), None) == Staging(16, 8, (None, None), True)
    a, b = bf16(4, 32), bf16(8, 32)
    plan = staging_plan(spec, a, (b,), None)
    assert plan == Staging(32, 8, (32, 32), False) and plan.legal(8, 32)
    assert staging_plan(spec, bf16(4, 40)[:, :32], (b,), bf16(4, 8).T.contiguous().T) == Staging(32, 8, (40, 32), True)
    assert staging_plan(spec, bf16(1, 5), (bf16(8, 5),), None).pitches == (8, None)  # one row: any pitch >= K



def test_dual_gemm_reads_b1_b2_mn_major_only_together():
    """The dual GEMM's MN-major variant (one ``tma.major_b`` for B1 and B2): taken when both are transposed views of
    row-major ``[K, N]`` weights, not when only one is (that one is copied); A on its own; the GEMM as before."""
    from ptxgen.runtime import api

    m, n, k = 64, 256, 128
    spec = SimpleNamespace(arch="sm_90a", name="dual_h100_128x128")
    a, a_t, b, b_t = bf16(m, k), bf16(k, m).T, bf16(n, k), bf16(k, n).T

    def majors(family, config, a, *bs):
        hit = api._mn_major_variant(family, config, spec, a, bs, m, n, k, 0)
        return None if hit is None else (hit.name, hit.tma.major_a, hit.tma.major_b)

    assert majors(api._DUAL, "dual_h100_128x128", a, b_t, bf16(k, n).T) == ("dual_h100_128x128_mnb", "k", "mn")
    assert majors(api._DUAL, "dual_h100_128x128", a, b_t, b) is None
    assert majors(api._DUAL, "dual_h100_128x128", a_t, b_t, b) == ("dual_h100_128x128_mna", "mn", "k")
    assert majors(api._DUAL, "dual_h100_64x64", a_t, b_t, bf16(k, n).T) == ("dual_h100_64x64_mnab", "mn", "mn")
    assert majors(api._GEMM, "h100_128x256", a, b_t) == ("h100_128x256_mnb", "k", "mn")
    assert majors(api._FP8, "fp8_h100_128x128", a, b_t) is None  # 8-bit wgmma inputs are K-major only


def test_fused_epilogue_calls_take_the_mn_major_variant_of_their_config():
    """A fused call's family (``_fused_family``: its own ``out`` dtype check) is still the GEMM or dual GEMM: its
    derived config (``epilogue.expr`` set) gets the MN-major variant with the expression kept."""
    import torch as _torch

    from ptxgen.ir.epilogue import for_kernel
    from ptxgen.runtime import api

    m, n, k = 64, 256, 128
    expr = for_kernel("gelu(acc + bias[col])", "gemm")
    derived = api._expr_config("h100_128x256", expr)
    fam = api._fused_family(api._GEMM, _torch.bfloat16)
    spec = SimpleNamespace(arch="sm_90a", name=derived.name)
    hit = api._mn_major_variant(fam, derived, spec, bf16(m, k), (bf16(k, n).T,), m, n, k, 0)
    assert (hit.tma.major_a, hit.tma.major_b, hit.epilogue.expr) == ("k", "mn", derived.epilogue.expr)
    dual = api._expr_config("dual_h100_128x128", for_kernel("silu(acc1) * acc2 + bias[col]", "dual_gemm"))
    hit = api._mn_major_variant(api._fused_family(api._DUAL, _torch.bfloat16), dual, spec, bf16(m, k).T.contiguous().T,
                                (bf16(k, n).T, bf16(k, n).T), m, n, k, 0)
    assert (hit.tma.major_b, hit.epilogue.expr) == ("mn", dual.epilogue.expr)
