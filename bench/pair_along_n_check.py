"""GPU correctness of the sm_90a CTA pairs along N through the public call (device only).

``python3 bench/pair_along_n_check.py [--json F] CONFIG ...``: per config and shape, ``ptxgen.gemm(a, b, out=d,
config=...)`` into a NaN-poisoned ``d`` against the fp32 product, and once with ``epilogue="relu(acc + bias[col])"``;
prints the relative Frobenius error (bf16: must be < 1e-2) and exits non-zero on a failure.  Shapes: tails of the
pair (an odd n-block count, N not a multiple of two n-blocks, the last pair's peer past N), M = 1, K % 8 != 0 (the
public call's staging), one wave of the pair at M = 128.
"""
import argparse
import json
import sys

import torch

import ptxgen

SHAPES = ((300, 520, 264), (128, 10240, 5120), (200, 1000, 4096), (1, 400, 72), (129, 1200, 100), (257, 576, 192),
          (1, 1, 64), (2048, 2000, 1024), (4096, 4096, 512))


def rel(out, ref) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("configs", nargs="+")
    p.add_argument("--json")
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows, bad = [], 0
    for name in args.configs:
        for m, n, k in SHAPES:
            a = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).bfloat16()
            b = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).bfloat16()
            bias = torch.randn(n, device="cuda", generator=g).bfloat16()
            ref = a.float() @ b.float().T
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            ptxgen.gemm(a, b, out=d, config=name)
            e = torch.full_like(d, float("nan"))
            ptxgen.gemm(a, b, out=e, config=name, epilogue="relu(acc + bias[col])", bias=bias)
            torch.cuda.synchronize()
            err, err_epi = rel(d, ref), rel(e, torch.relu(ref + bias.float()))
            ok = err < 1e-2 and err_epi < 1e-2 and not d.isnan().any().item() and not e.isnan().any().item()
            bad += not ok
            rows.append({"config": name, "m": m, "n": n, "k": k, "rel_fro": err, "rel_fro_epilogue": err_epi, "ok": ok})
            print(f"{name} {m}x{n}x{k}: rel {err:.2e}, relu(acc + bias) {err_epi:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
