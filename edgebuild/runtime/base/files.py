"""Content hashes and atomic writes: one implementation for the build host and the device.

``sha256_file`` streams, so a large engine or ONNX is never read into memory whole. The atomic
writes put the data in a temporary file in the same folder, fsync it, rename it over the target
and fsync the folder: a reader sees the old file or the new one, never half of either, and after
a power cut the rename has either happened or not.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator, Union

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer", "sha256_bytes", "sha256_file"]

CHUNK = 1 << 20
PathLike = Union[str, os.PathLike]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(str(path), "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(folder: PathLike) -> None:
    """Make a rename or a new entry in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and Windows) refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: PathLike, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an exception.

    On an exception the temporary file is removed and ``path`` keeps what it had. ``durable``: the
    file and the rename are fsynced, so a power cut leaves the old file or the new one; without it the
    rename is still atomic for every reader, but after a power cut the file may hold its old content
    (or, on some filesystems, none): for files rebuilt from others (a build report), whose fsyncs
    would cost a no-op compile more than the rest of its writing.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(".{}.tmp-{}-{}".format(target.name, os.getpid(), os.urandom(4).hex()))
    handle = open(str(staging), "xb")
    try:
        with handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(str(staging), str(target))
    except BaseException:
        try:
            os.unlink(str(staging))
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(target.parent)


def atomic_write_bytes(path: PathLike, data: bytes, durable: bool = True) -> None:
    with atomic_writer(path, durable) as handle:
        handle.write(data)


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8", durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode(encoding), durable)
