"""The self-contained kernel: its resources (shared-memory regions, mbarrier arrays, TMEM) and its body.

Everything an emitter or the simulator needs is here or in the ops of the
body: they never read the plan or the config.  The plan fills these fields
(:func:`ptxgen.plan.make_plan` computes every number once); the builders
attach the body.

Units: bytes for shared memory (offsets from the dynamic shared-memory base),
columns (32-bit) for TMEM, threads for block shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MBARRIER_BYTES = 8  # PTX ISA "mbarrier": a 64-bit object in shared memory


@dataclass(frozen=True)
class SmemRegion:
    """A shared-memory region: ``count`` slots of ``stride`` bytes from ``offset``.

    slot_bytes: bytes of each slot that the region's data occupies (``<= stride``; an
        interleaved A/B layout has A slots of ``a`` bytes at a stride of ``a + b``).
    align: required alignment of each slot, bytes (1024 for a 128B-swizzle operand:
        PTX ISA "Tensor copy: swizzle modes").
    """

    name: str
    offset: int
    stride: int
    count: int
    slot_bytes: int = 0
    align: int = 16

    @property
    def bytes(self) -> int:
        """Span of the region, bytes (``stride x count``)."""
        return self.stride * self.count

    @property
    def end(self) -> int:
        return self.offset + self.bytes

    def at(self, slot: int) -> int:
        """Byte offset of slot ``slot`` (static slots only; stage-indexed slots are IR expressions)."""
        return self.offset + slot * self.stride


@dataclass(frozen=True)
class BarrierArray:
    """An array of ``num`` mbarriers, 8 B each, at ``offset`` bytes from the dynamic shared-memory base.

    init: arrival count per cluster rank (index = ``%cluster_ctarank``).
    tx_bytes: transaction bytes expected per phase on the barrier that is waited on (0: none).
    doc: who arrives and who waits, for the barrier table and the PTX header.
    """

    name: str
    num: int
    offset: int
    init: tuple[int, ...]
    tx_bytes: int
    doc: str

    @property
    def end(self) -> int:
        return self.offset + MBARRIER_BYTES * self.num


@dataclass(frozen=True)
class Kernel:
    """A whole kernel: resources, launch shape and body (run by every thread of every CTA).

    Attributes:
        name: the ``.entry`` name.
        config_name: the config it was built from (file stem of ``generated/<config_name>.ptx``).
        arch: ``"sm_100a"`` or ``"sm_90a"``.
        title: header comment lines (what the kernel computes, its tile and pipeline).
        threads: threads per CTA (``.reqntid``).
        cluster_size: CTAs per cluster (1 or 2; ``.reqnctapercluster``).
        cta_group: ``tcgen05`` ``cta_group`` (1 or 2); 1 on sm_90a.
        smem_bytes: dynamic shared memory per CTA, bytes.
        regions: shared-memory data regions (operand stages, epilogue staging).
        barriers: mbarrier arrays, in shared-memory order.
        tmem_slot: byte offset of the 4-byte slot ``tcgen05.alloc`` writes the TMEM address to.
        tmem_cols: TMEM columns allocated per CTA (0: none).
        tmem_acc_stage_cols: TMEM columns of one accumulator stage (0: none).
        maxnreg: ``.maxnreg`` (0: none).
        minnctapersm: ``.minnctapersm`` (0: none).
        params: kernel parameters (name, kind) in order; kind ``tensor_map``, ``u64`` or ``u32``.
        launch: the runtime's :class:`ptxgen.launch.LaunchSpec` (grid policy, tensor-map boxes).
        block_k: K elements per pipeline stage (the simulator's shape choice).
        generator: what generated it (``ptxgen 0.1.0``), for the PTX header.
        body: the ops.
        watchdog_ns: hang-watchdog budget of every mbarrier wait, ns of ``%globaltimer`` (0: off, the
            default; see :mod:`ptxgen.ir.watchdog`).
        wait_sites: (barrier array, role) of each watched wait, indexed by ``WaitSite.site`` (empty when off).
    """

    name: str
    config_name: str
    arch: str
    title: tuple[str, ...]
    threads: int
    cluster_size: int
    cta_group: int
    smem_bytes: int
    regions: tuple[SmemRegion, ...]
    barriers: tuple[BarrierArray, ...]
    tmem_slot: int
    tmem_cols: int
    tmem_acc_stage_cols: int
    maxnreg: int
    minnctapersm: int
    params: tuple[tuple[str, str], ...]
    launch: object
    block_k: int
    generator: str = "ptxgen"
    body: tuple = field(default_factory=tuple)
    watchdog_ns: int = 0
    wait_sites: tuple[tuple[str, str], ...] = ()

    @property
    def is_sm100(self) -> bool:
        return self.arch == "sm_100a"

    def barrier(self, name: str) -> BarrierArray:
        """The barrier array ``name``.  Raises KeyError naming the arrays that exist."""
        for b in self.barriers:
            if b.name == name:
                return b
        raise KeyError(f"no barrier array {name!r}; the kernel has {', '.join(b.name for b in self.barriers)}")

    def has_barrier(self, name: str) -> bool:
        return any(b.name == name for b in self.barriers)

    def region(self, name: str) -> SmemRegion:
        """The shared-memory region ``name``.  Raises KeyError naming the regions that exist."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no shared-memory region {name!r}; the kernel has {', '.join(r.name for r in self.regions)}")

    @property
    def barrier_span(self) -> tuple[int, int]:
        """[first byte, end) of all mbarriers."""
        return min(b.offset for b in self.barriers), max(b.end for b in self.barriers)

    @property
    def stages(self) -> int:
        """Operand ring stages (the ``full`` barrier array's length)."""
        return self.barrier("full").num

    @property
    def acc_stages(self) -> int:
        """TMEM accumulator stages (sm_100a), 1 otherwise."""
        return self.barrier("tmem_full").num if self.has_barrier("tmem_full") else 1

    def with_body(self, body) -> "Kernel":
        from dataclasses import replace

        return replace(self, body=tuple(body))
