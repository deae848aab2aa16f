"""Where configs live on disk: the shipped folder, their names, a name-or-path -> file lookup.

Kept apart from :mod:`ptxgen.config` (pydantic schema, plan budgets) so that the runtime's warm path — a
kernel image found in the cache by its config's YAML text — never imports the schema: locating and reading a
YAML file is all a cache hit needs (:func:`ptxgen.runtime.loader.config_content`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

#: the shipped configs' folder, ``ptxgen/configs`` beside this module (located as :data:`ptxgen.runtime.prebuilt.FOLDER`
#: is: ``importlib.resources`` would add its imports to a warm first call for a path the package always has on disk)
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def configs_dir() -> Path:
    """Folder of the shipped configs (``ptxgen/configs``)."""
    return Path(CONFIGS)


def shipped_configs() -> list[str]:
    """Names of the shipped configs, sorted (``dual_*``, ``h100_*``, ``level1`` ... ``level9``)."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def is_shipped(name: str) -> bool:
    """Whether ``name`` is a shipped config's name (one of :func:`shipped_configs`), with one ``stat`` instead of the
    folder's listing."""
    return bool(name) and not name.startswith(".") and "/" not in name and os.sep not in name and \
        os.path.isfile(os.path.join(CONFIGS, f"{name}.yaml"))


def resolve_config_path(name_or_path: str | os.PathLike) -> Path:
    """A shipped config by bare name (``level9`` or ``level9.yaml``) or a path.  Raises ConfigError.

    Errors: no such file and not a shipped name; the path is a directory.
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    if p.is_dir():
        raise ConfigError(f"config {str(name_or_path)!r}: is a directory; give a YAML file or a shipped config name")
    stem = p.name[:-5] if p.name.endswith(".yaml") else p.name
    shipped = configs_dir() / f"{stem}.yaml"
    if p.parent == Path(".") and shipped.is_file():
        return shipped
    raise ConfigError(
        f"config {str(name_or_path)!r}: no such file, and not a shipped config; give a YAML path or a shipped "
        f"name ({', '.join(shipped_configs())})"
    )
