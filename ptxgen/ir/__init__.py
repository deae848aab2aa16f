"""Kernel IR: expression trees (:mod:`.expr`), ops (:mod:`.ops`), pipelines (:mod:`.pipeline`) and the
self-contained :class:`Kernel` (:mod:`.kernel`)."""

from .expr import (Bin, Const, Expr, Param, Select, Sreg, Var, ceil_div, emax, emin, eq, evaluate, expr_str,  # noqa: F401
                   fold, land, lift, lor, le, lt, ne, select)
from .kernel import BarrierArray, Kernel, SmemRegion  # noqa: F401
from .ops import *  # noqa: F401,F403 - the op vocabulary is the package's API
from .pipeline import BulkStoreRing, Pipeline, PipelineState  # noqa: F401
from .printer import kernel_str  # noqa: F401
