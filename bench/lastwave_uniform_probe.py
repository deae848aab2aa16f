"""Which PTX instruction takes a split-K kernel's k-loop off ptxas's uniform datapath (CPU only; ptxas wheel).

For each config, the shipped ``generated/<name>.ptx`` and edited copies are assembled (whole program, sm_90a) and
their SASS counted: ``WARPSYNC``, ``R2UR``, ``YIELD``, ``UIMAD.WIDE`` (the base's uniform stage arithmetic), and the
spill bytes.  The shipped fixup learns its verdict with ``bar.red.popc`` (``NamedBarrierPopc`` of ``sk_reduce``),
then, where the plan says so (``SplitKPlan.vote``), passes it through ``vote.sync.any.pred`` (``VoteAny``).  The
edits, probes only (the fixup's semantics are broken by ``no_popc`` and ``k_range``):

* ``no_vote``: the shipped vote removed (the verdict as ``bar.red.popc`` leaves it); the only edit of a kernel
  with the vote;
* ``popc_vote``: the vote added after ``bar.red.popc``;
* ``no_popc``: ``bar.red.popc`` as ``bar.sync`` and a constant;
* ``red_or``: ``bar.red.or.pred`` in its place;
* ``k_range``: every unit's k-range fixed at ``[0, num_k)``.

Usage (from the repository root): ``PYTHONPATH=$PWD python3 bench/lastwave_uniform_probe.py [CONFIG ...]``
(default: every shipped config with the fixup and the bases of the last-wave ones; docs/performance.md, "The pair's
last-wave k-loop").
"""
import re
import sys
from pathlib import Path

from ptxgen.assemble import assemble

ROOT = Path(__file__).resolve().parent.parent
POPC = re.compile(r"bar\.red\.popc\.u32 %sk_reduce, (%x\d+), 128, (%p\d+);")
VOTE = re.compile(r"\n\s*// VoteAny sk_reduce .*\n\s*setp\.ne\.u32 (%p\d+), %sk_reduce, 0;\n"
                  r"\s*vote\.sync\.any\.pred (%p\d+), \1, 0xffffffff;\n\s*selp\.u32 %sk_reduce, 1, 0, \2;")
DECL = "    .reg .b32 %sk_reduce;"
CONFIGS = ["h100_128x128_c2", "h100_128x128_c2_lw2", "h100_128x256", "h100_128x256_lw2", "h100_128x256_lw4",
           "h100_128x192_sk3", "h100_128x64_sk2", "h100_64x128_sk2", "dual_h100_128x128", "dual_h100_128x128_lw2",
           "dual_h100_128x128_c2", "dual_h100_128x128_c2_lw2"]


def sass_counts(ptx: str) -> str:
    r = assemble(ptx, "sm_90a", sass=True)
    counts = " ".join(f"{op} {r.sass.count(op)}" for op in ("WARPSYNC", "R2UR", "YIELD", "UIMAD.WIDE"))
    return f"{counts} spill {r.spill_store_bytes}+{r.spill_load_bytes} B"


def edits(ptx: str) -> dict[str, str]:
    """The probe copies of a split-K kernel's PTX (empty for a kernel without the fixup's named barrier)."""
    m = POPC.search(ptx)
    if not m:
        return {}
    bar, pred = m.groups()
    decl = DECL + "\n    .reg .pred %plw;"
    voted = VOTE.search(ptx)
    k_range = re.sub(r"mov\.u32 %kb0, %x\d+;", "mov.u32 %kb0, 0;", ptx)
    if voted:
        return {"no_vote": ptx.replace(voted.group(0), "")}
    return {
        "popc_vote": ptx.replace(m.group(0), m.group(0) + "\n setp.ne.u32 %plw, %sk_reduce, 0;\n"
                                 " vote.sync.any.pred %plw, %plw, 0xffffffff;\n selp.u32 %sk_reduce, 1, 0, %plw;"
                                 ).replace(DECL, decl),
        "no_popc": ptx.replace(m.group(0), f"bar.sync {bar}, 128;\n mov.u32 %sk_reduce, 1;"),
        "red_or": ptx.replace(m.group(0), f"bar.red.or.pred %plw, {bar}, 128, {pred};\n"
                              " selp.u32 %sk_reduce, 1, 0, %plw;").replace(DECL, decl),
        "k_range": re.sub(r"mov\.u32 %kb1, %x\d+;", "mov.u32 %kb1, %num_k;", k_range),
    }


def main() -> None:
    for name in sys.argv[1:] or CONFIGS:
        ptx = (ROOT / "generated" / f"{name}.ptx").read_text()
        print(f"{name:26s} shipped    {sass_counts(ptx)}", flush=True)
        for label, edited in edits(ptx).items():
            print(f"{name:26s} {label:10s} {sass_counts(edited)}", flush=True)


if __name__ == "__main__":
    main()
