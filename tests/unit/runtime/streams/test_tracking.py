"""A tracker per stream: ids that stay with an object, and what is said where the trackers cannot be imported."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.streams.tracking import StreamTracker


def _detections(x: float, score: float = 0.9) -> dict[str, np.ndarray]:
    boxes = np.array([[x, 50, x + 40, 90], [200, 150 - x / 4, 240, 190 - x / 4]], np.float32)
    return {"boxes": boxes, "scores": np.array([score, 0.85], np.float32), "labels": np.array([0, 1])}


@pytest.mark.parametrize("kind", ["bytetrack", "ocsort"])
def test_an_object_moving_slowly_keeps_its_id(kind: str) -> None:
    tracker = StreamTracker(kind)
    seen = [tracker.update(_detections(10 + 2 * i)) for i in range(12)]
    ids = [{t.cls: t.id for t in tracks} for tracks in seen[4:]]
    assert all(len(frame) == 2 for frame in ids) and all(frame == ids[0] for frame in ids)
    assert seen[-1][0].box[0] == pytest.approx(32, abs=2)


def test_weak_detections_are_not_tracked() -> None:
    tracker = StreamTracker("bytetrack", min_score=0.5)
    for i in range(6):
        tracks = tracker.update(_detections(10 + 2 * i, score=0.2))
    assert {t.cls for t in tracks} == {1}


def test_without_the_trackers_library_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trackers", None)  # import trackers raises ImportError
    with pytest.raises(CapabilityMissing, match="trackers") as raised:
        StreamTracker("bytetrack")
    assert "pip install trackers supervision" in (raised.value.hint or "")
