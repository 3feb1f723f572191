"""The engine file header reader, on byte strings built here (never an engine file on disk that pretends to be one).

The layout the bytes follow is the one edgebuild/runtime/engines/engine_header.py cites: the magic b"ftrt"
at 0-3 and a little-endian layout word at 4-7 (NVIDIA/TensorRT samples/common/sampleEngines.cpp,
``printPlanVersion``, used by ``trtexec --getPlanVersionOnly``); for layout word 0 the TensorRT
major, minor, patch and build at bytes 24-27 (same source; autoware_universe PR#10320 citing
NVIDIA/TensorRT#3073); a serialization tag at byte 8 (observed in #3073). Everything else in these
strings is filler.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from edgebuild.runtime.engines.engine_header import HEADER_BYTES, read_header, read_header_file


def _engine_bytes(version: tuple[int, int, int, int], layout: int = 0, tag: int = 239, tail: int = 100) -> bytes:
    head = bytearray(HEADER_BYTES)
    head[0:4] = b"ftrt"
    struct.pack_into("<I", head, 4, layout)
    head[8] = tag
    head[24:28] = bytes(version)
    return bytes(head) + bytes(tail)


def test_a_tensorrt_10_header_gives_the_version_and_says_what_it_cannot_tell() -> None:
    header = read_header(_engine_bytes((10, 3, 0, 30)))
    assert header.is_engine and header.tensorrt_version == "10.3.0.30"
    assert header.layout_word == 0 and header.serialization_tag == 239 and header.prefix_bytes == 0
    assert any("does not record the GPU, JetPack/L4T, precision or build flags" in n for n in header.notes)
    assert "written by TensorRT 10.3.0.30" in header.describe()


def test_an_8_x_version_is_shown_but_marked_unconfirmed() -> None:
    header = read_header(_engine_bytes((8, 5, 2, 2)))
    assert header.tensorrt_version == "8.5.2.2"
    assert any("shown unconfirmed" in n for n in header.notes)


def test_another_layout_word_leaves_the_version_unknown() -> None:
    header = read_header(_engine_bytes((10, 3, 0, 30), layout=1))
    assert header.is_engine and header.tensorrt_version is None and header.layout_word == 1
    assert any("bytes 4-7 are 1 (not 0)" in n for n in header.notes)
    assert "TensorRT version unknown" in header.describe()


def test_implausible_version_bytes_are_not_reported_as_a_version() -> None:
    header = read_header(_engine_bytes((0, 0, 0, 0)))
    assert header.is_engine and header.tensorrt_version is None
    assert any("do not read as a TensorRT version" in n for n in header.notes)


def test_a_file_without_the_magic_is_not_a_plan() -> None:
    header = read_header(b"\x08\x00\x00\x00ONNX or anything else")
    assert not header.is_engine and header.tensorrt_version is None
    assert "does not start with the magic 'ftrt'" in header.describe()
    assert not read_header(b"ft").is_engine


def test_a_short_plan_says_the_version_was_not_read() -> None:
    header = read_header(b"ftrt" + bytes(10))
    assert header.is_engine and header.tensorrt_version is None
    assert any("only 14 bytes" in n for n in header.notes)


def test_an_ultralytics_metadata_prefix_is_skipped(tmp_path: Path) -> None:
    # what Ultralytics writes as .engine: uint32 LE length, JSON metadata, then the plan
    metadata = json.dumps({"task": "detect", "imgsz": [640, 640]}).encode()
    data = struct.pack("<I", len(metadata)) + metadata + _engine_bytes((10, 7, 0, 23))
    header = read_header(data)
    assert header.is_engine and header.tensorrt_version == "10.7.0.23"
    assert header.prefix_bytes == 4 + len(metadata) and header.prefix_metadata == {"task": "detect",
                                                                                  "imgsz": [640, 640]}
    path = tmp_path / "written-here-by-the-test.engine"
    path.write_bytes(data)
    assert read_header_file(path) == header


def test_as_dict_keeps_the_key_inspect_json_has_always_written() -> None:
    data = read_header(_engine_bytes((10, 3, 0, 30))).as_dict()
    assert data["is_plan"] is True and "is_engine" not in data
    assert list(data)[0] == "is_plan" and data["tensorrt_version"] == "10.3.0.30"
