"""The schema of ``edgebuild.toml``'s streams: ``[[streams]]`` (the cameras and files a group's devices
track) and ``[runtime.tracking]`` (how the container's entry point runs the tracking).

A section of its own beside ``schema.py``: ``schema.Project`` holds ``streams`` and ``RuntimeSection`` holds
``tracking``; what needs the fleet or the disk to see (a group that is not in ``[[fleet]]``, a regions
file that is not there) is checked by ``check_streams``, which ``config`` runs with the other meaning checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__: list[str] = []

_NETWORK = re.compile(r"^(rtsp|rtsps|rtmp|http|https)://\S+$", re.IGNORECASE)
_CAMERA = re.compile(r"^(/dev/video|v4l2://|csi://)")
_CAMERA_NUMBER = re.compile(r"^(/dev/video|v4l2://|csi://)\d+$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.-]+(:\d{1,5})?$")
_STREAM_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StreamEntry(_Section):
    """One ``[[streams]]`` entry: a source the group's devices track (``edgebuild track --source``)."""

    # a video file on the device, rtsp:// (rtsps, rtmp, http), /dev/videoN (v4l2://N) or csi://N
    source: str
    name: str | None = None  # the JSON lines' "name" (default: none, the stream's index only)
    max_fps: float | None = Field(None, gt=0)
    group: str | None = None  # the fleet group whose devices run it (default: every group)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        text = value.strip()
        if not text:
            raise ValueError("is empty: give a video file on the device, rtsp://..., /dev/videoN or csi://N")
        if "://" in text and not (_NETWORK.match(text) or _CAMERA.match(text)):
            raise ValueError(f"{text!r}: a URL must be rtsp://, rtsps://, rtmp://, http(s)://, v4l2://N or csi://N")
        if _CAMERA.match(text) and not _CAMERA_NUMBER.match(text):
            raise ValueError(f"{text!r}: a camera is /dev/videoN, v4l2://N or csi://N, N its number")
        return text

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _STREAM_NAME.match(value):
            raise ValueError(f"must be letters, digits, '_', '-' or '.', starting with a letter or digit, "
                             f"found {value!r}")
        return value


class TrackingSection(_Section):
    """``[runtime.tracking]``: how the device runs the ``[[streams]]`` (the options of ``edgebuild track``)."""

    tracker: Literal["bytetrack", "ocsort"] = "bytetrack"
    # "beside" the KServe server (started after its warm-up), or "instead" of it (tracking only)
    mode: Literal["beside", "instead"] = "beside"
    # the JSON lines file on the device; a relative path is in the engine cache (the container's volume)
    jsonl: str = "tracks.jsonl"
    sse_port: int | None = Field(None, ge=1, le=65535)  # server-sent events (GET /tracks, /events, /health)
    mqtt: str | None = None  # HOST[:PORT] of an MQTT broker
    mqtt_topic: str = "edgebuild"
    regions: str | None = None  # a JSON file in the project (named boxes or polygons), shipped with the model

    @field_validator("jsonl")
    @classmethod
    def _jsonl(cls, value: str) -> str:
        if not value.strip() or value.endswith("/"):
            raise ValueError(f"must name a file (e.g. \"tracks.jsonl\"), found {value!r}")
        return value

    @field_validator("mqtt")
    @classmethod
    def _mqtt(cls, value: str | None) -> str | None:
        if value is not None and (not _HOST_PORT.match(value) or int(value.partition(":")[2] or 1883) > 65535):
            raise ValueError(f"must be HOST or HOST:PORT (e.g. \"broker.local:1883\"), found {value!r}")
        return value

    @field_validator("mqtt_topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        if not value or any(c in value for c in "#+") or value.startswith("/") or value.endswith("/"):
            raise ValueError(f"must be a topic prefix without '#', '+' or a leading or trailing '/', found {value!r}")
        return value


def streams_of_group(streams: list[StreamEntry], group: str) -> list[StreamEntry]:
    """The ``[[streams]]`` a fleet group's devices run: those for it and those for every group."""
    return [s for s in streams if s.group is None or s.group == group]


def check_streams(streams: list[StreamEntry], tracking: TrackingSection | None, groups: list[str],
                  task: str) -> list[str]:
    """What needs more than one key to see: the groups named, unique names, a detector to track with."""
    problems = [f"streams[{i}].group: {s.group!r} is not a fleet group (the groups: {', '.join(groups)})"
                for i, s in enumerate(streams) if s.group is not None and s.group not in groups]
    names = [s.name for s in streams if s.name is not None]
    problems += [f"streams: the name {n!r} is given to more than one stream" for n in sorted(set(names))
                 if names.count(n) > 1]
    if streams and task != "detection":
        problems.append(f"streams: tracking follows a detector's boxes; task.kind is {task!r}")
    if tracking is not None and not streams:
        problems.append("runtime.tracking: set, but no [[streams]] says what to track: add a [[streams]] entry "
                        "with a source, or remove [runtime.tracking]")
    return problems


def check_regions_file(tracking: TrackingSection | None, root: Path) -> list[str]:
    """``runtime.tracking.regions``: a file in the project (``root``), which compile copies into the model folder."""
    if tracking is None or tracking.regions is None:
        return []
    path = (root / tracking.regions).resolve()
    if path.is_file():
        return []
    return [f"runtime.tracking.regions: {'a folder, not a file' if path.is_dir() else 'file not found'}: {path}"]
