"""NVIDIA's system shared-memory client, importable with today's setuptools.

``tritonclient.utils.shared_memory`` imports ``pkg_resources`` for one ``resource_filename`` call (to
find its libcshm.so), and setuptools no longer ships that module; a stand-in answers that one call,
and only while the client module is imported. Used by the shared-memory tests and
``benchmarks/server_cost.py``.
"""

from __future__ import annotations

import importlib.resources
import sys
import types
from typing import Any


def nvidia_shared_memory() -> Any:
    """``tritonclient.utils.shared_memory``."""
    try:
        import pkg_resources  # noqa: F401

        stand_in = None
    except ImportError:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.resource_filename = lambda package, name: str(importlib.resources.files(package) / name)  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = stand_in
    try:
        import tritonclient.utils.shared_memory as shm
    finally:
        if stand_in is not None:
            del sys.modules["pkg_resources"]
    return shm
