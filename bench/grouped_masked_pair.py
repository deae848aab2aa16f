"""Masked decode on CTA pairs: the pair configs against the default call on tune problems of their own.

    python3 bench/grouped_masked_pair.py [--json PATH]

Problems (not the bench's 18): G in {4, 12, 24}, M_max in {192, 256}, N x K in {3072x4096, 4096x1536, 14336x4096},
masked_m uniform in [M_max / 2, M_max] (``bench/grouped_bench.py``'s masked rows), bf16 and FP8 (scales in the
kernel's layout, read in place).  Per problem: the default call (``config=None``) and each pair config, both
``check_tables=False``; CUDA events, median of 5 runs of 10 calls after a warm-up (``grouped_bench.time_us``); weight
GB/s (each group with rows reads its whole B) and its fraction of a device-to-device copy timed in the same run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from grouped_bench import copy_bandwidth, operands, time_us  # noqa: E402

import ptxgen  # noqa: E402
from ptxgen.runtime import grouped  # noqa: E402

PAIRS = {False: "grouped_masked_h100_128x256_c2", True: "grouped_masked_fp8_h100_128x256_c2"}
TUNE = [(g, m, n, k) for g in (4, 12, 24) for m in (192, 256) for n, k in ((3072, 4096), (4096, 1536), (14336, 4096))]


def main(json_path: str | None) -> None:
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_GBps": round(copy_bandwidth(), 1)}
    print(json.dumps(info), flush=True)
    rows_out = []
    for fp8 in (False, True):
        for groups, m_max, n, k in TUNE:
            gen = torch.Generator().manual_seed(groups * m_max + n)
            rows = [int(x) for x in torch.randint(m_max // 2, m_max + 1, (groups,), generator=gen)]
            a, b, sa, sb = operands(groups * m_max, groups, n, k, fp8)
            a = a.reshape(groups, m_max, k)
            if fp8:
                sa, sb = grouped.tma_scale_layout(sa.reshape(groups, m_max, -1)), grouped.tma_scale_layout(sb)
            mm = torch.tensor(rows, dtype=torch.int32, device="cuda")
            out = torch.empty((groups, m_max, n), device="cuda", dtype=torch.bfloat16)
            nbytes = groups * n * k * b.element_size()
            row = {"dtype": "fp8" if fp8 else "bf16", "G": groups, "M_max": m_max, "N": n, "K": k,
                   "default_config": grouped.default_config(grouped.GroupedProblem(
                       "masked", fp8, groups, groups * m_max, m_max, n, k))}
            for label, cfg in (("default", None), ("pair", PAIRS[fp8])):
                ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb, out=out, config=cfg)
                med, lo, hi = time_us(lambda: ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb, out=out,
                                                                  check_tables=False, config=cfg))
                gbps = nbytes / med / 1e3
                row[label] = {"us": round(med, 2), "us_min": round(lo, 2), "us_max": round(hi, 2),
                              "weight_GBps": round(gbps, 1), "of_copy": round(gbps / info["copy_GBps"], 3)}
            row["pair_speedup"] = round(row["default"]["us"] / row["pair"]["us"], 3)
            rows_out.append(row)
            print(json.dumps(row), flush=True)
            del a, b, sa, sb, out
            if json_path:
                with open(json_path, "w") as f:
                    json.dump({"info": info, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None)
