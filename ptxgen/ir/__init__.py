"""Kernel IR: expression trees (:mod:`.expr`) and ops (:mod:`.ops`)."""

from .expr import (Bin, Const, Expr, Param, Select, Sreg, Var, ceil_div, emax, emin, eq, evaluate, fold, land,  # noqa: F401
                   lift, lor, le, lt, ne, select)
from .ops import *  # noqa: F401,F403 - the op vocabulary is the package's API
from .printer import expr_str, kernel_str
