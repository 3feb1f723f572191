"""What a serialized TensorRT engine file's first bytes say, read without TensorRT.

TensorRT calls this file a plan (``engine.plan``, trtexec's ``printPlanVersion``); in edgebuild "plan"
means the latency/memory plan (``edgebuild plan``), so here it is the engine file and its header.

TensorRT has no API that asks an engine file what built it (NVIDIA/TensorRT#3073: "We currently does not
have an API to do so"; #4233, which GPU built an engine, is open). What is known of the header,
and where from:

- bytes 0-3 are the magic ``b"ftrt"`` (little-endian ``0x74727466``). Documented by NVIDIA's own
  trtexec (``printPlanVersion`` in NVIDIA/TensorRT samples/common/sampleEngines.cpp, behind
  ``trtexec --getPlanVersionOnly --loadEngine=...``: "Correct TensorRT plan file starts with this
  tag"); TensorRT refuses a file without it ("Magic tag does not match", NVIDIA/TensorRT#1384,
  #2915).
- bytes 4-7, a little-endian word trtexec switches on: only for ``0`` does it know where the
  version is ("Blob index to store the plan version may depend on the serialization version").
  Any other value: the layout is not known here, and the version is not read.
- bytes 24-27 (when bytes 4-7 are 0): major, minor, patch, build of the TensorRT that wrote the
  engine. Source: trtexec ``printPlanVersion`` (above); autoware_universe PR#10320
  (perception/autoware_tensorrt_common, ``TRT_MAJOR_IDX = 24`` .. ``TRT_PATCH_IDX = 26``, citing
  NVIDIA's answer on #3073, June 2023); observed on TensorRT 10.8/10.9 engines there.
- byte 8: a serialization version tag, observed only (#3073: 205 for 8.2.1.8, 213 for 8.4.3.1,
  232 for 8.5.3.1; TensorRT's own error "Current Version: 213, Serialized Engine Version: 232").
  It changes between releases but is not a release number: shown, never mapped.

Per TensorRT major version: 10.x, reliably observed (trtexec's reader ships with 10.x; autoware
checks 10.x engines with it). 8.6, the NVIDIA answer dates from the 8.6 era but no 8.6 engine bytes
were seen here: treated as observed, not documented. 8.5 and older (JetPack 5): not confirmed;
the version bytes are shown with that caveat. Version-compatible engines (``VERSION_COMPATIBLE``,
8.6+) embed a lean runtime; whether their header differs is not known here.

What the header never tells: the GPU (compute capability or module), the JetPack/L4T release,
the precision or the build flags. Those come from ``engine.json`` (``runtime.provenance``).

Ultralytics writes ``.engine`` files as a 4-byte little-endian length, that many bytes of JSON
metadata, then the engine (seen in public code that strips it before deserializing); such a prefix
is recognised and the engine after it read.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple, Union

from edgebuild.runtime.base.json_object import JsonObject

__all__ = []  # used only inside the runtime layer

MAGIC = b"ftrt"
#: enough for the fields above
HEADER_BYTES = 28
_VERSION_AT = 24
_TAG_AT = 8
#: an Ultralytics metadata prefix larger than this is not believed
_PREFIX_LIMIT = 1 << 20


@dataclass(frozen=True)
class EngineHeader:
    """What the first bytes of an engine file say; ``None`` where they do not say it."""

    #: the bytes start as a TensorRT engine does (the magic); ``as_dict`` names it ``is_plan``, as before
    is_engine: bool
    #: major.minor.patch.build from bytes 24-27, where the layout word is 0 and the bytes are plausible
    tensorrt_version: Optional[str] = None
    #: the version bytes are relied on (TensorRT 10 and later); an 8.x reading is shown, never acted on
    version_confirmed: bool = False
    layout_word: Optional[int] = None
    serialization_tag: Optional[int] = None
    #: bytes before the engine (an Ultralytics metadata prefix), 0 for a bare engine
    prefix_bytes: int = 0
    prefix_metadata: Optional[JsonObject] = None
    #: what could not be told, in words
    notes: Tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return {"is_plan": data.pop("is_engine"), **data}  # the key ``inspect --json`` has always written

    def describe(self) -> str:
        if not self.is_engine:
            return "not a TensorRT engine header: " + "; ".join(self.notes)
        parts = ["TensorRT engine (magic 'ftrt')"]
        if self.prefix_bytes:
            parts.append("after a {}-byte Ultralytics metadata prefix".format(self.prefix_bytes))
        if self.tensorrt_version:
            parts.append("written by TensorRT {}{}".format(
                self.tensorrt_version, "" if self.version_confirmed else " (unconfirmed)"))
        else:
            parts.append("TensorRT version unknown")
        if self.serialization_tag is not None:
            parts.append("serialization tag {}".format(self.serialization_tag))
        text = ", ".join(parts)
        return text + ("; " + "; ".join(self.notes) if self.notes else "")


def read_header(data: bytes) -> EngineHeader:
    """The header of an engine file given its first bytes (``HEADER_BYTES`` or more; an Ultralytics file: the
    whole prefix and ``HEADER_BYTES`` after it)."""
    if data[:4] == MAGIC:
        return _bare(bytes(data[:HEADER_BYTES]), 0, None)
    prefixed = _ultralytics_prefix(data)
    if prefixed is not None:
        offset, metadata = prefixed
        return _bare(bytes(data[offset:offset + HEADER_BYTES]), offset, metadata)
    if len(data) < 4:
        return EngineHeader(False, notes=("the file has {} bytes, fewer than the 4-byte magic".format(len(data)),))
    return EngineHeader(False, notes=("it does not start with the magic 'ftrt' (it starts with {!r}); TensorRT "
                                    "would refuse it".format(bytes(data[:8])),))


def read_header_file(path: Union[str, Path]) -> EngineHeader:
    """The header of the engine file at ``path`` (reads the first bytes only, and an Ultralytics prefix)."""
    with open(str(path), "rb") as handle:
        head = handle.read(HEADER_BYTES)
        prefixed = _prefix_length(head)
        if head[:4] != MAGIC and prefixed is not None:
            head += handle.read(prefixed + HEADER_BYTES)
    return read_header(head)


def _bare(engine: bytes, prefix: int, metadata: Optional[JsonObject]) -> EngineHeader:
    notes: List[str] = []
    if len(engine) < HEADER_BYTES:
        notes.append("only {} bytes after the magic were read; the version is at bytes 24-27".format(len(engine)))
        return EngineHeader(True, prefix_bytes=prefix, prefix_metadata=metadata, notes=tuple(notes))
    layout = struct.unpack_from("<I", engine, 4)[0]
    tag = engine[_TAG_AT]
    version, major = None, 0
    if layout != 0:
        notes.append("bytes 4-7 are {} (not 0): where this layout keeps the TensorRT version is not documented"
                     .format(layout))
    else:
        major, minor, patch, build = engine[_VERSION_AT:_VERSION_AT + 4]
        if 5 <= major <= 99:
            version = "{}.{}.{}.{}".format(major, minor, patch, build)
            if major < 10:
                notes.append("the version bytes are documented from TensorRT 10 (observed from 8.6); for a "
                             "TensorRT {} engine they are shown unconfirmed".format(major))
        else:
            notes.append("bytes 24-27 ({}) do not read as a TensorRT version".format(
                ".".join(str(b) for b in (major, minor, patch, build))))
    notes.append("the header does not record the GPU, JetPack/L4T, precision or build flags (engine.json does)")
    confirmed = version is not None and major >= 10
    return EngineHeader(True, version, confirmed, layout, tag, prefix, metadata, tuple(notes))


def _prefix_length(head: bytes) -> Optional[int]:
    if len(head) < 4:
        return None
    length = struct.unpack_from("<I", head, 0)[0]
    return length if 0 < length <= _PREFIX_LIMIT else None


def _ultralytics_prefix(data: bytes) -> Optional[Tuple[int, Optional[JsonObject]]]:
    """(offset of the engine, the metadata) where ``data`` is length + JSON + an engine starting with the magic."""
    length = _prefix_length(data)
    if length is None or bytes(data[4 + length:8 + length]) != MAGIC:
        return None
    try:
        metadata = json.loads(bytes(data[4:4 + length]).decode("utf-8"))
    except ValueError:
        return None
    return 4 + length, metadata if isinstance(metadata, dict) else None
