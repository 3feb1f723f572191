"""Named regions of a stream's picture, and the events of tracked objects entering and leaving them.

A region is a polygon (or a rectangle, a polygon of four corners) in the source's pixels, for one stream or for
every stream. ``RegionWatcher.update`` takes a stream's ``TrackedFrame`` s in order and says which tracks entered
or left which region at that frame, as ``RegionEvent`` s.

Where a track is: the **bottom centre of its box**, ((x1 + x2) / 2, y2). For a camera looking down at a floor,
a road or a yard, that is where the object stands; the box's centre would put a tall person "in" a floor zone
drawn well behind them. A point on a region's edge is inside it.

A track missing from a frame has not left: trackers lose objects for a few frames (an occlusion, a missed
detection) and find them again under the same id. It leaves its regions only once it has been missing for
``lost_after`` frames (counted in the stream's frame numbers, so dropped frames count too), at the frame where
that happens, with the box it was last seen with.

Pure and deterministic: the same frames give the same events, in the same order (per frame: the frame's tracks
in their order, each one's leaves then enters in the regions' order; then the lost tracks by id).

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from edgebuild.runtime.streams.records import RegionEvent, Track, TrackedFrame

__all__ = []

Point = Tuple[float, float]

#: frames a track may be missing before it leaves the regions it was in
LOST_AFTER = 30


class Region(NamedTuple):
    """A named polygon (at least three points, in order around it) in a stream's source pixels;
    ``stream`` None: the same region in every stream."""

    name: str
    points: Sequence[Point]
    stream: Optional[int] = None

    @classmethod
    def rectangle(cls, name: str, x1: float, y1: float, x2: float, y2: float,
                  stream: Optional[int] = None) -> "Region":
        return cls(name, [(x1, y1), (x2, y1), (x2, y2), (x1, y2)], stream)

    def contains(self, point: Point) -> bool:
        return point_in_polygon(point, self.points)


def point_in_polygon(point: Point, polygon: Sequence[Point]) -> bool:
    """Whether ``point`` is inside ``polygon`` or on its edge (even-odd rule: a crossing count along a ray)."""
    x, y = point
    inside = False
    n = len(polygon)
    for i in range(n):
        (ax, ay), (bx, by) = polygon[i], polygon[(i + 1) % n]
        if _on_segment(x, y, ax, ay, bx, by):
            return True
        if (ay > y) != (by > y) and x < ax + (y - ay) * (bx - ax) / (by - ay):
            inside = not inside
    return inside


def _on_segment(x: float, y: float, ax: float, ay: float, bx: float, by: float) -> bool:
    cross = (bx - ax) * (y - ay) - (by - ay) * (x - ax)
    if abs(cross) > 1e-9 * max(1.0, abs(bx - ax) + abs(by - ay)):
        return False
    return min(ax, bx) - 1e-9 <= x <= max(ax, bx) + 1e-9 and min(ay, by) - 1e-9 <= y <= max(ay, by) + 1e-9


def anchor(track: Track) -> Point:
    """Where a track is for the regions: its box's bottom centre."""
    x1, _, x2, y2 = (float(v) for v in track.box)
    return ((x1 + x2) / 2.0, y2)


def regions_from_json(data: Any) -> List[Region]:
    """Regions from their JSON form: a list of ``{"name": ..., "polygon": [[x, y], ...]}`` or
    ``{"name": ..., "box": [x1, y1, x2, y2]}``, each with an optional ``"stream": i``
    (or ``{"regions": [...]}`` around that list)."""
    if isinstance(data, dict):
        data = data.get("regions")
    if not isinstance(data, list):
        raise ValueError("regions are a JSON list (or {\"regions\": [...]}) of {\"name\", \"polygon\" or \"box\"}")
    regions = []
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError("a region needs a \"name\": {!r}".format(entry))
        stream = int(entry["stream"]) if entry.get("stream") is not None else None
        if "box" in entry:
            x1, y1, x2, y2 = (float(v) for v in entry["box"])
            regions.append(Region.rectangle(entry["name"], x1, y1, x2, y2, stream))
        elif "polygon" in entry:
            points = [(float(p[0]), float(p[1])) for p in entry["polygon"]]
            regions.append(Region(entry["name"], points, stream))
        else:
            raise ValueError("region {!r} has neither \"polygon\" nor \"box\"".format(entry["name"]))
    return regions


def load_regions(path: str) -> List[Region]:
    """``regions_from_json`` of a JSON file."""
    with open(path, encoding="utf-8") as f:
        return regions_from_json(json.load(f))


class _Followed:
    """What the watcher remembers of a track: the regions it is in, when and how it was last seen."""

    __slots__ = ("inside", "last_frame", "last_track", "last_time")

    def __init__(self) -> None:
        self.inside: List[str] = []
        self.last_frame = 0
        self.last_track: Optional[Track] = None
        self.last_time: Optional[float] = None


class RegionWatcher:
    """Enter and leave events of tracks in named regions, from each stream's frames in order."""

    def __init__(self, regions: Sequence[Region], lost_after: int = LOST_AFTER) -> None:
        if lost_after < 1:
            raise ValueError("lost_after is a number of frames, at least 1; got {}".format(lost_after))
        names = [(r.stream, r.name) for r in regions]
        if len(set(names)) != len(names):
            raise ValueError("two regions of the same stream share a name: {}".format(names))
        for region in regions:
            if len(region.points) < 3:
                raise ValueError("region {!r} needs at least three points".format(region.name))
        self.regions = list(regions)
        self.lost_after = lost_after
        self._followed: Dict[Tuple[int, int], _Followed] = {}
        self._last_frame: Dict[int, int] = {}

    def regions_of(self, stream: int) -> List[Region]:
        return [r for r in self.regions if r.stream is None or r.stream == stream]

    def inside(self, stream: int, track_id: int) -> List[str]:
        """The regions a track is in now (as far as the frames seen so far say)."""
        followed = self._followed.get((stream, track_id))
        return list(followed.inside) if followed else []

    def update(self, frame: TrackedFrame) -> List[RegionEvent]:
        """The events at this frame: the tracks that entered or left a region, and those lost long enough."""
        regions = self.regions_of(frame.stream)
        events: List[RegionEvent] = []
        seen = set()
        for track in frame.tracks:
            key = (frame.stream, int(track.id))
            seen.add(key)
            followed = self._followed.setdefault(key, _Followed())
            point = anchor(track)
            now = [r.name for r in regions if r.contains(point)]
            events += [RegionEvent(frame.stream, frame.frame, name, "leave", track, frame.time)
                       for name in followed.inside if name not in now]
            events += [RegionEvent(frame.stream, frame.frame, name, "enter", track, frame.time)
                       for name in now if name not in followed.inside]
            followed.inside, followed.last_frame = now, frame.frame
            followed.last_track, followed.last_time = track, frame.time
        events += self._lost(frame, seen)
        self._last_frame[frame.stream] = frame.frame
        return events

    def _lost(self, frame: TrackedFrame, seen: set) -> List[RegionEvent]:
        events: List[RegionEvent] = []
        for key in sorted(k for k in self._followed if k[0] == frame.stream and k not in seen):
            followed = self._followed[key]
            if frame.frame - followed.last_frame < self.lost_after:
                continue
            events += self._leave_all(followed, frame.stream, frame.frame, frame.time)
            del self._followed[key]
        return events

    def finish(self) -> List[RegionEvent]:
        """The streams ended: every track still in a region leaves it, at its stream's last frame."""
        events: List[RegionEvent] = []
        for key in sorted(self._followed):
            followed = self._followed[key]
            events += self._leave_all(followed, key[0], self._last_frame.get(key[0], followed.last_frame),
                                      followed.last_time)
        self._followed.clear()
        return events

    @staticmethod
    def _leave_all(followed: _Followed, stream: int, frame: int, time: Optional[float]) -> List[RegionEvent]:
        if followed.last_track is None:
            return []
        return [RegionEvent(stream, frame, name, "leave", followed.last_track, time) for name in followed.inside]
