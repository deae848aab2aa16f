"""Hardware limits every layer reads (one place).

Sources: CUDA C Programming Guide "Compute capabilities" (shared memory per block, opt-in, sm_90 and sm_100:
227 KB = 232448 B); PTX ISA "Tensor Memory" (512 columns x 128 lanes of 32 bits per SM).
"""

SMEM_LIMIT_BYTES = 232448  # max dynamic shared memory per block, sm_90 and sm_100 (227 KB)
TMEM_COLUMNS = 512  # TMEM columns per SM (sm_100a)
