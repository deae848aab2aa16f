"""Launch metadata: everything a runtime needs to launch one generated kernel.

The plan fills a :class:`LaunchSpec`; ``ptxgen build`` writes it beside the
PTX as ``generated/<name>.json``; the runtime reads it back.  Nothing here is
derived a second time: the runtime only evaluates the grid policy on the
problem shape.

The records here, and the runtime's records on a first call's path, are ``typing.NamedTuple`` classes:
immutable, and defined by compiling one small function, where a frozen dataclass compiles five or six methods
from text when its class is created (about 10 ms of a warm first call for fifteen classes on an H100 host;
docs/performance.md, "The warm path's host work").  Copies with changes: ``spec._replace(...)``.

Kernel signature (every GEMM kernel, both targets), in parameter order::

    tmap_a  .param .align 128 .b8 [128]   CUtensorMap of A [M, K] bf16, K innermost
    tmap_b  .param .align 128 .b8 [128]   CUtensorMap of B [N, K] bf16, K innermost
    tmap_d  .param .align 128 .b8 [128]   CUtensorMap of D [M, N] bf16, N innermost
    d_ptr   .param .u64                   D's device address (direct stores)
    m, n, k .param .u32                   problem shape in elements

Split-K kernels (``schedule.split_k > 1``) take one more parameter after ``k``::

    workspace .param .u64                 a zero-initialised device buffer of
                                          ``WorkspaceSpec.bytes(cta_tiles)`` bytes (fp32 partial
                                          tiles and one u32 counter per tile and consumer warpgroup)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

PARAMS: tuple[tuple[str, str], ...] = (
    ("tmap_a", "tensor_map"),
    ("tmap_b", "tensor_map"),
    ("tmap_d", "tensor_map"),
    ("d_ptr", "u64"),
    ("m", "u32"),
    ("n", "u32"),
    ("k", "u32"),
)


class TensorMapSpec(NamedTuple):
    """One 2-D tiled tensor map, as ``cuTensorMapEncodeTiled`` takes it.

    Attributes:
        tensor: ``"a"``, ``"b"`` or ``"d"`` (which operand it maps).
        box: box extent, innermost first, in elements: ``[cols, rows]``.
        swizzle: ``"none"``, ``"32B"``, ``"64B"`` or ``"128B"``.
        l2_promotion: ``"none"``, ``"64B"``, ``"128B"`` or ``"256B"``.
        dtype: element type: ``"bf16"`` (bf16 GEMM operands and D), ``"f16"`` (the NVFP4 kernel's D),
            ``"u8"`` (NVFP4 packed-e2m1 operands and scale-factor tiles, FP8 e4m3 operands, mapped as bytes),
            ``"f32"`` (FP8 per-block scales).
        major: ``"k"``: the map's rows are the operand's rows (M or N), its columns K; ``"mn"`` (an MN-major
            operand, ``tma.major_a`` / ``major_b``): its rows are K and its columns the operand's M or N, so the
            runtime encodes the transposed view (``[K, rows]``, pitch = the operand's K stride).
    """

    tensor: str
    box: tuple[int, int]
    swizzle: str
    l2_promotion: str
    dtype: str = "bf16"
    major: str = "k"

    @property
    def elem_bytes(self) -> int:
        """Bytes of one element of :attr:`dtype`."""
        return ELEM_BYTES[self.dtype]

    @property
    def box_bytes(self) -> int:
        """Bytes one box moves (what a TMA load of this map delivers to its mbarrier)."""
        return self.box[0] * self.box[1] * self.elem_bytes


ELEM_BYTES = {"bf16": 2, "f16": 2, "u8": 1, "f32": 4}
"""Element size in bytes of each tensor-map dtype."""


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: a record (these classes) as a dict of its fields, a mapping as a dict, a tuple
    as a list, recursively."""
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


class SplitUnits(NamedTuple):
    """How a persistent split-K launch deals its work (:meth:`GridPolicy.split_units`).

    Attributes:
        clusters: the launched grid, in clusters (``G``).
        dp_tiles: cluster tiles run whole, as ordinary data-parallel units (``split_tiles = "all"``: 0).
        split_tiles: cluster tiles split ``split_k`` ways (the tail: ``tiles - dp_tiles``); the workspace holds
            partials and counters for these only (last wave: ``clusters`` slots, see
            :meth:`WorkspaceSpec.cta_tiles_for`).
        units: work units the scheduler walks: ``dp_tiles + split_tiles x split_k``.
    """

    clusters: int
    dp_tiles: int
    split_tiles: int
    units: int


class GridPolicy(NamedTuple):
    """How the grid follows from the problem shape.

    A *cluster tile* is the output area one cluster computes per scheduler
    step: ``tile_rows`` x ``tile_cols`` elements of D.  ``persistent``
    launches at most one cluster per ``cluster_size`` SMs and loops over
    cluster tiles; otherwise one cluster per cluster tile.
    """

    persistent: bool
    tile_rows: int
    tile_cols: int
    cluster_size: int
    split_k: int = 1  # work units per cluster tile (split-K: the scheduler walks tiles x split_k units)
    split_tiles: str = "all"  # split-K: "all" tiles split, or "last_wave" (schedule.split_k_tiles)

    def cluster_tiles(self, m: int, n: int) -> int:
        """Number of cluster tiles covering an ``m`` x ``n`` output."""
        return -(-m // self.tile_rows) * -(-n // self.tile_cols)

    def split_units(self, m: int, n: int, num_sms: int) -> SplitUnits:
        """The grid and the work units of an ``m`` x ``n`` output on ``num_sms`` SMs (the one place the host
        computes them: runtime, simulator, verifier and chooser call this).

        ``split_tiles = "all"``: every tile is split, ``units = tiles x split_k``.  ``"last_wave"`` (persistent):
        with ``G0 = num_sms // cluster_size`` SM clusters, ``G = min(G0, units)`` where the kernel, launched with
        ``G`` clusters, runs ``dp_tiles = tiles - tiles % G`` whole tiles and splits the ``tiles % G`` others.
        Consistent: ``tiles >= G0`` gives ``units >= G0`` and ``G = G0``; ``tiles < G0`` gives
        ``G = min(G0, tiles x split_k) > tiles`` (split_k >= 2), so the kernel's ``tiles % G`` is every tile.
        """
        tiles, s = self.cluster_tiles(m, n), self.split_k
        sm_clusters = max(1, num_sms // self.cluster_size)
        if self.split_tiles == "all" or s == 1:
            units = tiles * s
            clusters = min(units, sm_clusters) if self.persistent else units
            return SplitUnits(clusters, 0, tiles if s > 1 else 0, units)
        clusters = sm_clusters if tiles >= sm_clusters else min(sm_clusters, tiles * s)
        dp = tiles - tiles % clusters
        return SplitUnits(clusters, dp, tiles - dp, dp + (tiles - dp) * s)

    def grid_x(self, m: int, n: int, num_sms: int) -> int:
        """``gridDim.x`` in CTAs (a multiple of ``cluster_size``) for an ``m`` x ``n`` output.

        Persistent: at most one cluster per ``cluster_size`` SMs (split-K: over the work units,
        :meth:`split_units`).
        """
        return self.split_units(m, n, num_sms).clusters * self.cluster_size


class WorkspaceSpec(NamedTuple):
    """The global workspace of a split-K kernel (split-K, last arriver reduces; see :class:`ptxgen.plan.SplitKPlan`).

    Layout, bytes from the buffer's start, for ``cta_tiles`` CTA tiles (cluster tiles x ``ctas_per_tile``)::

        [partials: cta_tiles x split_k x partial_bytes][counters: cta_tiles x counters_per_tile x 4 B]

    Partial ``s`` of CTA tile ``t`` is the fp32 accumulator(s) of split ``s`` in fragment order (what
    each consumer thread holds, 16 B per thread per chunk); counter ``(t, g)`` counts the splits of
    tile ``t`` whose consumer warpgroup ``g`` has published its partial.  Counters start at 0 (the
    runtime zero-fills the buffer once, when it allocates it) and the tile's last arriver resets them to 0.

    The methods compute with ints (runtime, simulator) and with IR expressions (the builder) alike.

    Attributes:
        split_k: splits per tile (>= 2).
        partial_bytes: bytes of one CTA tile's partial (block_m x block_n x 4 B x accumulators).
        counters_per_tile: u32 counters per CTA tile (one per consumer warpgroup).
        ctas_per_tile: CTA tiles per cluster tile (2 for a CTA pair computing two m-blocks).
    """

    split_k: int
    partial_bytes: int
    counters_per_tile: int
    ctas_per_tile: int = 1

    COUNTER_BYTES = 4

    def counters_offset(self, cta_tiles):
        """Byte offset of the first counter (the end of the partials)."""
        return cta_tiles * (self.split_k * self.partial_bytes)

    def partial_offset(self, cta_tile, split):
        """Byte offset of partial ``split`` (< split_k) of CTA tile ``cta_tile``."""
        return (cta_tile * self.split_k + split) * self.partial_bytes

    def counter_offset(self, cta_tiles, cta_tile, group):
        """Byte offset of the counter of consumer warpgroup ``group`` of CTA tile ``cta_tile``."""
        return self.counters_offset(cta_tiles) + (cta_tile * self.counters_per_tile + group) * self.COUNTER_BYTES

    def bytes(self, cta_tiles: int) -> int:
        """Workspace size for ``cta_tiles`` CTA tiles, bytes."""
        return self.counters_offset(cta_tiles) + cta_tiles * self.counters_per_tile * self.COUNTER_BYTES

    def cta_tiles_for(self, grid: GridPolicy, m: int, n: int, num_sms: int) -> int:
        """CTA tiles with a workspace slot for an ``m`` x ``n`` output under ``grid`` on ``num_sms`` SMs, times
        ``ctas_per_tile``: every cluster tile (``split_tiles = "all"``), or one per cluster of the launched grid
        (``"last_wave"``: the tail, ``tiles % G``, is fewer than the ``G`` clusters; the kernel places the counters
        after ``G`` slots, a number it holds anyway, so no tail count stays live across the tile loop)."""
        units = grid.split_units(m, n, num_sms)
        return (units.clusters if grid.split_tiles == "last_wave" else units.split_tiles) * self.ctas_per_tile

    def bytes_for(self, grid: GridPolicy, m: int, n: int, num_sms: int) -> int:
        """Workspace size for an ``m`` x ``n`` output under ``grid`` on ``num_sms`` SMs, bytes (``last_wave``: at
        most ``G x ctas_per_tile x split_k`` partials, whatever the shape)."""
        return self.bytes(self.cta_tiles_for(grid, m, n, num_sms))


class LaunchSpec(NamedTuple):
    """All a runtime needs to launch one kernel (see module docstring for the signature).

    Attributes:
        name: config name (``level9``).
        arch: ``"sm_100a"`` or ``"sm_90a"``.
        kernel: the ``.entry`` name in the PTX.
        block: ``blockDim`` (threads), ``[x, 1, 1]``.
        cluster: cluster dims in CTAs, ``[x, 1, 1]``.
        dynamic_smem_bytes: dynamic shared memory per CTA, bytes.
        grid: the grid policy.
        tensor_maps: by operand name ``a``, ``b``, ``d``.
        params: (name, kind) in parameter order.
        k_multiple: K must be a multiple of this (elements), for 16-byte global strides.
        n_multiple: N must be a multiple of this (8 when D is only ever stored through its tensor map).
        workspace: the split-K workspace (None: the kernel takes no ``workspace`` parameter).
        pdl: the kernel waits for its stream predecessor with ``griddepcontrol.wait`` before any global access (PTX
            ISA "griddepcontrol"), so it may be launched with the programmatic stream serialization attribute; the
            runtime does so unless ``PTXGEN_PDL`` is off (``ptxgen.knobs``).  False in specs written before it.
    """

    name: str
    arch: str
    kernel: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem_bytes: int
    grid: GridPolicy
    tensor_maps: dict[str, TensorMapSpec]
    params: tuple[tuple[str, str], ...] = PARAMS
    k_multiple: int = 8
    n_multiple: int = 1
    extra: Mapping[str, Any] = MappingProxyType({})
    workspace: WorkspaceSpec | None = None
    pdl: bool = False

    def to_json(self) -> str:
        """Stable, human-readable JSON (sorted keys, 2-space indent, trailing newline); ``grid.split_tiles`` only
        when it is not ``"all"`` and a tensor map's ``major`` only when it is not ``"k"`` (the specs written before
        them read back the same)."""
        d = _plain(self)
        if d["grid"]["split_tiles"] == "all":
            del d["grid"]["split_tiles"]
        for tmap in d["tensor_maps"].values():
            if tmap["major"] == "k":
                del tmap["major"]
        return json.dumps(d, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "LaunchSpec":
        """Inverse of :meth:`to_json`.  Raises ``KeyError``/``TypeError`` on a malformed document."""
        d = json.loads(text)
        return cls(
            name=d["name"],
            arch=d["arch"],
            kernel=d["kernel"],
            block=tuple(d["block"]),
            cluster=tuple(d["cluster"]),
            dynamic_smem_bytes=d["dynamic_smem_bytes"],
            grid=GridPolicy(**d["grid"]),
            tensor_maps={k: TensorMapSpec(**{**v, "box": tuple(v["box"])}) for k, v in d["tensor_maps"].items()},
            params=tuple(tuple(p) for p in d["params"]),
            k_multiple=d["k_multiple"],
            n_multiple=d.get("n_multiple", 1),
            extra=d.get("extra", {}),
            workspace=WorkspaceSpec(**d["workspace"]) if d.get("workspace") else None,
            pdl=d.get("pdl", False),
        )
