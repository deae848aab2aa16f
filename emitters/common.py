"""Lowering of the families both arches share: mbarrier, TMA, cluster and CTA sync, fences, data stores.

Sources: PTX ISA 8.8 sections "mbarrier", "cp.async.bulk.tensor", "barrier.cluster", "bar.sync",
"fence.proxy", "mapa", "shfl.sync", "vote.sync", "cvt" (bf16x2).
"""

from __future__ import annotations

from ptxgen.ir import expr as ex
from ptxgen.ir import ops

from .core import Lowering, _split_const

PEER_BIT_MASK = 0xFEFFFFFF  # clears the CTA-rank bit of a shared::cluster address (seed level 2)


def _remote(lw: Lowering, addr: str, cta: ex.Expr) -> str:
    """``mapa``: the address of the same barrier in cluster rank ``cta``."""
    r = lw.tmp()
    lw.emit(f"mapa.shared::cluster.u32 {r}, {addr}, {lw.value(cta)};")
    return r


def mbarrier_init(lw: Lowering, op: ops.MbarrierInit) -> None:
    lw.emit(f"mbarrier.init.shared::cta.b64 [{lw.bar(op.bar)}], {lw.value(op.count)};")


def fence_mbarrier_init(lw: Lowering, op: ops.FenceMbarrierInit) -> None:
    lw.emit("fence.mbarrier_init.release.cluster;")


def mbarrier_arrive(lw: Lowering, op: ops.MbarrierArrive) -> None:
    addr = lw.bar(op.bar)
    # scope "cta": the default (.release.cta) form, printed without qualifiers as before;
    # "cluster": .release.cluster (a cross-CTA data hand-off; PTX ISA "mbarrier.arrive")
    sem = ".release.cluster" if op.scope == "cluster" else ""
    if op.cta is None:
        lw.emit(f"mbarrier.arrive{sem}.shared::cta.b64 _, [{addr}];")
    else:
        # the seeds' (DeepGEMM's) form: default .release semantics on the mapa'd shared::cluster address
        lw.emit(f"mbarrier.arrive{sem}.shared::cluster.b64 _, [{_remote(lw, addr, op.cta)}];")


def mbarrier_arrive_expect_tx(lw: Lowering, op: ops.MbarrierArriveExpectTx) -> None:
    addr = lw.bar(op.bar)
    if op.cta is None:
        lw.emit(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{addr}], {op.tx_bytes};")
    else:
        lw.emit(f"mbarrier.arrive.expect_tx.shared::cluster.b64 _, [{_remote(lw, addr, op.cta)}], {op.tx_bytes};")


def mbarrier_wait(lw: Lowering, op: ops.MbarrierWait) -> None:
    addr, phase = lw.bar(op.bar), lw.reg(op.phase)
    sem = ".acquire.cluster" if op.scope == "cluster" else ""  # default: .acquire.cta
    if op.watch is not None and lw.kernel.watchdog_ns:
        _watched_wait(lw, op, addr, phase, sem)
        return
    top = lw.label("wait")
    p = lw.pred()
    lw.place(top)
    lw.emit(f"mbarrier.try_wait.parity{sem}.shared::cta.b64 {p}, [{addr}], {phase};")
    lw.emit(f"@!{p} bra {top};")


def _watched_wait(lw: Lowering, op: ops.MbarrierWait, addr: str, phase: str, sem: str) -> None:
    """The wait loop bounded by the kernel's watchdog budget (:mod:`ptxgen.ir.watchdog`).

    ``%globaltimer``: 64-bit ns timer (PTX ISA "Special registers"); ``atom.global.cas.b32`` (PTX ISA "atom").
    A thread leaves by the abort flag (another wait expired) while its own wait is younger than the budget;
    once its own budget is spent it competes for the record: it sets the flag, posts its start time to the
    record's ``oldest`` word (a CAS loop keeps the oldest, compared modulo 2^32 in 256 ns units), waits
    ``SETTLE_NS`` for the other expired waiters to post theirs, and writes the record only if its start is the
    oldest (ties: the CAS on ``claim``).  So the record names the wait that has been stuck longest, the one
    nearest the cause, not whichever thread's poll came first.  Either way the thread abandons: it clears
    ``wd_live``, so it skips every later arrive and TMA load (the instrument pass guards them) and only falls
    through the rest of its waits.
    """
    from ptxgen.ir.watchdog import LIVE, SETTLE_NS, UNBOUND, WORD

    ptr = "%" + "watchdog_ptr"
    top, done, expired = lw.label("wait"), lw.label("wait_done"), lw.label("wait_expired")
    post, post_cas, abandon = lw.label("wait_post"), lw.label("wait_post_cas"), lw.label("wait_abandon")
    settle, settle_spin = lw.label("wait_settle"), lw.label("wait_settle_spin")
    t0, now = lw.tmp64(), lw.tmp64()
    p, q, flag = lw.pred(), lw.pred(), lw.tmp()
    lw.emit(f"mov.u64 {t0}, %globaltimer;  // watchdog: wait site {op.watch.site}")
    lw.place(top)
    lw.emit(f"mbarrier.try_wait.parity{sem}.shared::cta.b64 {p}, [{addr}], {phase};")
    lw.emit(f"@{p} bra {done};")
    lw.emit(f"ld.volatile.global.u32 {flag}, [{ptr}];")
    lw.emit(f"mov.u64 {now}, %globaltimer;")
    lw.emit(f"sub.u64 {now}, {now}, {t0};")
    lw.emit(f"setp.lt.u64 {q}, {now}, {lw.kernel.watchdog_ns};")
    lw.emit(f"@!{q} bra {expired};")
    lw.emit(f"setp.eq.u32 {q}, {flag}, 0;")
    lw.emit(f"@{q} bra {top};")
    lw.emit(f"bra {abandon};  // another wait expired: abandon, fall through")
    lw.place(expired)
    one = lw.reg_const(1)
    lw.emit(f"st.volatile.global.u32 [{ptr}], {one};  // abort flag: every other waiter abandons")
    key, key64, old, diff, got = lw.tmp(), lw.tmp64(), lw.tmp(), lw.tmp(), lw.tmp()
    lw.emit(f"shr.u64 {key64}, {t0}, 8;")
    lw.emit(f"cvt.u32.u64 {key}, {key64};")
    lw.emit(f"max.u32 {key}, {key}, 1;  // 0 is the empty word")
    oldest = f"[{ptr}+{4 * WORD['oldest']}]"
    lw.place(post)
    lw.emit(f"ld.volatile.global.u32 {old}, {oldest};")
    lw.emit(f"setp.eq.u32 {q}, {old}, 0;")
    lw.emit(f"@{q} bra {post_cas};")
    lw.emit(f"sub.u32 {diff}, {key}, {old};")
    lw.emit(f"setp.lt.s32 {q}, {diff}, 0;  // this wait started before the posted one")
    lw.emit(f"@!{q} bra {settle};")
    lw.place(post_cas)
    lw.emit(f"atom.global.cas.b32 {got}, {oldest}, {old}, {key};")
    lw.emit(f"setp.ne.u32 {q}, {got}, {old};")
    lw.emit(f"@{q} bra {post};")
    lw.place(settle)
    t1, dt = lw.tmp64(), lw.tmp64()
    lw.emit(f"mov.u64 {t1}, %globaltimer;")
    lw.place(settle_spin)
    lw.emit(f"mov.u64 {dt}, %globaltimer;")
    lw.emit(f"sub.u64 {dt}, {dt}, {t1};")
    lw.emit(f"setp.lt.u64 {q}, {dt}, {SETTLE_NS};")
    lw.emit(f"@{q} bra {settle_spin};")
    lw.emit(f"ld.volatile.global.u32 {old}, {oldest};")
    lw.emit(f"setp.ne.u32 {q}, {old}, {key};")
    lw.emit(f"@{q} bra {abandon};  // an older wait expired too: it writes the record")
    claim = lw.tmp()
    lw.emit(f"atom.global.cas.b32 {claim}, [{ptr}+{4 * WORD['claim']}], 0, 1;")
    lw.emit(f"setp.ne.u32 {q}, {claim}, 0;")
    lw.emit(f"@{q} bra {abandon};")
    w = op.watch
    lo, hi = lw.tmp(), lw.tmp()
    lw.emit(f"mov.b64 {{{lo}, {hi}}}, {now};")
    fields = {"site": lw.reg_const(w.site), "cta": "%cta",
              "rank": "%rank" if lw.kernel.cluster_size > 1 else lw.reg_const(0),
              "warp": "%warp", "lane": "%lane", "index": lw.reg(op.bar.index), "parity": phase,
              "tile": lw.reg(w.tile) if w.tile is not None else lw.reg_const(UNBOUND),
              "kblock": lw.reg(w.kblock) if w.kblock is not None else lw.reg_const(UNBOUND),
              "elapsed_lo": lo, "elapsed_hi": hi}
    for name, reg in fields.items():
        lw.emit(f"st.global.u32 [{ptr}+{4 * WORD[name]}], {reg};")
    lw.place(abandon)
    lw.emit(f"mov.u32 {lw.var(LIVE)}, 0;  // watchdog: abandoned, skip later arrives and TMA loads")
    lw.place(done)
    lw.assigned()


def watchdog_drain(lw: Lowering) -> None:
    """The watched kernel's last lines (before ``ret``): a thread that abandoned a wait spins ``DRAIN_NS``.

    A CTA must not exit while a TMA load still writes its shared memory and arrives on its barrier
    (PTX ISA "cp.async.bulk.tensor": the copy is asynchronous; "mbarrier": complete_tx is its only completion
    signal, and a broken barrier never reports it), so a bounded ``%globaltimer`` wait stands in.  Abandoned
    threads issue no load; a live producer issues one only after a release that a consumer made before it
    abandoned, and that consumer spins here from after that release, so every load had ``DRAIN_NS`` (three
    orders of magnitude more than a load takes) before its CTA, and a multicast peer held by the teardown's
    cluster barrier, exits.  wgmma and bulk stores need nothing here: the kernel's own ``wgmma.wait_group``
    and ``cp.async.bulk.wait_group`` run, because abandoned threads fall through the same control flow.
    """
    from ptxgen.ir.watchdog import DRAIN_NS, LIVE

    spin, skip = lw.label("drain"), lw.label("drain_done")
    p, t0, now = lw.pred(), lw.tmp64(), lw.tmp64()
    lw.lines.append("")
    lw.comment(f"==== watchdog drain: a thread that abandoned a wait gives in-flight TMA loads {DRAIN_NS} ns")
    lw.emit(f"setp.ne.u32 {p}, {lw.var(LIVE)}, 0;")
    lw.emit(f"@{p} bra {skip};")
    lw.emit(f"mov.u64 {t0}, %globaltimer;")
    lw.place(spin)
    lw.emit(f"mov.u64 {now}, %globaltimer;")
    lw.emit(f"sub.u64 {now}, {now}, {t0};")
    lw.emit(f"setp.lt.u64 {p}, {now}, {DRAIN_NS};")
    lw.emit(f"@{p} bra {spin};")
    lw.place(skip)


def _coord(lw: Lowering, e) -> str:
    """A TMA coordinate register; a constant one (a scale tile's inner 0) is hoisted, not a mov per k-block."""
    e = ex.fold(ex.lift(e))
    return lw.reg_const(e.value, "coord") if isinstance(e, ex.Const) else lw.reg(e)


def tma_load(lw: Lowering, op: ops.TmaLoad) -> None:
    dst, bar = lw.smem(op.dst), lw.bar(op.bar)
    col, row = _coord(lw, op.col), _coord(lw, op.row)
    group = ""
    if op.two_sm:
        masked = lw.tmp()
        lw.emit(f"and.b32 {masked}, {bar}, {PEER_BIT_MASK:#x};  // completion on the leader CTA's barrier")
        bar, group = masked, ".cta_group::2"
    head = f"cp.async.bulk.tensor.2d{group}.shared::cluster.global.mbarrier::complete_tx::bytes"
    operands = f"[{dst}], [%tmap_{op.tensor}, {{{col}, {row}}}], [{bar}]"
    hint, policy = "", ""
    if op.cache_hint != "none":  # PTX ISA "createpolicy": the whole (fraction 1.0) access gets the eviction priority
        policy = lw.tmp64()
        lw.emit(f"createpolicy.fractional.L2::{op.cache_hint}.b64 {policy}, 1.0;")
        hint, policy = ".L2::cache_hint", f", {policy}"
    if op.multicast:
        mask = lw.tmp16()
        lw.emit(f"mov.b16 {mask}, {op.multicast:#x};")
        lw.emit(f"{head}.multicast::cluster{hint} {operands}, {mask}{policy};")
    else:
        lw.emit(f"{head}{hint} {operands}{policy};")


def tma_store(lw: Lowering, op: ops.TmaStore) -> None:
    src, col, row = lw.smem(op.src), lw.reg(op.col), lw.reg(op.row)
    lw.emit(f"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%tmap_{op.tensor}, {{{col}, {row}}}], [{src}];")


def bulk_commit(lw: Lowering, op: ops.BulkCommitGroup) -> None:
    lw.emit("cp.async.bulk.commit_group;")


def bulk_wait(lw: Lowering, op: ops.BulkWaitGroup) -> None:
    lw.emit(f"cp.async.bulk.wait_group{'.read' if op.read else ''} {op.n};")


def fence_proxy_async(lw: Lowering, op: ops.FenceProxyAsync) -> None:
    lw.emit("fence.proxy.async.shared::cta;")


def cta_sync(lw: Lowering, op: ops.CtaSync) -> None:
    lw.emit("bar.sync 0;")


def named_barrier(lw: Lowering, op: ops.NamedBarrier) -> None:
    lw.emit(f"bar.sync {lw.value(op.id)}, {op.threads};")


def named_barrier_popc(lw: Lowering, op: ops.NamedBarrierPopc) -> None:
    pred = lw.predicate(op.pred)
    lw.emit(f"bar.red.popc.u32 {lw.var(op.var)}, {lw.value(op.id)}, {op.threads}, {pred};")
    lw.assigned()


def cluster_sync(lw: Lowering, op: ops.ClusterSync) -> None:
    lw.emit("barrier.cluster.arrive.release.aligned;")
    lw.emit("barrier.cluster.wait.acquire.aligned;")


def vote_any(lw: Lowering, op: ops.VoteAny) -> None:
    # vote.sync.any.pred over the full warp (PTX ISA "vote.sync"): its result is a warp-wide reduction, so ptxas
    # keeps a branch on var warp-uniform
    pred, any_lane = lw.predicate(op.pred), lw.pred()
    lw.emit(f"vote.sync.any.pred {any_lane}, {pred}, 0xffffffff;")
    lw.emit(f"selp.u32 {lw.var(op.var)}, 1, 0, {any_lane};")


def shfl(lw: Lowering, op: ops.Shfl) -> None:
    lw.emit(f"shfl.sync.idx.b32 {lw.var(op.var)}, {lw.var(op.src)}, {lw.value(op.lane)}, 31, 0xffffffff;")


def nanosleep(lw: Lowering, op: ops.Nanosleep) -> None:
    lw.emit(f"nanosleep.u32 {op.ns};")


def grid_dep_control(lw: Lowering, op: ops.GridDepControl) -> None:
    """``griddepcontrol.wait`` / ``.launch_dependents`` (PTX ISA "griddepcontrol", PTX ISA 7.8, sm_90+)."""
    lw.emit(f"griddepcontrol.{op.action};")


def _pack_16(lw: Lowering, src: str, idx: tuple[int, ...], fmt: str, packed: bool = False) -> list[str]:
    """Pairs of f32 -> ``fmt``x2 words (bf16x2 or f16x2; element idx[2j] in the low half, as memory order wants).

    ``packed``: ``src`` holds such words already (:class:`~ptxgen.ir.ops.Pack16`): the words of the pairs.
    """
    if packed:
        if any(lo % 2 or hi != lo + 1 for lo, hi in zip(idx[0::2], idx[1::2])):
            raise ValueError(f"packed store of {src}{list(idx)}: elements must come in (even, odd) pairs of one word")
        words = lw.array(src, max(idx) // 2 + 1, ".b32")
        return [words[lo // 2] for lo in idx[0::2]]
    regs = lw.array(src, max(idx) + 1, _array_type(lw, src))
    words = []
    for lo, hi in zip(idx[0::2], idx[1::2]):
        w = lw.tmp()
        lw.emit(f"cvt.rn.{fmt}x2.f32 {w}, {regs[hi]}, {regs[lo]};")
        words.append(w)
    return words


def pack_16(lw: Lowering, op: ops.Pack16) -> None:
    """One ``cvt.rn.{fmt}x2.f32`` per pair into the ``.b32`` array ``dst`` (word j = elements 2j, 2j+1)."""
    src = lw.array(op.src, op.n, _array_type(lw, op.src))
    dst = lw.array(op.dst, op.n // 2, ".b32")
    for j in range(op.n // 2):
        lw.emit(f"cvt.rn.{op.fmt}x2.f32 {dst[j]}, {src[2 * j + 1]}, {src[2 * j]};")


def _array_type(lw: Lowering, name: str) -> str:
    return lw.arrays.get(name, (".b32", 0))[0]


def st_shared_16(lw: Lowering, op: ops.StShared16) -> None:
    if op.fmt == "e4m3":  # one pair -> two e4m3 bytes, the first element in the low byte (PTX ISA "cvt")
        regs = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
        h = lw.tmp16()
        lw.emit(f"cvt.rn.satfinite.e4m3x2.f32 {h}, {regs[op.idx[1]]}, {regs[op.idx[0]]};")
        lw.emit(f"st.shared.b16 [{lw.smem(op.addr)}], {h};")
        return
    words = _pack_16(lw, op.src, op.idx, op.fmt, op.packed)
    addr = lw.smem(op.addr)
    vec = {1: "", 2: ".v2", 4: ".v4"}[len(words)]
    data = words[0] if len(words) == 1 else "{" + ", ".join(words) + "}"
    lw.emit(f"st.shared{vec}.b32 [{addr}], {data};")


def st_matrix(lw: Lowering, op: ops.StMatrix) -> None:
    words = _pack_16(lw, op.src, op.idx, op.fmt, op.packed)
    lw.emit(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{lw.smem(op.addr)}], {{{', '.join(words)}}};")


def ld_matrix(lw: Lowering, op: ops.LdMatrix) -> None:
    """``ldmatrix.x4`` into four words, each split (``mov.b32 {lo, hi}``) and converted exactly to f32."""
    dst = lw.array(op.dst, max(op.idx) + 1, _array_type(lw, op.dst))
    words = [lw.tmp() for _ in range(4)]
    lw.emit(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{', '.join(words)}}}, [{lw.smem(op.addr)}];")
    for j, w in enumerate(words):
        lo, hi = lw.tmp16(), lw.tmp16()
        lw.emit(f"mov.b32 {{{lo}, {hi}}}, {w};")
        lw.emit(f"cvt.f32.{op.fmt} {dst[op.idx[2 * j]]}, {lo};")
        lw.emit(f"cvt.f32.{op.fmt} {dst[op.idx[2 * j + 1]]}, {hi};")


def st_global_16(lw: Lowering, op: ops.StGlobal16) -> None:
    """Vector store when the whole run is inside D and aligned (n % len == 0); else per element with masks.

    ``op.transposed`` (swap-AB): per element, ``D^T[col + j, row]`` at ``d_ptr + ((col + j) * m + row) * 2``."""
    if op.transposed:
        _st_global_16_transposed(lw, op)
        return
    n_el = len(op.idx)
    row, col = lw.reg(op.row), lw.reg(op.col)
    words = _pack_16(lw, op.src, op.idx, op.fmt, op.packed)
    done = lw.label("st_done")
    p_row = lw.pred()
    lw.emit(f"setp.ge.u32 {p_row}, {row}, {'%m' if op.row_end is None else lw.reg(op.row_end)};")
    lw.emit(f"@{p_row} bra {done};")
    # element address: d_ptr + (row * n + col) * 2
    lin = lw.tmp()
    lw.emit(f"mad.lo.u32 {lin}, {row}, %n, {col};")
    addr = lw.tmp64()
    lw.emit(f"mul.wide.u32 {addr}, {lin}, 2;")
    lw.emit(f"add.u64 {addr}, {addr}, %d_ptr;")
    end, rem, p_vec = lw.tmp(), lw.tmp(), lw.pred()
    lw.emit(f"add.u32 {end}, {col}, {n_el};")
    lw.emit(f"and.b32 {rem}, %n, {n_el - 1};")
    lw.emit(f"setp.le.u32 {p_vec}, {end}, %n;")
    lw.emit(f"setp.eq.and.u32 {p_vec}, {rem}, 0, {p_vec};")
    vec = {1: ".b32", 2: ".v2.b32", 4: ".v4.b32"}[len(words)]
    data = words[0] if len(words) == 1 else "{" + ", ".join(words) + "}"
    lw.emit(f"@{p_vec} st.global{vec} [{addr}], {data};")
    lw.emit(f"@{p_vec} bra {done};")
    if op.packed:  # the halves of each word: mov.b32 {lo, hi} (element 2j in the low half)
        halves = []
        for w in words:
            lo, hi = lw.tmp16(), lw.tmp16()
            lw.emit(f"mov.b32 {{{lo}, {hi}}}, {w};")
            halves += [lo, hi]
    else:
        regs = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
    for j, i in enumerate(op.idx):
        p, c = lw.pred(), lw.tmp()
        lw.emit(f"add.u32 {c}, {col}, {j};")
        lw.emit(f"setp.lt.u32 {p}, {c}, %n;")
        if op.packed:
            h = halves[j]
        else:
            h = lw.tmp16()
            lw.emit(f"cvt.rn.{op.fmt}.f32 {h}, {regs[i]};")
        lw.emit(f"@{p} st.global.b16 [{addr}+{2 * j}], {h};")
    lw.place(done)


def _st_global_16_transposed(lw: Lowering, op: ops.StGlobal16) -> None:
    """Swap-AB's store: element j of the run (the kernel's row ``row``, column ``col + j``) to ``D^T[col + j, row]``,
    a row-major D of pitch ``m``; guarded by ``row < m`` (the caller's N) and ``col + j < n`` (the caller's M).
    Lanes of consecutive rows write consecutive addresses (PTX ISA "wgmma register fragments": lane l holds row
    l / 4), so each st.global.b16 of a warp covers 8 runs of 8 bf16 (16 bytes)."""
    row, col = lw.reg(op.row), lw.reg(op.col)
    done = lw.label("st_done")
    p_row = lw.pred()
    lw.emit(f"setp.ge.u32 {p_row}, {row}, {'%m' if op.row_end is None else lw.reg(op.row_end)};")
    lw.emit(f"@{p_row} bra {done};")
    if op.packed:  # only epilogue.overlap packs, and swap-AB refuses it (ptxgen.config)
        raise NotImplementedError("StGlobal16: a transposed store of packed words")
    regs = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
    for j, i in enumerate(op.idx):
        p, c, lin, addr, h = lw.pred(), lw.tmp(), lw.tmp(), lw.tmp64(), lw.tmp16()
        lw.emit(f"add.u32 {c}, {col}, {j};")
        lw.emit(f"setp.lt.u32 {p}, {c}, %n;")
        lw.emit(f"mad.lo.u32 {lin}, {c}, %m, {row};")
        lw.emit(f"mul.wide.u32 {addr}, {lin}, 2;")
        lw.emit(f"add.u64 {addr}, {addr}, %d_ptr;")
        lw.emit(f"cvt.rn.{op.fmt}.f32 {h}, {regs[i]};")
        lw.emit(f"@{p} st.global.b16 [{addr}], {h};")
    lw.place(done)


def _global_addr(lw: Lowering, param: str, offset: ex.Expr) -> str:
    """``[...]`` operand of the 64-bit global address ``%param + offset`` (``offset``: u32 bytes).

    A constant part of ``offset`` becomes the immediate of the address operand (``[%xd + 2048]``), so the
    chunks of one partial share one base register.
    """
    const, rest = _split_const(ex.fold(ex.lift(offset)))
    addr = lw.tmp64()
    if rest is None:
        lw.emit(f"mov.u64 {addr}, %{param};")
    else:
        lw.emit(f"cvt.u64.u32 {addr}, {lw.reg(rest)};")
        lw.emit(f"add.u64 {addr}, {addr}, %{param};")
    return f"{addr}+{const}" if const else addr


def st_global_f32(lw: Lowering, op: ops.StGlobalF32) -> None:
    regs = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
    addr = _global_addr(lw, op.param, op.offset)
    lw.emit(f"st.global.v4.f32 [{addr}], {{{', '.join(regs[i] for i in op.idx)}}};")


def ld_global_f32(lw: Lowering, op: ops.LdGlobalF32) -> None:
    regs = lw.array(op.dst, max(op.idx) + 1, _array_type(lw, op.dst))
    addr = _global_addr(lw, op.param, op.offset)
    vals = [lw.tmp() for _ in op.idx]
    guard = ""
    if op.pred is not None:
        for v in vals:
            lw.emit(f"mov.b32 {v}, 0;")
        guard = f"@{lw.predicate(op.pred)} "
    lw.emit(f"{guard}ld.global.v4.f32 {{{', '.join(vals)}}}, [{addr}];")
    for i, v in zip(op.idx, vals):
        lw.emit(f"add.f32 {regs[i]}, {regs[i]}, {v};")


def ld_global_nc_u32(lw: Lowering, op: ops.LdGlobalNcU32) -> None:
    addr = _global_addr(lw, op.param, ex.lift(op.index) * 4)
    lw.emit(f"ld.global.nc.u32 {lw.var(op.var)}, [{addr}];")


def atom_global_add(lw: Lowering, op: ops.AtomGlobalAdd) -> None:
    addr = _global_addr(lw, op.param, op.offset)
    lw.emit(f"atom.{op.sem}.{op.scope}.global.add.u32 {lw.var(op.var)}, [{addr}], {op.value};")
    lw.assigned()


def st_global_u32(lw: Lowering, op: ops.StGlobalU32) -> None:
    addr = _global_addr(lw, op.param, op.offset)
    lw.emit(f"st.relaxed.{op.scope}.global.u32 [{addr}], {op.value};")


NEG_LOG2E_F32 = 0xBFB8AA3B  # -log2(e) as f32 bits: exp(-x) = ex2(x * -log2(e))
ONE_F32 = 0x3F800000


def _f32(v: float) -> str:
    """A PTX f32 immediate (``0fXXXXXXXX``, the exact bits of ``v`` rounded to f32)."""
    import struct

    return f"0f{struct.unpack('<I', struct.pack('<f', v))[0]:08X}"


#: gelu (tanh form): sqrt(2/pi) and sqrt(2/pi) * 0.044715
GELU_K, GELU_K3 = 0.7978845608028654, 0.7978845608028654 * 0.044715
#: erf by Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z)
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
INV_SQRT2 = 0.7071067811865476


def _epi_op(lw: Lowering, op: str, params: tuple, x: list[str], d: str, scratch: list[str]) -> None:
    """One op of an epilogue expression on f32 registers/immediates ``x`` into ``d`` (numerics: ptxgen.epi.OPS)."""
    if op in ("add", "sub", "mul"):
        lw.emit(f"{op}.f32 {d}, {x[0]}, {x[1]};")
    elif op == "neg":
        lw.emit(f"neg.f32 {d}, {x[0]};")
    elif op == "relu":
        lw.emit(f"max.f32 {d}, {x[0]}, 0f00000000;")
    elif op == "clamp":
        lw.emit(f"max.f32 {d}, {x[0]}, {_f32(params[0])};")
        lw.emit(f"min.f32 {d}, {d}, {_f32(params[1])};")
    elif op in ("sigmoid", "silu"):  # t = ex2(-x log2 e); sigmoid = rcp(1 + t); silu = x * sigmoid
        t = scratch[0]
        lw.emit(f"mul.f32 {t}, {x[0]}, 0f{NEG_LOG2E_F32:08X};")
        lw.emit(f"ex2.approx.ftz.f32 {t}, {t};")
        lw.emit(f"add.f32 {t}, {t}, 0f{ONE_F32:08X};")
        if op == "sigmoid":
            lw.emit(f"rcp.approx.ftz.f32 {d}, {t};")
        else:
            lw.emit(f"rcp.approx.ftz.f32 {t}, {t};")
            lw.emit(f"mul.f32 {d}, {x[0]}, {t};")
    elif op == "gelu":  # x * (1 + tanh(x (k + k3 x^2))) / 2
        t = scratch[0]
        lw.emit(f"mul.f32 {t}, {x[0]}, {x[0]};")
        lw.emit(f"fma.rn.f32 {t}, {t}, {_f32(GELU_K3)}, {_f32(GELU_K)};")
        lw.emit(f"mul.f32 {t}, {t}, {x[0]};")
        lw.emit(f"tanh.approx.f32 {t}, {t};")
        lw.emit(f"fma.rn.f32 {t}, {t}, 0f3F000000, 0f3F000000;")
        lw.emit(f"mul.f32 {d}, {x[0]}, {t};")
    elif op == "block_scale":  # amax / 448, 1 where amax is 0
        p = lw.pred()
        lw.emit(f"div.rn.f32 {d}, {x[0]}, {_f32(448.0)};")
        lw.emit(f"setp.eq.f32 {p}, {x[0]}, 0f00000000;")
        lw.emit(f"selp.f32 {d}, 0f{ONE_F32:08X}, {d}, {p};")
    elif op == "rcp":
        lw.emit(f"rcp.rn.f32 {d}, {x[0]};")
    elif op == "gelu_erf":  # x * s / 2, s = 1 + erf(x / sqrt 2): erfc(|z|) for x < 0, 2 - erfc(|z|) otherwise
        z, t, q, e = scratch
        p = lw.pred()
        lw.emit(f"abs.f32 {z}, {x[0]};")
        lw.emit(f"mul.f32 {z}, {z}, {_f32(INV_SQRT2)};")
        lw.emit(f"fma.rn.f32 {t}, {z}, {_f32(ERF_P)}, 0f{ONE_F32:08X};")
        lw.emit(f"rcp.approx.ftz.f32 {t}, {t};")
        lw.emit(f"fma.rn.f32 {q}, {t}, {_f32(ERF_A[4])}, {_f32(ERF_A[3])};")
        for a in ERF_A[2::-1]:
            lw.emit(f"fma.rn.f32 {q}, {q}, {t}, {_f32(a)};")
        lw.emit(f"mul.f32 {q}, {q}, {t};")
        lw.emit(f"mul.f32 {e}, {z}, {z};")
        lw.emit(f"mul.f32 {e}, {e}, 0f{NEG_LOG2E_F32:08X};")
        lw.emit(f"ex2.approx.ftz.f32 {e}, {e};")
        lw.emit(f"mul.f32 {q}, {q}, {e};")  # erfc(|z|)
        lw.emit(f"sub.f32 {e}, 0f40000000, {q};")
        lw.emit(f"setp.lt.f32 {p}, {x[0]}, 0f00000000;")
        lw.emit(f"selp.f32 {e}, {q}, {e}, {p};")
        lw.emit(f"mul.f32 {d}, {x[0]}, {e};")
        lw.emit(f"mul.f32 {d}, {d}, 0f3F000000;")
    else:
        raise NotImplementedError(f"no lowering for epilogue op {op!r}")


def epilogue_expr(lw: Lowering, op: ops.EpilogueExpr) -> None:
    """Per value j: the expression tree, children first, into ``dst[idx[j]]``.

    Each inner node has its own result (and scratch) registers, allocated the first time it is lowered and reused
    for every value, so ``silu(acc1) * acc2`` lowers to the same six instructions per value as the SwiGLU always
    did: mul, ex2.approx.ftz, add, rcp.approx.ftz, mul (silu), mul (by acc2).
    """
    from ptxgen.ir import epilogue as epi

    dst = lw.array(op.dst, max(op.idx) + 1, _array_type(lw, op.dst))
    regs: dict[tuple, tuple[str, list[str]]] = {}

    def lower(node, j: int, path: tuple, out: str | None) -> str:
        if isinstance(node, epi.Reg):
            return lw.array(node.array, max(node.idx) + 1, _array_type(lw, node.array))[node.idx[j]]
        if isinstance(node, epi.ParamLeaf):
            return f"%{node.param}"
        if isinstance(node, epi.Num):
            return _f32(node.value)
        if path not in regs:
            scratch = [lw.tmp() for _ in range(epi.SCRATCH.get(node.op, 0))]
            regs[path] = (out or lw.tmp(), scratch)
        d, scratch = regs[path]
        d = out or d
        args = [lower(a, j, path + (k,), None) for k, a in enumerate(node.args)]
        _epi_op(lw, node.op, node.params, args, d, scratch)
        return d

    for j, i in enumerate(op.idx):
        if isinstance(op.expr, epi.Call):
            lower(op.expr, j, (), dst[i])
        else:  # a leaf: D is that value
            lw.emit(f"mov.b32 {dst[i]}, {lower(op.expr, j, (), None)};")


def ld_epilogue(lw: Lowering, op: ops.LdEpilogue) -> None:
    """Per element: the address ``P + index * size``, a predicated ``ld.global`` of it (0 where off D), and for
    16-bit elements ``cvt.f32.{bf16|f16}`` (exact).  Read-only data: ``ld.global.nc`` (PTX ISA "ld.global.nc").

    A pair of 16-bit elements along a row (``col``/``tile``, the wgmma fragment's two adjacent columns) is one
    ``ld.global.nc.b32`` when both are inside D and the pair is 4-byte aligned (col is even; a tile needs n even;
    the runtime passes 4-byte aligned operands), then ``mov.b32 {lo, hi}``; otherwise per element as above."""
    dst = lw.array(op.dst, max(op.idx) + 1, _array_type(lw, op.dst))
    if op.layout == "tile_t":
        _ld_transposed(lw, op, dst)
        return
    size = 4 if op.dtype == "f32" else 2
    row = lw.reg(op.row) if op.layout in ("row", "tile") else None
    col = lw.reg(op.col) if op.layout in ("col", "tile") else None
    lin = None
    if op.layout == "tile":
        lin = lw.tmp()
        lw.emit(f"mad.lo.u32 {lin}, {row}, %n, {col};")
    index = {"row": row, "col": col, "tile": lin}[op.layout]
    addr = lw.tmp64()
    lw.emit(f"mul.wide.u32 {addr}, {index}, {size};")
    lw.emit(f"add.u64 {addr}, {addr}, %{op.param};")
    if size == 2 and len(op.idx) == 2 and op.layout in ("col", "tile"):
        _ld_pair(lw, op, dst, row, col, addr)
        return
    for j, i in enumerate(op.idx):
        p = None
        if op.guard:
            p = lw.pred()
            if row is not None:
                lw.emit(f"setp.lt.u32 {p}, {row}, %m;")
            if col is not None:
                c = lw.tmp()
                lw.emit(f"add.u32 {c}, {col}, {j};")
                lw.emit(f"setp.lt.{'and.' if row is not None else ''}u32 {p}, {c}, %n{', ' + p if row is not None else ''};")
        at = f"[{addr}+{size * j}]" if j else f"[{addr}]"
        guard = f"@{p} " if p else ""
        if size == 4:
            if p:
                lw.emit(f"mov.b32 {dst[i]}, 0;")
            lw.emit(f"{guard}ld.global.nc.f32 {dst[i]}, {at};")
        else:
            h = lw.tmp16()
            if p:
                lw.emit(f"mov.b16 {h}, 0;")
            lw.emit(f"{guard}ld.global.nc.b16 {h}, {at};")
            lw.emit(f"cvt.f32.{op.dtype} {dst[i]}, {h};")


def _ld_transposed(lw: Lowering, op: ops.LdEpilogue, dst: list[str]) -> None:
    """A swap-AB kernel's ``[M, N]`` operand (layout ``tile_t``): element j of the run (the kernel's row ``row``,
    column ``col + j``) at ``P[(col + j) * m + row]``, one ``ld.global.nc`` each, predicated on ``row < m`` and
    ``col + j < n`` (0 where off D).  Lanes of consecutive rows read consecutive addresses (lane l holds row
    l / 4, PTX ISA "wgmma register fragments"), as the transposed store writes them."""
    row, col = lw.reg(op.row), lw.reg(op.col)
    size = 4 if op.dtype == "f32" else 2
    for j, i in enumerate(op.idx):
        c, lin, addr = (lw.tmp() if j else col), lw.tmp(), lw.tmp64()
        if j:
            lw.emit(f"add.u32 {c}, {col}, {j};")
        lw.emit(f"mad.lo.u32 {lin}, {c}, %m, {row};")
        lw.emit(f"mul.wide.u32 {addr}, {lin}, {size};")
        lw.emit(f"add.u64 {addr}, {addr}, %{op.param};")
        p = None
        if op.guard:
            p = lw.pred()
            lw.emit(f"setp.lt.u32 {p}, {row}, %m;")
            lw.emit(f"setp.lt.and.u32 {p}, {c}, %n, {p};")
        guard = f"@{p} " if p else ""
        if size == 4:
            if p:
                lw.emit(f"mov.b32 {dst[i]}, 0;")
            lw.emit(f"{guard}ld.global.nc.f32 {dst[i]}, [{addr}];")
            continue
        h = lw.tmp16()
        if p:
            lw.emit(f"mov.b16 {h}, 0;")
        lw.emit(f"{guard}ld.global.nc.b16 {h}, [{addr}];")
        lw.emit(f"cvt.f32.{op.dtype} {dst[i]}, {h};")


def _ld_pair(lw: Lowering, op: ops.LdEpilogue, dst: list[str], row: str | None, col: str, addr: str) -> None:
    """Two adjacent 16-bit elements, branch-free: ``@p_vec ld.global.nc.b32`` when both are inside D and 4-byte
    aligned, else a predicated ``ld.global.nc.b16`` per element inside D, each into its own zeroed register and
    OR-ed together (the predicates exclude each other).  No load writes a register another load of the pair wrote:
    a predicated load that merged into the wide load's result would wait for it (in-order issue), serializing the
    wave's loads."""
    p_vec, end = lw.pred(), lw.tmp()
    lw.emit(f"add.u32 {end}, {col}, 2;")
    lw.emit(f"setp.le.u32 {p_vec}, {end}, %n;")
    if op.layout == "tile":
        odd = lw.tmp()
        lw.emit(f"and.b32 {odd}, %n, 1;")
        lw.emit(f"setp.eq.and.u32 {p_vec}, {odd}, 0, {p_vec};")
        lw.emit(f"setp.lt.and.u32 {p_vec}, {row}, %m, {p_vec};")
    if not op.guard:
        lw.emit(f"setp.eq.u32 {p_vec}, 1, 1;")  # unguarded: every pair is loaded (the verifier checks the bounds)
    word, lo, hi = lw.tmp(), lw.tmp16(), lw.tmp16()
    lw.emit(f"mov.b32 {word}, 0;")
    lw.emit(f"@{p_vec} ld.global.nc.b32 {word}, [{addr}];")
    if op.guard:
        halves = []
        for j in range(2):
            p, c, h = lw.pred(), lw.tmp(), lw.tmp16()
            lw.emit(f"add.u32 {c}, {col}, {j};")
            lw.emit(f"setp.lt.and.u32 {p}, {c}, %n, !{p_vec};")  # inside D, and the pair not loaded whole
            if row is not None:
                lw.emit(f"setp.lt.and.u32 {p}, {row}, %m, {p};")
            lw.emit(f"mov.b16 {h}, 0;")
            lw.emit(f"@{p} ld.global.nc.b16 {h}, [{addr}+{2 * j}];" if j else f"@{p} ld.global.nc.b16 {h}, [{addr}];")
            halves.append(h)
        both = lw.tmp()
        lw.emit(f"mov.b32 {both}, {{{halves[0]}, {halves[1]}}};")
        lw.emit(f"or.b32 {word}, {word}, {both};")
    lw.emit(f"mov.b32 {{{lo}, {hi}}}, {word};")
    lw.emit(f"cvt.f32.{op.dtype} {dst[op.idx[0]]}, {lo};")
    lw.emit(f"cvt.f32.{op.dtype} {dst[op.idx[1]]}, {hi};")


def _inside(lw: Lowering, row: str, col: str, off: int = 0) -> str:
    """A predicate: ``row < m`` and ``col + off < n``."""
    p = lw.pred()
    c = col
    if off:
        c = lw.tmp()
        lw.emit(f"add.u32 {c}, {col}, {off};")
    lw.emit(f"setp.lt.u32 {p}, {row}, %m;")
    lw.emit(f"setp.lt.and.u32 {p}, {c}, %n, {p};")
    return p


def amax_local(lw: Lowering, op: ops.AmaxLocal) -> None:
    """Per value: ``abs.f32`` then a predicated ``max.f32`` into the running max (values outside D skipped)."""
    dst = lw.array(op.dst, op.slot + 1, _array_type(lw, op.dst))[op.slot]
    src = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
    row, col = lw.reg(op.row), lw.reg(op.col)
    t = lw.tmp()
    for i, off in zip(op.idx, op.cols):
        p = _inside(lw, row, col, off)
        lw.emit(f"abs.f32 {t}, {src[i]};")
        lw.emit(f"@{p} max.f32 {dst}, {dst}, {t};")


def amax_reduce(lw: Lowering, op: ops.AmaxReduce) -> None:
    """``shfl.sync.bfly.b32`` with xor 1, 2, .., lanes/2 and ``max.f32`` (PTX ISA "shfl.sync")."""
    dst = lw.array(op.dst, max(op.idx) + 1, _array_type(lw, op.dst))
    t = lw.tmp()
    for i in op.idx:
        x = 1
        while x < op.lanes:
            lw.emit(f"shfl.sync.bfly.b32 {t}, {dst[i]}, {x}, 31, -1;")
            lw.emit(f"max.f32 {dst[i]}, {dst[i]}, {t};")
            x *= 2


def st_epilogue(lw: Lowering, op: ops.StEpilogue) -> None:
    """An epilogue output store (see :class:`~ptxgen.ir.ops.StEpilogue`)."""
    src = lw.array(op.src, max(op.idx) + 1, _array_type(lw, op.src))
    row, col = lw.reg(op.row), lw.reg(op.col)
    addr = lw.tmp64()
    if op.layout in ("block", "row_max", "tensor_max"):
        lane, p = lw.tmp(), lw.pred()
        lw.emit(f"mov.u32 {lane}, %laneid;")
        lw.emit(f"and.b32 {lane}, {lane}, {31 if op.layout == 'tensor_max' else 3};")
        lw.emit(f"setp.eq.u32 {p}, {lane}, 0;")
        if op.layout != "tensor_max":
            lw.emit(f"setp.lt.and.u32 {p}, {row}, %m, {p};")
        if op.layout == "block":
            lw.emit(f"setp.lt.and.u32 {p}, {col}, %n, {p};")
            nb, lin = lw.tmp(), lw.tmp()
            lw.emit(f"add.u32 {nb}, %n, 127;")
            lw.emit(f"shr.u32 {nb}, {nb}, 7;")
            lw.emit(f"shr.u32 {lin}, {col}, 7;")
            lw.emit(f"mad.lo.u32 {lin}, {row}, {nb}, {lin};")
            lw.emit(f"mul.wide.u32 {addr}, {lin}, 4;")
            lw.emit(f"add.u64 {addr}, {addr}, %{op.param};")
            lw.emit(f"@{p} st.global.f32 [{addr}], {src[op.idx[0]]};")
            return
        if op.layout == "row_max":
            lw.emit(f"mul.wide.u32 {addr}, {row}, 4;")
            lw.emit(f"add.u64 {addr}, {addr}, %{op.param};")
        else:
            lw.emit(f"mov.u64 {addr}, %{op.param};")
        lw.emit(f"@{p} red.relaxed.gpu.global.max.u32 [{addr}], {src[op.idx[0]]};")
        return
    # tile: a pair inside D with n even in one store, else per element
    size = 1 if op.fmt == "e4m3" else 2
    lin = lw.tmp()
    lw.emit(f"mad.lo.u32 {lin}, {row}, %n, {col};")
    lw.emit(f"mul.wide.u32 {addr}, {lin}, {size};")
    lw.emit(f"add.u64 {addr}, {addr}, %{op.param};")
    lo, hi = src[op.idx[0]], src[op.idx[-1]]
    p_vec = None
    if len(op.idx) == 2:  # branch-free: a whole aligned pair in one store, else predicated per element
        p_vec, end, odd = lw.pred(), lw.tmp(), lw.tmp()
        lw.emit(f"add.u32 {end}, {col}, 2;")
        lw.emit(f"and.b32 {odd}, %n, 1;")
        lw.emit(f"setp.le.u32 {p_vec}, {end}, %n;")
        lw.emit(f"setp.eq.and.u32 {p_vec}, {odd}, 0, {p_vec};")
        lw.emit(f"setp.lt.and.u32 {p_vec}, {row}, %m, {p_vec};")
        if op.fmt == "e4m3":
            h = lw.tmp16()
            lw.emit(f"cvt.rn.satfinite.e4m3x2.f32 {h}, {hi}, {lo};")  # the low byte is the first element
            lw.emit(f"@{p_vec} st.global.b16 [{addr}], {h};")
            b = lw.tmp16()
            lw.emit(f"shr.u16 {b}, {h}, 8;")
            halves = [h, b]
        else:
            w, h, b = lw.tmp(), lw.tmp16(), lw.tmp16()
            lw.emit(f"cvt.rn.{op.fmt}x2.f32 {w}, {hi}, {lo};")
            lw.emit(f"@{p_vec} st.global.b32 [{addr}], {w};")
            lw.emit(f"mov.b32 {{{h}, {b}}}, {w};")
            halves = [h, b]
    else:
        h = lw.tmp16()
        if op.fmt == "e4m3":
            lw.emit(f"cvt.rn.satfinite.e4m3x2.f32 {h}, 0f00000000, {lo};")
        else:
            lw.emit(f"cvt.rn.{op.fmt}.f32 {h}, {lo};")
        halves = [h]
    for j, h in enumerate(halves):
        p, c = lw.pred(), lw.tmp()
        lw.emit(f"add.u32 {c}, {col}, {j};")
        lw.emit(f"setp.lt.and.u32 {p}, {c}, %n, !{p_vec};" if p_vec else f"setp.lt.u32 {p}, {c}, %n;")
        lw.emit(f"setp.lt.and.u32 {p}, {row}, %m, {p};")
        at = f"[{addr}+{size * j}]" if j else f"[{addr}]"
        lw.emit(f"@{p} st.global.b{8 * size} {at}, {h};")


COMMON = {
    ops.EpilogueExpr: epilogue_expr,
    ops.LdEpilogue: ld_epilogue,
    ops.AmaxLocal: amax_local,
    ops.AmaxReduce: amax_reduce,
    ops.StEpilogue: st_epilogue,
    ops.Pack16: pack_16,
    ops.MbarrierInit: mbarrier_init,
    ops.FenceMbarrierInit: fence_mbarrier_init,
    ops.MbarrierArrive: mbarrier_arrive,
    ops.MbarrierArriveExpectTx: mbarrier_arrive_expect_tx,
    ops.MbarrierWait: mbarrier_wait,
    ops.TmaLoad: tma_load,
    ops.TmaStore: tma_store,
    ops.BulkCommitGroup: bulk_commit,
    ops.BulkWaitGroup: bulk_wait,
    ops.FenceProxyAsync: fence_proxy_async,
    ops.CtaSync: cta_sync,
    ops.NamedBarrier: named_barrier,
    ops.NamedBarrierPopc: named_barrier_popc,
    ops.ClusterSync: cluster_sync,
    ops.Shfl: shfl,
    ops.VoteAny: vote_any,
    ops.Nanosleep: nanosleep,
    ops.GridDepControl: grid_dep_control,
    ops.StShared16: st_shared_16,
    ops.StMatrix: st_matrix,
    ops.LdMatrix: ld_matrix,
    ops.StGlobal16: st_global_16,
    ops.StGlobalF32: st_global_f32,
    ops.LdGlobalF32: ld_global_f32,
    ops.LdGlobalNcU32: ld_global_nc_u32,
    ops.AtomGlobalAdd: atom_global_add,
    ops.StGlobalU32: st_global_u32,
}
