"""What was read from a file (its SHA-256, an image's size, an ONNX graph's cost), kept by the file's stat.

A no-op compile reads the same files every stage key is made of: hashing them again, or opening
every validation image again for its size, costs more than all the rest of the run. While a cache is
in use (``use(BuildLayout.file_cache)``; the compile holds one for its stages), ``cached(path, kind, compute)``
answers from ``build/.cache/files.json`` (``BuildLayout.file_cache``) when the file's size,
``st_mtime_ns``, ``st_ctime_ns`` and inode are what they were when the value was computed, and
computes (and keeps) it otherwise. Without a cache in use it just computes.

Safe to trust:

* any of size, mtime, ctime or inode different: the file is read again (a file rewritten in place,
  replaced by a rename, or touched);
* a file modified within ``RACY_NS`` of when its value was computed (mtime granularity: a write in
  the same tick would leave the stat unchanged) is not trusted: it is read again, and trusted once
  its value was computed well after its last change (git's "racily clean" rule);
* a cache file that cannot be read, is not JSON or not this version's shape is ignored and written
  again; an entry of the wrong shape is a miss;
* written atomically (a temporary file renamed over it), only when something new was computed; a
  cache that cannot be written only costs time.

``remembered(path, kind, compute)`` keeps a value that has no JSON form (a parsed annotations file)
in memory for the rest of the run, by the same stat: the stages' keys read the COCO file four
times in one compile. It trusts a file by the same rules (stat unchanged, not changed within
``RACY_NS`` of the first read), and nothing of it is written.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

__all__ = ["cached", "remembered"]  # and use, which only stages.compile_work enters

#: bump when a kind's value changes meaning, so an old cache is not trusted
CACHE_VERSION = 1
#: a file changed this close to when its value was computed is read again (coarse mtime clocks: 2 s on FAT)
RACY_NS = 2_000_000_000

_T = TypeVar("_T")


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _trusted(entry: dict[str, Any] | None, signature: list[int]) -> bool:
    """The entry was made for the file as it is now (same stat), and well after the file last changed."""
    if entry is None or entry.get("stat") != signature or not isinstance(entry.get("values"), dict):
        return False
    checked = entry.get("checked_ns")
    return isinstance(checked, int) and max(signature[1], signature[2]) + RACY_NS < checked


class StatCache:
    """The values computed from files, by path, each valid while the file's stat is unchanged."""

    def __init__(self, path: Path | None):
        self.path = path  # None: kept in memory only
        self._entries: dict[str, dict[str, Any]] = {}
        #: (path, kind) -> (the file's stat, when it was read, the value): this run's, never written
        self._memory: dict[tuple[str, str], tuple[list[int], int, Any]] = {}
        self._dirty = False
        self._lock = threading.Lock()
        if path is not None:
            self._entries, self._dirty = self._load(path)

    @staticmethod
    def _load(path: Path) -> tuple[dict[str, dict[str, Any]], bool]:
        """(the entries of the file, whether it must be written again: present but unusable)."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, False
        except (OSError, UnicodeDecodeError):
            return {}, True
        try:
            data = json.loads(text)
        except ValueError:
            return {}, True
        files = data.get("files") if isinstance(data, dict) and data.get("version") == CACHE_VERSION else None
        if not isinstance(files, dict):
            return {}, True
        return {k: v for k, v in files.items() if isinstance(v, dict)}, False

    def get(self, path: Path, kind: str, compute: Callable[[Path], _T], decode: Callable[[Any], _T],
            encode: Callable[[_T], Any] = lambda value: value) -> _T:
        """``compute(path)``, or ``decode`` of what it gave before (``encode``-d, as JSON kept it) while the
        file's stat is unchanged. ``decode`` raises TypeError, ValueError, KeyError or IndexError for a
        value of the wrong shape (a miss). A file that cannot be stat'ed is left to ``compute`` to say so."""
        key = os.path.abspath(path)
        try:
            signature = _signature(os.stat(key))
        except OSError:
            return compute(path)
        with self._lock:
            entry = self._entries.get(key)
            stored = entry["values"].get(kind) if entry is not None and _trusted(entry, signature) else None
        if stored is not None:
            try:
                return decode(stored)
            except (TypeError, ValueError, KeyError, IndexError):
                pass
        checked_ns = time.time_ns()  # before reading: a write during the read leaves an mtime after it
        value = compute(path)
        try:
            if _signature(os.stat(key)) != signature:
                return value  # changed while read: what was read is not kept
        except OSError:
            return value
        with self._lock:
            entry = self._entries.get(key)
            if not _trusted(entry, signature):
                entry = self._entries[key] = {"stat": signature, "checked_ns": checked_ns, "values": {}}
            entry["values"][kind] = json.loads(json.dumps(encode(value)))  # type: ignore[index]  # as read back
            self._dirty = True
        return value

    def remembered(self, path: Path, kind: str, compute: Callable[[], _T]) -> _T:
        """``compute()``, or what it gave earlier in this run for ``path`` (and ``kind``: what else the value
        depends on) while the file's stat is unchanged and the file did not change within ``RACY_NS`` of that
        first read. Kept in memory only: for values with no JSON form, read more than once in one run."""
        key = os.path.abspath(path)
        try:
            signature = _signature(os.stat(key))
        except OSError:
            return compute()
        with self._lock:
            hit = self._memory.get((key, kind))
        if hit is not None and hit[0] == signature and max(signature[1], signature[2]) + RACY_NS < hit[1]:
            return cast(_T, hit[2])
        read_ns = time.time_ns()
        value = compute()
        with self._lock:
            self._memory[(key, kind)] = (signature, read_ns, value)
        return value

    def save(self) -> None:
        """Write the cache when something was computed (entries of files that are gone are dropped)."""
        if self.path is None or not self._dirty:
            return
        from edgebuild.runtime.base.files import atomic_write_text

        with self._lock:
            kept = {k: v for k, v in self._entries.items() if os.path.exists(k)}
            text = json.dumps({"version": CACHE_VERSION, "files": kept}, separators=(",", ":"))
            self._dirty = False
        try:
            atomic_write_text(self.path, text)
        except OSError:
            pass  # a cache that cannot be written only costs time


_active: list[StatCache] = []
_active_lock = threading.Lock()


def active() -> StatCache | None:
    """The cache in use (the innermost ``use``), if any."""
    return _active[-1] if _active else None


@contextmanager
def use(where: Path) -> Iterator[StatCache]:
    """Use the file cache at ``where`` (a build folder's ``BuildLayout.file_cache``) inside the ``with``,
    and write it (when something new was computed) when the ``with`` ends. Nested for the same file:
    the one already in use."""
    current = active()
    if current is not None and current.path == where:
        yield current
        return
    cache = StatCache(where)
    with _active_lock:
        _active.append(cache)
    try:
        yield cache
    finally:
        with _active_lock:
            _active.remove(cache)
        cache.save()


def cached(path: Path, kind: str, compute: Callable[[Path], _T], decode: Callable[[Any], _T],
           encode: Callable[[_T], Any] = lambda value: value) -> _T:
    """``compute(path)`` through the cache in use (``StatCache.get``), or computed where none is."""
    cache = active()
    return compute(path) if cache is None else cache.get(path, kind, compute, decode, encode)


def remembered(path: Path, kind: str, compute: Callable[[], _T]) -> _T:
    """``compute()``, or its value from earlier in this run (``StatCache.remembered``) while a cache is in use."""
    cache = active()
    return compute() if cache is None else cache.remembered(path, kind, compute)
