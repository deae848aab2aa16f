"""The residual through the CD staging ring on split-K configs, against its per-pair loads (device only).

    PYTHONPATH=$PWD python3 bench/staged_splitk.py [--suite gemm --half tune] [--shape MxNxK ...] [--json F]

Per shape whose fused ``acc + residual`` call takes a split-K config (the chooser's pick, ``api.fused_config``):
torch eager ``torch.matmul(a, b.T) + residual``, ``ptxgen.gemm(..., epilogue="acc + residual")`` on the pick (the
residual staged: its boxes TMA-loaded by the tile's last arriver into the CD staging ring, read with ``ldmatrix``),
and on the pick with ``epilogue.stmatrix: false`` (not staged: per-pair ``ld.global`` of the residual, the path
split-K configs took before; its D staging through ``st.shared`` measured 0-0.7 % slower than ``stmatrix``,
docs/performance.md "stmatrix staging").  The three sides alternate call by call on input sets rotated past L2
(``ptxgen.bench.time_interleaved``), ``--runs`` runs of ``--iters`` calls; each side checked once against an fp32
reference on a NaN-poisoned D.  Reported per shape: the median over runs of each side's median (ms), and the
ratios with their spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import torch

import ptxgen
from ptxgen.bench import input_sets_needed, relative_error, time_interleaved, warm_gpu
from ptxgen.config import load_config
from ptxgen.ir import epilogue as E
from ptxgen.runtime import driver
from ptxgen.runtime.api import _GEMM, fused_config

EXPR = "acc + residual"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite")
    ap.add_argument("--half", default="tune")
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    info = driver.device_info(0)
    shapes = [tuple(map(int, s.split("x"))) for s in args.shape]
    if args.suite:
        from ptxgen.suites import load

        shapes += [s.mnk for s in load(args.suite).half(args.half)]
    expr = E.parse(EXPR)
    warm_gpu()
    rows = []
    name = torch.cuda.get_device_name(0)
    print(f"device: {name}")
    for m, n, k in shapes:
        pick = fused_config(_GEMM, None, expr, m, n, k, info)
        if pick.schedule.split_k == 1:
            continue
        base = pick.name
        pair_loads = load_config(base).replace(**{"name": f"{base}_pairloads", "epilogue.stmatrix": False})
        configs = {"staged": base, "pair loads": pair_loads}
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        set_bytes = 2 * (m * k + n * k + 2 * m * n)
        sets = input_sets_needed(set_bytes, info.l2_bytes, torch.cuda.mem_get_info()[0])
        data = []
        for _ in range(sets):
            a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
            b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
            r = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
            data.append(SimpleNamespace(a=a, b=b, r=r, out=torch.empty(m, n, device="cuda").bfloat16()))
        want = data[0].a.float() @ data[0].b.float().T + data[0].r.float()
        for label, cfg in configs.items():
            d = data[0].out.fill_(float("nan"))
            ptxgen.gemm(data[0].a, data[0].b, out=d, config=cfg, epilogue=EXPR, residual=data[0].r)
            err = relative_error(d.float(), want)
            assert err < 1e-2 and not torch.isnan(d).any(), f"{label} {m}x{n}x{k}: error {err}"
        fns = {"eager": lambda i: torch.matmul(data[i].a, data[i].b.T) + data[i].r}
        for label, cfg in configs.items():
            fns[label] = (lambda cfg: lambda i: ptxgen.gemm(data[i].a, data[i].b, out=data[i].out, config=cfg,
                                                            epilogue=EXPR, residual=data[i].r))(cfg)
        runs = [time_interleaved(fns, sets, warmup=5, iters=args.iters) for _ in range(args.runs)]
        med = {side: statistics.median(r[side] for r in runs) for side in fns}
        gain = [r["pair loads"] / r["staged"] for r in runs]
        row = dict(m=m, n=n, k=k, config=base, eager_ms=med["eager"], staged_ms=med["staged"],
                   pair_loads_ms=med["pair loads"], staged_gain=statistics.median(gain), gain_min=min(gain),
                   gain_max=max(gain), staged_vs_eager=med["eager"] / med["staged"],
                   pair_loads_vs_eager=med["eager"] / med["pair loads"])
        rows.append(row)
        print(f"{m}x{n}x{k} {base}: eager {med['eager']:.4f} staged {med['staged']:.4f} pair loads "
              f"{med['pair loads']:.4f} ms; staged / pair-load speed {row['staged_gain']:.3f} "
              f"({row['gain_min']:.3f}-{row['gain_max']:.3f}); vs eager {row['staged_vs_eager']:.3f} / "
              f"{row['pair_loads_vs_eager']:.3f}", flush=True)
    if rows:
        g = statistics.geometric_mean(r["staged_gain"] for r in rows)
        print(f"geomean staged / pair-load speed {g:.3f} over {len(rows)} shapes")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "expr": EXPR, "runs": args.runs, "iters": args.iters,
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
