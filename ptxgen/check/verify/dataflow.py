"""Data flow: every stage access after the wait that hands the stage to the accessing role.

Data flow.  An MMA reads an A/B stage only after a consumer wait on that
stage's ``full`` barrier in the same iteration; a TMA load fills a stage only
after a producer_acquire on its ``empty`` barrier and signals that stage's
``full``; MMAs write an accumulator stage after waiting ``tmem_empty``, the
epilogue reads it after waiting ``tmem_full``.  NVFP4: a ``tcgen05.cp`` reads a scale stage only after
the consumer wait on its ``full``, outside the accumulator columns; a block-scaled MMA reads scale columns
that a ``tcgen05.cp`` of the same thread wrote earlier in the same k-block, with the idesc's scale format
and scale-factor ids matching ``.block16`` (MXFP8 ``.kind::mxf8f6f4``: ``.block32`` with ue8m0 scales, any
ID 0-3, one byte of the column).  FP8: a promotion's scale loads read the scale_a and scale_b
slots of a stage only after the consumer wait on its ``full`` in the same iteration (and, through the
hand-over rule, before that warp's release of the stage).
"""

from __future__ import annotations

from ...descriptors import MXF8_SCALE_VEC, UMMA_IDESC_MXF4, UMMA_IDESC_MXF8F6F4, UMMA_SMEM_DESC
from ...hw import DYNAMIC_SMEM_BASE, MN_MAJOR_CHUNK, SF_ATOM_BYTES, SF_TMEM_COLS_PER_ATOM
from ...errors import VerifyError
from ...ir import Kernel
from ...ir import ops as O
from .. import walker as W
from ..mma import umma_operand, umma_shape, wgmma_operand
from .epilogue import check_staged, staged_fills
from .trace import _Rec, _Trace


# ------------------------------------------------------------------ data flow: wait before use


class _Slots:
    """Which region slot (A/B/CD stage) a shared-memory byte range lies in."""

    def __init__(self, kernel: Kernel):
        self.regions = [(r.name.upper(), r.offset, r.stride, r.count, r.slot_bytes) for r in kernel.regions]
        self.operands = tuple(name for name, *_ in self.regions if name != "CD")
        self._kernel = kernel

    def align(self, off: int) -> int:
        """Required alignment of the slot at ``off`` (1 outside every region's slots; stage-interleaved regions
        overlap, so the slot holding ``off``, not just the region's span, decides)."""
        return next((r.align for r in self._kernel.regions
                     if r.offset <= off < r.end and (not r.stride or (off - r.offset) % r.stride < r.slot_bytes)), 1)

    def find(self, lo: int, hi: int) -> tuple[str, int] | None:
        for name, off, stride, count, size in self.regions:
            if stride and off <= lo:
                i = (lo - off) // stride
                if i < count and hi <= off + i * stride + size:
                    return name, i
        return None

    def slot(self, lo: int, hi: int, what: str, where: W.Where, kinds: tuple[str, ...]) -> tuple[str, int]:
        """The (region, slot) holding [lo, hi); VerifyError unless it is one slot of a region in ``kinds``."""
        hit = self.find(lo, hi)
        if hit is None or hit[0] not in kinds:
            inside = f"{hit[0]} stage {hit[1]}" if hit else "no single A, B or CD slot"
            raise VerifyError(f"smem access outside its region: {what} by {where} touches [{lo:#x}, {hi:#x}), which "
                              f"lies in {inside}; it must stay inside one {' or '.join(kinds)} slot")
        return hit


def _operand_extent(start: int, rows: int, sbo: int, lbo: int = 0, mn_major: bool = False) -> tuple[int, int]:
    """Byte range [lo, hi) (from the smem base) of a k16 slice of a SW128 operand of ``rows`` rows: K-major (8-row
    groups SBO apart, 32 bytes of each 128-byte row), or MN-major (64-element chunks LBO apart, two 8-row K groups
    SBO apart; :func:`ptxgen.check.swizzle.mnmajor_sw128_index`)."""
    lo = start - DYNAMIC_SMEM_BASE
    if mn_major:
        return lo, lo + (-(-rows // MN_MAJOR_CHUNK) - 1) * lbo + sbo + 8 * 128
    return lo, lo + (rows // 8 - 1) * sbo + 7 * 128 + 32


def _check_dataflow(trace: _Trace) -> None:
    """Wait-before-use, TMA stage/barrier pairing, smem slots and TMEM bounds, warp by warp.

    Records each stage access in its event's ``uses`` for :func:`_check_handovers`."""
    kernel = trace.kernel
    slots = _Slots(kernel)
    acc_cols = kernel.tmem_acc_stage_cols or 1
    fills = staged_fills(trace, slots)
    for (ctaid, warp), recs in trace.warps.items():
        last_wait: dict[tuple[str, int], tuple] = {}
        committed: dict[object, _Rec] = {}  # bulk async groups: issuing thread -> its last commit
        copied: dict[int, _Rec] = {}  # TMEM column -> the tcgen05.cp that last wrote it (NVFP4 scales)
        staged: dict = {}  # the warp's staged-operand state (epilogue.check_staged)

        def require(name: str, index: int, rec: _Rec, what: str) -> None:
            got = last_wait.get((name, index))
            if got is None or rec.key[: len(got)] != got:
                raise VerifyError(f"missing wait: {what} by {rec.where} without a wait on {name}[{index}] in this "
                                  f"iteration (last wait on it: {'never' if got is None else got})")
            rec.uses.append((name, index))

        for rec in recs:
            ev = rec.ev
            if isinstance(ev.op, O.MbarrierWait):
                last_wait[(ev.bar.name, ev.bar.index)] = rec.key
                check_staged(kernel, slots, ev, rec, require, staged, fills)
            elif check_staged(kernel, slots, ev, rec, require, staged, fills):
                pass
            elif isinstance(ev.op, O.TmaLoad):
                size = kernel.launch.tensor_maps[ev.op.tensor]
                region, s = slots.slot(ev.dst, ev.dst + size.box_bytes, f"TmaLoad {ev.op.tensor}", rec.where,
                                       slots.operands)
                _aligned(ev.dst, slots.align(ev.dst), f"TmaLoad {ev.op.tensor}", rec.where)
                if any(ref.index != s or ref.name != "full" for ref in ev.bars):
                    raise VerifyError(f"TMA into the wrong stage: TmaLoad {ev.op.tensor} by {rec.where} writes {region} "
                                      f"stage {s} but completes on {', '.join(map(str, ev.bars))}")
                require("empty", s, rec, f"TmaLoad {ev.op.tensor} into {region} stage {s}")
            elif isinstance(ev.op, O.Umma):
                _check_umma(kernel, slots, ev, rec, require, acc_cols)
            elif isinstance(ev.op, O.TmemCopy):
                _check_tmem_copy(kernel, slots, ev, rec, require, copied)
            elif isinstance(ev.op, O.UmmaBlockScaled):
                _check_umma_block_scaled(kernel, slots, ev, rec, require, acc_cols, copied)
            elif isinstance(ev.op, O.Wgmma):
                for operand, desc, rows, mn in (("A", ev.a_desc, 64, ev.op.trans_a), ("B", ev.b_desc, ev.op.n, ev.op.trans_b)):
                    op = wgmma_operand(desc, rec.where, operand, mn)
                    region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo, op.lbo, mn), f"Wgmma operand {operand}",
                                           rec.where, slots.operands)
                    require("full", s, rec, f"Wgmma reads {region} stage {s}")
            elif isinstance(ev.op, O.ScaleLoad):
                _check_scale_load(slots, ev, rec, require)
            elif isinstance(ev.op, O.TmemLoad):
                lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
                if lane != 32 * (warp % 4) or col + ev.op.ncols > kernel.tmem_cols:
                    raise VerifyError(f"TMEM access out of bounds: TmemLoad by {rec.where} reads lanes [{lane}, "
                                      f"{lane + 32}) columns [{col}, {col + ev.op.ncols}); warp {warp} owns lanes "
                                      f"[{32 * (warp % 4)}, {32 * (warp % 4) + 32}), {kernel.tmem_cols} columns allocated")
                require("tmem_full", col // acc_cols, rec, f"TmemLoad of accumulator stage {col // acc_cols}")
            elif isinstance(ev.op, W.SHARED_STORES):
                rec.uses += sorted({slots.slot(addr, addr + ev.nbytes, "StShared16", rec.where, ("CD",))
                                    for addr in set(ev.addr.tolist())})
            elif isinstance(ev.op, O.TmaStore):
                rec.uses.append(slots.slot(ev.src, ev.src + kernel.launch.tensor_maps[ev.op.tensor].box_bytes,
                                           f"TmaStore {ev.op.tensor}", rec.where, ("CD",)))
            elif isinstance(ev.op, O.BulkCommitGroup):
                committed[ev.thread] = rec
            elif isinstance(ev.op, O.BulkWaitGroup) and ev.thread is not None:
                other = next((r for t, r in committed.items() if t != ev.thread), None)
                if other is not None:
                    raise VerifyError(
                        f"bulk async-group ownership: {ev.op.describe()} by one elect.sync lane of {rec.where} waits "
                        f"for groups that another elect.sync committed (at {other.where.at}); bulk async-groups "
                        "belong to the committing thread and elect.sync does not promise the same lane twice: "
                        "commit and wait from one fixed thread, or wait in every lane (PTX ISA elect.sync, cp.async.bulk.wait_group)")
            _check_issuers(ev, rec)


def _check_umma(kernel: Kernel, slots: _Slots, ev: W.Event, rec: _Rec, require, acc_cols: int) -> None:
    m_total, n_total = umma_shape(ev.op.idesc, rec.where)
    for operand, desc, rows in (("A", ev.a_desc, 128), ("B", ev.b_desc, n_total // kernel.cta_group)):
        op = umma_operand(desc, rec.where, operand)
        region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo), f"Umma operand {operand}", rec.where,
                               slots.operands)
        require("full", s, rec, f"Umma reads {region} stage {s}")
    lane, col = ev.d >> 16, ev.d & 0xFFFF
    if lane or col + n_total > kernel.tmem_cols:
        raise VerifyError(f"TMEM access out of bounds: Umma by {rec.where} writes lanes [{lane}, {lane + 128}) columns "
                          f"[{col}, {col + n_total}); {kernel.tmem_cols} columns are allocated")
    require("tmem_empty", col // acc_cols, rec, f"Umma into accumulator stage {col // acc_cols}")
    if kernel.cta_group == 2 and rec.where.rank % 2:
        raise VerifyError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {rec.where}")


def _check_tmem_copy(kernel: Kernel, slots: _Slots, ev: W.Event, rec: _Rec, require, copied: dict) -> None:
    """A ``tcgen05.cp`` of one 512-B scale atom: source inside one landed scale stage, target inside the allocation."""
    f = UMMA_SMEM_DESC.decode(ev.desc)
    lo = (f["start"] << 4) - DYNAMIC_SMEM_BASE
    region, s = slots.slot(lo, lo + SF_ATOM_BYTES, "TmemCopy source", rec.where, slots.operands)
    require("full", s, rec, f"TmemCopy reads {region} stage {s}")
    lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
    if lane or col + SF_TMEM_COLS_PER_ATOM > kernel.tmem_cols:
        raise VerifyError(f"TMEM access out of bounds: TmemCopy by {rec.where} writes lanes [{lane}, 128) columns "
                          f"[{col}, {col + SF_TMEM_COLS_PER_ATOM}); {kernel.tmem_cols} columns are allocated")
    if col < kernel.tmem_acc_stage_cols * kernel.acc_stages:
        raise VerifyError(f"scale factors over an accumulator: TmemCopy by {rec.where} writes TMEM columns "
                          f"[{col}, {col + SF_TMEM_COLS_PER_ATOM}), inside the accumulator stages "
                          f"[0, {kernel.tmem_acc_stage_cols * kernel.acc_stages})")
    for c in range(col, col + SF_TMEM_COLS_PER_ATOM):
        copied[c] = rec


def _check_umma_block_scaled(kernel: Kernel, slots: _Slots, ev: W.Event, rec: _Rec, require,
                             acc_cols: int, copied: dict) -> None:
    """As :func:`_check_umma`, plus: the scale vector matches the idesc's scale format, and both scale-factor
    column groups were written by this thread's ``tcgen05.cp`` in the same k-block iteration, before the MMA
    (PTX ISA "tcgen05.mma" block scaling: the scales are read from TMEM when the MMA executes)."""
    mx8 = ev.op.kind == "mxf8f6f4"
    f = (UMMA_IDESC_MXF8F6F4 if mx8 else UMMA_IDESC_MXF4).decode(ev.op.idesc)
    m_total, n_total = f["m_dim"] << 7, f["n_dim"] << 3
    fmt = {"block16": 0, "block32": 1}.get(ev.op.scale_vec)
    if mx8 and (ev.op.scale_vec != MXF8_SCALE_VEC or f["scale_format"] != 1):
        raise VerifyError(f"block-scale mismatch: {ev.op.describe()} by {rec.where}: .{ev.op.scale_vec} with idesc "
                          f"scale format {f['scale_format']}; .kind::mxf8f6f4 is .{MXF8_SCALE_VEC} (scale_vec::1X) "
                          "with ue8m0 scales (format 1) (PTX ISA 'tcgen05.mma', 'Instruction descriptor')")
    if not mx8 and (fmt != f["scale_format"] or f["a_sf_id"] or f["b_sf_id"]):
        raise VerifyError(f"block-scale mismatch: {ev.op.describe()} by {rec.where}: .{ev.op.scale_vec} with idesc "
                          f"scale format {f['scale_format']} and scale-factor ids A={f['a_sf_id']} B={f['b_sf_id']}; "
                          "NVFP4 is .block16 with ue4m3 scales (format 0) and ids 0 (PTX ISA 'Instruction descriptor')")
    for operand, desc, rows in (("A", ev.a_desc, 128), ("B", ev.b_desc, n_total // kernel.cta_group)):
        op = umma_operand(desc, rec.where, operand)
        region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo), f"UmmaBlockScaled operand {operand}",
                               rec.where, slots.operands)
        require("full", s, rec, f"UmmaBlockScaled reads {region} stage {s}")
    lane, col = ev.d >> 16, ev.d & 0xFFFF
    if lane or col + n_total > kernel.tmem_acc_stage_cols * kernel.acc_stages:
        raise VerifyError(f"TMEM access out of bounds: UmmaBlockScaled by {rec.where} writes lanes [{lane}, 128) "
                          f"columns [{col}, {col + n_total}), outside the accumulator stages")
    require("tmem_empty", col // acc_cols, rec, f"UmmaBlockScaled into accumulator stage {col // acc_cols}")
    for what, taddr, rows in (("scale_A", ev.sfa, m_total // kernel.cta_group), ("scale_B", ev.sfb, n_total)):
        c0 = taddr & 0xFFFF
        for c in range(c0, c0 + rows // 32):  # row x of the scales at lane x % 32, column c0 + x // 32
            got = copied.get(c)
            if got is None or got.key != rec.key:
                raise VerifyError(f"scale factors not copied before the MMA: {ev.op.describe()} by {rec.where} reads "
                                  f"{what} at TMEM column {c}, which no tcgen05.cp of this thread wrote in this k-block "
                                  f"(last copy: {'never' if got is None else got.where.at}); copy the scale atoms "
                                  "after the consumer_wait and before the MMAs that read them")
    if kernel.cta_group == 2 and rec.where.rank % 2:
        raise VerifyError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {rec.where}")


def _check_scale_load(slots: _Slots, ev: W.Event, rec: _Rec, require) -> None:
    """FP8 scale loads (``ld.shared.f32``, every lane's two scale_a rows and the scale_b) read a
    SCALE_A and a SCALE_B slot of a stage this warp waited ``full`` on in this iteration: the scales are operands of
    the pipeline, landed by the TMA behind the same barrier as the A/B tiles they scale."""
    reads = {("SCALE_A", int(x)) for x in (*ev.sa_addr.tolist(), *(ev.sa_addr + ev.op.row_half).tolist())}
    reads.add(("SCALE_B", int(ev.sb_addr)))
    stages = sorted({slots.slot(lo, lo + 4, f"ScaleLoad {kind.lower()}", rec.where, (kind,))
                     for kind, lo in reads})
    for region, s in stages:
        require("full", s, rec, f"ScaleLoad reads {region} stage {s}")


def _check_issuers(ev: W.Event, rec: _Rec) -> None:
    if isinstance(ev.op, (O.Umma, O.UmmaBlockScaled, O.TmemCopy, O.UmmaCommit, O.TmaLoad, O.TmaStore)) \
            and ev.lanes != 1:
        raise VerifyError(f"issued by {ev.lanes} threads: {ev.op.describe()} by {rec.where}; one elected thread "
                          "issues it (each thread would issue its own copy)")


def _aligned(off: int, align: int, what: str, where: W.Where) -> None:
    if off % align:
        raise VerifyError(f"misaligned: {what} by {where} at smem+{off:#x}; needs {align}-byte alignment")
