"""Split-K under CUDA-graph replay: one workspace per capture against one per captured call (device only).

``PYTHONPATH=$PWD python3 bench/graph_workspace.py --shape MxNxK ... [--config NAME] [--runs 5] [--json F]``: per
shape, ``ptxgen.gemm`` (the chooser's config, or ``--config``) and ``torch.matmul(a, b.T, out=d)``, each captured as
``ptxgen.bench.GRAPH_CALLS`` calls over input sets rotated past L2 into one CUDA graph and replayed
(:func:`ptxgen.bench.time_graphs`), ``--runs`` times; per side the median per-call time over the runs and its
min-max.  Three graph sides:

* ``shared``: the runtime as shipped (``split_k_workspace``: one workspace per capture, counters zero-filled);
* ``per_call``: every captured call allocates a zero-filled workspace of its own, as the runtime did before
  (``capture_of`` answers a new id per call, ``_new_workspace`` fills the whole buffer): each replay runs one
  fill of the whole workspace per call, and each call's partials land in memory no other call touched;
* ``torch``.

Outputs of both ptxgen sides are checked against an fp32 reference after the replays (no NaN, relative error
< 1e-2).
"""
import argparse
import contextlib
import itertools
import json
import statistics as st

import torch

import ptxgen
from ptxgen.bench import GRAPH_CALLS, input_sets_needed, relative_error, time_graphs, warm_gpu
from ptxgen.cli import _shape as shape  # the CLI's MxNxK parser and its errors
from ptxgen.runtime import api, driver


#: capture ids answered to the ``per_call`` side, one per captured call, above any the driver gives here
_PER_CALL_IDS = itertools.count(1 << 40)


@contextlib.contextmanager
def per_call_workspaces():
    """The runtime's earlier rule inside the block: a captured call gets a whole zero-filled workspace of its own."""
    ids = _PER_CALL_IDS
    capture_of, new = api.capture_of, api._new_workspace
    api.capture_of = lambda device, stream: next(ids) if torch.cuda.is_current_stream_capturing() else None
    api._new_workspace = lambda nbytes, counters, device: torch.zeros(nbytes, dtype=torch.uint8, device=device)
    try:
        yield
    finally:
        api.capture_of, api._new_workspace = capture_of, new


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", type=shape, required=True)
    p.add_argument("--config", default=None, help="shipped name or YAML path (default: the chooser's)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    warm_gpu()
    info = driver.device_info(torch.cuda.current_device())
    rows = []
    for m, n, k in args.shape:
        free, _ = torch.cuda.mem_get_info()
        n_sets = input_sets_needed(2 * (m * k + n * k + 3 * m * n), info.l2_bytes, free)
        a = [torch.randn(m, k, device="cuda").bfloat16() for _ in range(n_sets)]
        b = [torch.randn(n, k, device="cuda").bfloat16() for _ in range(n_sets)]
        outs = {side: [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(n_sets)]
                for side in ("shared", "per_call", "torch")}

        def shared(i):
            return ptxgen.gemm(a[i], b[i], out=outs["shared"][i], config=args.config)

        def per_call(i):
            with per_call_workspaces():
                return ptxgen.gemm(a[i], b[i], out=outs["per_call"][i], config=args.config)

        def torch_call(i):
            return torch.matmul(a[i], b[i].T, out=outs["torch"][i])

        runs = [time_graphs({"shared": shared, "per_call": per_call, "torch": torch_call}, n_sets)
                for _ in range(args.runs)]
        torch.cuda.synchronize()
        errors = {}
        for side in ("shared", "per_call"):
            for i in range(min(n_sets, GRAPH_CALLS)):
                out = outs[side][i]
                err = float("inf") if torch.isnan(out).any() else relative_error(out, a[i].float() @ b[i].float().T)
                errors[side] = max(errors.get(side, 0.0), err)
        kernel = api.loaded_kernel(api.resolve_config(args.config, m, n, k, torch.cuda.current_device()),
                                   torch.cuda.current_device()).spec.name
        row = {"m": m, "n": n, "k": k, "kernel": kernel, "input_sets": n_sets, "max_rel_err": errors}
        for side in ("shared", "per_call", "torch"):
            values = [r[side] for r in runs]
            row[f"{side}_us"] = [v * 1e3 for v in values]
            print(f"{m}x{n}x{k} {kernel:>20} {side:>8}: {st.median(values) * 1e3:8.1f} us "
                  f"[{min(values) * 1e3:.1f}-{max(values) * 1e3:.1f}]", flush=True)
        med = {side: st.median(row[f"{side}_us"]) for side in ("shared", "per_call", "torch")}
        print(f"{m}x{n}x{k}: torch/shared {med['torch'] / med['shared']:.3f}  torch/per_call "
              f"{med['torch'] / med['per_call']:.3f}  max error {errors}", flush=True)
        if max(errors.values()) >= 1e-2:
            raise SystemExit(f"{m}x{n}x{k}: wrong output under graph replay: {errors}")
        rows.append(row)
        del a, b, outs
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
