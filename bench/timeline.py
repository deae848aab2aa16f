"""Where a CTA's time goes: per-CTA phase times of an sm_90a GEMM kernel from clock stamps spliced into its PTX
(device only).

The config's PTX is copied with ``%clock64`` / ``%globaltimer`` reads added at fixed points and loaded through
``PTXGEN_OVERRIDE_PTX`` (a directory holding ``<config name>.ptx``; the launch metadata is checked as for any
override).  The first consumer thread (thread 128) stamps kernel entry, the end of the setup (after
``griddepcontrol.wait``), its first and last passed ``full`` wait (the first and the last k-block's data in shared
memory), ``wgmma.wait_group 0`` after its last k-block, its last TMA-store commit, and the end of the kernel; the
producer's electing thread stamps the issue of its first TMA load.  The stamps are stored past D's last row (D is a
view of the first M rows of a taller buffer), so D itself is written as usual and checked against torch.

Phases, SM clock cycles (median over CTAs and launches, with min-max): ``setup`` entry -> after the wait;
``to_first_tma`` entry -> first TMA load issued (producer); ``first_data`` entry -> first ``full`` wait passed;
``kloop`` first -> last ``full`` wait passed; ``mma_drain`` -> ``wgmma.wait_group 0``; ``epilogue`` -> last store
committed (0 for direct stores); ``exit`` -> end of the kernel (the store ring's drain; direct stores themselves).
The steps to the first TMA issue, entry -> (docs/performance.md, "The cycles before the first TMA"): ``to_dec`` the
producer's ``setmaxnreg.dec`` done (thread 0), ``to_inc`` the consumers' ``setmaxnreg.inc`` done (thread 128),
``to_coords`` the first tile's coordinates, ``to_empty`` its first ``empty`` wait passed, ``to_tma_a`` its first TMA
load of A issued (the producer's electing thread).
``start_ns`` / ``end_ns``: each CTA's entry / end by ``%globaltimer`` after the first CTA's entry.

Each launch follows a 256 MiB memset, so its operands come from DRAM as in the benchmarks' rotated inputs.  The
stamps cost a few instructions per k-block; compare configs with each other, not with uninstrumented times.  Meant
for one tile per CTA: with several, ``setup`` and ``to_first_tma`` are the first tile's, and the ``full``-wait
stamps (hence ``first_data``, ``kloop``) and those after them are the last tile's.  The numbers in
docs/performance.md ("Small products: where a CTA's time goes") were taken with these stamps loaded through the
runtime's loader directly; this script, through the override, reproduced them within 2 % on the H100.

Usage: PYTHONPATH=$PWD python3 bench/timeline.py --config NAME_OR_YAML [--config ...] --shape MxNxK [...]
       [--launches 10] [--json F]
"""
import argparse
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

PHASES = ("setup", "to_first_tma", "first_data", "kloop", "mma_drain", "epilogue", "exit")
STEPS = ("to_dec", "to_inc", "to_coords", "to_empty", "to_tma_a")  # stamps 10-14, from entry
SLOT_BYTES = 128  # per CTA: fifteen u64 stamps
#: where each of STEPS is stamped: (the line it follows, its indent, who stores it, what it is)
STEP_POINTS = (
    (r"setmaxnreg\.dec\.sync\.aligned\.u32 \d+;\n", 8, "%thread, 0", "producer setmaxnreg.dec"),
    (r"setmaxnreg\.inc\.sync\.aligned\.u32 \d+;\n", 8, "%thread, 128", "consumer setmaxnreg.inc"),
    (r"mov\.u32 %n_col, %x\d+;\n", 20, "%t, %cluster_id", "producer tile coordinates"),
    (r"// MbarrierWait empty\[stage\][^\n]*\n(?:[^\n]*\n)*?\$WAIT_\d+:\n[^\n]*\n[^\n]*bra \$WAIT_\d+;\n", 24, "%it, 0",
     "producer empty wait"),
    (r"cp\.async\.bulk\.tensor\.2d[^\n]*\[%tmap_a[^\n]*\n", 24, "%it, 0", "TMA load of A"),
)


def _sub(pattern: str, repl: str, text: str, what: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1)
    if n == 0:
        raise ValueError(f"timeline: no {what} in the PTX (an sm_90a GEMM kernel with a producer and consumers?)")
    return out


def instrument(ptx: str) -> str:
    """The kernel's PTX with the stamps (see the module docstring); raises ValueError where a point is missing."""
    ptx = _sub(r"(\.reg \.f32 %acc0_<\d+>;\n)", r"\1    .reg .u64 %ts<10>;\n    .reg .u64 %tsa;\n    .reg .pred %tsp;\n",
               ptx, "accumulator declaration")
    ptx = _sub(r"(mov\.u32 %thread, %tid\.x;\n)", r"\1    mov.u64 %ts0, %clock64;\n    mov.u64 %ts7, %globaltimer;\n",
               ptx, "prologue")
    # the slot: d_ptr + round_up(M * N * 2, 16) bytes (past D, 16-byte aligned for st.global.v2.u64) + ctaid * 128
    ptx = _sub(r"(griddepcontrol\.wait;\n)", r"\1    mov.u64 %ts1, %clock64;\n"
               r"    mul.wide.u32 %tsa, %m, %n;\n    shl.b64 %tsa, %tsa, 1;\n    add.u64 %tsa, %tsa, 15;\n"
               r"    and.b64 %tsa, %tsa, -16;\n    add.u64 %tsa, %tsa, %d_ptr;\n"
               rf"    mul.wide.u32 %ts9, %cta, {SLOT_BYTES};\n    add.u64 %tsa, %tsa, %ts9;\n", ptx, "griddepcontrol.wait")
    ptx = _sub(r"(cp\.async\.bulk\.tensor\.2d[^\n]*\[%tmap_b[^\n]*\n)",
               r"\1                        setp.eq.u32 %tsp, %kb, 0;\n                        mov.u64 %ts9, %clock64;\n"
               r"                        @%tsp st.global.u64 [%tsa+72], %ts9;\n", ptx, "TMA load of B")
    # the steps to the first TMA issue: slots 10-14 (STEPS), each stored once by the thread that passes it
    for slot, (pattern, indent, cond, what) in enumerate(STEP_POINTS, start=10):
        pad = " " * indent
        ptx = _sub(f"({pattern})", rf"\1{pad}mov.u64 %ts9, %clock64;\n{pad}setp.eq.u32 %tsp, {cond};\n"
                   rf"{pad}@%tsp st.global.u64 [%tsa+{8 * slot}], %ts9;\n", ptx, what)
    ptx = _sub(r"(// MbarrierWait full\[stage\] phase=phase \(consumer_wait\)\n(?:[^\n]*\n)*?\$WAIT_\d+:\n[^\n]*\n[^\n]*bra \$WAIT_\d+;\n)",
               r"\1                mov.u64 %ts3, %clock64;\n                setp.eq.u32 %tsp, %kb, 0;\n"
               r"                @%tsp mov.u64 %ts2, %ts3;\n", ptx, "consumer full wait")
    ptx = _sub(r"(\$KB_DONE_\d+:\n\s*// WgmmaWait 0\n\s*wgmma\.wait_group\.sync\.aligned 0;\n)",
               r"\1            mov.u64 %ts4, %clock64;\n            mov.u64 %ts5, %ts4;\n", ptx, "wgmma.wait_group 0 after the k-loop")
    ptx = re.sub(r"(cp\.async\.bulk\.commit_group;\n)", r"\1                        mov.u64 %ts5, %clock64;\n", ptx)
    return _sub(r"(    // ==== teardown\n)", r"\1    mov.u64 %ts6, %clock64;\n    setp.eq.u32 %tsp, %thread, 128;\n"
                r"    mov.u64 %ts8, %globaltimer;\n"
                r"    @%tsp st.global.v2.u64 [%tsa], {%ts0, %ts1};\n    @%tsp st.global.v2.u64 [%tsa+16], {%ts2, %ts3};\n"
                r"    @%tsp st.global.v2.u64 [%tsa+32], {%ts4, %ts5};\n    @%tsp st.global.v2.u64 [%tsa+48], {%ts6, %ts7};\n"
                r"    @%tsp st.global.u64 [%tsa+64], %ts8;\n", ptx, "teardown")


def _q(values: list[float]) -> list[float]:
    return [statistics.median(values), min(values), max(values)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--json")
    args = p.parse_args()

    from ptxgen.build import build, kernel_ptx

    override = Path(tempfile.mkdtemp(prefix="ptxgen-timeline-"))
    for cfg in args.config:
        kernel = build(cfg).kernel
        (override / f"{kernel.launch.name}.ptx").write_text(instrument(kernel_ptx(kernel)))
    os.environ["PTXGEN_OVERRIDE_PTX"] = str(override)  # read when a kernel is loaded, below

    import torch

    from ptxgen.bench import relative_error
    from ptxgen.runtime import prepare

    flush = torch.empty(64 * 2**20, device="cuda", dtype=torch.int32)
    doc = {"device": torch.cuda.get_device_name(), "rows": []}
    for shape in args.shape:
        m, n, k = map(int, shape.split("x"))
        max_ctas = 8 * -(-m // 64) * -(-n // 8) + 1024  # any grid of tiles >= 64x8, split up to 8 ways
        extra_rows = -(-(max_ctas * SLOT_BYTES + 16) // (2 * n)) + 1  # room for every CTA's slot past D
        for cfg in args.config:
            stamps = []
            for it in range(args.launches + 2):
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                buf = torch.full((m + extra_rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                launch = prepare(a, b, buf[:m], cfg)
                if launch.grid_x > max_ctas:
                    raise ValueError(f"{cfg} {shape}: grid of {launch.grid_x} CTAs, stamp room for {max_ctas}")
                flush.zero_()
                launch.launch()
                torch.cuda.synchronize()
                err = relative_error(buf[:m], a.float() @ b.float().T)
                if not err < 1e-2:
                    raise AssertionError(f"{cfg} {shape}: rel err {err} (the stamps must not touch D)")
                if it >= 2:  # the first two launches load and warm the kernel
                    base = -(-m * n * 2 // 16) * 16  # the kernel's slot base, bytes after D's first element
                    raw = buf.view(-1).view(torch.uint8)[base: base + launch.grid_x * SLOT_BYTES].contiguous()
                    stamps.append(raw.view(torch.int64).view(launch.grid_x, SLOT_BYTES // 8)[:, :15].tolist())
            steps = {st: [s[10 + i] - s[0] for launch_stamps in stamps for s in launch_stamps]
                     for i, st in enumerate(STEPS)}
            per = {ph: [] for ph in PHASES}
            cta, starts, ends = [], [], []
            for launch_stamps in stamps:
                g0 = min(s[7] for s in launch_stamps)
                for s in launch_stamps:
                    for ph, v in zip(PHASES, (s[1] - s[0], s[9] - s[0], s[2] - s[0], s[3] - s[2], s[4] - s[3],
                                              s[5] - s[4], s[6] - s[5])):
                        per[ph].append(v)
                    cta.append(s[6] - s[0])
                    starts.append(s[7] - g0)
                    ends.append(s[8] - g0)
            row = {"config": cfg, "shape": shape, "ctas": len(stamps[0]),
                   **{ph: _q(v) for ph, v in per.items()}, **{st: _q(v) for st, v in steps.items()},
                   "cta_cycles": _q(cta), "start_ns": _q(starts), "end_ns": _q(ends)}
            doc["rows"].append(row)
            print(f"{cfg} {shape} ({row['ctas']} CTAs): " + ", ".join(
                f"{key} {row[key][0]:.0f} [{row[key][1]:.0f}-{row[key][2]:.0f}]"
                for key in (*PHASES, *STEPS, "cta_cycles", "start_ns", "end_ns")), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
