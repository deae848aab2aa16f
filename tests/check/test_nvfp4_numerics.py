"""NVFP4 numerics (ptxgen.formats, ptxgen.check.nvfp4): decode tables bit for bit, the 128x4 scale atom layout, the dual-GEMM
reference against float64, and the block-scaled MMA semantics on a 128xNx256 block."""

from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch")

from ptxgen.descriptors import (
    nvfp4_operand_desc_hi,
    sf_copy_desc,
    umma_idesc_mxf4nvf4,
    umma_smem_desc,
)
from ptxgen.errors import SimError
from ptxgen.check.nvfp4 import block_scaled_mma, nvfp4_dual_gemm_reference, random_nvfp4, tmem_copy_32x128b_warpx4
from ptxgen.check.swizzle import box_index
from ptxgen.formats import (
    E2M1_VALUES,
    dequantize,
    e2m1_decode,
    e4m3_decode,
    pack_e2m1,
    sf_from_blocked,
    sf_from_blocked_torch,
    sf_to_blocked,
    sf_to_blocked_torch,
    unpack_e2m1,
)

# --- decode tables ------------------------------------------------------------------


def test_e2m1_table() -> None:
    assert E2M1_VALUES[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert E2M1_VALUES[8:].tolist() == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert np.signbit(E2M1_VALUES[8])
    # independent formula: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0, exponent 0 subnormal
    for c in range(16):
        s, e, m = c >> 3, (c >> 1) & 3, c & 1
        v = m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)
        assert e2m1_decode(c) == (-v if s else v)


def test_e4m3_table_matches_torch() -> None:
    ours = e4m3_decode(np.arange(256))
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    ok = ~np.isnan(ours)
    assert (ours[ok].view(np.uint32) == theirs[ok].view(np.uint32)).all()  # bit-exact, signed zeros included
    assert e4m3_decode(0x7E) == 448 and e4m3_decode(0x01) == 2.0 ** -9 and e4m3_decode(0x38) == 1.0


def test_packing_matches_torch_pack_uint4() -> None:
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, size=(4, 32), dtype=np.uint8)
    t = torch.from_numpy(codes).reshape(-1)
    torch_packed = (t[1::2] << 4 | t[::2]).reshape(4, 16).numpy()  # torch.testing common_quantized.pack_uint4
    np.testing.assert_array_equal(pack_e2m1(codes), torch_packed)
    np.testing.assert_array_equal(unpack_e2m1(torch_packed), codes)
    assert unpack_e2m1(np.array([0x72], np.uint8)).tolist() == [2, 7]  # low nibble is element 0
    if hasattr(torch, "float4_e2m1fn_x2"):  # the dtype is a byte container: same bytes
        assert torch.from_numpy(torch_packed).view(torch.float4_e2m1fn_x2).view(torch.uint8).numpy().tolist() \
            == torch_packed.tolist()


def test_pack_errors() -> None:
    with pytest.raises(ValueError, match="even"):
        pack_e2m1(np.zeros((2, 3), np.uint8))
    with pytest.raises(ValueError, match="0-15"):
        pack_e2m1(np.full((2, 2), 16, np.uint8))


# --- 128x4 atom layout ---------------------------------------------------------------


def torch_to_blocked(x: torch.Tensor) -> torch.Tensor:
    """torch.testing._internal.common_quantized.to_blocked (cuBLAS 1D block scaling layout), shapes divisible."""
    rows, cols = x.shape
    blocks = x.view(rows // 128, 128, cols // 4, 4).permute(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


@pytest.mark.parametrize(("rows", "cols"), [(128, 4), (256, 16), (384, 28)])
def test_blocked_layout(rows: int, cols: int) -> None:
    rng = np.random.default_rng(rows + cols)
    sf = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    blk = sf_to_blocked(sf)
    np.testing.assert_array_equal(blk, torch_to_blocked(torch.from_numpy(sf)).numpy())
    np.testing.assert_array_equal(sf_from_blocked(blk, rows, cols), sf)
    t = torch.from_numpy(sf)
    np.testing.assert_array_equal(sf_to_blocked_torch(t).numpy(), blk)
    np.testing.assert_array_equal(sf_from_blocked_torch(sf_to_blocked_torch(t), rows, cols).numpy(), sf)
    # explicit byte formula: atom (r // 128, c // 4) row-block-major, then (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    r, c = rows - 23, cols - 1
    off = ((r // 128) * (cols // 4) + c // 4) * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    assert blk[off] == sf[r, c]


def test_blocked_layout_errors() -> None:
    with pytest.raises(ValueError, match="multiple of 128"):
        sf_to_blocked(np.zeros((100, 4), np.uint8))
    with pytest.raises(ValueError, match="needs 512"):
        sf_from_blocked(np.zeros(256, np.uint8), 128, 4)


# --- reference ---------------------------------------------------------------------------

SHAPES = [(128, 128, 256), (256, 256, 512), (128, 384, 768), (256, 256, 1792), (512, 256, 448 * 4)]


def _problem(m: int, n: int, k: int, masked: bool, seed: int):
    rng = np.random.default_rng(seed)
    a, sa = random_nvfp4(m, k, rng, masked=masked)
    b1, s1 = random_nvfp4(n, k, rng, masked=masked)
    b2, s2 = random_nvfp4(n, k, rng, masked=masked)
    return a, b1, b2, sa, s1, s2


def _dense64(a, b1, b2, sa, s1, s2) -> np.ndarray:
    def deq(p, s):
        vals = np.array([E2M1_VALUES[c] for c in range(16)], np.float64)[unpack_e2m1(p)]
        return vals * np.repeat(e4m3_decode(s).astype(np.float64), 16, axis=1)
    ad = deq(a, sa)
    x1, x2 = ad @ deq(b1, s1).T, ad @ deq(b2, s2).T
    return x1 / (1 + np.exp(-x1)) * x2


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unrestricted"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_reference_vs_float64(m: int, n: int, k: int, masked: bool) -> None:
    a, b1, b2, sa, s1, s2 = _problem(m, n, k, masked, seed=m + n + k)
    c = nvfp4_dual_gemm_reference(a, b1, b2, sf_to_blocked(sa), sf_to_blocked(s1), sf_to_blocked(s2))
    assert c.dtype == np.float16 and c.shape == (m, n)
    exact = _dense64(a, b1, b2, sa, s1, s2)
    assert np.isfinite(c).all()
    scale = np.abs(exact).max()
    np.testing.assert_allclose(c.astype(np.float64), exact, rtol=2e-3, atol=1e-5 * scale)


def test_reference_accepts_torch_and_catches_layout_bugs() -> None:
    a, b1, b2, sa, s1, s2 = _problem(128, 128, 512, True, seed=7)
    blk = [sf_to_blocked(s) for s in (sa, s1, s2)]
    c = nvfp4_dual_gemm_reference(a, b1, b2, *blk)
    tt = [torch.from_numpy(x) for x in (a, b1, b2)]
    if hasattr(torch, "float4_e2m1fn_x2"):
        tt = [t.view(torch.float4_e2m1fn_x2) for t in tt]
    ts = [torch.from_numpy(x).view(torch.float8_e4m3fn).reshape(-1, 512 // 16) for x in blk]
    np.testing.assert_array_equal(nvfp4_dual_gemm_reference(*tt, *ts), c)
    # planted: swapped nibbles, or row-major scales passed as if blocked, change the result
    swapped = (a >> 4) | (a << 4)
    assert not np.array_equal(nvfp4_dual_gemm_reference(swapped, b1, b2, *blk), c)
    assert not np.array_equal(nvfp4_dual_gemm_reference(a, b1, b2, sa.reshape(-1), *blk[1:]), c)


# --- block-scaled MMA semantics: one 128 x N x 256 stage ----------------------------------------

A_OFF, B_OFF, SF_OFF = 0x0000, 0x4000, 0xC000
SFA_COL, SFB_COL = 256, 272  # TMEM columns: SFA 16, SFB 16 * N/128


def _stage(n: int, seed: int):
    """smem with one stage as TMA would land it, TMEM words after the scale copies, and the inputs."""
    k = 256
    rng = np.random.default_rng(seed)
    a, sa = random_nvfp4(128, k, rng, masked=False)
    b, sb = random_nvfp4(n, k, rng, masked=False)
    smem = np.zeros(0x10000, np.uint8)
    smem[box_index(A_OFF, 128, 128, True, 0)] = a.reshape(-1)  # 128B-swizzled rows of 128 B (256 e2m1)
    smem[box_index(B_OFF, n, 128, True, 0)] = b.reshape(-1)
    # scale tiles: global blocked atoms (rb, kb); the TMA box lands mn-atom-major, 4 k-atoms each
    off = SF_OFF
    slots = {}
    for name, s in (("A", sa), ("B", sb)):
        blk = sf_to_blocked(s).reshape(s.shape[0] // 128, 4, 512)
        for mn_a in range(blk.shape[0]):
            for k_a in range(4):
                smem[off:off + 512] = blk[mn_a, k_a]
                slots[name, mn_a, k_a] = off
                off += 512
    tmem = np.zeros((128, 512), np.uint32)
    for kk in range(4):
        tmem_copy_32x128b_warpx4(smem, 0, sf_copy_desc(slots["A", 0, kk]), tmem, SFA_COL + 4 * kk)
        for mn_a in range(n // 128):
            tmem_copy_32x128b_warpx4(smem, 0, sf_copy_desc(slots["B", mn_a, kk]), tmem,
                                     SFB_COL + (n // 32) * kk + 4 * mn_a)
    return smem, tmem, (a, sa, b, sb)


def _run_stage(smem, tmem, n: int, sfa_shift: int = 0, **kw) -> np.ndarray:
    idesc = umma_idesc_mxf4nvf4(128, n)
    acc = np.zeros((128, n), np.float32)
    for kk in range(4):  # 4 MMAs of K=64: +32 B in the descriptors, next 4 scale columns
        adesc = umma_smem_desc(A_OFF + 32 * kk, 0, 1024)
        bdesc = umma_smem_desc(B_OFF + 32 * kk, 0, 1024)
        assert adesc >> 32 == nvfp4_operand_desc_hi()
        acc += block_scaled_mma(smem, 0, adesc, bdesc, idesc, tmem, SFA_COL + 4 * kk + sfa_shift,
                                SFB_COL + (n // 32) * kk, **kw)
    return acc


@pytest.mark.parametrize("n", [128, 256])
def test_block_scaled_mma_matches_reference(n: int) -> None:
    smem, tmem, (a, sa, b, sb) = _stage(n, seed=n)
    got = _run_stage(smem, tmem, n)
    want = dequantize(a, sa).astype(np.float64) @ dequantize(b, sb).astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    # warpx4: all four 32-lane partitions hold the same scale words
    assert all((tmem[32 * p:32 * p + 32, SFA_COL:SFA_COL + 16] == tmem[:32, SFA_COL:SFA_COL + 16]).all()
               for p in range(4))


def test_block_scaled_mma_planted_bugs() -> None:
    n = 128
    smem, tmem, (a, sa, b, sb) = _stage(n, seed=3)
    want = _run_stage(smem, tmem, n)
    # wrong SF TMEM column (the next k-step's scales) -> wrong numbers
    assert not np.allclose(_run_stage(smem, tmem, n, sfa_shift=4)[:, :], want)
    adesc, bdesc = umma_smem_desc(A_OFF, 0, 1024), umma_smem_desc(B_OFF, 0, 1024)
    idesc = umma_idesc_mxf4nvf4(128, n)
    # wrong SF id with block16
    with pytest.raises(SimError, match="scale-factor ids"):
        block_scaled_mma(smem, 0, adesc, bdesc, idesc | (2 << 29), tmem, SFA_COL, SFB_COL)
    # block32 scale format under a .block16 instruction, and the block32 qualifier itself
    with pytest.raises(SimError, match="scale format"):
        block_scaled_mma(smem, 0, adesc, bdesc, umma_idesc_mxf4nvf4(128, n, scale_vec="block32"), tmem,
                         SFA_COL, SFB_COL)
    with pytest.raises(SimError, match="block32"):
        block_scaled_mma(smem, 0, adesc, bdesc, umma_idesc_mxf4nvf4(128, n, scale_vec="block32"), tmem,
                         SFA_COL, SFB_COL, scale_vec="block32")
    # scale columns never copied (zero bytes are legal ue4m3 zeros -> zero product, caught numerically)
    assert not block_scaled_mma(smem, 0, adesc, bdesc, idesc, tmem, 400, SFB_COL).any()
    # bit 7 of a scale byte is ue4m3 padding (PTX ISA 5.2.3), not a sign: same product; the NaN byte is reported
    bad = tmem.copy()
    bad[:, SFA_COL] |= 0x80808080
    np.testing.assert_array_equal(block_scaled_mma(smem, 0, adesc, bdesc, idesc, bad, SFA_COL, SFB_COL),
                                  block_scaled_mma(smem, 0, adesc, bdesc, idesc, tmem, SFA_COL, SFB_COL))
    bad[:, SFA_COL] |= 0x7F
    with pytest.raises(SimError, match="is the ue4m3 NaN"):
        block_scaled_mma(smem, 0, adesc, bdesc, idesc, bad, SFA_COL, SFB_COL)
    # a swizzled descriptor for the scale copy is refused
    with pytest.raises(SimError, match="bad descriptor"):
        tmem_copy_32x128b_warpx4(smem, 0, umma_smem_desc(SF_OFF, 0, 1024), tmem, SFA_COL)
