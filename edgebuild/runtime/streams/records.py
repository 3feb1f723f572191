"""What a stream's frame becomes: its tracked objects, in the source's pixels (``TrackedFrame``), one JSON line
each (``TrackedFrame.json_line``); and the events of an object entering or leaving a region (``RegionEvent``).

The JSON line is the format of ``edgebuild track --jsonl``, of the server-sent events and of the MQTT messages:

    {"stream": 0, "frame": 12, "tracks": [{"id": 3, "box": [x1, y1, x2, y2], "class": 1, "score": 0.91}]}

with ``"time"`` (seconds since the epoch when the frame was read) and, where the stream has a name, ``"name"``.
Boxes are in the source's pixels (the model's letterbox undone), rounded to 0.01 px; scores to 1e-4.

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

__all__ = []


class Track(NamedTuple):
    """One tracked object in one frame: the tracker's id (stable while the object is followed), its box
    (x1, y1, x2, y2 in the source's pixels), its class index and the detection's score."""

    id: int
    box: Sequence[float]
    cls: int
    score: float

    def as_dict(self) -> Dict[str, Any]:
        return {"id": int(self.id), "box": [round(float(v), 2) for v in self.box], "class": int(self.cls),
                "score": round(float(self.score), 4)}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Track":
        box = [float(v) for v in data["box"]]
        if len(box) != 4:
            raise ValueError("a track's box is [x1, y1, x2, y2]; got {!r}".format(data["box"]))
        return cls(int(data["id"]), box, int(data["class"]), float(data["score"]))


class TrackedFrame(NamedTuple):
    """A stream's frame after detection and tracking: ``stream`` (the source's index, in the order given),
    ``frame`` (the frame's number in its stream, from 0, counting the frames read, dropped ones too),
    ``tracks``; ``time``: when the frame was read (``time.time()``); ``name``: the stream's name, if any."""

    stream: int
    frame: int
    tracks: List[Track]
    time: Optional[float] = None
    name: Optional[str] = None

    def as_dict(self) -> Dict[str, Any]:
        out = {"stream": self.stream, "frame": self.frame,
               "tracks": [t.as_dict() for t in self.tracks]}  # type: Dict[str, Any]
        if self.time is not None:
            out["time"] = round(self.time, 6)
        if self.name is not None:
            out["name"] = self.name
        return out

    def json_line(self) -> str:
        """The frame as one line of JSON (no newline inside; the caller adds the line's end)."""
        return json.dumps(self.as_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TrackedFrame":
        return cls(int(data["stream"]), int(data["frame"]), [Track.from_dict(t) for t in data["tracks"]],
                   float(data["time"]) if data.get("time") is not None else None, data.get("name"))


class RegionEvent(NamedTuple):
    """An object entering or leaving a named region (``kind``: "enter" or "leave") at a stream's frame."""

    stream: int
    frame: int
    region: str
    kind: str
    track: Track
    time: Optional[float] = None

    def as_dict(self) -> Dict[str, Any]:
        out = {"stream": self.stream, "frame": self.frame, "region": self.region, "event": self.kind,
               "track": self.track.as_dict()}  # type: Dict[str, Any]
        if self.time is not None:
            out["time"] = round(self.time, 6)
        return out

    def json_line(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"))
