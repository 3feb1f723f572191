"""Where the product's data files are: ``profiles/``, ``cgroups/`` and ``docker/`` (the source
tree's folders, or the copies a wheel carries under ``edgebuild/data/``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir"]

PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """A data folder of the product (profiles, cgroups, docker): installed copy or source tree."""
    override = os.environ.get(f"EDGEBUILD_{name.upper()}_DIR")
    if override:
        return Path(override)
    installed = PACKAGE / "data" / name
    if installed.is_dir():
        return installed
    return PACKAGE.parent / name
