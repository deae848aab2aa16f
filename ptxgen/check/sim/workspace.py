"""The split-K global workspace of a simulated launch: fp32 partials with provenance, u32 counters.

Layout: :class:`ptxgen.launch.WorkspaceSpec` (partials, then counters), zero-filled at launch like the
runtime's buffer.  Each 4-byte word of the partial region carries a state:

* ``UNDEF``      no store wrote it in this launch;
* ``STORED``     written by ``st.global`` and not yet published by a release;
* ``PUBLISHED``  published by a release (``red.release``, ``atom.acq_rel``) on counter ``publisher``, as the
  ``seq``-th counter operation of the launch.

Ordering (PTX ISA "Memory Consistency Model": release/acquire patterns, causality order through
``bar.sync``).  A warp's stores are *pending* until a release by the warp publishes them; a completed thread
barrier shares its warps' pending stores and acquired counters (a release by one thread after the barrier
covers the others' earlier stores, an acquire by one thread before it orders the others' later loads).  An
``atom.add`` releases (``release``, ``acq_rel``: the warp's pending stores become published on that counter),
adds, and acquires (``acquire``, ``acq_rel``: the warp records the counter and the counter operations up to
it); a load is legal only on words ``PUBLISHED`` on a counter the loading warp has acquired, by a release that
came before that acquire.  Anything else is a *read of a partial that no completed store produced* (or not
ordered before the read).  Nothing waits on a counter; a launch must leave every counter at 0 (self-cleaning
workspace).
"""

from __future__ import annotations

import numpy as np

from ...errors import SimError

UNDEF, STORED, PUBLISHED = 0, 1, 2
WORD = 4


class _Stores:
    """One batch of a warp's partial stores (word indices), published at most once."""

    __slots__ = ("words", "who", "published")

    def __init__(self, words: np.ndarray, who: object):
        self.words, self.who, self.published = words, who, False


class Workspace:
    """One launch's workspace (see module docstring).

    Args:
        spec: the kernel's :class:`~ptxgen.launch.WorkspaceSpec`.
        cta_tiles: CTA tiles of the launch (sizes the buffer).
    """

    def __init__(self, spec, cta_tiles: int):
        self.spec = spec
        self.nbytes = spec.bytes(cta_tiles)
        self.counters_at = spec.counters_offset(cta_tiles)
        self.data = np.zeros(self.nbytes // WORD, dtype=np.uint32)
        self.state = np.zeros(self.counters_at // WORD, dtype=np.uint8)
        self.publisher = np.full(self.counters_at // WORD, -1, dtype=np.int64)
        self.seq = np.zeros(self.counters_at // WORD, dtype=np.int64)  # the publishing release's place in order
        self.ops = 0  # counter operations so far (releases and acquires are numbered by it)
        self.pending: dict[object, list[_Stores]] = {}  # warp -> stores not yet published by a release of its
        self.acquired: dict[object, dict[int, int]] = {}  # warp -> counter byte offset -> the latest acquire's place

    # ---------------------------------------------------------------- partials

    def _words(self, offsets: np.ndarray, what: object) -> np.ndarray:
        bad = offsets[(offsets % 16 != 0) | (offsets < 0) | (offsets + 16 > self.counters_at)]
        if len(bad):
            raise SimError(f"out of bounds: {what} accesses workspace byte {int(bad[0]):#x}; the partials are "
                           f"[0, {self.counters_at:#x}) in 16-byte aligned chunks")
        return (offsets[:, None] // WORD + np.arange(4)).ravel()

    def store(self, warp, offsets: np.ndarray, values: np.ndarray, who: object) -> None:
        words = self._words(offsets, who)
        self.data[words] = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).ravel()
        self.state[words] = STORED
        self.publisher[words] = -1
        self.pending.setdefault(warp, []).append(_Stores(words, who))

    def load(self, warp, offsets: np.ndarray, who: object) -> np.ndarray:
        words = self._words(offsets, who)
        acquired = self.acquired.get(warp, {})
        st, pub = self.state[words], self.publisher[words]
        seen = np.array([acquired.get(int(c), -1) for c in pub], dtype=np.int64)
        ok = (st == PUBLISHED) & (self.seq[words] < seen)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            byte = int(words[i]) * WORD
            if st[i] == UNDEF:
                why = "no store in this launch wrote it"
            elif st[i] == STORED:
                why = "it was stored but no release (the atom.acq_rel arrival after the store) has published it"
            elif seen[i] < 0:
                why = (f"it was published on the counter at byte {int(pub[i]):#x}, which the reader has not acquired "
                       "(an acquire of the counter's final value, then a thread barrier)")
            else:
                why = (f"it was published on the counter at byte {int(pub[i]):#x} after the reader's acquire of it "
                       "(the reader decided before that split arrived)")
            raise SimError(f"read of a partial that no completed store produced: {who} loads workspace byte "
                           f"{byte:#x}, but {why}")
        return self.data[words].view(np.float32).reshape(len(offsets), 4).copy()

    # ---------------------------------------------------------------- counters

    def _counter(self, offset: int, what: object) -> int:
        if offset % WORD or not self.counters_at <= offset < self.nbytes:
            raise SimError(f"out of bounds: {what} uses workspace byte {offset:#x} as a counter; the counters are "
                           f"[{self.counters_at:#x}, {self.nbytes:#x}) in 4-byte words")
        return offset // WORD

    def atom(self, warp, offset: int, value: int, sem: str, who: object) -> int:
        """``atom.SEM.add`` of ``value`` to the counter at ``offset``: release (``release``, ``acq_rel``), add, acquire
        (``acquire``, ``acq_rel``); returns the old value."""
        i = self._counter(offset, who)
        old = int(self.data[i])
        if sem in ("release", "acq_rel"):
            self.ops += 1
            for batch in self.pending.pop(warp, []):
                if not batch.published:
                    w = batch.words[self.state[batch.words] == STORED]
                    self.state[w] = PUBLISHED
                    self.publisher[w] = offset
                    self.seq[w] = self.ops
                    batch.published = True
        self.data[i] = (old + value) & 0xFFFFFFFF
        if sem in ("acquire", "acq_rel"):
            self.ops += 1
            self.acquired.setdefault(warp, {})[offset] = self.ops
        return old

    def set(self, offset: int, value: int, who: object) -> None:
        self.data[self._counter(offset, who)] = value

    def barrier(self, warps: list) -> None:
        """A completed thread barrier: its warps share pending stores and acquired counters."""
        pending = [b for w in warps for b in self.pending.get(w, []) if not b.published]
        acquired: dict[int, int] = {}
        for w in warps:
            for c, at in self.acquired.get(w, {}).items():
                acquired[c] = max(at, acquired.get(c, -1))
        for w in warps:
            self.pending[w] = list(pending)
            self.acquired[w] = dict(acquired)

    def check_exit(self) -> None:
        """Every counter back at 0 (the next launch, or a CUDA-graph replay, starts from 0)."""
        counters = self.data[self.counters_at // WORD:]
        left = np.flatnonzero(counters)
        if len(left):
            i = int(left[0])
            raise SimError(f"split-K counter not reset: {len(left)} workspace counter(s) nonzero at exit (counter "
                           f"{i} at byte {self.counters_at + WORD * i:#x} holds {int(counters[i])}); the next launch's "
                           "last split would not wait for its partials")
