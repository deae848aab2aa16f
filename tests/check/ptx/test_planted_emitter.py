"""Planted emitter bugs: each one, patched into the emitter with pytest's monkeypatch, must fail a CPU check
that compares freshly emitted PTX against the IR (the differential sweep of test_ptx_vs_ir) or a golden
sequence (tests/helpers/ptx_filecheck.py).  Nothing here reads generated/, so the checks hold after generated/ is
regenerated with the bug.  The unpatched emitter passes both.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
from tests.helpers.ptx_filecheck import GOLDEN, CheckError, check_golden
from tests.check.ptx.test_ptx_vs_ir import OVERLAP, SPLIT_K, STMATRIX, VARIANTS, sweep, variant_config

import emitters
import emitters.common as common
import emitters.core as core
import emitters.tcgen05 as tcgen05
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.build import build
from ptxgen.config import shipped_configs
from ptxgen.ir import expr as ex
from ptxgen.ir import ops


def _swept_configs() -> list:
    """Every shipped config and the variants (split-K, overlapped epilogue, stmatrix), the cheap sweeps first."""
    return sorted(shipped_configs(), key=lambda c: c.startswith("h100")) + [variant_config(*v) for v in VARIANTS]


@functools.cache
def unpatched_ptx() -> dict[str, str]:
    """Config name -> PTX of the unpatched emitter.  Call it only before a bug is planted (its first call emits)."""
    return {res.config.name: res.ptx for res in map(build, _swept_configs())}


def differential_failure(unchanged: dict[str, str] | None = None) -> str | None:
    """First PTX-vs-IR difference over every shipped config and the variants, emitted now; None when all agree.

    unchanged: config name -> PTX whose sweep is known to pass (:func:`unpatched_ptx`, which
        test_unpatched_emitter_passes proves); a config emitting exactly that text again is not swept.  The
        sweep is a function of the IR and the PTX, and a planted emitter bug leaves the IR as it was.
    """
    for config in _swept_configs():
        res = build(config)
        if unchanged is not None and unchanged.get(res.config.name) == res.ptx:
            continue
        try:
            msg = sweep(res.kernel, ptxinterp.parse(res.ptx))
        except ptxinterp.PtxInterpError as exc:  # a form the IR rules out (e.g. an inexact constant division)
            msg = f"PTX cannot be interpreted: {exc}"
        if msg is not None:
            return f"{res.config.name}: {msg}"
    return None


def golden_failures() -> dict[str, str]:
    """Golden sequence name -> first line of its failure, over PTX emitted now."""
    out, cache = {}, {}
    for g in GOLDEN:
        text = cache.get(g.config) or cache.setdefault(g.config, build(g.config).ptx)
        try:
            check_golden(g, text)
        except CheckError as exc:
            out[g.name] = str(exc).splitlines()[0]
    return out


# ------------------------------------------------------------------ the bugs


def _patch_op(mp, op_type, make):
    """Replace the lowering of ``op_type`` in every arch table by ``make(original)``."""
    for table in emitters.TABLES.values():
        if op_type in table:
            mp.setitem(table, op_type, make(table[op_type]))


def pow2_mod_and(mp):
    """``x % 2^s`` lowered as ``and x, 2^s`` (the mask without the -1; ``x % 2^s`` is ``and x, 2^s - 1``)."""
    value = core.Lowering.value

    def bad(self, e):
        f = ex.fold(ex.lift(e))
        if isinstance(f, ex.Bin) and f.op == "mod" and isinstance(f.b, ex.Const) and core._is_pow2(f.b.value):
            a, d = self.reg(f.a), self.tmp()
            self.emit(f"and.b32 {d}, {a}, {f.b.value};")
            return d
        return value(self, e)
    mp.setattr(core.Lowering, "value", bad)


def pow2_div_shl(mp):
    """Strength reduction of ``x / 2^s`` shifts the wrong way (``shl`` instead of ``shr``)."""
    mp.setitem(core._POW2, "div", "shl")


def constant_division_off_by_one(mp):
    """Division by a constant with a multiplier one too small: some quotients (stage, phase, tile counts) one short."""
    magic = core.udiv_magic
    mp.setattr(core, "udiv_magic", lambda d: None if magic(d) is None else (magic(d)[0] - 1, magic(d)[1]))


def peer_bit_mask(mp):
    """The 2-SM TMA barrier mask clears the wrong bit (0xFFFEFFFF instead of 0xFEFFFFFF)."""
    mp.setattr(common, "PEER_BIT_MASK", 0xFFFEFFFF)


def tma_coords_swapped(mp):
    """TMA load box coordinates passed as {row, col} instead of {col, row}."""
    _patch_op(mp, ops.TmaLoad, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, col=op.row, row=op.col)))


def loop_bound_gt(mp):
    """Loop exit test ``setp.gt`` instead of ``setp.ge``: one iteration too many."""
    def bad_for(lw, op):
        lw.comment(op.describe())
        top, done = lw.label(f"{op.var}_loop"), lw.label(f"{op.var}_done")
        v = lw.var(op.var)
        lw.emit(f"mov.u32 {v}, {lw.value(op.start)};")
        lw.place(top)
        p = lw.pred()
        lw.emit(f"setp.gt.u32 {p}, {v}, {lw.value(op.stop)};")
        lw.emit(f"@{p} bra {done};")
        lw.depth += 1
        lw.body(op.body)
        lw.depth -= 1
        lw.emit(f"add.u32 {v}, {v}, {lw.value(op.step)};")
        lw.emit(f"bra {top};")
        lw.place(done)
    mp.setitem(core._CONTROL, ops.For, bad_for)


def desc_hi_wrong(mp):
    """UMMA descriptor high word off by one bit (bit 46 of the descriptor: SBO's top bit)."""
    desc = tcgen05._desc
    mp.setattr(tcgen05, "_desc", lambda lw, lo, hi: desc(lw, lo, hi ^ (1 << 14)))


def commit_multicast_dropped(mp):
    """``tcgen05.commit`` without ``.multicast::cluster``: only the issuing CTA's barrier is arrived on."""
    _patch_op(mp, ops.UmmaCommit, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, multicast=0)))


def selp_swapped(mp):
    """``selp d, a, b, p`` with a and b swapped (a Select lowered inverted)."""
    value = core.Lowering.value

    def bad(self, e):
        f = ex.fold(ex.lift(e))
        if isinstance(f, ex.Select):
            return value(self, ex.Select(f.cond, f.b, f.a))
        return value(self, e)
    mp.setattr(core.Lowering, "value", bad)


def barrier_stride(mp):
    """mbarrier ``name[i]`` addressed at offset + 16 i instead of + 8 i."""
    def bar(self, b):
        return self.value(ex.Sreg("smem") + self.kernel.barrier(b.name).offset + b.index * 16)
    mp.setattr(core.Lowering, "bar", bar)


def mapa_own_rank(mp):
    """Remote arrive maps the barrier into the thread's own rank instead of the target CTA."""
    def remote(lw, addr, cta):
        r = lw.tmp()
        lw.emit(f"mapa.shared::cluster.u32 {r}, {addr}, %rank;")
        return r
    mp.setattr(common, "_remote", remote)


def bf16_pair_swapped(mp):
    """``cvt.rn.bf16x2.f32`` with its sources swapped: element pairs land reversed in memory."""
    original = common._pack_16

    def pack(lw, src, idx, fmt, packed=False):
        if packed:
            return original(lw, src, idx, fmt, packed)
        regs = lw.array(src, max(idx) + 1, common._array_type(lw, src))
        words = []
        for lo, hi in zip(idx[0::2], idx[1::2]):
            w = lw.tmp()
            lw.emit(f"cvt.rn.{fmt}x2.f32 {w}, {regs[lo]}, {regs[hi]};")
            words.append(w)
        return words
    mp.setattr(common, "_pack_16", pack)


def packed_words_swapped(mp):
    """The overlapped epilogue's ``Pack16`` packs each pair high element first: D's column pairs land swapped."""
    def pack(lw, op):
        src, dst = lw.array(op.src, op.n, common._array_type(lw, op.src)), lw.array(op.dst, op.n // 2, ".b32")
        for j in range(op.n // 2):
            lw.emit(f"cvt.rn.{op.fmt}x2.f32 {dst[j]}, {src[2 * j]}, {src[2 * j + 1]};")
    _patch_op(mp, ops.Pack16, lambda f: pack)


def packed_store_unpacked(mp):
    """A packed store emitted like an f32 one: it converts registers of the packed array as if they held f32."""
    for op_type in (ops.StShared16, ops.StMatrix):
        _patch_op(mp, op_type, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, packed=False)))


def stmatrix_words_reversed(mp):
    """``stmatrix`` given its four words last first: each lane's matrices 0-3 written as 3-0."""
    def bad(lw, op):
        words = common._pack_16(lw, op.src, op.idx, op.fmt, op.packed)
        lw.emit(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{lw.smem(op.addr)}], {{{', '.join(reversed(words))}}};")
    _patch_op(mp, ops.StMatrix, lambda f: bad)


def cluster_scope_dropped(mp):
    """Level 1's relay: ``mbarrier.arrive`` / ``try_wait`` emitted at the default .cta scope
    (a cross-CTA hand-off synchronizes at cluster scope: PTX ISA, Memory Consistency Model, scope)."""
    for op_type in (ops.MbarrierArrive, ops.MbarrierWait):
        _patch_op(mp, op_type, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, scope="cta")))


def scale_operands_swapped(mp):
    """NVFP4: the block-scaled ``tcgen05.mma`` emitted with ``[sfb], [sfa]``: each operand scaled by the other's scales."""
    _patch_op(mp, ops.UmmaBlockScaled, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, sfa=op.sfb, sfb=op.sfa)))


def f16_stored_as_bf16(mp):
    """NVFP4's fp16 C converted with ``cvt.rn.bf16x2.f32``: the right bits for the wrong type."""
    pack = common._pack_16
    mp.setattr(common, "_pack_16", lambda lw, src, idx, fmt, packed=False: pack(lw, src, idx, "bf16", packed))


def release_dropped(mp):
    """The split-K arrival emitted ``atom.relaxed.gpu``: partial stores no longer ordered before it."""
    _patch_op(mp, ops.AtomGlobalAdd, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, sem="relaxed")))


def partial_chunk_off_by_one(mp):
    """Split-K partial stores one 16-byte chunk too far (the last split would add another thread's values)."""
    _patch_op(mp, ops.StGlobalF32, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, offset=op.offset + 16)))


def transposed_store_untransposed(mp):
    """Swap-AB's transposed store emitted as the plain one: the kernel's D^T lands at D[row, col] (pitch n)."""
    _patch_op(mp, ops.StGlobal16, lambda f: lambda lw, op: f(lw, dataclasses.replace(op, transposed=False)))


def transposed_bound_swapped(mp):
    """Swap-AB's transposed store guards its row with n and its columns with m (the bound on the wrong dimension):
    at m != n it drops rows that are inside D and writes columns past it."""
    def make(f):
        def bad(lw, op):
            start = len(lw.lines)
            f(lw, op)
            if op.transposed:
                swap = {"%m;": "%n;", "%n;": "%m;"}
                lw.lines[start:] = [line[:-3] + swap[line[-3:]] if "setp." in line and line[-3:] in swap else line
                                    for line in lw.lines[start:]]
        return bad
    _patch_op(mp, ops.StGlobal16, make)


def vote_all(mp):
    """The split-K verdict's ``vote.sync.any`` emitted as ``vote.sync.all`` (the same result while every lane's count
    agrees: only the instruction form differs)."""
    def bad(lw, op):
        pred, p = lw.predicate(op.pred), lw.pred()
        lw.emit(f"vote.sync.all.pred {p}, {pred}, 0xffffffff;")
        lw.emit(f"selp.u32 {lw.var(op.var)}, 1, 0, {p};")
    _patch_op(mp, ops.VoteAny, lambda f: bad)


def vote_dropped(mp):
    """The vote not emitted: the verdict stays as ``bar.red.popc`` left it (right value, per-thread loop)."""
    _patch_op(mp, ops.VoteAny, lambda f: lambda lw, op: None)


def grid_dependency_wait_dropped(mp):
    """``griddepcontrol.wait`` not emitted: the kernel, launched with programmatic dependent launch, would read and
    write global memory while the previous grid still runs."""
    _patch_op(mp, ops.GridDepControl, lambda f: lambda lw, op: None if op.action == "wait" else f(lw, op))


def grid_dependency_after_first_load(mp):
    """``griddepcontrol.wait`` emitted after the producer's first TMA load instead of in the setup (the wait's
    place is what the differential compares, not only its presence)."""
    state = {}

    def tma(f):
        def lower(lw, op):
            f(lw, op)
            if state.pop("pending", False):
                lw.emit("griddepcontrol.wait;")
        return lower

    def gdc(f):
        def lower(lw, op):
            if op.action == "wait":
                state["pending"] = True
                return
            f(lw, op)
        return lower
    _patch_op(mp, ops.TmaLoad, tma)
    _patch_op(mp, ops.GridDepControl, gdc)


# bug -> the check that must catch it ("differential", or "golden:<name>")
BUGS = {
    pow2_mod_and: "differential",
    pow2_div_shl: "differential",
    constant_division_off_by_one: "differential",
    peer_bit_mask: "differential",
    tma_coords_swapped: "differential",
    loop_bound_gt: "differential",
    desc_hi_wrong: "differential",
    commit_multicast_dropped: "differential",
    selp_swapped: "differential",
    barrier_stride: "differential",
    mapa_own_rank: "differential",
    bf16_pair_swapped: "differential",
    packed_words_swapped: "differential",
    packed_store_unpacked: "differential",
    stmatrix_words_reversed: "differential",
    cluster_scope_dropped: "differential",
    scale_operands_swapped: "differential",
    f16_stored_as_bf16: "differential",
    release_dropped: "differential",
    partial_chunk_off_by_one: "differential",
    transposed_store_untransposed: "differential",
    transposed_bound_swapped: "differential",
    vote_all: "differential",
    vote_dropped: "differential",
    grid_dependency_wait_dropped: "differential",
    grid_dependency_after_first_load: "differential",
}
GOLDEN_CATCHES = {  # bugs a golden sequence catches as well
    peer_bit_mask: "two_sm_tma_load",
    commit_multicast_dropped: "multicast_commit",
}


def test_unpatched_emitter_passes_the_golden_sequences():
    assert golden_failures() == {}


@pytest.mark.slow
def test_unpatched_emitter_passes():
    """The deterministic PTX-vs-IR sweep of every shipped config and variant (the slow tier: each planted bug in the
    main tier sweeps the configs whose PTX it changes, and the main tier's drawn cases cover the representative
    configs, tests/check/ptx/test_ptx_vs_ir.py)."""
    assert differential_failure() is None


@pytest.mark.parametrize("bug", list(BUGS), ids=lambda f: f.__name__)
def test_planted_bug_is_caught(bug, monkeypatch):
    configs = {name: name for name in ("level9", "h100_128x256", "level1", "nvfp4_dual_128x128", "h100_64x16_swap")}
    configs["split-K"] = variant_config(*SPLIT_K[0])
    configs["overlap"] = variant_config(*OVERLAP[0])
    configs["stmatrix"] = variant_config(*STMATRIX[0])
    before = {name: build(c).ptx for name, c in configs.items()}
    unchanged = unpatched_ptx()  # emitted before the bug is planted
    bug(monkeypatch)
    after = {name: build(c).ptx for name, c in configs.items()}
    assert before != after, f"{bug.__name__} does not change the emitted PTX: the planted bug is not planted"
    catcher = BUGS[bug]
    if catcher == "differential":
        msg = differential_failure(unchanged)
        assert msg is not None, f"{bug.__name__}: the PTX-vs-IR differential check passed"
    if bug in GOLDEN_CATCHES:
        assert GOLDEN_CATCHES[bug] in golden_failures(), f"{bug.__name__}: golden {GOLDEN_CATCHES[bug]} passed"
