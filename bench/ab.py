"""A/B/n of kernels on the GPU without torch in the loop (device only).

Every side is timed per call in alternating rounds (``ptxgen.bench.time_interleaved``) on the same inputs, rotated
past L2, so clock and thermal drift hit all sides alike and the ratio between two kernels is steadier than two
separate ratios to torch (which move 2-5 % between runs on the H100; docs/performance.md, "Method").  Each side is first
checked once against an fp32 reference on a NaN-poisoned output.

Sides are either configs (``--config``, prepared launches, the first is the base) or, with ``--rewrite R``, each
``--config`` against an IR rewrite of itself (``ptxgen.ir.rewrite``; both loaded with ``kernel_call``):
  drain    the exit drain ``cp.async.bulk.wait_group 0`` (every write done) instead of ``wait_group.read 0``
  release  every consumer warp's elected lane arrives on ``empty`` (count x4) instead of warp 0's only
           (one-CTA configs: a pair's remote arrivals would need the peer's count changed too)
  elect    the sm_90a TMA store issued under ``elect.sync`` instead of by lane 0
  novote   (split-K configs with ``SplitKPlan.vote``) the fixup's verdict without its ``vote.sync.any``
  nosetmaxnreg  both ``setmaxnreg`` dropped: every warp keeps the launch's ``.maxnreg``
  store_first, store_after_full_wait, wait_before_store  (``epilogue.overlap`` configs) the previous tile's store
           before the first k-block, between its ``full`` wait and its wgmma, or after its wgmma completed

Usage: PYTHONPATH=$PWD python3 bench/ab.py --config A [--config B ...] --shape MxNxK ... [--rewrite R]
       [--iters N] [--repeat R].  Prints per shape and repeat each side's median ms and its time relative to the first.
"""
import argparse
import math
from dataclasses import replace

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, relative_error, time_interleaved, warm_gpu
from ptxgen.build import build
from ptxgen.ir import expr as ex
from ptxgen.ir import ops as O
from ptxgen.runtime import driver, prepare
from ptxgen.runtime.api import kernel_call
from ptxgen.ir.rewrite import rewrite

WARP_IN_WG_IS_0 = ex.Bin("eq", ex.Bin("mod", ex.Sreg("warp"), ex.Const(4)), ex.Const(0))


def full_drain(kernel):
    return rewrite(kernel, lambda op: replace(op, read=False) if isinstance(op, O.BulkWaitGroup) and op.n == 0 else None)


def per_warp_release(kernel):
    assert kernel.cluster_size == 1, "release rewrite: one-CTA configs only"

    def fn(op):
        if isinstance(op, O.MbarrierInit) and op.bar.name == "empty":
            return replace(op, count=ex.Const(op.count.value * 4))
        if (isinstance(op, O.If) and op.cond == WARP_IN_WG_IS_0 and len(op.then) == 1 and isinstance(op.then[0], O.Elect)
                and all(isinstance(x, O.MbarrierArrive) and x.bar.name == "empty" for x in op.then[0].body)):
            return op.then
        return None
    return rewrite(kernel, fn)


def elect_sync_store(kernel):
    return rewrite(kernel, lambda op: replace(op, fixed=False) if isinstance(op, O.Elect) and op.fixed else None)


DEFERRED_STORE = ex.Bin("ne", ex.Var("tc"), ex.Const(0))  # epilogue.overlap: the previous tile's store


def move_deferred_store(kernel, place):
    """epilogue.overlap kernels: the tile loop's deferred store moved to ``place(body)`` (an index into the tile
    loop's body without the store); ``place`` returning None inserts ``wgmma.wait_group 0`` before it instead."""
    def fn(op):
        if not isinstance(op, O.For) or not any(isinstance(x, O.If) and x.cond == DEFERRED_STORE for x in op.body):
            return None
        body = list(op.body)
        at = next(i for i, x in enumerate(body) if isinstance(x, O.If) and x.cond == DEFERRED_STORE)
        store = body.pop(at)
        to = place(body)
        body[at:at] = [O.WgmmaWait(0), store] if to is None else []
        if to is not None:
            body.insert(to, store)
        return replace(op, body=tuple(body))
    return rewrite(kernel, fn)


def _first(kind, pred=lambda op: True):
    return lambda body: next(i for i, x in enumerate(body) if isinstance(x, kind) and pred(x))


REWRITES = {
    "drain": full_drain, "release": per_warp_release, "elect": elect_sync_store,
    # split-K (docs/performance.md, "The pair's last-wave k-loop"): the verdict as bar.red.popc leaves it, without the
    # vote.sync.any that makes it warp-uniform to ptxas (the kernel before the vote)
    "novote": lambda k: rewrite(k, lambda op: () if isinstance(op, O.VoteAny) else None),
    # the roles' register moves (docs/performance.md, "The cycles before the first TMA"): both setmaxnreg dropped, every
    # warp keeping the launch's .maxnreg (enough for the tiles with small accumulators: ptxas spills nothing there)
    "nosetmaxnreg": lambda k: rewrite(k, lambda op: () if isinstance(op, O.SetMaxNReg) else None),
    # epilogue.overlap (docs/performance.md, "Overlapped epilogue"): the store before the first k-block (no overlap), after its full wait,
    # or after its wgmma completed (issued, then waited: as slow as the overlap)
    "store_first": lambda k: move_deferred_store(k, _first(O.Let, lambda x: x.var == "kb")),
    "store_after_full_wait": lambda k: move_deferred_store(k, lambda body: _first(O.MbarrierWait)(body) + 1),
    "wait_before_store": lambda k: move_deferred_store(k, lambda body: None),
}


def sides(configs, rewrite_name, a, b, d):
    """label -> per-set launch callables."""
    sets = range(len(a))
    if rewrite_name is None:
        return {c.split("/")[-1].removesuffix(".yaml"): [prepare(a[i], b[i], d[i], c).launch for i in sets]
                for c in configs}
    out = {}
    for c in configs:
        shipped = build(c).kernel
        variant = REWRITES[rewrite_name](shipped)
        assert variant != shipped, f"{rewrite_name}: nothing to rewrite in {c}"
        for label, kernel in ((c, shipped), (f"{c}+{rewrite_name}", variant)):
            call = kernel_call(kernel, a[0], b[0], d[0])
            out[label] = [(lambda i=i, call=call: call(a[i], b[i], d[i])) for i in sets]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--rewrite", choices=sorted(REWRITES))
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    for shape in args.shape:
        m, n, k = map(int, shape.split("x"))
        free, _ = torch.cuda.mem_get_info(dev)
        n_sets = input_sets_needed(2 * (m * k + n * k + 2 * m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(n_sets)]
        b = [_random_bf16(n, k, dev) for _ in range(n_sets)]
        d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        launches = sides(args.config, args.rewrite, a, b, d)
        ref = a[0].float() @ b[0].float().T
        for label, ls in launches.items():
            d[0].fill_(math.nan)
            ls[0]()
            torch.cuda.synchronize()
            err = relative_error(d[0], ref)
            assert err < 1e-2, f"{label} {shape}: rel err {err}"  # NaN fails too
        for r in range(args.repeat):
            t = time_interleaved({label: (lambda i, ls=ls: ls[i]()) for label, ls in launches.items()}, n_sets,
                                 warmup=10, iters=args.iters)
            base = next(iter(t.values()))
            print(f"{shape} run {r}: " + ", ".join(f"{label} {ms:.4f} ms ({ms / base:.3f})" for label, ms in t.items()),
                  flush=True)
        del a, b, d, launches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
