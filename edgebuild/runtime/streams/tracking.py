"""A tracker per stream: the model's detections of one frame in, the objects it follows (with their ids) out.

The trackers are Roboflow's ``trackers`` (ByteTrack, the default, and OC-SORT), fed ``supervision.Detections``.
Both need Python 3.10 or newer: on JetPack 5 (Python 3.8) they are not installable, and asking for tracking
there says so (``CapabilityMissing``) instead of failing on an import.

Python 3.8, numpy; ``trackers`` and ``supervision`` are imported only when a tracker is made.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from typing import Any, Dict, List

import numpy as np

from edgebuild.errors import CapabilityMissing, ConfigError
from edgebuild.runtime.streams.records import Track

__all__ = []  # type: List[str]

TRACKERS = ("bytetrack", "ocsort")
_INSTALL = ("pip install trackers supervision (they need Python 3.10 or newer: on JetPack 5, run in a container "
            "with one)")


def _libraries() -> Any:
    try:
        import supervision
        import trackers
    except ImportError as exc:
        raise CapabilityMissing("tracking needs Roboflow's trackers and supervision, which cannot be imported "
                                "here ({})".format(exc), hint=_INSTALL) from None
    return trackers, supervision


class StreamTracker:
    """One stream's tracker: ``update(detections)`` with one frame's detections in the source's pixels
    (``boxes`` [K, 4] xyxy, ``scores`` [K], ``labels`` [K]) gives that frame's tracks.

    A detection below ``min_score`` is not given to the tracker at all (ByteTrack's second stage still sees
    the weaker ones above it). A track is reported once the tracker has confirmed it (its id is not -1).
    """

    def __init__(self, kind: str = "bytetrack", frame_rate: float = 30.0, min_score: float = 0.1) -> None:
        if kind not in TRACKERS:
            raise ConfigError("--tracker {!r}: one of {}".format(kind, ", ".join(TRACKERS)))
        trackers, supervision = _libraries()
        self._supervision = supervision
        self.kind, self.min_score = kind, float(min_score)
        made = trackers.ByteTrackTracker if kind == "bytetrack" else trackers.OCSORTTracker
        self._tracker = made(frame_rate=float(frame_rate))

    def update(self, detections: Dict[str, np.ndarray]) -> List[Track]:
        scores = np.asarray(detections["scores"], np.float32).reshape(-1)
        keep = scores >= self.min_score
        boxes = np.asarray(detections["boxes"], np.float32).reshape(-1, 4)[keep]
        labels = np.asarray(detections["labels"]).reshape(-1)[keep].astype(int)
        given = self._supervision.Detections(xyxy=boxes, confidence=scores[keep], class_id=labels)
        tracked = self._tracker.update(given)
        ids = tracked.tracker_id if tracked.tracker_id is not None else np.full(len(tracked), -1)
        confidence = tracked.confidence if tracked.confidence is not None else np.ones(len(tracked))
        classes = tracked.class_id if tracked.class_id is not None else np.zeros(len(tracked), int)
        found = [Track(int(ids[i]), [float(v) for v in tracked.xyxy[i]], int(classes[i]), float(confidence[i]))
                 for i in range(len(tracked)) if int(ids[i]) >= 0]
        return sorted(found, key=lambda track: track.id)
