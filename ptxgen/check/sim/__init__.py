"""The simulated machine: protocol faults and wrong results of a Kernel IR, under many interleavings (numpy).

:func:`simulate` runs one launch under one schedule (policy ``random``, ``latest`` or ``pct``, and a seed;
:mod:`.schedule`): every warp of every CTA is a coroutine (:mod:`ptxgen.check.walker`); the machine
(:mod:`.machine`) keeps shared memory with per-byte provenance and TMEM (:mod:`.memory`), mbarriers
with phase, pending arrivals and tx-count (:mod:`.sync`), happens-before clocks for the tcgen05 fences
(:mod:`.ordering`), and completes TMA loads and stores and MMAs asynchronously (:mod:`.units`), in an
order the seeded scheduler picks.  Each instruction family's handlers are a module of
:mod:`.handlers` (barriers, TMA, epilogue stores, split-K workspace, TMEM, UMMA, wgmma and
setmaxnreg, the block-scaled NVFP4 ops).  :func:`sweep` runs a few shapes x many schedules
for ``ptxgen check``.  Faults raise :class:`ptxgen.errors.SimError` with a
message that starts with the fault's name (``deadlock``, ``read before
write``, ``TMEM read before write``, ``write after read``, ``over-arrival``,
``transaction-byte mismatch``, ``missing tcgen05.fence::after_thread_sync``,
``missing tcgen05.fence::before_thread_sync``, ``missing tcgen05.wait::ld``,
``unordered tcgen05 access``, ``missing wgmma.fence``, ``unbalanced
setmaxnreg``, ``register budget``, ``wrong result``, ...).
"""

from ..numerics import bf16_bits_to_f32, f32_to_bf16_bits, round_bf16
from .run import SimResult, simulate
from .sweep import Fault, Sweep, default_shapes, schedule_plan, sweep

__all__ = ["SimResult", "simulate", "Fault", "Sweep", "default_shapes", "schedule_plan", "sweep", "f32_to_bf16_bits",
           "bf16_bits_to_f32", "round_bf16"]
