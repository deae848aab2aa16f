"""Chains of back-to-back ``ptxgen.gemm`` calls, with and without programmatic dependent launch (PDL).

    PYTHONPATH=$PWD python3 bench/pdl_bench.py run [--half report] [--max-m 256] [--chain 20] [--runs 7] --json OUT
    PYTHONPATH=$PWD python3 bench/pdl_bench.py compare OFF.json ON.json [OFF2.json ON2.json ...]

``run`` times, per shape of the GEMM suite's half (M <= ``--max-m``; 0: all), a chain of ``--chain`` calls of one
side enqueued back to back on one stream between one pair of CUDA events (what a model's loop of GEMMs sees: no
event between the calls), each call on its own input set (rotated past twice the L2), for ``ptxgen.gemm`` (the
chooser's config) and ``torch.matmul(a, b.T, out=d)``; the sides alternate chain by chain, ``--runs`` chains each,
median per call and the spread (min, max).  Then the same chain of each side captured in one CUDA graph
(:func:`ptxgen.bench.time_graphs`, ``--runs`` replays each, alternating): whether a capture keeps the
programmatic edges shows as the chain's gain surviving in the replay.  PDL is what the process's ``PTXGEN_PDL``
says (read when a kernel is loaded): run it once with ``PTXGEN_PDL=0`` and once with ``PTXGEN_PDL=1``,
alternating, and ``compare`` the files in pairs (torch's chain is the reference of each process: ours / torch per
file, then PDL on against off).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from ptxgen import bench as B
from ptxgen import suites


def chain_ms(fn, n_sets: int, chain: int) -> float:
    """Per-call time (ms) of ``chain`` calls ``fn(set)`` enqueued back to back between one pair of events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(chain):
        fn(i % n_sets)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / chain


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def run(args) -> None:
    import torch

    import ptxgen

    shapes = [s for s in suites.load("gemm").half(args.half) if args.max_m == 0 or s.m <= args.max_m]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    B.warm_gpu()
    rows = []
    for s in shapes:
        m, n, k = s.m, s.n, s.k
        set_bytes = 2 * (m * k + n * k + m * n)
        n_sets = B.input_sets_needed(set_bytes, props.L2_cache_size, torch.cuda.mem_get_info()[0])
        sets = [(B._random_bf16(m, k, dev), B._random_bf16(n, k, dev), torch.empty(m, n, dtype=torch.bfloat16,
                                                                                    device=dev)) for _ in range(n_sets)]
        sides = {"ptxgen": lambda i: ptxgen.gemm(sets[i][0], sets[i][1], out=sets[i][2]),
                 "torch": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=sets[i][2])}
        for fn in sides.values():  # warm-up: the kernel loaded, the workspace allocated
            for i in range(args.chain):
                fn(i % n_sets)
        torch.cuda.synchronize()
        samples = {name: [] for name in sides}
        order = list(sides)
        for r in range(args.runs):
            for name in (order if r % 2 == 0 else order[::-1]):
                samples[name].append(chain_ms(sides[name], n_sets, args.chain))
        row = {"m": m, "n": n, "k": k, "label": s.label, "kind": s.kind}
        for name, v in samples.items():
            row[name] = {"ms": statistics.median(v), "min": min(v), "max": max(v), "runs": v}
        row["ratio"] = row["torch"]["ms"] / row["ptxgen"]["ms"]
        row["graph"] = B.time_graphs(sides, n_sets, calls=args.chain, replays=args.runs)
        rows.append(row)
        print(f"{m}x{n}x{k}: ptxgen {row['ptxgen']['ms'] * 1e3:8.1f} us  torch {row['torch']['ms'] * 1e3:8.1f} us"
              f"  torch/ours {row['ratio']:.3f}  graph: ptxgen {_us(row['graph'].get('ptxgen'))} us"
              f"  torch {_us(row['graph'].get('torch'))} us", flush=True)
        del sets
        torch.cuda.empty_cache()
    doc = {"device": props.name, "torch": torch.__version__, "pdl_knob": os.environ.get("PTXGEN_PDL", "(unset)"),
           "chain": args.chain, "runs": args.runs, "half": args.half, "max_m": args.max_m, "rows": rows,
           "geomean_ratio": B.geomean(r["ratio"] for r in rows)}
    print(f"geomean torch/ours {doc['geomean_ratio']:.3f} over {len(rows)} shapes (PTXGEN_PDL={doc['pdl_knob']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


def compare(paths: list[str]) -> None:
    """Files in (PDL off, PDL on) pairs: per shape ours with PDL on against off (per-call time), and torch/ours."""
    docs = [json.load(open(p)) for p in paths]
    if len(docs) % 2:
        raise SystemExit("compare takes files in (off, on) pairs")
    pairs = list(zip(docs[::2], docs[1::2]))
    print("shape              " + "  ".join(f"pair {i + 1}: off/on  t/o off  t/o on  graph off/on"
                                           for i in range(len(pairs))))
    gains = [[] for _ in pairs]
    graph_gains = [[] for _ in pairs]
    for j, row in enumerate(pairs[0][0]["rows"]):
        cells = []
        for i, (off, on) in enumerate(pairs):
            a, b = off["rows"][j], on["rows"][j]
            g = a["ptxgen"]["ms"] / b["ptxgen"]["ms"]
            gains[i].append(g)
            ga, gb = a.get("graph", {}).get("ptxgen"), b.get("graph", {}).get("ptxgen")
            gg = ga / gb if ga and gb else None
            if gg is not None:
                graph_gains[i].append(gg)
            graph_cell = f"{'-':>12}" if gg is None else f"{gg:12.3f}"
            cells.append(f"{g:14.3f}  {a['ratio']:7.3f}  {b['ratio']:6.3f}  {graph_cell}")
        print(f"{row['m']}x{row['n']}x{row['k']:<8}" + "  ".join(cells))
    for i, (off, on) in enumerate(pairs):
        graph = f"{B.geomean(graph_gains[i]):.3f}" if graph_gains[i] else "-"
        print(f"pair {i + 1}: ours off/on geomean {B.geomean(gains[i]):.3f} (graph replay {graph}); "
              f"torch/ours geomean off {off['geomean_ratio']:.3f}, on {on['geomean_ratio']:.3f} ({on['device']})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--half", default="report", choices=("report", "tune", "all"))
    r.add_argument("--max-m", type=int, default=256, help="shapes with M <= this (0: all)")
    r.add_argument("--chain", type=int, default=20)
    r.add_argument("--runs", type=int, default=7)
    r.add_argument("--json")
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args)
    else:
        compare(args.files)


if __name__ == "__main__":
    sys.exit(main())
