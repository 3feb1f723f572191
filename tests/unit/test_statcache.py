"""The file cache (edgebuild.statcache): what was read from a file is kept by its stat, and trusted only
while that stat is unchanged, so a no-op compile reads nothing again and a changed file is always read.

A changed file is read again when any of size, mtime, ctime or inode differs (same size with a new
mtime; the old mtime restored on new content of another size; a file replaced by a rename); a file
changed too close to when its value was computed is not trusted; a cache that is garbage or of another
shape is ignored and written again; it is written by a rename, never left half written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from edgebuild import statcache
from edgebuild.content import file_sha256
from edgebuild.datasets import images
from edgebuild.project.layout import BuildLayout
from edgebuild.statcache import StatCache, use


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are as new as the cache's entries: without this, every one is 'racily
    clean' (changed too close to when it was read) and read again, which its own test checks."""
    monkeypatch.setattr(statcache, "RACY_NS", 0)


class Counted:
    """sha256 of a file, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self, path: Path) -> str:
        self.reads += 1
        return hashlib.sha256(path.read_bytes()).hexdigest()


def _get(cache_file: Path, path: Path, compute: Counted) -> str:
    """One run's lookup: a fresh cache object from the file, saved afterwards (as a compile does)."""
    cache = StatCache(cache_file)
    value = cache.get(path, "sha256", compute, str)
    cache.save()
    return value


def _set_mtime(path: Path, mtime_ns: int) -> None:
    os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.mark.usefixtures("trusting")
def test_an_unchanged_file_is_read_once_across_runs(tmp_path: Path) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "build" / ".cache" / "files.json", Counted()
    data.write_bytes(b"12345678")
    assert _get(cache_file, data, compute) == hashlib.sha256(b"12345678").hexdigest()
    assert _get(cache_file, data, compute) == hashlib.sha256(b"12345678").hexdigest()
    assert compute.reads == 1
    assert json.loads(cache_file.read_text())["version"] == statcache.CACHE_VERSION
    assert [p.name for p in cache_file.parent.iterdir()] == ["files.json"], "no temporary file left behind"


@pytest.mark.usefixtures("trusting")
def test_same_size_new_mtime_is_read_again(tmp_path: Path) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")
    _set_mtime(data, 1_000_000_000_000_000_000)
    _get(cache_file, data, compute)
    data.write_bytes(b"87654321")  # the same size
    _set_mtime(data, 1_000_000_000_000_000_001)  # one nanosecond later
    assert _get(cache_file, data, compute) == hashlib.sha256(b"87654321").hexdigest()
    assert compute.reads == 2


@pytest.mark.usefixtures("trusting")
def test_same_mtime_new_content_of_another_size_is_read_again(tmp_path: Path) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")
    _set_mtime(data, 1_000_000_000_000_000_000)
    _get(cache_file, data, compute)
    data.write_bytes(b"123456789")
    _set_mtime(data, 1_000_000_000_000_000_000)  # the old mtime put back
    assert _get(cache_file, data, compute) == hashlib.sha256(b"123456789").hexdigest()
    assert compute.reads == 2


@pytest.mark.usefixtures("trusting")
def test_a_file_replaced_by_a_rename_with_its_size_and_mtime_is_read_again(tmp_path: Path) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")
    _set_mtime(data, 1_000_000_000_000_000_000)
    _get(cache_file, data, compute)
    other = tmp_path / "b.bin"
    other.write_bytes(b"abcdefgh")
    _set_mtime(other, 1_000_000_000_000_000_000)
    os.replace(other, data)  # another inode (and ctime) at the same path, same size and mtime
    assert _get(cache_file, data, compute) == hashlib.sha256(b"abcdefgh").hexdigest()
    assert compute.reads == 2


def test_a_file_changed_just_before_it_was_read_is_not_trusted(tmp_path: Path) -> None:
    """Racily clean: a write in the same mtime tick as the read would leave the stat unchanged."""
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")  # just now: within RACY_NS of the read
    _get(cache_file, data, compute)
    _get(cache_file, data, compute)
    assert compute.reads == 2


@pytest.mark.usefixtures("trusting")
@pytest.mark.parametrize("garbage", [b"\x00\xff not json", b"[1, 2]", b'{"version": 1, "files": []}',
                                     b'{"version": 999, "files": {}}', b""])
def test_a_corrupt_cache_is_ignored_and_written_again(tmp_path: Path, garbage: bytes) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")
    cache_file.write_bytes(garbage)
    assert _get(cache_file, data, compute) == hashlib.sha256(b"12345678").hexdigest()
    written = json.loads(cache_file.read_text())
    assert written["version"] == statcache.CACHE_VERSION and os.path.abspath(data) in written["files"]
    _get(cache_file, data, compute)
    assert compute.reads == 1


@pytest.mark.usefixtures("trusting")
def test_an_entry_of_the_wrong_shape_is_a_miss(tmp_path: Path) -> None:
    data, cache_file, compute = tmp_path / "a.bin", tmp_path / "files.json", Counted()
    data.write_bytes(b"12345678")
    _get(cache_file, data, compute)
    stored = json.loads(cache_file.read_text())
    stored["files"][os.path.abspath(data)]["values"]["sha256"] = ["not", "a", "hash"]
    cache_file.write_text(json.dumps(stored))
    cache = StatCache(cache_file)  # its decode refuses the list: read again
    assert cache.get(data, "sha256", compute, _hex) == hashlib.sha256(b"12345678").hexdigest()
    assert compute.reads == 2


def _hex(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


@pytest.mark.usefixtures("trusting")
def test_hashes_and_image_sizes_go_through_the_build_folders_cache(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    build = BuildLayout.default(tmp_path).file_cache
    picture = tmp_path / "a.png"
    Image.new("RGB", (32, 24)).save(picture)
    opened = []
    real = images._image_size
    monkeypatch.setattr(images, "_image_size", lambda path, key: opened.append(path) or real(path, key))
    for _ in range(2):
        with use(build):
            assert images.image_size(picture, "data.validation.images") == (32, 24)
            assert file_sha256(picture) == hashlib.sha256(picture.read_bytes()).hexdigest()
    assert opened == [picture], "the second run opens no image"
    assert build.is_file()
    Image.new("RGB", (40, 24)).save(picture)  # a new size
    with use(build):
        assert images.image_size(picture, "data.validation.images") == (40, 24)
    assert images.image_size(picture, "data.validation.images") == (40, 24)  # no cache in use: read
    assert len(opened) == 3


@pytest.mark.usefixtures("trusting")
def test_a_remembered_value_is_read_once_a_run_while_the_file_is_unchanged(tmp_path: Path) -> None:
    """``remembered``: values with no JSON form (a parsed COCO file), kept in memory for one run, by stat."""
    data, reads = tmp_path / "annotations.json", []
    data.write_text("[1]")

    def parse() -> list:
        reads.append(1)
        return json.loads(data.read_text())

    assert statcache.remembered(data, "json", parse) == [1]
    assert statcache.remembered(data, "json", parse) == [1]
    assert len(reads) == 2, "no cache in use: computed every time"
    with use(tmp_path / "files.json") as cache:
        assert [statcache.remembered(data, "json", parse) for _ in range(3)] == [[1]] * 3
        assert len(reads) == 3
        assert statcache.remembered(data, "other kind", parse) == [1] and len(reads) == 4
        data.write_text("[22]")  # another size
        assert statcache.remembered(data, "json", parse) == [22] and len(reads) == 5
        assert cache._memory
    assert not (tmp_path / "files.json").exists(), "nothing remembered is written"
    with use(tmp_path / "files.json"):  # the next run reads it again
        assert statcache.remembered(data, "json", parse) == [22] and len(reads) == 6


def test_a_file_changed_just_before_it_was_remembered_is_read_again(tmp_path: Path) -> None:
    data, reads = tmp_path / "annotations.json", []
    data.write_text("[1]")  # just now: within RACY_NS of the read
    with use(tmp_path / "files.json"):
        for _ in range(2):
            statcache.remembered(data, "json", lambda: reads.append(1))
    assert len(reads) == 2


@pytest.mark.usefixtures("trusting")
def test_a_compile_reads_its_coco_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage keys ask for the validation set four times a compile: the COCO JSON is parsed once."""
    from edgebuild.datasets import coco

    (tmp_path / "images").mkdir()
    Image.new("RGB", (32, 24)).save(tmp_path / "images" / "a.png")
    ann = tmp_path / "annotations.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 24}],
                               "annotations": [], "categories": [{"id": 1, "name": "box"}]}))
    parsed = []
    real = coco._read_coco
    monkeypatch.setattr(coco, "_read_coco", lambda *args: parsed.append(args) or real(*args))
    with use(tmp_path / "files.json"):
        first = coco.read_coco(ann, tmp_path / "images", ["box"])
        assert coco.read_coco(ann, tmp_path / "images", ["box"]) is first
        assert len(parsed) == 1
        coco.read_coco(ann, tmp_path / "images", ["box"], limit=1)  # another question: read
        assert len(parsed) == 2
