"""Which PTX instruction takes a last-wave kernel's k-loop off ptxas's uniform datapath (CPU only; ptxas wheel).

For each config, the shipped ``generated/<name>.ptx`` and edited copies are assembled (whole program, sm_90a) and
their SASS counted: ``WARPSYNC``, ``R2UR``, ``YIELD``, ``UIMAD.WIDE`` (the base's uniform stage arithmetic).  The
edits, probes only (the fixup's semantics are broken by the first and third):

* ``no_popc``: the fixup's ``bar.red.popc`` (``NamedBarrierPopc`` of ``sk_reduce``) as ``bar.sync`` and a constant;
* ``popc_vote``: the same ``bar.red.popc``, then ``vote.sync.any.pred`` on ``sk_reduce != 0`` (the same value);
* ``red_or``: ``bar.red.or.pred`` in its place;
* ``k_range``: every unit's k-range fixed at ``[0, num_k)``.

Usage (from the repository root): ``PYTHONPATH=$PWD python3 bench/lastwave_uniform_probe.py [CONFIG ...]``
(docs/performance.md, "The pair's last-wave k-loop").
"""
import re
import sys
from pathlib import Path

from ptxgen.assemble import compile_ptx, disassemble

ROOT = Path(__file__).resolve().parent.parent
POPC = re.compile(r"bar\.red\.popc\.u32 %sk_reduce, (%x\d+), 128, (%p\d+);")
DECL = "    .reg .b32 %sk_reduce;"


def sass_counts(ptx: str) -> str:
    sass = disassemble(compile_ptx(ptx, "sm_90a"))
    return " ".join(f"{op} {sass.count(op)}" for op in ("WARPSYNC", "R2UR", "YIELD", "UIMAD.WIDE"))


def edits(ptx: str) -> dict[str, str]:
    """The probe copies of a last-wave kernel's PTX (empty for a kernel without the fixup's named barrier)."""
    m = POPC.search(ptx)
    if not m:
        return {}
    bar, pred = m.groups()
    decl = DECL + "\n    .reg .pred %plw;"
    k_range = re.sub(r"mov\.u32 %kb0, %x\d+;", "mov.u32 %kb0, 0;", ptx)
    return {
        "no_popc": ptx.replace(m.group(0), f"bar.sync {bar}, 128;\n mov.u32 %sk_reduce, 1;"),
        "popc_vote": ptx.replace(m.group(0), m.group(0) + "\n setp.ne.u32 %plw, %sk_reduce, 0;\n"
                                 " vote.sync.any.pred %plw, %plw, 0xffffffff;\n selp.u32 %sk_reduce, 1, 0, %plw;"
                                 ).replace(DECL, decl),
        "red_or": ptx.replace(m.group(0), f"bar.red.or.pred %plw, {bar}, 128, {pred};\n"
                              " selp.u32 %sk_reduce, 1, 0, %plw;").replace(DECL, decl),
        "k_range": re.sub(r"mov\.u32 %kb1, %x\d+;", "mov.u32 %kb1, %num_k;", k_range),
    }


def main() -> None:
    names = sys.argv[1:] or ["h100_128x128_c2", "h100_128x128_c2_lw2", "h100_128x256", "h100_128x256_lw4"]
    for name in names:
        ptx = (ROOT / "generated" / f"{name}.ptx").read_text()
        print(f"{name:24s} shipped    {sass_counts(ptx)}", flush=True)
        for label, edited in edits(ptx).items():
            print(f"{name:24s} {label:10s} {sass_counts(edited)}", flush=True)


if __name__ == "__main__":
    main()
