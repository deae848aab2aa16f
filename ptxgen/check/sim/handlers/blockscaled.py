"""The machine's model of the block-scaled tcgen05 ops: ``tcgen05.cp`` of scale atoms and the block-scaled MMA
(NVFP4 ``.kind::mxf4nvf4``, MXFP8 ``.kind::mxf8f6f4``).

Both join the issuing warp's in-order tcgen05 queue (like ``tcgen05.mma``; PTX ISA "tcgen05 memory
consistency model": tcgen05.cp -> tcgen05.mma of one thread is a pipelined pair, executed in issue
order), so a copy issued before an MMA completes before it:

* **tcgen05.cp** reads its 32 lines of shared memory when issued (every byte must be landed: the copy
  must come after the consumer_wait on ``full``) and holds them until it completes; then it writes
  the 128 lanes x 4 columns of TMEM (``warpx4``).
* **block-scaled MMA** reads its A/B slices of shared memory when issued (like ``tcgen05.mma``) and its
  scale factors from TMEM when it *executes* (completes): a scale column a copy has not yet written,
  or never wrote, is a ``TMEM read before write``; stale scales from an earlier k-block give a wrong
  result.  The product is exact e2m1 x ue4m3 (float64 sum of one K=64 slice, one rounding to fp32),
  accumulated in fp32 TMEM.  MXFP8: e4m3 x ue8m0 over one K=32 slice (the same 32 bytes of each row), one
  scale per row: the byte of the scale column the idesc's scale-factor ID names (:mod:`ptxgen.check.fp8`).

**collector buffer** (``.collector::a::*``, PTX ISA "tcgen05.mma"): ``fill`` keeps the MMA's A in the issuing
thread's collector buffer; ``use`` / ``lastuse`` read A from it, which needs the buffer to hold the same A (the
same smem descriptor, filled by this thread's latest MMA chain), ``lastuse`` and ``discard`` (the default, no
qualifier) then empty it.  A ``use``/``lastuse`` with an empty buffer or another A is a ``collector misuse``.
The product is computed from shared memory either way (the ISA lets the tensor core reload A at will, so the
smem A must stay unchanged until the MMA completes, which the async-read tracking already checks).

``cta_group::2`` (modelled): the leader issues for the pair; a copy moves each CTA's own shared
memory into its own TMEM at the same address (SFA: the CTA's rows; SFB: every CTA holds all of B's
scales), and the MMA's CTA c multiplies its own A rows and scale_A by B (N/2 rows from each CTA,
leader's first) scaled by the scale_B in its own TMEM.
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ....hw import SF_TMEM_COLS_PER_ATOM
from ... import walker as W
from ....formats import unpack_e2m1
from ...fp8 import mxf8_mma_shape, mxf8_product
from ...nvfp4 import block_scaled_product, mma_shape, operand_index, scale_rows, sf_copy_index, sf_copy_words

# per MMA kind: (shape check, operand bytes -> codes, product, K per MMA)
_KINDS = {
    "mxf4nvf4": (mma_shape, unpack_e2m1, block_scaled_product, 64),
    "mxf8f6f4": (lambda idesc, vec, group, who: mxf8_mma_shape(idesc, vec, group, who), lambda b: b,
                 lambda a, b, sa, sb, vec, who: mxf8_product(a, b, sa, sb, who), 32),
}



def _issuer(m, w, what: str, lanes: int):
    """The CTAs a tcgen05 op of ``w`` acts on (the pair with cta_group::2), after the issue rules."""
    who = w.who(what)
    if lanes != 1:
        raise SimError(f"{what} issued by {lanes} threads: {who}; one thread issues it (Elect)")
    group = m.kernel.cta_group
    if group == 2 and w.cta.rank % 2:
        raise SimError(f"{what}.cta_group::2 issued by the odd CTA of the pair: {who}")
    return who, [w.cta, m._cta(w, w.cta.rank ^ 1)] if group == 2 else [w.cta]


def tmem_copy(m, w, ev: W.Event) -> None:
    """``tcgen05.cp.32x128b.warpx4``: the source lines must be landed at issue; TMEM is written at completion."""
    who, ctas = _issuer(m, w, "tcgen05.cp", ev.lanes)
    lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
    if lane:
        raise SimError(f"bad TMEM address: {who} copies to lane {lane}; 32x128b.warpx4 starts at lane 0")
    idx = sf_copy_index(ev.desc, m.smem_base, who)
    reads = []
    for c in ctas:
        handle = c.smem.begin_async_read(idx, who)
        reads.append((c, handle, c.smem.data[idx].copy()))
        c.tmem.begin_copy(col, SF_TMEM_COLS_PER_ATOM, who)

    def complete(mm) -> None:
        for c, handle, lines in reads:
            c.tmem.end_copy(col, sf_copy_words(lines), who)
            c.smem.end_async_read(handle)

    w.tc.push(m, complete)


def _collector(m, w, ev: W.Event, who) -> None:
    """Apply ``.collector::a::*`` of a block-scaled MMA to the issuing warp's collector buffer (module docstring)."""
    held = m.__dict__.setdefault("a_collector", {})  # issuing warp -> the A descriptor its collector holds
    key, usage = w, ev.op.collector
    if usage in ("use", "lastuse") and held.get(key) != ev.a_desc:
        now = f"A desc {held[key]:#018x}" if key in held else "nothing"
        raise SimError(f"collector misuse: {who}: .collector::a::{usage} reads A desc {ev.a_desc:#018x} from the "
                       f"collector buffer, which holds {now} (PTX ISA \"tcgen05.mma\": it needs a previous fill of the "
                       "same A, still valid)")
    if usage == "fill":
        held[key] = ev.a_desc
    elif usage != "use":
        held.pop(key, None)


def umma_block_scaled(m, w, ev: W.Event) -> None:
    """Block-scaled ``tcgen05.mma``: operands read at issue, scale factors at execution (see module docstring)."""
    who, ctas = _issuer(m, w, "tcgen05.mma.block_scale", ev.lanes)
    _collector(m, w, ev, who)
    if ev.op.kind not in _KINDS:
        raise SimError(f"{who}: .kind::{ev.op.kind} is not modelled (kinds: {sorted(_KINDS)})")
    shape, codes, product, mma_k = _KINDS[ev.op.kind]
    f = shape(ev.op.idesc, ev.op.scale_vec, m.kernel.cta_group, who)
    rows_b = f["n"] // len(ctas)
    a_codes, b_codes, handles = [], [], []
    for c in ctas:  # A: each CTA's own 128 rows; B: N/group rows from each CTA, leader's first
        for desc, rows, what, out in ((ev.a_desc, 128, "A", a_codes), (ev.b_desc, rows_b, "B", b_codes)):
            idx = operand_index(desc, rows, m.smem_base, who, what)
            handles.append((c, c.smem.begin_async_read(idx, who)))
            out.append(codes(c.smem.data[idx]))
    b_all = np.concatenate(b_codes)
    lane, col = ev.d >> 16, ev.d & 0xFFFF
    sfa_col, sfb_col = ev.sfa & 0xFFFF, ev.sfb & 0xFFFF
    for c in ctas:
        c.tmem.begin_write(lane, col, 128, f["n"], who)

    def complete(mm) -> None:
        for c, a in zip(ctas, a_codes):
            sa = scale_rows(c.tmem.read_words(sfa_col, 128 // 32, who, "scale_A"), 0, 128, ev.op.scale_vec,
                            f["a_sf_id"], who, "A", mma_k=mma_k)
            sb = scale_rows(c.tmem.read_words(sfb_col, f["n"] // 32, who, "scale_B"), 0, f["n"], ev.op.scale_vec,
                            f["b_sf_id"], who, "B", mma_k=mma_k)
            c.tmem.end_write(lane, col, product(a, b_all, sa, sb, ev.op.scale_vec, who), ev.accumulate, who)
        for c, h in handles:
            c.smem.end_async_read(h)

    w.tc.push(m, complete)
