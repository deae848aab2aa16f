"""``ptxgen.grouped_gemm``: grouped GEMM for mixture-of-experts on sm_90a (bf16, or FP8 with DeepSeek-V3's block
scales), one B per group (expert), the kernels of ``schedule.grouped`` configs (docs/grouped.md).

Two layouts, as DeepGEMM names them:

* masked (decode): A ``[G, M_max, K]``, ``masked_m`` int32 ``[G]`` (valid rows of each group), D
  ``[G, M_max, N]``; rows ``>= masked_m[g]`` of D are never written.
* contiguous (prefill, training): A ``[M_total, K]`` with rows grouped by expert, ``m_indices`` int32
  ``[M_total]`` (each row's group, -1 for a padding row), D ``[M_total, N]``; padding rows are never written.

B is ``[G, N, K]``: contiguous, or (bf16) ``w.transpose(1, 2)`` of a contiguous ``[G, K, N]`` weight, the layout
``torch._grouped_mm`` takes, read in place by the config's MN-major variant (``tma.major_b: mn``; :func:`mn_major_b`,
:data:`MN_MAJOR_K`): no copy of the experts' weights per call.

Every input rule is checked before any launch and raised as one line (:class:`~ptxgen.errors.ShapeError`), ``out``
untouched.

Per-call path (:class:`GroupedCall`, as :class:`~ptxgen.runtime.api._Fp8Call` for ``gemm_fp8``): the first call of
a signature (config identity; each operand's dtype, shape, stride and device) runs every shape rule, loads the
kernel and stores the call; later calls check only what the signature cannot show (16-byte alignment of A, B, D;
``out`` overlapping no input), map the scales (in place when their layout allows, else one copy each:
``api._scale_map``; scale_b's copy kept while it is unchanged, :meth:`GroupedCall._scale_b_map`) and launch.  No
call synchronizes except a table read:

* the table rules (``masked_m`` in ``[0, M_max]``; ``m_indices`` as :func:`check_indices`) read the table on the
  host: one synchronizing copy (the GPU drains, then idles while Python works); a table given as a CPU tensor is
  read where it is, no sync, and copied to the device on the current stream (:func:`_device_table`);
* a table already read by this signature is not read again while it is the same tensor object at the same
  address with the same version counter (``t._version``, which every torch in-place op bumps).  Writes that torch
  does not see (a Triton or CUDA-extension kernel writing through ``data_ptr``, a CUDA-graph replay) leave the
  counter as it was: pass such a table with ``check_tables=False``;
* ``check_tables=False`` never reads it (for tables produced on the GPU, and inside CUDA-graph capture).  A table
  breaking the rules then gives wrong rows but never an access outside A, B, D and the scales: the kernel clamps
  ``masked_m[g]`` to M_max (unsigned minimum: a negative word is a huge u32), a group id past G addresses B and
  scale_b rows past their tensor maps (TMA zero-fills loads outside the map), and every store is bounded by D's
  rows (``StGlobal16`` ``row_end``; a TMA-store config's store box is clipped at D's tensor map).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptxgen.errors import ConfigError, ShapeError
from ptxgen.hw import BF16_BLOCK_K, FP8_SCALE_BLOCK, GROUPED_SEGMENT_ROWS

#: shipped configs by (layout, fp8); default_config takes a larger tile where the H100 measured it faster.
#: Contiguous: the 128x256 tile with TMA stores of whole m-blocks (docs/grouped.md, "TMA stores of whole m-blocks"):
#: on the four prefill problems of bench/grouped_bench.py, bf16 1.04-1.15x and FP8 1.06-1.30x the direct-store
#: default it replaced; FP8 at K = 2048 1.12-1.13x the 128x128 TMA-store tile, so one tile for every K.  Contiguous
#: bf16 runs on CTA pairs multicasting B (docs/grouped.md, "CTA pairs multicasting B": on the H100 1.33x the walk of
#: expert runs it replaced over the five tune problems of bench/grouped_gap.py, geomean; 1.01x torch._grouped_mm),
#: and so does contiguous FP8 (docs/grouped.md, "FP8 CTA pairs": 1.04x the single-CTA TMA-store tile over the tune
#: problems, geomean; 0.89x at 3072 x 4096, 1.25x at G = 64).
DEFAULT_CONFIGS = {("masked", False): "grouped_masked_h100_128x128",
                   ("contiguous", False): "grouped_contiguous_h100_128x256_c2",
                   ("masked", True): "grouped_masked_fp8_h100_128x128",
                   ("contiguous", True): "grouped_contiguous_fp8_h100_128x256_c2"}
#: measured on the H100 (docs/grouped.md): the 128x256 tile is 12-16 % faster at M_max = 256, 1-6 % slower at 64-128;
#: M_max > 128 runs it on CTA pairs multicasting B (docs/grouped.md, "Masked decode on CTA pairs": 1.08x the single
#: CTA over 18 tune problems of bench/grouped_masked_pair.py, geomean; 0.98-1.67x)
MASKED_WIDE, MASKED_WIDE_ROWS = "grouped_masked_h100_128x256_c2", 128
#: Masked FP8 tiles (docs/grouped.md, "Speed: the FP8 128x256 and 256x128 tiles"; H100, whole-program ptxas), read
#: at G = 32 (the G <= 16 rows of that run sat on a per-call floor of ~200 us): M_max > MASKED_WIDE_ROWS with
#: K >= FP8_WIDE_K takes the 128x256 tile (1.11x the 128x128 tile at K = 7168), smaller K the 256x128 tile (one
#: m-block per group reads each B once: 1.07x at K = 2048); M_max <= 128 keeps 128x128 (the larger tiles 0.82-1.00x
#: there).
#: The 128x256 tile runs on CTA pairs ("Masked decode on CTA pairs": 1.06x the single CTA over the 12 tune problems
#: with K = 4096, geomean, 0.95-1.54x; at K = 1536 the pair is 0.94-1.01x the 256x128 tile, which stays).
MASKED_FP8_WIDE, MASKED_FP8_TALL = "grouped_masked_fp8_h100_128x256_c2", "grouped_masked_fp8_h100_256x128"
FP8_WIDE_K = 4096
#: Masked FP8 with M_max <= MASKED_FP8_NARROW_ROWS takes the 64-row tile (docs/grouped.md, "Masked FP8 decode: the
#: 128-row tile's idle half and the per-call scale copies"): the 128-row tile's second warpgroup multiplies only
#: rows past M_max there; 1.02-1.12x the 128x128 tile on the 6 tune problems with M_max = 64 (geomean 1.05), 0.75-1.02x
#: at M_max = 128 (the rows of one 128-row m-block read B twice as two 64-row m-blocks), so 128 keeps 128x128.
MASKED_FP8_NARROW, MASKED_FP8_NARROW_ROWS = "grouped_masked_fp8_h100_64x128", 64
#: a contiguous segment's padding multiple (every contiguous config's block_m divides it: ptxgen.config)
BLOCK_M = GROUPED_SEGMENT_ROWS
NO_GROUP = -1
_SB_BOX = 4  # fp32 scale_b blocks per 16-byte TMA box: each group's blocks are padded to a multiple of it
_ALIGN = 16
#: a bf16 B given as ``w.transpose(1, 2)`` of a contiguous ``[G, K, N]`` weight (``torch._grouped_mm``'s layout) is
#: read in place by the config's MN-major variant (``tma.major_b: mn``; its map is the ``[G x K, N]`` stack) when N
#: is a multiple of 8 (16-byte map rows) and K of MN_MAJOR_K, every bf16 config's block_k: a k-block then never
#: reaches into the next group's rows (they would meet A's zero-filled columns past K, exact only for finite weights)
MN_MAJOR_K = BF16_BLOCK_K


@dataclass(frozen=True)
class GroupedProblem:
    """A checked grouped GEMM: ``layout`` (``masked``/``contiguous``), ``fp8``, ``groups`` (G), ``rows`` (rows of A
    and D: G x M_max or M_total), ``m`` (the kernel's m: M_max or M_total), ``n``, ``k``; ``b_mn``: B is the
    transposed view of a contiguous ``[G, K, N]`` weight, read MN-major (:data:`MN_MAJOR_K`)."""

    layout: str
    fp8: bool
    groups: int
    rows: int
    m: int
    n: int
    k: int
    b_mn: bool = False


def contiguous_layout(group_rows: Any, block_m: int = BLOCK_M, device: Any = None) -> Any:
    """DeepGEMM's ``m_indices`` (int32 ``[M_total]``) for groups of ``group_rows[g]`` rows: each group's rows, then
    -1 padding to a multiple of ``block_m``, in group order (an empty group has no segment)."""
    import torch

    parts = []
    for g, r in enumerate(int(x) for x in group_rows):
        pad = -(-r // block_m) * block_m
        parts += [torch.full((r,), g, dtype=torch.int32), torch.full((pad - r,), NO_GROUP, dtype=torch.int32)]
    out = torch.cat(parts) if parts else torch.zeros((0,), dtype=torch.int32)
    return out.to(device) if device is not None else out


def _tensor(name: str, t: Any, dims: int, what: str, dtype: Any, require_cuda: bool, device: Any = None) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name}: got {type(t).__name__}: must be a torch.Tensor")
    if t.dim() != dims:
        raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be {dims}-D {what}")
    if t.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)):
        want = " or ".join(str(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,)))
        raise ShapeError(f"{name}: dtype={t.dtype}: must be {want}")
    if require_cuda and t.device.type != "cuda":
        raise ShapeError(f"{name}: device={t.device}: must be a CUDA tensor")
    if device is not None and t.device != device:
        raise ShapeError(f"{name}: device={t.device}: must be on a's device {device}")


def _dense(name: str, t: Any, contiguous: bool = True) -> None:
    """``t`` contiguous (unless ``contiguous`` is False: a layout checked by the caller) and 16-byte aligned."""
    if contiguous and t.numel() and not t.is_contiguous():
        raise ShapeError(f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be contiguous; call .contiguous()")
    if t.numel() and t.data_ptr() % _ALIGN:
        raise ShapeError(f"{name}: data_ptr={t.data_ptr():#x}: must be {_ALIGN}-byte aligned (TMA); call .clone()")


def mn_major_b(b: Any) -> bool:
    """Whether B ``[G, N, K]`` is the transposed view of a contiguous ``[G, K, N]`` tensor (``w.transpose(1, 2)``),
    and not itself contiguous."""
    return b.numel() > 0 and not b.is_contiguous() and b.transpose(1, 2).is_contiguous()


def _extent(t: Any) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def check_indices(m_indices: Any, groups: int, block_m: int = BLOCK_M) -> None:
    """The rules of a contiguous ``m_indices`` (a 1-D integer tensor, any device; read on the host).

    Every value is -1 (padding) or a group in ``[0, G)``; ``M_total`` is a multiple of ``block_m``; each group's
    rows form one segment starting on an m-block (a multiple of ``block_m``) and padded with -1 rows only at its
    end, up to the next multiple of ``block_m``; segments in ascending group order.  So an m-block holds rows of one
    group followed by padding, or padding only.  Raises ShapeError (one line) naming the first row breaking a rule.
    """
    import numpy as np

    idx = m_indices.detach().to("cpu").numpy().astype(np.int64)  # one host read; numpy: ~10x torch's CPU ops here
    total = idx.size
    bad = np.flatnonzero((idx < NO_GROUP) | (idx >= groups))
    if bad.size:
        r = int(bad[0])
        raise ShapeError(f"m_indices[{r}]={int(idx[r])}: must be -1 (padding) or a group in [0, {groups})")
    if total % block_m:
        raise ShapeError(f"m_indices: length {total}: must be a multiple of block_m={block_m} (each group's segment "
                         "padded with -1 rows to a multiple of block_m)")
    if not total:
        return
    blocks = idx.reshape(-1, block_m)
    first = blocks[:, :1]
    pad = blocks == NO_GROUP
    wrong = (blocks != first) & ~pad
    wrong[:, 1:] |= pad[:, :-1] & ~pad[:, 1:]  # a row after padding (the first such row of each m-block suffices)
    if wrong.any():
        row = int(np.flatnonzero(wrong)[0])
        b = row // block_m
        raise ShapeError(f"m_indices[{row}]={int(idx[row])}: m-block {b} starts with {int(first[b, 0])}; an m-block "
                         f"holds rows of one group then -1 padding (segments aligned to block_m={block_m})")
    at = np.flatnonzero(first[:, 0] != NO_GROUP)  # m-blocks holding a group, in order
    heads, full = first[at, 0], ~pad[at].any(axis=1)
    # a head below the one before: unsorted; equal to it: the same group goes on, which needs the m-block just
    # before to be that group's and full (a group's rows form one segment, padded only at its end)
    down = heads[1:] < heads[:-1]
    split = (heads[1:] == heads[:-1]) & ((at[1:] != at[:-1] + 1) | ~full[:-1])
    if (down | split).any():
        i = int(np.flatnonzero(down | split)[0]) + 1
        g, last = int(heads[i]), int(heads[i - 1])
        raise ShapeError(f"m_indices[{int(at[i]) * block_m}]={g}: group {g} after group {last}"
                         + (" (unsorted: segments must be in ascending group order)" if g < last else
                            " ended by padding: a group's rows form one segment, padded only at its end"))


def check_grouped_operands(a: Any, b: Any, m_indices: Any = None, masked_m: Any = None, scale_a: Any = None,
                           scale_b: Any = None, out: Any = None, *, require_cuda: bool = True,
                           check_tables: bool = True, block_m: int = BLOCK_M) -> GroupedProblem:
    """Every rule :func:`grouped_gemm` keeps; no launch (``check_tables`` reads the table on the host).

    Returns the :class:`GroupedProblem`.  Raises ShapeError (one line: argument, value, rule) for the first rule
    broken: tensors of the right rank, dtype (a, b both bf16 or both ``float8_e4m3fn``; tables int32; scales
    float32; out bf16) and device (the table on a's device or the CPU); exactly one of ``m_indices`` / ``masked_m``; B ``[G, N, K]`` with G equal to
    the table's (masked) and K equal to A's; K a multiple of 8 (bf16) or 16 (e4m3) for 16-byte TMA row strides;
    a, b, out contiguous and 16-byte aligned (bf16 b also the transposed view of a contiguous ``[G, K, N]``
    weight, N a multiple of 8 and K of ``MN_MAJOR_K``); scales (FP8 only) ``scale_a`` one per row of A and 128-K block,
    ``scale_b`` ``[G, ceil(N/128), ceil(K/128)]``; out overlapping no input; ``0 <= masked_m[g] <= M_max``;
    ``m_indices`` as :func:`check_indices`.
    """
    import torch

    if (m_indices is None) == (masked_m is None):
        raise ShapeError("m_indices/masked_m: pass exactly one (contiguous layout: m_indices; masked layout: masked_m)")
    layout = "masked" if masked_m is not None else "contiguous"
    e4m3 = torch.float8_e4m3fn
    a_dims = 3 if layout == "masked" else 2
    _tensor("a", a, a_dims, "[G, M_max, K]" if layout == "masked" else "[M_total, K]", (torch.bfloat16, e4m3),
            require_cuda)
    dev = a.device
    _tensor("b", b, 3, "[G, N, K]", a.dtype, require_cuda, dev)
    fp8 = a.dtype == e4m3
    table, tname = (masked_m, "masked_m") if layout == "masked" else (m_indices, "m_indices")
    on_host = isinstance(table, torch.Tensor) and table.device.type == "cpu"  # read without a sync, then copied
    _tensor(tname, table, 1, "[G]" if layout == "masked" else "[M_total]", torch.int32, require_cuda and not on_host,
            None if on_host else dev)
    groups, n, k = b.shape
    if a.shape[-1] != k:
        raise ShapeError(f"b: shape={tuple(b.shape)}: K={k} must equal a's K={a.shape[-1]} (b is [G, N, K])")
    if layout == "masked":
        if a.shape[0] != groups:
            raise ShapeError(f"a: shape={tuple(a.shape)}: G={a.shape[0]} must equal b's G={groups}")
        if masked_m.shape[0] != groups:
            raise ShapeError(f"masked_m: shape={tuple(masked_m.shape)}: must be [G] = ({groups},) (b's G)")
        rows, m = groups * a.shape[1], a.shape[1]
    else:
        rows = m = a.shape[0]
        if m_indices.shape[0] != rows:
            raise ShapeError(f"m_indices: shape={tuple(m_indices.shape)}: must be [M_total] = ({rows},) (a's rows)")
    k_multiple = 16 if fp8 else 8
    if k < 1 or k % k_multiple:
        raise ShapeError(f"K={k}: must be a positive multiple of {k_multiple} ({'e4m3' if fp8 else 'bf16'} rows need "
                         "16-byte TMA row strides)")
    b_mn = not fp8 and mn_major_b(b)
    if b_mn and (n % 8 or k % MN_MAJOR_K):
        raise ShapeError(f"b: shape={tuple(b.shape)} stride={b.stride()}: a transposed [G, K, N] weight is read in "
                         f"place with N a multiple of 8 and K a multiple of {MN_MAJOR_K} (N={n}, K={k}); "
                         "call .contiguous()")
    _dense("a", a)
    _dense("b", b, contiguous=not b_mn)
    inputs = [("a", a), ("b", b)] + ([] if on_host else [(tname, table)])
    kb = -(-k // FP8_SCALE_BLOCK)
    if fp8:
        for name, t, want, what in (
                ("scale_a", scale_a, tuple(a.shape[:-1]) + (kb,),
                 "[G, M_max, ceil(K/128)]" if layout == "masked" else "[M_total, ceil(K/128)]"),
                ("scale_b", scale_b, (groups, -(-n // FP8_SCALE_BLOCK), kb), "[G, ceil(N/128), ceil(K/128)]")):
            if t is None:
                raise ShapeError(f"{name}: None: FP8 operands need {name} {what} (float32)")
            _tensor(name, t, len(want), what, torch.float32, require_cuda, dev)
            if tuple(t.shape) != want:
                raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be {what} = {want} (one fp32 scale per "
                                 f"{'row' if name == 'scale_a' else '128 rows of each group'} and 128-K block)")
            inputs.append((name, t))
    elif scale_a is not None or scale_b is not None:
        raise ShapeError("scale_a/scale_b: given for bf16 operands; scales belong to float8_e4m3fn operands only")
    if out is not None:
        want = (groups, m, n) if layout == "masked" else (rows, n)
        _tensor("out", out, len(want), "[G, M_max, N]" if layout == "masked" else "[M_total, N]", torch.bfloat16,
                require_cuda, dev)
        if tuple(out.shape) != want:
            raise ShapeError(f"out: shape={tuple(out.shape)}: must be {want}")
        _dense("out", out)
        for name, t in inputs:
            (o0, o1), (t0, t1) = _extent(out), _extent(t)
            if o0 < o1 and t0 < t1 and o0 < t1 and t0 < o1:
                raise ShapeError(f"out: memory overlaps {name}: D must not alias an input")
    if check_tables and table.numel():
        if layout == "masked":
            host = masked_m.detach().to("cpu", copy=True)
            bad = ((host < 0) | (host > m)).nonzero()
            if len(bad):
                g = int(bad[0])
                raise ShapeError(f"masked_m[{g}]={int(host[g])}: must be in [0, M_max={m}]")
        else:
            check_indices(m_indices, groups, block_m)
    return GroupedProblem(layout, fp8, groups, rows, m, n, k, b_mn)


def default_config(p: GroupedProblem) -> str:
    """The shipped config ``config=None`` takes: by layout and dtype, then (measured on the H100, the constants
    above) masked by M_max (FP8: the 64-row tile up to 64 rows), and masked FP8 past 128 rows by K."""
    wide_k = p.k >= FP8_WIDE_K
    if p.layout == "masked" and p.fp8 and p.m <= MASKED_FP8_NARROW_ROWS:
        return MASKED_FP8_NARROW
    if p.layout == "masked" and p.m > MASKED_WIDE_ROWS:
        if not p.fp8:
            return MASKED_WIDE
        return MASKED_FP8_WIDE if wide_k else MASKED_FP8_TALL
    return DEFAULT_CONFIGS[(p.layout, p.fp8)]


def _refuses(spec: Any, problem: GroupedProblem) -> str | None:
    layout = spec.extra.get("grouped")
    if layout != problem.layout:
        return (f"config {spec.name}: schedule.grouped={layout or 'none'}; this call needs a "
                f"schedule.grouped={problem.layout} config ({DEFAULT_CONFIGS[(problem.layout, problem.fp8)]})")
    if ("scale_a" in spec.tensor_maps) != problem.fp8:
        return (f"config {spec.name}: operands {'fp8' if 'scale_a' in spec.tensor_maps else 'bf16'} do not match "
                f"{'float8_e4m3fn' if problem.fp8 else 'bf16'} a/b ({DEFAULT_CONFIGS[(problem.layout, problem.fp8)]})")
    major, want = spec.tensor_maps["b"].major, "mn" if problem.b_mn else "k"
    if major != want:
        given = "a transposed [G, K, N] view" if problem.b_mn else "contiguous [G, N, K]"
        return f"config {spec.name}: tma.major_b={major}; b is {given}: needs tma.major_b={want}"
    return None


def tma_scale_layout(scale: Any) -> Any:
    """The same scales in the layout :func:`grouped_gemm` (and ``gemm_fp8``) reads in place, with no copy per call:
    a view ``[G, rows, kblocks]`` (or ``[rows, kblocks]``) of a new ``[kblocks, G, round_up(rows, 4)]`` float32
    tensor (one copy now; the padding rows are zeros).  Convert constant scales (a weight's ``scale_b``) once;
    produce per-call scales (``scale_a``) in this layout to skip the per-call copy.

    Raises:
        ShapeError: ``scale`` is not a 2-D or 3-D float32 tensor.
    """
    import torch

    if not isinstance(scale, torch.Tensor) or scale.dim() not in (2, 3) or scale.dtype != torch.float32:
        what = f"shape={tuple(scale.shape)} dtype={scale.dtype}" if isinstance(scale, torch.Tensor) else \
            f"got {type(scale).__name__}"
        raise ShapeError(f"scale: {what}: must be a 2-D or 3-D float32 tensor ([rows, kblocks] or [G, rows, kblocks])")
    flat = scale.dim() == 2
    t = scale.unsqueeze(0) if flat else scale
    groups, rows, kblocks = t.shape
    pad = -(-rows // _SB_BOX) * _SB_BOX
    store = torch.zeros((kblocks, groups, pad), dtype=torch.float32, device=scale.device)
    store[:, :, :rows].copy_(t.permute(2, 0, 1))
    view = store[:, :, :rows].permute(1, 2, 0)
    return view[0] if flat else view


def _span(t: Any) -> int:
    """Bytes from ``t.data_ptr()`` to one past its last element (0 for an empty tensor)."""
    if t is None or not t.numel():
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def _table_key(t: Any) -> tuple:
    """What must match for a table read before not to be read again: the object (weakly), address, version."""
    import weakref

    return weakref.ref(t), t.data_ptr(), t._version


def _key_matches(key: tuple | None, t: Any) -> bool:
    """Whether ``t`` is the tensor :func:`_table_key` recorded in ``key``, unchanged (None: nothing recorded)."""
    return key is not None and key[0]() is t and key[1] == t.data_ptr() and key[2] == t._version


def _device_table(table: Any, name: str, device: Any) -> Any:
    """A CPU table's copy on ``device``, enqueued on torch's current stream without a sync: through a private
    pinned copy (a pageable source may make the driver synchronize; the caching host allocator reuses the pinned
    block only after the copy ran), so the caller may change ``table`` as soon as the call returns.

    Raises:
        ShapeError: inside CUDA-graph capture (a replay would read the pinned copy of the capture's call).
    """
    import torch

    if torch.cuda.is_current_stream_capturing():
        raise ShapeError(f"{name}: device=cpu: a CPU table cannot be captured in a CUDA graph (each replay would read "
                         f"the capture's copy); pass it on {device}")
    return table.pin_memory().to(device, non_blocking=True)


def grouped_gemm(a: Any, b: Any, m_indices: Any = None, masked_m: Any = None, scale_a: Any = None,
                 scale_b: Any = None, out: Any = None, config: Any = None, *, check_tables: bool = True) -> Any:
    """Grouped GEMM on sm_90a, on torch's current stream: for each group g, ``D_g = A_g @ B[g].T`` (fp32 accumulate,
    bf16 out); with FP8 operands DeepSeek-V3's block-scaled product (:func:`ptxgen.gemm_fp8`, docs/fp8.md).

    Layouts (pass exactly one table):

    * masked (decode): ``a`` ``[G, M_max, K]``, ``masked_m`` int32 ``[G]`` with ``0 <= masked_m[g] <= M_max``;
      D ``[G, M_max, N]``; rows ``>= masked_m[g]`` of group g are never written (left as they are in ``out``).
    * contiguous (prefill, training; DeepGEMM's layout): ``a`` ``[M_total, K]``, ``m_indices`` int32
      ``[M_total]``: each group's rows form one segment that starts at a multiple of block_m = 128 and is padded
      with -1 rows to the next multiple of 128 (so ``M_total`` is a multiple of 128), segments in ascending group
      order, an empty group has no segment; D ``[M_total, N]``; padding rows are never written.

    Args:
        a: A, bf16 or ``torch.float8_e4m3fn``, contiguous, 16-byte aligned, on a CUDA device.
        b: B ``[G, N, K]`` (one weight per group: D's columns are B's rows), a's dtype, contiguous.  Any N: the
            last n-block of a group reads rows of the next group, which only feed columns ``>= N`` (never stored).
            bf16 also ``w.transpose(1, 2)`` of a contiguous ``[G, K, N]`` weight (``torch._grouped_mm``'s
            layout) with N a multiple of 8 and K of 64, read in place (the config's ``tma.major_b: mn`` variant).
        m_indices, masked_m: the table of the layout, int32, on a's device or the CPU (then checked on the host
            without a sync and copied to a's device on the current stream per call; not in CUDA-graph capture).
        scale_a: FP8 only: float32 one scale per row of A and 128-K block (``[G, M_max, ceil(K/128)]`` or
            ``[M_total, ceil(K/128)]``), any strides.
        scale_b: FP8 only: float32 ``[G, ceil(N/128), ceil(K/128)]`` (one scale per 128 x 128 block of each B), any
            strides.  A scale tensor in the kernel's layout (:func:`tma_scale_layout`; for contiguous scale_a also
            DeepGEMM's ``get_col_major_tma_aligned_tensor``) is read in place, any other copied once per call.
        out: optional D, bf16, contiguous, 16-byte aligned, overlapping no input.
        config: a ``schedule.grouped`` config of the layout and dtype, or None for the shipped one
            (:func:`default_config`).
        check_tables: refuse a table that breaks the rules, reading it on the host (one synchronizing copy) unless
            this call signature read this same tensor before, unchanged (same object, address and ``t._version``;
            writes torch does not see, such as a Triton kernel's, keep the version: pass those with False).  False:
            never read (a table produced on the GPU; CUDA-graph capture); a bad table then gives wrong rows, never
            an access outside A, B, D and the scales (module docstring).

    Returns:
        D (``out`` if given; a new tensor is allocated with ``torch.empty``, so its untouched rows hold whatever
        the allocator gave: pass a filled ``out`` when those rows matter).

    Raises:
        ShapeError: a bad input (:func:`check_grouped_operands`), or a CPU table inside CUDA-graph capture, before
            any launch; ``out`` untouched.
        ConfigError: a config of another layout or dtype, or a device that is not sm_90a.
        CudaError: a driver call failed.
    """
    from ptxgen.runtime import api

    table = masked_m if m_indices is None else m_indices
    try:
        ckey = config if config is None or config.__class__ is str else ("id", id(config))
        key = ("grouped_gemm", ckey, m_indices is None) + tuple(
            None if t is None else (t.dtype, t.shape, t.stride(), t.device) for t in (a, b, table, scale_a, scale_b, out))
        call = api._calls.get(key)
    except (AttributeError, TypeError):  # not tensors: the full check names the problem
        key, call = None, None
    if call is None or (call.by_id and call.config is not config):
        p = check_grouped_operands(a, b, m_indices, masked_m, scale_a, scale_b, out, check_tables=False)
        if not (p.rows and p.n):
            check_grouped_operands(a, b, m_indices, masked_m, scale_a, scale_b, out, check_tables=check_tables)
            return out if out is not None else empty_d(p, a.device)
        call = GroupedCall(p, config, key is not None and key[1].__class__ is tuple, a)
        api._remember(key, call)
    return call(a, b, table, scale_a, scale_b, out, check_tables)


def empty_d(p: GroupedProblem, device: Any) -> Any:
    """A new D of the problem (``torch.empty``: its untouched rows hold whatever the allocator gave)."""
    import torch

    return torch.empty((p.groups, p.m, p.n) if p.layout == "masked" else (p.rows, p.n), dtype=torch.bfloat16,
                       device=device)


class GroupedCall:
    """A call signature of :func:`grouped_gemm` (see module docstring): the problem, the loaded kernel and grid;
    per call the pointer rules, the table rules (unless read before, or ``check_tables=False``), the scale maps
    and one launch on torch's current stream."""

    __slots__ = ("p", "config", "by_id", "launcher", "ordinal", "grid_x", "new_out", "spans", "d_bytes",
                 "table_read", "device", "d_map", "scale_b_copy")

    def __init__(self, p: GroupedProblem, config: Any, by_id: bool, a: Any):
        import functools

        from ptxgen.runtime import api, driver

        ordinal = api._ordinal(a)
        driver.ensure_context(ordinal)
        info = driver.device_info(ordinal)
        chosen = default_config(p) if config is None else config
        if p.b_mn:  # the config's MN-major variant reads the transposed weights in place
            variant = api.majors_config(chosen, False, True)
            if variant is None:
                raise ConfigError(f"config {getattr(chosen, 'name', chosen)}: cannot read b MN-major (tma.major_b=mn: "
                                  "each CTA's share of block_n whole 64-column boxes); pass b contiguous")
            chosen = variant
        loaded = api.loaded_kernel(chosen, ordinal)
        spec = loaded.spec
        refused = _refuses(spec, p)
        if refused:
            raise ConfigError(refused)
        api.check_arch(spec.name, spec.arch, info.capability)
        units = (p.groups if p.layout == "masked" else 1) * -(-p.m // spec.grid.tile_rows) * \
            -(-p.n // spec.grid.tile_cols)
        self.p, self.config, self.by_id = p, config, by_id
        cs = spec.grid.cluster_size  # a CTA pair walks pair units (tile_rows = 2 block_m): one cluster per 2 SMs
        self.launcher, self.ordinal = loaded.launcher, ordinal
        self.grid_x = max(1, min(units, info.sm_count // cs)) * cs
        self.new_out = functools.partial(empty_d, p, a.device)
        self.device = a.device
        self.spans: tuple | None = None  # bytes from data_ptr to the end of each input: set by the first call
        self.d_bytes = 2 * p.rows * p.n
        self.table_read: tuple | None = None  # _table_key of the last table that passed the table rules
        self.scale_b_copy: tuple | None = None  # (*_table_key(scale_b), stream, map, copy): see _scale_b_map
        # a TMA-store config (spec extra "store": "tma") stores the whole m-blocks through D's map over the flattened
        # rows [G x M_max or M_total, N]; N % 8 != 0 (no 16-byte rows) and direct-store configs take no map
        self.d_map = spec.extra.get("store") == "tma" and api.d_map_ok(spec, p.n)

    def __call__(self, a: Any, b: Any, table: Any, scale_a: Any, scale_b: Any, out: Any, check_tables: bool) -> Any:
        p = self.p
        ins = (a, b, table, scale_a, scale_b)
        on_host = table.device.type == "cpu" and self.device.type != "cpu"
        if self.spans is None:
            self.spans = tuple(0 if t is table and on_host else _span(t) for t in ins)
        if (a.data_ptr() | b.data_ptr()) & (_ALIGN - 1) or out is not None and self._misplaced(out, ins):
            self._full_check(ins, out, False)  # raises the broken rule's ShapeError
        if check_tables:
            if not _key_matches(self.table_read, table):
                self.table_read = None
                self._full_check(ins, out, True)  # the table rules: one synchronizing read
                self.table_read = _table_key(table)
        if on_host:
            table = _device_table(table, "masked_m" if p.layout == "masked" else "m_indices", self.device)
        if out is None:
            out = self.new_out()
        from ptxgen.runtime import api

        b_map = (b.data_ptr(), p.groups * p.k, p.n, p.n) if p.b_mn else (b.data_ptr(), p.groups * p.n, p.k, p.k)
        maps = [(a.data_ptr(), p.rows, p.k, p.k), b_map]
        held_a = held_b = None
        stream = api.launch_stream(self.ordinal)
        if p.fp8:
            sa, held_a = api._scale_map(scale_a, a.device)
            sb, held_b = self._scale_b_map(scale_b, stream)
            maps += [sa, sb]
        maps.append((out.data_ptr(), p.rows, p.n, p.n) if self.d_map else None)  # tmap_d (see __init__)
        scalars = (out.data_ptr(), p.m, p.n, p.k, table.data_ptr(), p.groups)
        self.launcher.launch(self.grid_x, tuple(maps), scalars, stream)
        del held_a, held_b, table  # the caching allocator reuses them only after the launch on this stream
        return out

    def _scale_b_map(self, scale_b: Any, stream: int) -> tuple:
        """scale_b's map and the tensor it reads (None: in place).  scale_b is a weight's constant: a copy made for
        it is kept and read again while scale_b is the same tensor object at the same address with the same version
        counter (the table rule, :func:`_table_key`) and the call is on the stream that made the copy (so the copy
        is ordered before every launch reading it).  Inside CUDA-graph capture the copy is made anew and not kept
        (a kept copy replaced later would leave the graph reading freed memory)."""
        import torch

        from ptxgen.runtime import api

        capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        kept = self.scale_b_copy
        if kept is not None and _key_matches(kept[:3], scale_b) and kept[3] == stream and not capturing:
            return kept[4], kept[5]
        sb, staged = api._scale_map(scale_b, self.device)
        self.scale_b_copy = None if staged is None or capturing else (*_table_key(scale_b), stream, sb, staged)
        return sb, staged

    def _misplaced(self, out: Any, ins: tuple) -> bool:
        """Whether ``out`` is misaligned or overlaps an input (its byte range)."""
        pd = out.data_ptr()
        d_end = pd + self.d_bytes
        return bool(pd & (_ALIGN - 1)) or any(
            span and q < d_end and pd < q + span for q, span in ((t.data_ptr() if t is not None else 0, s)
                                                                  for t, s in zip(ins, self.spans)))

    def _full_check(self, ins: tuple, out: Any, check_tables: bool) -> None:
        a, b, table, scale_a, scale_b = ins
        masked = self.p.layout == "masked"
        check_grouped_operands(a, b, None if masked else table, table if masked else None, scale_a, scale_b, out,
                               check_tables=check_tables)
