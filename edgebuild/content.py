"""Content on the build host: hashes of files, trees and settings (what cache keys are made
of), and output folders written to a temporary path and renamed into place.

A stage's cache key hashes what goes into it (its version, parameters, its inputs' content
hashes, tool versions), never its outputs. A stage writes into a temporary folder next to its
output folder and renames it into place when everything is written and checked, so an
interrupted run never leaves an output that looks complete.
"""


from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgebuild.runtime.base.files import sha256_file
from edgebuild.statcache import cached

__all__ = ["atomic_output_dir", "changed_parts", "digest", "file_sha256", "files_digest", "tool_versions",
           "tree_sha256"]


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file (the one streaming ``sha256_file``, shared with the device side); while a
    file cache is in use (``edgebuild.statcache``), not read again when its stat is unchanged."""
    return cached(Path(path), "sha256", sha256_file, _sha256_hex)


def _sha256_hex(value: object) -> str:
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise ValueError(value)
    return value


def tree_sha256(root: Path, pattern: str = "*.py") -> str:
    """Hash of every file matching ``pattern`` under ``root`` (names and contents)."""
    digest = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob(pattern) if "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(root.parent if root.is_file() else root)).encode())
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def files_digest(paths: list[Path], root: Path | None = None) -> str:
    """Hash of a list of files by name (the path under ``root`` where given) and content: a data
    set's identity, labels included where the folder is the label."""
    return digest([[str(p.relative_to(root)) if root else p.name, file_sha256(p)] for p in paths])


def digest(value: Any) -> str:
    """A stable hash of a JSON-serialisable value."""
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def tool_versions(*dists: str) -> dict[str, str]:
    versions = {}
    for dist in dists:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def changed_parts(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Names of the cache-key parts that differ between a stored record and now."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))



# -- atomic outputs ---------------------------------------------------------------------------

@contextmanager
def atomic_output_dir(final: Path) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces ``final`` in one rename."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield staging
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
