"""CPU stand-ins for the runtime tests: bf16 tensors, a tensor-map spec, the torch-or-skip mark, and bench scripts as
modules."""

from __future__ import annotations

import pytest

from ptxgen.launch import TensorMapSpec

torch_needed = pytest.mark.usefixtures("torch_mod")
"""Mark: the test needs torch (the ``torch_mod`` fixture of ``tests/runtime/conftest.py`` skips without it)."""


def bf16(*shape, device="cpu"):
    import torch

    return torch.zeros(shape, dtype=torch.bfloat16, device=device)


def spec(box=(64, 64), swizzle="128B", l2="256B", tensor="a", dtype="bf16"):
    return TensorMapSpec(tensor=tensor, box=box, swizzle=swizzle, l2_promotion=l2, dtype=dtype)


def bench_module(name: str):
    """``bench/<name>.py`` loaded as a module (bench scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
