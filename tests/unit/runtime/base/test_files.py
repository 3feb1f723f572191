"""The shared sha256 and atomic-write helpers (edgebuild/runtime/base/files.py), used by host and device."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from edgebuild.runtime.base import files
from edgebuild.runtime.base.files import atomic_write_bytes, atomic_write_text, atomic_writer, sha256_bytes, sha256_file


@pytest.mark.parametrize("size", [0, 1, files.CHUNK - 1, files.CHUNK, 3 * files.CHUNK + 17])
def test_sha256_file_equals_hashlib(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest() == sha256_bytes(data)
    assert sha256_file(str(path)) == sha256_file(path)


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "engine.json"
    atomic_write_text(path, "first")
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["engine.json"]


def test_an_exception_mid_write_keeps_the_old_content(tmp_path: Path) -> None:
    path = tmp_path / "engine.plan"
    path.write_bytes(b"old plan")
    with pytest.raises(RuntimeError, match="killed"), atomic_writer(path) as handle:
        handle.write(b"half of a new pl")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old plan"
    assert [p.name for p in tmp_path.iterdir()] == ["engine.plan"]


def test_a_failed_rename_keeps_the_old_content(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "recipe.json"
    path.write_text("old")

    def refuse(*_args) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["recipe.json"]


def test_a_new_file_is_readable_like_any_other(tmp_path: Path) -> None:
    """The temporary file is created with the usual permissions (umask), not mkstemp's 0600."""
    path = tmp_path / "engine.plan"
    atomic_write_bytes(path, b"x")
    reference = tmp_path / "plain"
    reference.write_bytes(b"x")
    assert path.stat().st_mode == reference.stat().st_mode


@pytest.mark.parametrize("durable", [True, False])
def test_only_a_durable_write_is_fsynced(tmp_path: Path, monkeypatch, durable: bool) -> None:
    """durable=False (a build report, rebuilt from the records): the same rename, no fsync of the file or folder."""
    synced = []
    real = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    path = tmp_path / "index.html"
    path.write_text("old")
    atomic_write_text(path, "new", durable=durable)
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["index.html"]
    assert len(synced) == (2 if durable else 0)  # the file, then its folder
