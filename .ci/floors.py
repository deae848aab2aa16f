#!/usr/bin/env python3
"""Print the declared minimum version of each dependency as a pin (``name==floor``), one per line.

Usage: python3 .ci/floors.py [EXTRA...]   (the base dependencies plus those of each named extra)
Every requirement must have a ``>=`` floor that names a released version exactly, so that CI can install the
floors in a second environment and prove that they work.
"""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
reqs = list(project["dependencies"])
for extra in sys.argv[1:]:
    reqs += project["optional-dependencies"][extra]
for req in reqs:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)(\s*,.*)?", req)
    if m is None:
        sys.exit(f"floors: requirement {req!r} has no '>=' floor")
    print(f"{m.group(1)}=={m.group(2)}")
