"""PTX leanness stats of the shipped kernels: K-loop instructions per MMA, registers, spills, SASS counts.

For every ``generated/<name>.ptx`` (or the files given), the steady-state K loop is the ``$KB_LOOP_n`` ..
``$KB_DONE_n`` region that contains the MMAs (``tcgen05.mma`` / ``wgmma.mma_async``); its PTX instructions
(lines ending in ``;`` that are not ``//`` comments, labels or blanks; loop control and try_wait loops
included, counted once as written) are divided by the MMAs in it.  The producer's K loop is reported too
(``prod``: its instructions, no MMAs).  With ``--sass`` each file is assembled (ptxgen.assemble, ptxas) for
registers, spill bytes, the total SASS instruction count and the opcode families ``ptxgen build`` reports.

Usage (from the repository root)::

    PYTHONPATH=$PWD python3 bench/ptx_stats.py --sass [--json out.json] [generated/level9.ptx ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MMA = re.compile(r"^\s*(@!?%\w+\s+)?(tcgen05\.mma|wgmma\.mma_async)\b")
LOOP = re.compile(r"^\$KB_LOOP_(\d+):")
TARGET = re.compile(r"^\.target\s+(\S+)")


def is_instruction(line: str) -> bool:
    """A PTX instruction line (not a comment, label, directive-free blank)."""
    s = line.split("//", 1)[0].strip()
    return bool(s) and s.endswith(";") and not s.startswith(".")


def k_loops(ptx: str) -> list[dict]:
    """Each ``$KB_LOOP_n`` region: ``{"instructions", "mmas"}`` (labels of nested wait loops not counted)."""
    lines = ptx.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = LOOP.match(line)
        if not m:
            continue
        done = f"$KB_DONE_{int(m.group(1)) + 1}:"
        j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == done)
        body = lines[i + 1:j]
        out.append({"instructions": sum(map(is_instruction, body)), "mmas": sum(bool(MMA.match(b)) for b in body)})
    return out


def stats(path: Path, sass: bool) -> dict:
    ptx = path.read_text()
    loops = k_loops(ptx)
    mma_loops = [lp for lp in loops if lp["mmas"]]
    prod = [lp for lp in loops if not lp["mmas"]]
    n_ins, n_mma = sum(lp["instructions"] for lp in mma_loops), sum(lp["mmas"] for lp in mma_loops)
    row = {"name": path.stem, "kloop_instructions": n_ins, "kloop_mmas": n_mma,
           "per_mma": round(n_ins / n_mma, 2) if n_mma else None,
           "producer_kloop_instructions": sum(lp["instructions"] for lp in prod),
           "ptx_instructions": sum(map(is_instruction, ptx.splitlines()))}
    if sass:
        from ptxgen.assemble import assemble
        from ptxgen.cli import SASS_KEYS

        target = TARGET.search(ptx, re.M) or re.search(r"^\.target\s+(\S+)", ptx, re.M)
        asm = assemble(ptx, target.group(1), sass=True)
        row.update(registers=asm.registers, spills=asm.spill_store_bytes + asm.spill_load_bytes,
                   sass_total=sum(asm.opcodes.values()),
                   sass={k: asm.count(k) for k in SASS_KEYS[target.group(1)]})
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--sass", action="store_true", help="assemble for registers, spills and SASS counts")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    files = args.files or sorted((ROOT / "generated").glob("*.ptx"))
    rows = [stats(f, args.sass) for f in files]
    for r in rows:
        line = (f"{r['name']:<14} kloop {r['kloop_instructions']:>4} ins / {r['kloop_mmas']} mma = {r['per_mma']:>6}"
                f"  producer kloop {r['producer_kloop_instructions']:>3}  ptx {r['ptx_instructions']:>5}")
        if args.sass:
            line += (f"  regs {r['registers']:>3} spills {r['spills']} sass {r['sass_total']:>5} "
                     + " ".join(f"{k}={v}" for k, v in r["sass"].items()))
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
