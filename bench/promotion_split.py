"""``bench/survey.py`` with the L2 promotion of the A and of the B tensor map set apart (device only).

A config has one ``tma.l2_promotion`` for both operands, and the runtime caps 256-byte promotion at 128 bytes for a
row stride that is not a multiple of 128 bytes (``ptxgen.runtime.tensormap.ALIGNED_STRIDE_BYTES``).  This probe
replaces, for every config the survey times, the promotion of the map of operand ``a`` with ``--a`` and of ``b``
(and ``b2``) with ``--b`` (``none``, ``64B``, ``128B``, ``256B``; ``keep``: the runtime's own choice), whatever the
stride, so each operand's share of the ragged-K cost can be measured (docs/performance.md, "Ragged K").  The D map
is left alone.

Usage: PYTHONPATH=$PWD python3 bench/promotion_split.py --a 128B --b none -- SURVEY_ARGS ...
"""
import argparse
import sys
from pathlib import Path

from ptxgen.runtime import tensormap


def split_promotion(a: str, b: str) -> None:
    """Make :func:`ptxgen.runtime.tensormap.tiled_args` encode A's maps with ``a`` and B's with ``b``."""
    for value in (a, b):
        if value != "keep" and value not in tensormap.L2_PROMOTIONS:
            raise SystemExit(f"promotion {value!r}: must be keep or one of {list(tensormap.L2_PROMOTIONS)}")
    rule = tensormap.tiled_args
    by_tensor = {"a": a, "b": b, "b2": b}

    def tiled_args(address, rows, cols, row_stride_elems, spec):
        args = rule(address, rows, cols, row_stride_elems, spec)
        wanted = by_tensor.get(spec.tensor, "keep")
        if wanted == "keep":
            return args
        return args._replace(l2_promotion=tensormap.L2_PROMOTIONS[wanted])

    tensormap.tiled_args = tiled_args


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser()
    p.add_argument("--a", default="keep")
    p.add_argument("--b", default="keep")
    args = p.parse_args(argv[:cut])
    split_promotion(args.a, args.b)
    sys.path.insert(0, str(Path(__file__).parent))
    import survey

    sys.argv = [str(Path(__file__).parent / "survey.py"), *argv[cut + 1:]]
    survey.main()


if __name__ == "__main__":
    main()
