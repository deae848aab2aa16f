"""Host-side TMA descriptors: ``cuTensorMapEncodeTiled`` for 2-D row-major tensors.

A row-major ``[rows, cols]`` tensor is described innermost first: global
dims ``[cols, rows]``, one global stride ``[row_stride_bytes]``, box
``spec.box`` (``[box_cols, box_rows]``), element strides ``[1, 1]``, no
interleave, the spec's swizzle and L2 promotion (256-byte promotion capped at
128 bytes when the row stride is not a multiple of 128 bytes: see
:data:`ALIGNED_STRIDE_BYTES`), out-of-bounds fill NONE (loads read zeros past
the edge; stores are clipped).

:func:`tiled_args` validates everything the driver would reject (and a
little more) without touching the driver, so the rules are testable on a
CPU; :func:`encode_tiled` then makes the call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ptxgen.errors import ShapeError
from ptxgen.launch import TensorMapSpec
from ptxgen.runtime import driver

MAX_BOX = 256
GLOBAL_ALIGN = 16
STRIDE_ALIGN = 16
MAX_DIM = 1 << 32
MAX_STRIDE = 1 << 40

#: spec.dtype -> (CUtensorMapDataType member, element bytes, torch dtype name)
DTYPES: dict[str, tuple[str, int, str]] = {
    "bf16": ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2, "bfloat16"),
    "f16": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2, "float16"),  # NVFP4 C
    "u8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1, "uint8"),  # NVFP4 packed e2m1 and scale-factor bytes, FP8 e4m3
    "f32": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4, "float32"),  # FP8 per-block scales
}
#: spec.swizzle -> (CUtensorMapSwizzle member, swizzle span in bytes or None)
SWIZZLES: dict[str, tuple[str, int | None]] = {
    "none": ("CU_TENSOR_MAP_SWIZZLE_NONE", None),
    "32B": ("CU_TENSOR_MAP_SWIZZLE_32B", 32),
    "64B": ("CU_TENSOR_MAP_SWIZZLE_64B", 64),
    "128B": ("CU_TENSOR_MAP_SWIZZLE_128B", 128),
}
#: a row stride that is not a multiple of this (one L2 line) makes every 128-byte box row straddle two lines; with
#: 256-byte L2 promotion each straddle then fetches two 256-byte blocks, so the runtime asks for 128-byte promotion
#: instead (H100, 3072x5120x7000 with h100_128x256: 0.394 -> 0.339 ms, 0.81x -> 0.94x torch; docs/performance.md,
#: "Ragged K")
ALIGNED_STRIDE_BYTES = 128
#: spec.l2_promotion -> CUtensorMapL2promotion member
L2_PROMOTIONS: dict[str, str] = {
    "none": "CU_TENSOR_MAP_L2_PROMOTION_NONE",
    "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
    "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}


class TiledArgs(NamedTuple):
    """Validated arguments of one ``cuTensorMapEncodeTiled`` call (innermost first).

    Attributes:
        address: global base address (16-byte aligned).
        dims: ``(cols, rows)`` in elements.
        strides: ``(row_stride_bytes,)``.
        box: ``(box_cols, box_rows)`` in elements.
        dtype: ``CUtensorMapDataType`` member name.
        swizzle: ``CUtensorMapSwizzle`` member name.
        l2_promotion: ``CUtensorMapL2promotion`` member name.
    """

    address: int
    dims: tuple[int, int]
    strides: tuple[int]
    box: tuple[int, int]
    dtype: str
    swizzle: str
    l2_promotion: str


def check_spec(spec: TensorMapSpec) -> None:
    """Check a :class:`TensorMapSpec` on its own (a plan bug, not a user input).

    Raises:
        ValueError: unknown dtype/swizzle/L2 promotion; a box extent outside [1, 256];
            an inner box row that is not a multiple of 16 bytes or exceeds the swizzle span.
    """
    where = f"tensor map {spec.tensor!r}"
    if spec.dtype not in DTYPES:
        raise ValueError(f"{where}: dtype={spec.dtype!r}: must be one of {sorted(DTYPES)}")
    if spec.swizzle not in SWIZZLES:
        raise ValueError(f"{where}: swizzle={spec.swizzle!r}: must be one of {list(SWIZZLES)}")
    if spec.l2_promotion not in L2_PROMOTIONS:
        raise ValueError(f"{where}: l2_promotion={spec.l2_promotion!r}: must be one of {list(L2_PROMOTIONS)}")
    if len(spec.box) != 2:
        raise ValueError(f"{where}: box={spec.box}: must have 2 extents [cols, rows]")
    for i, extent in enumerate(spec.box):
        if not 1 <= extent <= MAX_BOX:
            raise ValueError(f"{where}: box[{i}]={extent}: must be in [1, {MAX_BOX}]")
    elem = DTYPES[spec.dtype][1]
    inner_bytes = spec.box[0] * elem
    if inner_bytes % 16:
        raise ValueError(f"{where}: box[0]={spec.box[0]} ({inner_bytes} B): inner box must be a multiple of 16 bytes")
    span = SWIZZLES[spec.swizzle][1]
    if span is not None and inner_bytes > span:
        raise ValueError(
            f"{where}: box[0]={spec.box[0]} ({inner_bytes} B): with {spec.swizzle} swizzle the inner box "
            f"must be at most {span} bytes ({span // elem} elements)"
        )


def tiled_args(address: int, rows: int, cols: int, row_stride_elems: int, spec: TensorMapSpec) -> TiledArgs:
    """Validate a row-major ``[rows, cols]`` tensor against ``spec``; no driver call.

    Args:
        address: device address of element ``[0, 0]``.
        rows, cols: shape in elements.
        row_stride_elems: distance between rows, in elements.
        spec: the plan's tensor map spec (its 256-byte L2 promotion becomes 128 bytes for a row stride that is
            not a multiple of :data:`ALIGNED_STRIDE_BYTES`).

    Raises:
        ValueError: the spec itself is illegal (see :func:`check_spec`).
        ShapeError: the tensor breaks a TMA rule (empty/oversized dims, address not 16-byte
            aligned, row stride not a multiple of 16 bytes or too large).
    """
    check_spec(spec)
    where = f"tensor map {spec.tensor!r}"
    dtype_name, elem, _ = DTYPES[spec.dtype]
    for label, value in (("rows", rows), ("cols", cols)):
        if not 1 <= value <= MAX_DIM:
            raise ShapeError(f"{where}: {label}={value}: must be in [1, 2**32]")
    if address % GLOBAL_ALIGN:
        raise ShapeError(f"{where}: data address {address:#x}: must be {GLOBAL_ALIGN}-byte aligned")
    stride_bytes = row_stride_elems * elem
    if stride_bytes % STRIDE_ALIGN:
        raise ShapeError(
            f"{where}: row stride {row_stride_elems} elements = {stride_bytes} B: must be a multiple of "
            f"{STRIDE_ALIGN} bytes ({STRIDE_ALIGN // elem} {spec.dtype} elements)"
        )
    if not 0 < stride_bytes < MAX_STRIDE:
        raise ShapeError(f"{where}: row stride {stride_bytes} B: must be in (0, 2**40)")
    if row_stride_elems < cols:
        raise ShapeError(f"{where}: row stride {row_stride_elems} elements < cols={cols}: rows overlap")
    return TiledArgs(
        address=address,
        dims=(cols, rows),
        strides=(stride_bytes,),
        box=(spec.box[0], spec.box[1]),
        dtype=dtype_name,
        swizzle=SWIZZLES[spec.swizzle][0],
        l2_promotion=L2_PROMOTIONS[spec.l2_promotion if spec.l2_promotion != "256B" or stride_bytes % ALIGNED_STRIDE_BYTES == 0
                                   else "128B"],
    )


def tensor_args(tensor: Any, spec: TensorMapSpec) -> TiledArgs:
    """:func:`tiled_args` for a 2-D row-major torch tensor (any device; no driver call).

    Raises:
        ShapeError: not 2-D, dtype does not match ``spec.dtype``, not row-major (stride(1) != 1),
            or a TMA rule of :func:`tiled_args`.
    """
    where = f"tensor map {spec.tensor!r}"
    if spec.dtype in DTYPES and str(tensor.dtype) != f"torch.{DTYPES[spec.dtype][2]}":
        raise ShapeError(f"{where}: dtype={tensor.dtype}: must be torch.{DTYPES[spec.dtype][2]}")
    if tensor.dim() != 2:
        raise ShapeError(f"{where}: shape={tuple(tensor.shape)}: must be 2-D")
    rows, cols = tensor.shape
    if tensor.stride(1) != 1 and cols != 1:
        raise ShapeError(f"{where}: stride={tensor.stride()}: innermost stride must be 1 (row-major)")
    row_stride = tensor.stride(0) if rows > 1 else cols
    return tiled_args(tensor.data_ptr(), rows, cols, row_stride, spec)


def encode(args: TiledArgs) -> Any:
    """``cuTensorMapEncodeTiled`` on validated arguments; returns a ``CUtensorMap`` (128 bytes).

    Raises:
        CudaError: the driver rejected the descriptor.
    """
    drv = driver.cu()
    result = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, args.dtype),
        2,
        args.address,
        [drv.cuuint64_t(d) for d in args.dims],
        [drv.cuuint64_t(s) for s in args.strides],
        [drv.cuuint32_t(b) for b in args.box],
        [drv.cuuint32_t(1), drv.cuuint32_t(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, args.swizzle),
        getattr(drv.CUtensorMapL2promotion, args.l2_promotion),
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    return driver.check(result, "cuTensorMapEncodeTiled", detail=str(args))


def encode_tiled(tensor: Any, spec: TensorMapSpec) -> Any:
    """Encode a ``CUtensorMap`` for a 2-D row-major CUDA tensor.

    Args:
        tensor: ``[rows, cols]`` torch tensor on a CUDA device, dtype per ``spec.dtype`` (bf16),
            ``stride(1) == 1``, row stride a multiple of 16 bytes, data 16-byte aligned.
        spec: box (``[cols, rows]`` elements), swizzle and L2 promotion from the plan.

    Returns:
        A ``cuda.bindings.driver.CUtensorMap``.

    Raises:
        ShapeError / ValueError: see :func:`tensor_args` (raised before the driver call).
        CudaError: the driver rejected the descriptor.
    """
    return encode(tensor_args(tensor, spec))
