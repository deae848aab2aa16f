"""CPU simulator of the Kernel IR (numpy): protocol faults and wrong results, under random interleavings.

:func:`simulate` runs one launch: every warp of every CTA is a coroutine
(:mod:`.walker`), the machine (:mod:`.machine`) keeps shared memory with
per-byte provenance, TMEM, mbarriers with phase / pending arrivals /
tx-count, and completes TMA loads and stores and MMAs asynchronously in an
order a seeded scheduler draws.  Faults raise :class:`ptxgen.errors.SimError`
with a message that starts with the fault's name (``deadlock``,
``read before write``, ``TMEM read before write``, ``over-arrival``,
``transaction-byte mismatch``, ``write after read``, ``wrong result``, ...).
"""

from .numerics import bf16_bits_to_f32, f32_to_bf16_bits, round_bf16
from .simulate import SimResult, simulate

__all__ = ["SimResult", "simulate", "f32_to_bf16_bits", "bf16_bits_to_f32", "round_bf16"]
