"""Shared memory, tensor memory and global tensors of the simulator, with provenance tracking.

Shared memory is a byte array per CTA plus one *state* byte per byte:

* ``UNDEF``   no write ever produced it;
* ``VALID``   written by a completed async-proxy write (TMA load), or a generic
  write made visible to the async proxy (``fence.proxy.async``);
* ``INFLIGHT`` an async write (TMA load) to it was issued and has not completed;
* ``GENERIC`` written by ``st.shared`` and not yet fenced with
  ``fence.proxy.async`` by the writing warp (PTX ISA "Memory Consistency
  Model: proxies": the TMA unit and the tensor cores read through the async
  proxy).

Async readers (UMMA, wgmma, TMA store) must find every byte they read
``VALID`` (else: *read before write*), and register their byte range until
they complete; a write into a range an in-flight reader still holds is a
*write-after-read* fault, a write into a range with an in-flight async write
is a *write-after-write* fault.

Addresses: ops name byte offsets from the dynamic shared-memory base; the
shared-window address of that base is ``base`` (1024-aligned, like the
window after the 1 KB the hardware reserves on sm_90+).  The 128-byte
swizzle is a function of the *absolute* address (PTX ISA "Tensor copy:
swizzle modes", "Shared memory descriptor: matrix layouts"): address bits
[4:6] are XORed with bits [7:9].  TMA writes and the MMAs' reads apply it the
same way, so a misplaced destination shows up as wrong data.
"""

from __future__ import annotations

import numpy as np

from ...errors import SimError
from ...formats import e4m3_decode

UNDEF, VALID, INFLIGHT, GENERIC = 0, 1, 2, 3
_STATE_WORDS = {UNDEF: "never written", INFLIGHT: "its async write (TMA) has not completed",
                GENERIC: "written by st.shared without fence.proxy.async before the async-proxy read"}


class SharedMemory:
    """One CTA's dynamic shared memory (see module docstring).

    Args:
        size: bytes (the plan's ``smem_bytes``).
        base: shared-window address of byte 0.
        reserved: ``(lo, hi, name)`` ranges data writes must not touch (mbarriers, the TMEM slot).
        cta: CTA name for messages.
    """

    def __init__(self, size: int, base: int, reserved: list[tuple[int, int, str]], cta: str):
        self.size, self.base, self.cta = size, base, cta
        self.data = np.zeros(size, dtype=np.uint8)
        self.state = np.zeros(size, dtype=np.uint8)
        self.landed = np.full(size, -1, dtype=np.int64)  # scheduler step at which a TMA load last landed the byte
        self.reserved = reserved
        self.readers: dict[int, tuple[int, int, str]] = {}  # handle -> (lo, hi, who)
        self.writers: dict[int, tuple[int, int, str]] = {}
        self._next = 0

    # ---------------------------------------------------------------- checks

    def check_range(self, lo: int, hi: int, who: object, *, write: bool) -> None:
        """Bounds, and for writes the reserved ranges.  Raises SimError."""
        if lo < 0 or hi > self.size:
            raise SimError(f"out of bounds: {who} touches smem [{lo:#x}, {hi:#x}) of {self.cta}, "
                           f"outside the {self.size} B of dynamic shared memory")
        if write:
            for rlo, rhi, name in self.reserved:
                if lo < rhi and rlo < hi:
                    raise SimError(f"out of bounds: {who} writes smem [{lo:#x}, {hi:#x}) of {self.cta}, "
                                   f"overlapping the {name} at [{rlo:#x}, {rhi:#x})")

    def _hazards(self, lo: int, hi: int, who: object) -> None:
        for rlo, rhi, reader in self.readers.values():
            if lo < rhi and rlo < hi:
                raise SimError(f"write after read: {who} writes smem [{lo:#x}, {hi:#x}) of {self.cta} while "
                               f"{reader} still reads [{rlo:#x}, {rhi:#x}) (the buffer was refilled before its "
                               f"reader released it)")
        for wlo, whi, writer in self.writers.values():
            if lo < whi and wlo < hi:
                raise SimError(f"write after write: {who} writes smem [{lo:#x}, {hi:#x}) of {self.cta} while "
                               f"{writer} into [{wlo:#x}, {whi:#x}) has not completed")

    def _handle(self) -> int:
        self._next += 1
        return self._next

    # ---------------------------------------------------------------- async writes (TMA loads)

    def begin_async_write(self, lo: int, hi: int, who: object) -> int:
        """An async write of [lo, hi) was issued: the bytes are INFLIGHT until :meth:`end_async_write`."""
        self.check_range(lo, hi, who, write=True)
        self._hazards(lo, hi, who)
        self.state[lo:hi] = INFLIGHT
        h = self._handle()
        self.writers[h] = (lo, hi, who)
        return h

    def end_async_write(self, handle: int, idx: np.ndarray, values: np.ndarray, when: int) -> None:
        """The async write completed at scheduler step ``when``: its bytes become VALID."""
        lo, hi, _ = self.writers.pop(handle)
        self.data[idx] = values
        self.state[lo:hi] = VALID
        self.landed[lo:hi] = when

    # ---------------------------------------------------------------- generic writes (st.shared)

    def generic_write(self, idx: np.ndarray, values: np.ndarray, who: object) -> None:
        """``st.shared`` of ``values`` at byte offsets ``idx`` (state GENERIC until the writer's fence)."""
        lo, hi = int(idx.min()), int(idx.max()) + 1
        self.check_range(lo, hi, who, write=True)
        self._hazards(lo, hi, who)
        self.data[idx] = values
        self.state[idx] = GENERIC

    def fence_proxy_async(self, idx: np.ndarray) -> None:
        """``fence.proxy.async``: the writer's generic writes at ``idx`` become visible to the async proxy."""
        st = self.state[idx]
        self.state[idx] = np.where(st == GENERIC, VALID, st)

    def internal_write(self, lo: int, values: np.ndarray) -> None:
        """A write by the hardware itself (``tcgen05.alloc`` storing the TMEM address)."""
        self.data[lo:lo + len(values)] = values
        self.state[lo:lo + len(values)] = VALID

    # ---------------------------------------------------------------- async reads (MMA, TMA store)

    def begin_async_read(self, idx: np.ndarray, who: object) -> int:
        """Check every byte at ``idx`` is VALID and hold the range until :meth:`end_async_read`.  Raises SimError."""
        lo, hi = int(idx.min()), int(idx.max()) + 1
        self.check_range(lo, hi, who, write=False)
        st = self.state[idx]
        bad = np.flatnonzero(st != VALID)
        if len(bad):
            off = int(idx.flat[bad[0]])
            raise SimError(f"read before write: {who} reads smem {off:#x} of {self.cta} (range [{lo:#x}, {hi:#x})), "
                           f"but {_STATE_WORDS[int(st.flat[bad[0]])]}")
        h = self._handle()
        self.readers[h] = (lo, hi, who)
        return h

    def end_async_read(self, handle: int) -> None:
        del self.readers[handle]

    def generic_read(self, lo: int, hi: int, who: object) -> np.ndarray:
        """``ld.shared`` of [lo, hi): the bytes must have been written.  Raises SimError."""
        self.check_range(lo, hi, who, write=False)
        if (self.state[lo:hi] == UNDEF).any():
            raise SimError(f"read before write: {who} loads smem [{lo:#x}, {hi:#x}) of {self.cta}, which no write produced")
        return self.data[lo:hi]

    def bf16(self, idx: np.ndarray) -> np.ndarray:
        """float32 values of the bf16 elements whose first bytes are at ``idx``."""
        lo = self.data[idx].astype(np.uint32)
        hi = self.data[idx + 1].astype(np.uint32)
        return ((hi << 24) | (lo << 16)).view(np.float32)


class Tmem:
    """One CTA's tensor memory: 128 lanes x 512 columns of 32 bit (PTX ISA "Tensor Memory").

    Per cell: the f32 value, whether a completed MMA wrote it, how many
    issued MMAs that write it have not completed, and whether ``tcgen05.ld``
    read it since an MMA last overwrote it (accumulate flag off).  In these
    kernels the epilogue reads each accumulator cell once per tile, so a
    second read before the next tile's first MMA completes is a stale read.

    Per cell also the happens-before stamps of the machine's ordering checks: the last MMA that writes it
    (issuing warp id, that warp's tcgen05 op number) and the last ``tcgen05.ld`` since (reading warp id, its
    tcgen05 op number, its release epoch at the read); -1: none.
    """

    LANES, COLS = 128, 512

    def __init__(self, cta: str):
        self.cta = cta
        self.value = np.zeros((self.LANES, self.COLS), dtype=np.float32)
        self.written = np.zeros((self.LANES, self.COLS), dtype=bool)
        self.pending = np.zeros((self.LANES, self.COLS), dtype=np.int32)
        self.consumed = np.zeros((self.LANES, self.COLS), dtype=bool)
        self.cols = 0  # allocated columns (from address 0)
        self.freed = False
        # per cell: index into ``records`` of its stamp, -1 for none
        self.wr = np.full((self.LANES, self.COLS), -1, dtype=np.int32)
        self.rd = np.full((self.LANES, self.COLS), -1, dtype=np.int32)
        self.records: list[tuple[int, ...]] = []

    def _record(self, stamp: tuple[int, ...]) -> int:
        self.records.append(stamp)
        return len(self.records) - 1

    def stamp_write(self, lane: int, col: int, rows: int, ncols: int, warp: int, seq: int) -> None:
        """An MMA issued by ``warp`` as its tcgen05 op ``seq`` writes these cells (earlier reads are superseded)."""
        self.wr[lane:lane + rows, col:col + ncols] = self._record((warp, seq))
        self.rd[lane:lane + rows, col:col + ncols] = -1

    def stamp_read(self, lane: int, col: int, ncols: int, warp: int, seq: int, epoch: int) -> None:
        """A ``tcgen05.ld`` by ``warp`` (its tcgen05 op ``seq``, release epoch ``epoch``) reads these cells."""
        self.rd[lane:lane + 32, col:col + ncols] = self._record((warp, seq, epoch))

    def stamps(self, which: str, lane: int = 0, col: int = 0, rows: int = LANES, ncols: int = COLS) -> list[tuple]:
        """Distinct stamps of the cells of a region: ``"wr"`` (warp id, op number) of the MMAs writing them,
        ``"rd"`` (warp id, op number, epoch) of the tcgen05.ld reading them; cells without one are left out."""
        arr = (self.wr if which == "wr" else self.rd)[lane:lane + rows, col:col + ncols]
        first = int(arr[0, 0])
        ids = [first] if (arr == first).all() else np.unique(arr).tolist()
        return [self.records[i] for i in ids if i >= 0]

    def _region(self, lane: int, col: int, rows: int, ncols: int, who: object) -> tuple[slice, slice]:
        if self.freed:
            raise SimError(f"TMEM use after dealloc: {who} touches TMEM of {self.cta} after tcgen05.dealloc")
        if not self.cols:
            raise SimError(f"TMEM not allocated: {who} touches TMEM of {self.cta} before tcgen05.alloc")
        if lane + rows > self.LANES or col + ncols > self.cols:
            raise SimError(f"out of bounds: {who} touches TMEM lanes [{lane}, {lane + rows}) columns "
                           f"[{col}, {col + ncols}) of {self.cta}; {self.cols} columns are allocated")
        return slice(lane, lane + rows), slice(col, col + ncols)

    def begin_write(self, lane: int, col: int, rows: int, ncols: int, who: object) -> None:
        self.pending[self._region(lane, col, rows, ncols, who)] += 1

    def end_write(self, lane: int, col: int, result: np.ndarray, accumulate: bool, who: object) -> None:
        """An MMA completed: ``D = result (+ D)`` on its cells."""
        region = self._region(lane, col, *result.shape, who)
        self.pending[region] -= 1
        if accumulate:
            if not self.written[region].all():
                raise SimError(f"TMEM read before write: {who} accumulates into TMEM of {self.cta} lanes "
                               f"[{lane}, {lane + result.shape[0]}) columns [{col}, {col + result.shape[1]}) that "
                               "no MMA wrote (accumulate flag set on a tile's first MMA?)")
            self.value[region] += result
        else:
            self.value[region] = result
            self.consumed[region] = False
        self.written[region] = True

    def read(self, lane: int, col: int, ncols: int, who: object) -> np.ndarray:
        """``tcgen05.ld`` of 32 lanes x ncols: every cell written by a completed MMA.  Raises SimError."""
        region = self._region(lane, col, 32, ncols, who)
        if self.pending[region].any():
            c = col + int(np.flatnonzero(self.pending[region].any(axis=0))[0])
            raise SimError(f"TMEM read before write: {who} reads TMEM of {self.cta} lanes [{lane}, {lane + 32}) "
                           f"columns [{col}, {col + ncols}) while an MMA writing column {c} has not completed "
                           "(epilogue read before tmem_full?)")
        if not self.written[region].all():
            c = col + int(np.flatnonzero(~self.written[region].all(axis=0))[0])
            raise SimError(f"TMEM read before write: {who} reads TMEM of {self.cta} lanes [{lane}, {lane + 32}) "
                           f"columns [{col}, {col + ncols}); column {c} was never written by an MMA")
        if self.consumed[region].any():
            c = col + int(np.flatnonzero(self.consumed[region].any(axis=0))[0])
            raise SimError(f"TMEM read before write: {who} reads TMEM of {self.cta} lanes [{lane}, {lane + 32}) "
                           f"columns [{col}, {col + ncols}); column {c} was already read since an MMA last wrote it "
                           "(stale accumulator: epilogue read before tmem_full?)")
        self.consumed[region] = True
        return self.value[region].copy()

    def busy(self) -> bool:
        return bool(self.pending.any())

    # ---------------------------------------------------------------- raw words (tcgen05.cp: NVFP4 scale factors)

    def begin_copy(self, col: int, ncols: int, who: object) -> None:
        """A ``tcgen05.cp`` into all 128 lanes of columns [col, col + ncols) was issued."""
        self.pending[self._region(0, col, self.LANES, ncols, who)] += 1

    def end_copy(self, col: int, words: np.ndarray, who: object) -> None:
        """The copy completed: the cells hold the 32-bit ``words`` ``[128, ncols]`` (raw bits, not f32 values)."""
        region = self._region(0, col, self.LANES, words.shape[1], who)
        self.pending[region] -= 1
        self.value.view(np.uint32)[region] = words
        self.written[region] = True

    def read_words(self, col: int, ncols: int, who: object, what: str) -> np.ndarray:
        """32-bit words ``[128, ncols]`` an MMA reads as ``what`` (scale factors) when it executes.  Raises SimError
        when no copy ever wrote them.

        Copies still pending are later ones of the same in-order tcgen05 queue (the caller runs at the MMA's
        completion, after every earlier op of its thread): the MMA reads the values before them.
        """
        region = self._region(0, col, self.LANES, ncols, who)
        if not self.written[region].all():
            raise SimError(f"TMEM read before write: {who} reads {what} at TMEM columns [{col}, {col + ncols}) of "
                           f"{self.cta}, which no tcgen05.cp wrote before it (scale factors copied after the MMA, "
                           "or to other columns?)")
        return self.value.view(np.uint32)[region].copy()


class GlobalTensors:
    """A ``[m, k]``, B (and a dual GEMM's B2) ``[n, k]`` (bf16 bits, K innermost) and D ``[m, n]`` (bf16 bits,
    poisoned at start).

    extra: more 2-D tensors by map name, any element type (NVFP4: packed-e2m1 bytes ``[rows, K/2]`` as a, b, b2,
    and the scale tiles ``sfa``, ``sfb``, ``sfb2`` as ``[lines, 128]`` bytes of the blocked layout); D is then
    ``[len(a), len(b)]`` 16-bit (fp16 bits for NVFP4).
    d_shape: D's ``[m, n]`` when A or B is held transposed (an MN-major map reads ``[K, rows]``); default
    ``[len(a), len(b)]``.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, poison: int, b2: np.ndarray | None = None,
                 extra: dict[str, np.ndarray] | None = None, d_shape: tuple[int, int] | None = None):
        self.a, self.b, self.b2 = a, b, b2
        self.extra = extra or {}
        self.d = np.full(d_shape or (a.shape[0], b.shape[0]), poison, dtype=np.uint16)
        #: rows of load boxes past each tensor's last row, zero-filled (see :meth:`load_box`)
        self.filled_rows: dict[str, int] = {}

    def row_shape(self, tensor: str) -> tuple[int, int]:
        """(elements, bytes) of one row of a global tensor (the width its tensor map declares)."""
        src = {"a": self.a, "b": self.b, "b2": self.b2, **self.extra}[tensor]
        return src.shape[1], src.shape[1] * src.itemsize

    def load_box(self, tensor: str, col: int, row: int, cols: int, rows: int) -> np.ndarray:
        """The ``[rows, cols]`` box at (col, row); out-of-bounds elements read as zero (TMA zero fill).  Rows past
        the tensor's last row are counted in ``filled_rows[tensor]``."""
        src = {"a": self.a, "b": self.b, "b2": self.b2, **self.extra}.get(tensor)
        if src is None:
            raise KeyError(f"no global tensor {tensor!r} in this launch")
        box = np.zeros((rows, cols), dtype=src.dtype)
        r1, c1 = min(row + rows, src.shape[0]), min(col + cols, src.shape[1])
        self.filled_rows[tensor] = self.filled_rows.get(tensor, 0) + rows - max(r1 - row, 0)
        if r1 > row and c1 > col:
            box[: r1 - row, : c1 - col] = src[row:r1, col:c1]
        return box

    def store_box(self, col: int, row: int, box: np.ndarray) -> None:
        """Write a ``[rows, cols]`` box of D at (col, row), clipped at M and N (TMA store clipping).  A box of bytes
        (an e4m3 D's UINT8 map) holds e4m3 codes: decoded into the e4m3 D's float32 buffer ``extra["d_ptr"]``."""
        m, n = self.d.shape
        r1, c1 = min(row + box.shape[0], m), min(col + box.shape[1], n)
        if r1 > row and c1 > col:
            if box.dtype == np.uint8:
                self.extra["d_ptr"][row:r1, col:c1] = e4m3_decode(box[: r1 - row, : c1 - col])
                return
            self.d[row:r1, col:c1] = box[: r1 - row, : c1 - col]
