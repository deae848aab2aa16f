"""The FP8 pair's load side alone: ``grouped_gap.py`` with one more side whose kernel stores nothing.

    python3 bench/grouped_fp8tile_probe.py time --fp8 --problems tune [--json PATH] [--configs A,B]

Adds ``grouped_contiguous_fp8_h100_128x256_c2_nostore`` (the shipped pair's fields under another name, written to a
temporary YAML) to ``--configs``; for that config only, :meth:`ptxgen.builders.roles.WgmmaConsumer.stores` is
replaced by nothing in this process.  No store reads the accumulators, so ptxas drops every wgmma and promotion too
(its SASS has no QGMMA and no FFMA): what runs is the walk, the table reads, the producer's TMA loads (A, the
multicast B halves, the scales) and the consumers' full/empty handshakes.  Its time is the floor the load side sets,
not the epilogue's cost (docs/grouped.md, "The FP8 per-tile cost"); its rows keep the NaN poison (relative error
nan).  Never a shipped config: the runtime keys its images by the config's content, so the name keeps the patched
kernel apart from the shipped one.
"""

from __future__ import annotations

import runpy
import sys
import tempfile
from pathlib import Path

import ptxgen
from ptxgen.builders import roles
from ptxgen.config import load_config

SHIPPED = "grouped_contiguous_fp8_h100_128x256_c2"
NOSTORE = SHIPPED + "_nostore"

stores = roles.WgmmaConsumer.stores


def _stores(self, tile, fused=()):
    return [] if self.p.cfg.name == NOSTORE else stores(self, tile, fused)


roles.WgmmaConsumer.stores = _stores
path = Path(tempfile.mkdtemp()) / f"{NOSTORE}.yaml"
path.write_text((Path(ptxgen.__file__).parent / "configs" / f"{SHIPPED}.yaml").read_text()
                .replace(f"name: {SHIPPED}\n", f"name: {NOSTORE}\n"))
assert load_config(str(path)).name == NOSTORE
if "--configs" in sys.argv:
    i = sys.argv.index("--configs") + 1
    sys.argv[i] = f"{path},{sys.argv[i]}"
else:
    sys.argv += ["--configs", str(path)]
sys.argv[0] = str(Path(__file__).with_name("grouped_gap.py"))
runpy.run_path(sys.argv[0], run_name="__main__")
