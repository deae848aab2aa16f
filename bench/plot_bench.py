"""Redraw the PNG of a ``ptxgen bench --json`` result (e.g. where the GPU machine had no matplotlib).

Usage: ``PYTHONPATH=$PWD python3 bench/plot_bench.py bench.json bench.png``
"""

import json
import sys

from ptxgen.bench import plot

doc = json.load(open(sys.argv[1]))
if not plot(doc["results"], sys.argv[2], title=f"ptxgen vs torch.matmul on {doc['device']}"):
    sys.exit("matplotlib is not installed (pip install 'ptxgen[plot]')")
print(f"wrote {sys.argv[2]}")
