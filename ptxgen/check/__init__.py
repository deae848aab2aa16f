"""The check wing: what checks a kernel, beside the compile path (nothing that compiles a kernel imports it).

The base, shared by the three rooms:

* :mod:`.walker`, the IR's reference interpreter: it runs one warp of a Kernel IR as a coroutine that
  yields one event per instruction with its operands evaluated (one :class:`~.walker.Event` type, derived
  from the op's fields; the rooms dispatch on the op's type, as the emitters do);
* :mod:`.numerics` (bf16 conversions, the reference GEMM, result comparison) and :mod:`.nvfp4` (the
  block-scaled MMA's semantics and the NVFP4 reference);
* the operand decoding: :mod:`.mma` (shared-memory and instruction descriptors of ``tcgen05.mma`` and
  ``wgmma``) and :mod:`.swizzle` (the 128-byte swizzle, TMA box and K-major operand byte offsets).

The rooms, peers of one another (none imports another):

* :mod:`.verify`, the static verifier: traces every warp with the walker and checks the barrier
  protocol, data flow, hand-overs, layout and teardown;
* :mod:`.sim`, the simulated machine: runs the walkers of a whole launch under seeded schedules,
  completes asynchronous units late, and reports protocol faults and wrong results;
* :mod:`.ptx`, the PTX differential: interprets the emitted PTX per thread and compares its effects
  with the walker's.

The wing imports from ptxgen only the IR, descriptors, errors, hardware constants and host-side formats.
"""
