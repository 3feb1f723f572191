"""Stage outputs: content hashes, cache keys and atomic writes.

A stage's cache key hashes what goes into it (its version, parameters, its inputs' content
hashes, tool versions), never its outputs. A stage writes into a temporary folder next to its
output folder and renames it into place when everything is written and checked, so an
interrupted run never leaves an output that looks complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tree_sha256(root: Path, pattern: str = "*.py") -> str:
    """Hash of every file matching ``pattern`` under ``root`` (names and contents)."""
    digest = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob(pattern) if "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(root.parent if root.is_file() else root)).encode())
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def files_digest(paths: list[Path]) -> str:
    """Hash of a list of files by name and content (a data set's identity)."""
    return digest([[p.name, file_sha256(p)] for p in paths])


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


def verify_files(folder: Path, hashes: dict[str, str]) -> list[str]:
    """Files listed with their sha256 that are missing or different; cheapest check first."""
    bad = []
    for name, expected in hashes.items():
        path = folder / name
        if not path.is_file() or file_sha256(path) != expected:
            bad.append(name)
    return bad


def find_reusable_record(folder: Path, record_file: str, load: Callable[[Path], Any],
                         current_key_parts: Callable[[], dict[str, str]], what: str) -> tuple[Any, str]:
    """A stage's stored record if its key parts are unchanged and its files intact.

    The record needs ``key_parts``, ``files`` and ``reused`` fields. Returns (record, "up to
    date") or (None, why not), cheapest check first.
    """
    if not (folder / record_file).is_file():
        return None, f"no earlier {what}"
    try:
        record = load(folder)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        return None, f"earlier record unreadable ({exc})"
    changed = changed_parts(record.key_parts, current_key_parts())
    if changed:
        return None, f"changed since the last {what}: {', '.join(changed)}"
    broken = verify_files(folder, record.files)
    if broken:
        return None, f"output files missing or modified: {', '.join(broken)}"
    return dataclasses.replace(record, reused=True), "up to date"


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
