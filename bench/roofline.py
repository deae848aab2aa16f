"""Small-M GEMMs against the memory roofline (device only).

For M <= 512 a GEMM is mostly a read of B (``N * K * 2`` bytes).  This script times, per shape, a prepared launch
of each ``--config`` and ``torch.matmul(a, b.T, out=d)``, all sides alternating call by call on the same inputs
rotated past L2 (``ptxgen.bench.time_interleaved``), ``--repeat`` times; each side is first checked once against an
fp32 reference on a NaN-poisoned output.  It also times a device-to-device copy of a ``--copy-mib`` tensor with CUDA
events (median of 20), the bandwidth a read of B can hope for.

Reported per shape and side: the median of the repeats' medians (ms), their min and max, and the bandwidth
``2 * (M*K + N*K + M*N) / t`` (bytes read and written) as a fraction of the copy's ``2 * size / t`` (read and
written).

Usage: PYTHONPATH=$PWD python3 bench/roofline.py [--suite gemm --half tune --max-m 512 | --shape MxNxK ...]
       --config NAME_OR_YAML ... [--repeat 5] [--iters 20] [--json F]
"""
import argparse
import json
import math
import statistics

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, relative_error, time_interleaved, warm_gpu
from ptxgen.runtime import driver, prepare


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

        out += [s.mnk for s in load(args.suite).half(args.half) if s.m <= args.max_m and s.k % 8 == 0]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--suite")
    p.add_argument("--half", default="tune")
    p.add_argument("--max-m", type=int, default=512)
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy-mib", type=int, default=1024)
    p.add_argument("--json")
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
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
        for c in args.config:
            label = c.split("/")[-1].removesuffix(".yaml")
            try:
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


if __name__ == "__main__":
    main()
