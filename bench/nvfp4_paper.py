"""NVFP4 dual GEMM on paper: bytes, FLOPs, speed of light and schedule arithmetic for the four problem shapes.

Usage (from the repository root): ``PYTHONPATH=. python bench/nvfp4_paper.py`` (prints the Markdown tables of
docs/nvfp4.md; the shipped schedules are read from this checkout's plans).

Every hardware number is an explicit assumption below; change one and rerun.
"""

from __future__ import annotations

import math

SHAPES = [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]
SOL_US = [4.708, 8.714, 2.125, 6.535]  # speed of light the problem states, per shape

# --- assumptions (B200) ---
SMS = 148
HBM_TBPS = 8.0  # HBM3e bandwidth, TB/s (B200 spec)
FP4_DENSE_PFLOPS = 9.0  # dense FP4 tensor throughput of the chip, PFLOP/s (B200 spec; 18 with 2:4 sparsity)
# The stated SOL times are reproduced (to 0.1 %) by max(bytes / SOL_TBPS, FLOPs / SOL_PFLOPS):
SOL_TBPS = 7.68
SOL_PFLOPS = 6.90
SM_LOAD_GBPS = 120.0  # L2 -> one SM's shared memory (TMA), GB/s: ~64 B/clk at ~1.9 GHz; an assumption, not a spec
BLOCK_K = 256  # K per stage: one 128-B row of packed e2m1
SF_VEC = 16

SHIPPED = ["nvfp4_dual_128x128", "nvfp4_dual_256x128"]
# schedules: (name, rows per CTA, B rows per CTA, CTAs per output tile, tile rows, tile cols, bytes one CTA's loads
# move per K = 256 stage or None); the shipped ones come from their plans (shipped_schedules), these two are not
# built (N = 64 would fill more SMs)
UNBUILT = [
    ("1-CTA 128x64 (not built)", 128, 64, 1, 128, 64, None),
    ("2-CTA 256x64 (not built)", 128, 32, 2, 256, 64, None),
]


def shipped_plans() -> list:
    """The plans of the shipped NVFP4 configs (every number below about them is read from these)."""
    from ptxgen.config import load_config
    from ptxgen.plan import make_plan

    return [make_plan(load_config(name)) for name in SHIPPED]


def shipped_schedules() -> list[tuple]:
    return [(p.cfg.name, p.mma.block_m, p.loads.b_box_rows, p.roles.cta_group, p.schedule.cluster_tile_rows, p.mma.block_n,
             p.loads.load_bytes) for p in shipped_plans()]


def print_shipped_kernels() -> None:
    """Per shipped config: what one CTA holds and does per k-step (from the plan)."""
    print("## The shipped kernels (from their plans)\n")
    print("| config | CTAs per tile | stages | bytes one CTA's loads move per stage (A + B1 + B2 + SFA + SFB1 + SFB2) | "
          "expect_tx per stage per CTA (bytes landing) | dynamic smem B | TMEM columns used / allocated | per k-step: "
          "tcgen05.cp + block-scaled MMAs |")
    print("|---|---|---|---|---|---|---|---|")
    for p in shipped_plans():
        parts = " + ".join(str(o.load_bytes) for o in p.loads.operands)
        used = p.tmem.acc_stage_cols * p.acc_stages + sum(p.mma.k_steps * p.scales.cols_per_atom for _ in p.loads.scale_operands)
        print(f"| {p.cfg.name} | {p.roles.cta_group} | {p.stages} | {parts} = {p.loads.load_bytes} | {p.loads.expect_tx_bytes} | "
              f"{p.smem.bytes} | {used} / {p.tmem.cols} | {len(p.loads.scale_operands) * p.mma.k_steps} + "
              f"{len(p.mma.streams) * p.mma.k_steps} (K = {p.mma.block_k}) |")
    print()


def problem_bytes(m: int, n: int, k: int) -> dict[str, int]:
    return {"A": m * k // 2, "B1+B2": 2 * n * k // 2, "scales": (m + 2 * n) * k // SF_VEC, "C": 2 * m * n}


def main() -> None:
    per_sm_flops = SOL_PFLOPS * 1e15 / SMS
    print("## Problem: bytes, FLOPs, bounds\n")
    print("| M x N x K | A MB | B1+B2 MB | scales MB | C MB | total MB | GFLOP (2 GEMMs) | HBM time us "
          "(8 TB/s) | FP4 time us (9 PF) | stated SOL us | bytes/SOL TB/s | FLOP/byte |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (m, n, k), sol in zip(SHAPES, SOL_US):
        b = problem_bytes(m, n, k)
        total = sum(b.values())
        flops = 2 * 2 * m * n * k
        print(f"| {m}x{n}x{k} | {b['A'] / 1e6:.2f} | {b['B1+B2'] / 1e6:.2f} | {b['scales'] / 1e6:.2f} | "
              f"{b['C'] / 1e6:.2f} | {total / 1e6:.2f} | {flops / 1e9:.2f} | {total / HBM_TBPS / 1e6:.2f} | "
              f"{flops / FP4_DENSE_PFLOPS / 1e9:.2f} | {sol} | {total / sol / 1e6:.2f} | {flops / total:.0f} |")
    print("\nSOL model check: max(bytes / %.2f TB/s, FLOPs / %.2f PFLOP/s):" % (SOL_TBPS, SOL_PFLOPS))
    for (m, n, k), sol in zip(SHAPES, SOL_US):
        total = sum(problem_bytes(m, n, k).values())
        flops = 4 * m * n * k
        t_mem, t_mma = total / SOL_TBPS / 1e6, flops / SOL_PFLOPS / 1e9
        model = max(t_mem, t_mma)
        print(f"- {m}x{n}x{k}: memory {t_mem:.3f} us, tensor {t_mma:.3f} us -> {model:.3f} us "
              f"({'memory' if t_mem > t_mma else 'tensor'}-bound) vs stated {sol} us ({100 * (model / sol - 1):+.2f} %)")

    print()
    print_shipped_kernels()
    print("## Schedules\n")
    print("Per CTA: MMA time at the SOL tensor rate (6.90 PFLOP/s) / 148 SMs; load time of the CTA's A, B1, B2 and scale "
          f"bytes at {SM_LOAD_GBPS:.0f} GB/s per SM (assumed).  Estimate = waves x max(MMA, load) (perfect overlap, "
          "no prologue/epilogue), floored by the HBM time.\n")
    print("| shape | schedule | CTAs | SMs busy | waves | k-steps | MMAs/k-step/CTA | MB per CTA | MMA us | "
          "load us | GB/s per SM to hide loads under MMA | L2->SM MB total | estimate us | bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (m, n, k), sol in zip(SHAPES, SOL_US):
        hbm_us = sum(problem_bytes(m, n, k).values()) / HBM_TBPS / 1e6
        for name, rows, brows, group, tm, tn, stage_bytes in shipped_schedules() + UNBUILT:
            tiles = (m // tm) * (n // tn)
            ctas = tiles * group
            waves = math.ceil(ctas / SMS)
            steps = k // BLOCK_K
            # per CTA: its rows x (both GEMMs' tn columns) x K, at the per-SM rate
            mma_us = 2 * 2 * rows * tn * k / per_sm_flops * 1e6
            mmas = 2 * BLOCK_K // 64
            # shipped: the plan's bytes per stage (a 2-SM pair loads half of each SFB, multicast); not built: scale
            # tiles come in whole 128-row atoms (a CTA holding 32 or 64 B rows still loads a 128-row SFB atom)
            cta_bytes = (stage_bytes * steps if stage_bytes else
                         rows * k // 2 + 2 * brows * k // 2 + (rows + 2 * max(brows, 128)) * k // SF_VEC)
            load_us = cta_bytes / (SM_LOAD_GBPS * 1e9) * 1e6
            est = max(waves * max(mma_us, load_us), hbm_us)
            bound = "HBM" if est == hbm_us else ("MMA" if mma_us >= load_us else "SM load")
            print(f"| {m}x{n}x{k} | {name} | {ctas} | {min(ctas, SMS)}/{SMS} | {waves} | {steps} | {mmas} | "
                  f"{cta_bytes / 1e6:.2f} | {mma_us:.2f} | {load_us:.2f} | {cta_bytes / mma_us / 1e3:.0f} | "
                  f"{ctas * cta_bytes / 1e6:.0f} | "
                  f"{est:.2f} | {bound} |")


if __name__ == "__main__":
    main()
