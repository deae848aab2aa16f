"""Hardware limits every layer reads (one place).

Sources: CUDA C Programming Guide "Compute capabilities" (shared memory per block, opt-in, sm_90 and sm_100:
227 KB = 232448 B); PTX ISA "Tensor Memory" (512 columns x 128 lanes of 32 bits per SM).
"""

SMEM_LIMIT_BYTES = 232448  # max dynamic shared memory per block, sm_90 and sm_100 (227 KB)
TMEM_COLUMNS = 512  # TMEM columns per SM (sm_100a)

# Residency (CUDA C++ Programming Guide, "Compute Capabilities", cc 9.0 and 10.0): 228 KB of shared memory
# per SM, of which the driver reserves 1 KB per resident CTA; at most 2048 threads and 32 CTAs per SM.
SM_SMEM_BYTES = 233472
SMEM_RESERVED_PER_CTA = 1024
SM_MAX_THREADS = 2048
SM_MAX_CTAS = 32


def resident_ctas(smem_bytes: int, threads: int) -> int:
    """CTAs of ``threads`` threads and ``smem_bytes`` dynamic shared memory (bytes) that one SM holds at once.

    Shared-memory, thread and CTA limits only (registers aside).  Source: see ``SM_SMEM_BYTES``.
    """
    return min(SM_SMEM_BYTES // (smem_bytes + SMEM_RESERVED_PER_CTA), SM_MAX_THREADS // threads, SM_MAX_CTAS)


# Dynamic shared memory starts above the driver's per-CTA reserve: the shared-window address of its first byte.
# The checks place it there so that descriptor start-address fields (absolute, >> 4) are what the hardware sees.
DYNAMIC_SMEM_BASE = SMEM_RESERVED_PER_CTA

# In a cluster launch a CTA's shared::cta addresses are its window of the cluster's shared memory: they carry the
# CTA's rank in bits 24-27 (PTX ISA "State spaces: Shared": the shared::cta window lies inside shared::cluster; on an
# H100 rank 1's dynamic shared memory starts 16 MiB above rank 0's), above the 18 address bits a matrix
# descriptor's start field holds.  The checks give each rank its window (:func:`cta_smem_base`).
CLUSTER_RANK_SHIFT = 24


def cta_smem_base(base: int, rank: int) -> int:
    """Shared-window address of cluster rank ``rank``'s byte at ``base`` of rank 0 (see ``CLUSTER_RANK_SHIFT``)."""
    return base | rank << CLUSTER_RANK_SHIFT

# Block-scaled MMA scale factors (PTX ISA "tcgen05.mma: Block Scaling", ``.block16``; the layout is cuBLAS's
# "1D Block Scaling Factors Layout"): one ue4m3 scale per SF_VEC K elements; a scale matrix [R, K/SF_VEC] is
# stored in atoms of SF_ATOM_ROWS rows x SF_ATOM_K scales (SF_ATOM_BYTES bytes), each atom 32 lines of 16 B; one
# ``tcgen05.cp .32x128b.warpx4`` moves an atom into SF_TMEM_COLS_PER_ATOM columns (128 bits per lane).
SF_VEC = 16
SF_ATOM_ROWS = 128
SF_ATOM_K = 4
SF_ATOM_BYTES = SF_ATOM_ROWS * SF_ATOM_K
SF_LINE_BYTES = 128  # a scale map's inner TMA box: one 128-byte line of the blocked layout (a quarter of an atom)
SF_TMEM_COLS_PER_ATOM = 4


# The FP8 block-scaled recipe's granularity (the kernel's scale ABI: DeepSeek-V3's recipe, as DeepGEMM takes it):
# one scale_a per row per 128 K, one scale_b per 128 rows of B per 128 K.
FP8_SCALE_BLOCK = 128

# The contiguous grouped layout (DeepGEMM's m_indices): each group's rows form one segment padded to a multiple of
# this many rows.  A grouped kernel's m-block must divide it, so that an m-block never spans two groups.
GROUPED_SEGMENT_ROWS = 128

# K elements of one bf16 k-block (``tile.block_k`` of every bf16 config): 128 B, one 128B-swizzle atom row (PTX ISA
# "Matrix Descriptor Format": the K-major operand layouts the wgmma and UMMA descriptors take).
BF16_BLOCK_K = 64

# An MN-major bf16 operand (sm_90a) moves in boxes of this many M or N elements: 128 B, one 128B-swizzle row, so one
# box is one column of swizzle atoms, block_k K rows deep (PTX ISA "Tensor copy: swizzle modes", "Matrix Descriptor
# Format": MN-major layouts repeat every swizzle width along M or N, LBO apart).
MN_MAJOR_CHUNK = 64
