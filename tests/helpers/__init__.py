"""Helpers shared by the test folders: the repository root, golden PTX sequences (:mod:`.ptx_filecheck`), kernels
and IR mutations for the simulator and verifier tests (:mod:`.sim_support`), CPU stand-ins for the runtime
tests (:mod:`.runtime`)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``generated/``, ``README.md``, ``ptxgen/``, ``emitters/``)."""
