"""Every candidate config on every shape of a suite half, against torch and the memory roofline (device only).

Times, per shape, a prepared launch of each config (``--shipped``: every shipped config the chooser may pick, see
``ptxgen.runtime.choose.candidates``; ``--config``: more, by name or YAML path) and ``torch.matmul(a, b.T, out=d)``,
all sides alternating call by call on the same inputs rotated past L2 (``ptxgen.bench.time_interleaved``),
``--repeat`` times; each side is first checked once against an fp32 reference on a NaN-poisoned output.  A shape
whose K is not a multiple of 8 (no prepared launch) times the public call ``ptxgen.gemm`` of each config instead
(the same staging copy on every side).  For M <= 512 a GEMM is mostly a read of B (``N * K * 2`` bytes), so the
script also times a device-to-device copy of a ``--copy-mib`` tensor with CUDA events (median of 20), the
bandwidth such a read can hope for.

``--table F`` writes the tuned table of the shapes timed (``ptxgen.runtime.choose.table_doc``: per shape the fastest
shipped config and every shipped config's time); ``ptxgen tune`` writes the same table without torch or the copy.

Reported per shape and side: the median of the repeats' medians (ms), their min and max, and the bandwidth
``2 * (M*K + N*K + M*N) / t`` (bytes read and written) as a fraction of the copy's ``2 * size / t`` (read and
written).

Usage: PYTHONPATH=$PWD python3 bench/survey.py [--suite gemm --half tune [--max-m 512] | --shape MxNxK ...]
       [--shipped] [--config NAME_OR_YAML ...] [--repeat 5] [--iters 20] [--json F] [--table F]
"""
import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, relative_error, time_interleaved, warm_gpu
import ptxgen
from ptxgen.runtime import choose, driver, prepare


def copy_bandwidth(mib: int, runs: int = 20) -> dict:
    """Device-to-device copy of ``mib`` MiB: median ms and GB/s counting the bytes read and written."""
    n = mib * 2**20 // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    ms = statistics.median(times)
    return {"mib": mib, "ms": ms, "min_ms": min(times), "max_ms": max(times), "gbps_rw": 2 * n * 2 / (ms * 1e-3) / 1e9}


def shapes_from(args) -> list[tuple[int, int, int]]:
    out = [tuple(map(int, s.split("x"))) for s in args.shape]
    if args.suite:
        from ptxgen.suites import load

        out += [s.mnk for s in load(args.suite).half(args.half) if s.m <= args.max_m]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--suite")
    p.add_argument("--half", default="tune")
    p.add_argument("--max-m", type=int, default=1 << 30)
    p.add_argument("--shipped", action="store_true")
    p.add_argument("--config", action="append", default=[])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy-mib", type=int, default=1024)
    p.add_argument("--json")
    p.add_argument("--table")
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    arch = choose.ARCH_OF_CAPABILITY[tuple(info.capability)]
    shipped = [c.name for c in choose.candidates(arch)] if args.shipped else []
    configs = shipped + [c for c in args.config if c not in shipped]
    doc = {"device": torch.cuda.get_device_name(dev), "copy": copy_bandwidth(args.copy_mib), "rows": []}
    copy_gbps = doc["copy"]["gbps_rw"]
    print(f"device {doc['device']}; copy of {args.copy_mib} MiB: {doc['copy']['ms']:.3f} ms, {copy_gbps:.0f} GB/s "
          "(read + written)", flush=True)
    for m, n, k in shapes_from(args):
        free, _ = torch.cuda.mem_get_info(dev)
        n_sets = input_sets_needed(2 * (m * k + n * k + m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(n_sets)]
        b = [_random_bf16(n, k, dev) for _ in range(n_sets)]
        d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        ref = a[0].float() @ b[0].float().T
        fns = {"torch": lambda i: torch.matmul(a[i], b[i].T, out=d[i])}
        errors = {}
        for c in configs:
            label = c.split("/")[-1].removesuffix(".yaml")
            try:
                if k % 8:
                    launches = [lambda i=i, c=c: ptxgen.gemm(a[i], b[i], out=d[i], config=c) for i in range(n_sets)]
                else:
                    launches = [prepare(a[i], b[i], d[i], c).launch for i in range(n_sets)]
                d[0].fill_(math.nan)
                launches[0]()
                torch.cuda.synchronize()
                err = relative_error(d[0], ref)
                if not err < 1e-2:
                    raise AssertionError(f"rel err {err}")
            except Exception as exc:  # a config that cannot run this shape is reported, not fatal
                errors[label] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            fns[label] = lambda i, ls=launches: ls[i]()
        del ref
        runs = {label: [] for label in fns}
        for _ in range(args.repeat):
            for label, ms in time_interleaved(fns, n_sets, warmup=3, iters=args.iters).items():
                runs[label].append(ms)
        nbytes = 2 * (m * k + n * k + m * n)
        row = {"m": m, "n": n, "k": k, "bytes": nbytes, "errors": errors, "sides": {}}
        t_torch = statistics.median(runs["torch"])
        for label, v in runs.items():
            ms = statistics.median(v)
            row["sides"][label] = {"ms": ms, "min": min(v), "max": max(v), "runs": v,
                                   "gbps": nbytes / (ms * 1e-3) / 1e9,
                                   "of_copy": nbytes / (ms * 1e-3) / 1e9 / copy_gbps, "ratio": t_torch / ms}
        best = min((s for s in row["sides"] if s != "torch"), key=lambda s: row["sides"][s]["ms"], default=None)
        row["best"] = best
        ours = {s: v["ms"] for s, v in row["sides"].items() if s in shipped}
        row["best_shipped"] = min(ours, key=ours.get, default=None)
        doc["rows"].append(row)
        print(f"{m}x{n}x{k}: torch {t_torch * 1e3:.1f} us ({row['sides']['torch']['of_copy']:.2f} of copy); "
              + ", ".join(f"{s} {v['ms'] * 1e3:.1f} [{v['min'] * 1e3:.1f}-{v['max'] * 1e3:.1f}] ({v['ratio']:.2f}x, "
                          f"{v['of_copy']:.2f})" for s, v in row["sides"].items() if s != "torch")
              + (f"; failed: {errors}" if errors else ""), flush=True)
        del a, b, d, fns
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.table:
        entries = [{"m": r["m"], "n": r["n"], "k": r["k"], "config": r["best_shipped"],
                    "ms": round(r["sides"][r["best_shipped"]]["ms"], 4),
                    "all_ms": {s: round(r["sides"][s]["ms"], 4) for s in shipped if s in r["sides"]}}
                   for r in doc["rows"] if r["best_shipped"]]
        choose.write_table(Path(args.table), choose.table_doc(
            arch, doc["device"], entries, f"bench/survey.py (prepared launches alternating call by call, median of "
            f"{args.repeat} runs of {args.iters} calls, L2-rotated inputs)"))


if __name__ == "__main__":
    main()
