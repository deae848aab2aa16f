"""Fixtures of the runtime tests: torch (or skip), a private kernel-cache directory, one built sm_90a kernel."""

from __future__ import annotations

import pytest

from ptxgen.runtime import cache


@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch")


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "kcache"
    monkeypatch.setenv(cache.ENV_VAR, str(root))
    return root


@pytest.fixture(scope="module")
def built_h100():
    from ptxgen.build import build

    return build("h100_128x128")
