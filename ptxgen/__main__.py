"""``python -m ptxgen``: the same command line as the ``ptxgen`` script."""

import sys

from .cli import main

sys.exit(main())
