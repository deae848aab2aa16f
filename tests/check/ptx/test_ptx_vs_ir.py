"""Emitted PTX against the Kernel IR on the CPU: the differential test.

For every shipped config (sm_100a and sm_90a) Hypothesis draws a problem shape (M, N, K not multiples of
the tile; more k-blocks than stages so the smem ring wraps; several tiles per persistent cluster so the
accumulator ring and the tile loop wrap), a CTA (either cluster rank) and, for every warp role of the
kernel, one warp of that role (lane 0, the elected lane) plus one more thread of any warp and lane.  For
each thread, the effects of the freshly emitted PTX (``emitters.emit``, run by ``ptxgen.check.ptx.interp``) must
equal the effects of the IR (run by the simulator's walker, ``ptxgen.check.ptx.diff.ir_effects``): the same
barrier addresses, parities, tx bytes, TMA coordinates, descriptors, TMEM addresses and stores, in the
same order.  generated/ is never read.  The main tier draws cases for the representative configs
(tests/helpers/representative.py) and the variants; the slow tier draws twice as many for every shipped config
and variant, and runs every shipped config's deterministic sweep
(tests/check/ptx/test_planted_emitter.py::test_unpatched_emitter_passes).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.build import build
from ptxgen.config import shipped_configs
from ptxgen.ir import ops
from ptxgen.check.ptx.diff import Launch, diff_thread, ir_effects, ptx_effects, role_ranges
from ptxgen.check.ptx.diff import sweep_threads as sweep  # noqa: F401 (the planted-bug tests import it from here)
from tests.helpers.representative import REPRESENTATIVE

EXAMPLES = 6  # per representative config in the main tier; every example runs one thread of every role (draw_case)
SLOW_EXAMPLES = 12  # per shipped config in the slow tier (test_ptx_effects_equal_ir_effects_more_examples)
#: variants no shipped config carries, compared like the shipped ones: (shipped config, name suffix, changes).
#: Split-K (one CTA, and a multicast pair), the overlapped epilogue (a GEMM pair, and the SwiGLU pair) and stmatrix
#: staging (a pair; a 2-wave tile with the overlapped epilogue: packed words)
VARIANTS = (("h100_128x192", "sk3", {"schedule.split_k": 3}),
            ("dual_h100_128x128_c2", "sk2", {"schedule.split_k": 2}),
            ("h100_128x256", "ov", {"epilogue.overlap": True}),
            ("dual_h100_128x128_c2", "ov", {"epilogue.overlap": True}),
            ("h100_128x256", "sm", {"epilogue.stmatrix": True}),
            ("h100_256x128", "ovsm", {"epilogue.overlap": True, "epilogue.stmatrix": True}))
SPLIT_K = VARIANTS[:2]
OVERLAP = VARIANTS[2:4]
STMATRIX = VARIANTS[4:]


def variant_config(name: str, suffix: str, changes: dict):
    """The shipped config ``name`` with ``changes`` (dotted keys), named ``<name>_<suffix>``."""
    from ptxgen.config import load_config

    return load_config(name).replace(**changes, name=f"{name}_{suffix}")


@functools.cache
def built(name: str, suffix: str = "", changes: tuple = ()):
    """(kernel, parsed PTX) of a shipped config (or a variant: ``suffix`` and ``changes`` as ``(key, value)`` pairs),
    emitted now by the current emitter."""
    res = build(variant_config(name, suffix, dict(changes)) if changes else name)
    return res.kernel, ptxinterp.parse(res.ptx)


def built_variant(variant: tuple):
    name, suffix, changes = variant
    return built(name, suffix, tuple(changes.items()))


@st.composite
def draw_case(draw, kernel, *, kblocks=None, tiles=None):
    """A launch shape and the threads to compare in it (see module docstring).

    kblocks / tiles: fix the number of k-blocks / of (m, n) tiles along (m, n) instead of drawing them.
    """
    spec = kernel.launch  # the shapes a launch may take (tile sizes, stages) are the kernel's
    rows, cols, bk, stages, cs = spec.grid.tile_rows, spec.grid.tile_cols, kernel.block_k, kernel.stages, kernel.cluster_size
    tm, tn = tiles or (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    kb = kblocks or draw(st.integers(stages + 1, stages + 2))
    m = rows * (tm - 1) + draw(st.integers(1, rows - 1))
    step = spec.n_multiple if spec.n_multiple > 1 else 1
    n = cols * (tn - 1) + step * draw(st.integers(1, (cols - 1) // step))
    k = bk * (kb - 1) + 8 * draw(st.integers(1, bk // 8 - 1))  # K rows of 16 B multiples (TMA strides)
    grid = spec.grid.grid_x(m, n, cs)  # persistent: one cluster walks every tile
    ctaid = draw(st.integers(0, grid // cs - 1)) * cs + draw(st.integers(0, cs - 1))
    tids = [draw(st.integers(lo, hi - 1)) * 32 for _, lo, hi in role_ranges(kernel)]
    tids += [draw(st.integers(0, kernel.threads - 1)) for _ in range(2)]
    return m, n, k, grid, ctaid, sorted(set(tids))


def check(kernel, prog, m, n, k, grid, ctaid, tids) -> None:
    for tid in tids:
        msg = diff_thread(kernel, prog, Launch(m, n, k, grid, ctaid, tid))
        assert msg is None, msg


def _variant_id(variant) -> str:
    return variant[0] + (f"_{variant[1]}" if variant[1] else "")


SHIPPED_AND_VARIANTS = pytest.mark.parametrize("variant", [(c, "", {}) for c in shipped_configs()] + list(VARIANTS),
                                               ids=_variant_id)
REPRESENTATIVE_AND_VARIANTS = pytest.mark.parametrize("variant", [(c, "", {}) for c in REPRESENTATIVE] + list(VARIANTS),
                                                      ids=_variant_id)


def differential(variant, examples: int) -> None:
    """``examples`` Hypothesis cases of one config or variant: every drawn thread's PTX effects equal its IR's."""
    kernel, prog = built_variant(variant) if variant[1] else built(variant[0])

    @settings(max_examples=examples)
    @given(case=draw_case(kernel))
    def run(case):
        check(kernel, prog, *case)

    run()


@REPRESENTATIVE_AND_VARIANTS
def test_ptx_effects_equal_ir_effects(variant):
    """Split-K variants compare workspace addresses (partial chunks, counters), the counter ops and their
    .release/.acquire scopes, and the k-block ranges of each split (K draws as few k-blocks as stages + 1).
    Overlapped-epilogue variants compare the deferred stores of packed words (each stored element names the
    accumulator register its ``cvt.rn.bf16x2.f32`` read) and the last tile's store after the tile loop."""
    differential(variant, EXAMPLES)


@pytest.mark.slow
@SHIPPED_AND_VARIANTS
def test_ptx_effects_equal_ir_effects_more_examples(variant):
    """The same differential with twice the main tier's cases per config, over every shipped config (the main
    tier keeps its share of the ten-minute CPU budget)."""
    differential(variant, SLOW_EXAMPLES)


@pytest.mark.parametrize("name", ["level9", "h100_128x256"])
def test_traces_are_not_trivial(name):
    """The comparison sees the work: TMA loads, MMAs, barrier waits with both parities, stores, for each role."""
    kernel, prog = built(name)
    g = kernel.launch.grid
    m, n, k = g.tile_rows * 2 - 3, g.tile_cols * 2 - 8, kernel.block_k * (kernel.stages + 2) - 8
    grid = g.grid_x(m, n, kernel.cluster_size)
    kinds, parities = set(), set()
    for _, lo, _ in role_ranges(kernel):
        launch = Launch(m, n, k, grid, 0, lo * 32)
        effects = ptx_effects(prog, kernel, launch)
        assert effects == ir_effects(kernel, launch)
        kinds |= {e[0] for e in effects}
        parities |= {e[2] for e in effects if e[0] == "mbarrier.try_wait"}
    mma = "tcgen05.mma" if kernel.is_sm100 else "wgmma"
    staging = "stmatrix" if any(isinstance(op, ops.StMatrix) for op in ops.walk(kernel.body)) else "st.shared"
    assert {"tma.load", mma, "mbarrier.arrive", "mbarrier.try_wait", staging, "tma.store"} <= kinds
    assert parities == {0, 1}


@pytest.mark.parametrize("name", ["nvfp4_dual_128x128", "nvfp4_dual_256x128"])
def test_nvfp4_traces_are_not_trivial(name):
    """NVFP4: the MMA thread's trace holds the scale copies and block-scaled MMAs, the epilogue's its f16 stores."""
    kernel, prog = built(name)
    g = kernel.launch.grid
    m, n, k = g.tile_rows * 2, g.tile_cols * 2, kernel.block_k * (kernel.stages + 2)
    grid = g.grid_x(m, n, kernel.cluster_size)
    effects = []
    for _, lo, _ in role_ranges(kernel):
        launch = Launch(m, n, k, grid, 0, lo * 32)
        eff = ptx_effects(prog, kernel, launch)
        assert eff == ir_effects(kernel, launch)
        effects += eff
    kinds = {e[0] for e in effects}
    assert {"tcgen05.cp", "tcgen05.mma.block_scale", "tma.load", "st.shared"} <= kinds and "tcgen05.mma" not in kinds
    mma = next(e for e in effects if e[0] == "tcgen05.mma.block_scale")
    assert mma[1:4] == (kernel.cta_group, "mxf4nvf4", "block16")
    assert all(el[0] == "f16" for e in effects if e[0] == "st.shared" for el in e[2])


def test_split_k_traces_are_not_trivial():
    """The split-K comparison sees the fixup: partial stores and loads, the acq_rel arrival, the counting barrier,
    the counter reset."""
    kernel, prog = built_variant(SPLIT_K[0])
    g = kernel.launch.grid
    m, n, k = g.tile_rows * 2 - 3, g.tile_cols * 2 - 8, kernel.block_k * (kernel.stages + 2) - 8
    launch = Launch(m, n, k, g.grid_x(m, n, 1), 0, 4 * 32)  # a consumer warp's elected lane
    effects = ptx_effects(prog, kernel, launch)
    assert effects == ir_effects(kernel, launch)
    kinds = {e[0] for e in effects}
    assert {"st.global.f32", "ld.global.f32", "atom.add", "bar.red.popc", "st.global.sem.u32", "vote.sync"} <= kinds
    assert {e[1:3] for e in effects if e[0] == "atom.add"} == {("acq_rel", "gpu")}
    assert {e[1:] for e in effects if e[0] == "vote.sync"} == {("any", True, True)}


def test_interpreter_vote():
    """``vote.sync.{any,all}.pred`` over the warp: a lane whose own predicate decides reads no other lane; otherwise
    every lane runs to its vote.  The effect carries the mode, the thread's predicate and the result."""
    text = """
    .visible .entry t() {
        .reg .b32 %r<4>; .reg .pred %p<6>;
        mov.u32 %r1, %laneid;
        setp.eq.u32 %p1, %r1, 5;
        vote.sync.any.pred %p2, %p1, 0xffffffff;
        vote.sync.all.pred %p3, %p1, 0xffffffff;
        setp.lt.u32 %p4, %r1, 32;
        vote.sync.all.pred %p5, %p4, 0xffffffff;
        ret;
    }
    """
    prog = ptxinterp.parse(text)
    run = lambda lane: ptxinterp.run_thread(prog, tid=32 + lane, ctaid=0, nctaid=1, ntid=64, params={}, smem_base=0)
    assert run(5) == [("vote.sync", "any", True, True), ("vote.sync", "all", True, False),
                      ("vote.sync", "all", True, True)]
    assert run(7) == [("vote.sync", "any", False, True), ("vote.sync", "all", False, False),
                      ("vote.sync", "all", True, True)]
    with pytest.raises(ptxinterp.PtxInterpError, match="vote form not interpreted"):
        ptxinterp.parse(".visible .entry t() {\n vote.sync.any.pred %p1, %p2, 0xffff;\n}")


def test_interpreter_basics():
    """The interpreter's own semantics on a hand-written kernel: arithmetic, setp.and, selp, loops, shfl, effects."""
    text = """
    .extern .shared .align 1024 .b8 smem[];
    .visible .entry t(.param .u32 n) {
        .reg .b32 %r<20>; .reg .pred %p<4>; .reg .b64 %d<2>;
        mov.u32 %r1, %tid.x;
        ld.param.u32 %r2, [n];
        mov.u32 %r3, smem;
        rem.u32 %r4, %r1, 5;
        sub.u32 %r5, %r4, 7;
        shr.s32 %r6, %r5, 1;
        setp.lt.s32 %p1, %r5, 0;
        setp.eq.and.u32 %p2, %r4, 2, %p1;
        selp.b32 %r7, 11, 22, %p2;
        mov.b64 %d1, {%r7, %r2};
        mapa.shared::cluster.u32 %r8, %r3, 1;
        mov.u32 %r9, 0;
    $L:
        setp.ge.u32 %p3, %r9, 3;
        @%p3 bra $D;
        mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r3+8], %r9;
        add.u32 %r9, %r9, 1;
        bra $L;
    $D:
        shfl.sync.idx.b32 %r10, %r1, 3, 31, 0xffffffff;
        elect.sync _|%p1, 0xffffffff;
        @!%p1 bra $E;
        mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r8], 64;
    $E:
        tcgen05.mma.cta_group::1.kind::f16 [%r10], %d1, %d1, %r6, %p2;
        ret;
    }
    """
    prog = ptxinterp.parse(text)
    eff = ptxinterp.run_thread(prog, tid=32 + 7, ctaid=0, nctaid=1, ntid=64, params={"n": 5}, smem_base=0x400)
    # tid 39: r4 = 4, r5 = -3, r6 = -2 (arithmetic shift), p2 false (r4 != 2) -> r7 = 22; not elected
    waits = [("mbarrier.try_wait", 0x408, i, "acquire", "cta") for i in range(3)]
    assert eff == [*waits, ("tcgen05.mma", 1, "f16", 32 + 3, 5 << 32 | 22, 5 << 32 | 22, 0xFFFFFFFE, False)]
    eff = ptxinterp.run_thread(prog, tid=32, ctaid=0, nctaid=1, ntid=64, params={"n": 5}, smem_base=0x400)
    assert eff[3] == ("mbarrier.arrive", "cluster", 0x01000400, 64, "release", "cta")
    with pytest.raises(ptxinterp.PtxInterpError, match="not interpreted"):
        ptxinterp.parse(".visible .entry t() {\n ld.global.u32 %r1, [%r2];\n}")


def test_interpreter_memory_scopes():
    """``.release.cluster`` / ``.acquire.cluster`` (the scope of a cross-CTA hand-off) appear in the effects; the
    default is cta."""
    text = """
    .extern .shared .align 1024 .b8 smem[];
    .visible .entry t() {
        .reg .b32 %r<4>; .reg .pred %p<2>;
        mov.u32 %r1, smem;
        mapa.shared::cluster.u32 %r2, %r1, 0;
        mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r2];
        mbarrier.arrive.shared::cta.b64 _, [%r1];
        mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p1, [%r1], 1;
        mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 0;
        ret;
    }
    """
    eff = ptxinterp.run_thread(ptxinterp.parse(text), tid=0, ctaid=1, nctaid=2, ntid=32, params={}, smem_base=0x400,
                               rank=1)
    assert [e[-2:] for e in eff] == [("release", "cluster"), ("release", "cta"), ("acquire", "cluster"), ("acquire", "cta")]
    assert eff[0][:2] == ("mbarrier.arrive", "cluster") and eff[2][:3] == ("mbarrier.try_wait", 0x400, 1)
