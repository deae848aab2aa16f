"""The main tier's representative configs (tests/helpers/representative.py) carry every shipped feature, and each
of them carries one the others lack: a new family or feature cannot drop out of the main tier's sweeps, and the
check sees each config it depends on."""

from __future__ import annotations

import pytest

from ptxgen.config import shipped_configs
from tests.helpers.representative import REPRESENTATIVE, features, shipped_params, uncovered


def test_representative_configs_are_shipped() -> None:
    assert set(REPRESENTATIVE) <= set(shipped_configs()), sorted(set(REPRESENTATIVE) - set(shipped_configs()))


def test_representative_configs_cover_every_shipped_feature() -> None:
    missing = uncovered(REPRESENTATIVE)
    assert not missing, "shipped features no representative config carries (add the config to REPRESENTATIVE): " + \
        "; ".join(f"{feature} ({name})" for feature, name in missing.items())


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_dropping_a_representative_config_is_caught(name: str) -> None:
    """Planted: without ``name`` the coverage check names a feature only ``name`` carries among them."""
    others = [c for c in REPRESENTATIVE if c != name]
    missing = uncovered(others)
    assert missing and set(missing) <= features(name)


def test_every_shipped_config_is_swept_in_one_tier() -> None:
    params = shipped_params()
    assert [p.values[0] for p in params] == shipped_configs()
    slow = {p.values[0] for p in params if any(m.name == "slow" for m in p.marks)}
    assert slow == set(shipped_configs()) - set(REPRESENTATIVE)
