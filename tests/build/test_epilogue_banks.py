"""Shared-memory bank conflicts of the sm_90a epilogue's fragment stores into the CD staging buffer.

A warp's ``st.shared.b32`` takes one wavefront per distinct 4-byte word that lands on its busiest
bank (32 banks of 4 bytes; CUDA C++ Programming Guide, "Shared Memory", compute capability 9.0).
The wgmma fragment of a warp covers 8 rows x 4 lanes per store, so a staging row pitch of P words
puts row r on banks (r * P + lane % 4) mod 32: conflict-free exactly when P / 4 is odd, i.e. when a
row is an odd number of 16-byte chunks (``store_block_n / 8`` odd) or the staging is 128B-swizzled.
These tests evaluate the addresses the IR's ``StShared16`` ops carry, lane by lane, so a change to
the plan's staging layout or to ``FragmentStore`` addressing that brings conflicts back fails here.
"""

from pathlib import Path

import numpy as np
import pytest

from ptxgen.build import build
from ptxgen.config import from_dict, load_config
from ptxgen.ir import ops
from ptxgen.ir.expr import Sreg, Var, evaluate
from ptxgen.shipped import shipped_configs

BANKS = 32
ROOT = Path(__file__).parents[2]


def _fragment_stores(kernel) -> list[ops.StShared16 | ops.StMatrix]:
    return [op for op in ops.walk(kernel.body) if isinstance(op, (ops.StShared16, ops.StMatrix))]


def _lane_addresses(addr, warp: int) -> np.ndarray:
    lane = np.arange(32, dtype=np.int64)

    def env(leaf):
        if isinstance(leaf, Sreg):
            return {"lane": lane, "warp": warp}.get(leaf.name, 0)
        assert isinstance(leaf, Var), leaf
        return 0

    return np.broadcast_to(np.asarray(evaluate(addr, env), dtype=np.int64), lane.shape)


def wavefronts(op: ops.StShared16 | ops.StMatrix, warp: int = 4) -> int:
    """Wavefronts of one warp's ``st.shared.b32`` of ``op`` (lanes 0-31 of ``warp``, tile 0, warpgroup 0); of its
    worst matrix for a ``stmatrix`` (:func:`matrix_wavefronts`)."""
    if isinstance(op, ops.StMatrix):
        return matrix_wavefronts(op, warp)
    assert len(op.idx) == 2, "sm_90a fragment stores are 4 bytes (2 bf16) per lane"
    words = _lane_addresses(op.addr, warp) // 4
    return max(len(set(words[(words % BANKS) == b].tolist())) for b in range(BANKS))


def matrix_wavefronts(op: ops.StMatrix, warp: int = 4) -> int:
    """Worst wavefronts of one 8x8 matrix of a ``stmatrix.x4`` (8 rows of 16 bytes, from lanes 8j..8j+7): rows in
    the same 16-byte bank group (4 of the 32 banks) serialize."""
    addr = _lane_addresses(op.addr, warp)
    assert (addr % 16 == 0).all(), "stmatrix rows are 16-byte aligned"
    groups = (addr // 16) % (BANKS // 4)
    return max(int(np.bincount(groups[8 * j:8 * j + 8], minlength=BANKS // 4).max()) for j in range(4))


def _sm90_tma_store_configs() -> list[str]:
    names = []
    for name in shipped_configs():
        cfg = load_config(name)
        if cfg.arch == "sm_90a" and cfg.epilogue.store == "tma":
            names.append(name)
    return names


#: shipped configs whose staging stores conflict, measured faster than their conflict-free variant: the 256x160 tiles'
#: 32-column stmatrix boxes (64-byte rows: 4 wavefronts a matrix) and two CD buffers per warpgroup against 40-column
#: st.shared boxes (80-byte rows, 1 wavefront) and one buffer, which shared memory leaves beside 4 operand stages:
#: the 40-column variants ran 0.99x over the H200's tune half (docs/performance.md, "A 256x160 tile")
MEASURED_CONFLICTS = {"h100_256x160": 4, "h100_256x160_c2": 4}


@pytest.mark.parametrize("name", _sm90_tma_store_configs())
def test_shipped_sm90_staging_stores_are_conflict_free(name):
    stores = _fragment_stores(build(name).kernel)
    assert stores, f"{name}: a TMA-store epilogue with no staging stores"
    worst = max(wavefronts(op) for op in stores)
    assert worst == MEASURED_CONFLICTS.get(name, 1), f"{name}: a fragment store takes {worst} wavefronts"


@pytest.mark.parametrize("name", sorted(MEASURED_CONFLICTS))
def test_the_measured_conflicts_have_a_conflict_free_variant(name):
    """Each measured exception's bench variant with 40-column boxes (bench/configs/<name>_e40.yaml) is conflict-free."""
    variant = load_config(ROOT / "bench" / "configs" / f"{name}_e40.yaml")
    assert max(wavefronts(op) for op in _fragment_stores(build(variant).kernel)) == 1


def _sm90(block_n: int, swizzle: str, store_block_n: int) -> dict:
    return {"name": "banks", "arch": "sm_90a", "tile": {"block_m": 128, "block_n": block_n}, "pipeline": {"stages": 4},
            "mma": {"warpgroups": 2},
            "epilogue": {"store": "tma", "swizzle": swizzle, "store_block_n": store_block_n, "stages": 1},
            "schedule": {"persistent": True, "group": 8}}


@pytest.mark.parametrize("block_n, swizzle, store_block_n, expected", [
    (176, "none", 88, 1),   # 176-B rows = 11 chunks (odd): conflict-free (h100_192x176)
    (144, "none", 72, 1),   # 9 chunks
    (144, "none", 144, 2),  # 18 chunks: rows r and r + 4 share banks
    (128, "none", 64, 8),   # 8 chunks: all 8 rows on the same 4 banks
    (128, "none", 32, 4),   # 4 chunks
    (128, "128", 64, 1),    # 128B swizzle: chunk ^ row % 8 spreads the rows
])
def test_wavefronts_follow_the_row_pitch(block_n, swizzle, store_block_n, expected):
    kernel = build(from_dict(_sm90(block_n, swizzle, store_block_n))).kernel
    assert max(wavefronts(op) for op in _fragment_stores(kernel)) == expected
