"""The tracking metrics' wiring: the ground truth fed back scores 1, swapped ids cost IDF1 and two switches, an
empty prediction scores 0, don't-care rows and classes count as the module says, and edgebuild's JSON lines read
back as the boxes they hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgebuild.accuracy.tracking.metrics import TrackedBox, read_tracks_jsonl, tracking_metrics

#: two objects crossing a 100-frame sequence, a third (class 2) hidden behind another for frames 40-44
FRAMES = 100


Row = tuple[int, int, float, float, float, float, int, float]


def _rows() -> list[Row]:
    rows = []
    for frame in range(1, FRAMES + 1):
        rows.append((frame, 1, 10.0 + frame, 20.0, 20.0, 20.0, 1, 1.0))
        rows.append((frame, 2, 120.0 - frame, 60.0, 24.0, 24.0, 2, 1.0))
        rows.append((frame, 3, 50.0, 110.0, 16.0, 16.0, 3, 0.0 if 40 <= frame < 45 else 1.0))
    return rows


@pytest.fixture
def gt_files(tmp_path: Path) -> list[Path]:
    files = []
    for stream in range(2):
        path = tmp_path / f"stream-{stream:02d}" / "gt" / "gt.txt"
        path.parent.mkdir(parents=True)
        path.write_text("".join(f"{f},{i},{x},{y},{w},{h},1,{c},{v}\n" for f, i, x, y, w, h, c, v in _rows()))
        files.append(path)
    return files


def _as_predicted(rows: list[Row], swap_from: int | None = None,
                  min_visibility: float = 0.0) -> dict[int, list[TrackedBox]]:
    tracks: dict[int, list[TrackedBox]] = {}
    for frame, ident, x, y, w, h, cls, visibility in rows:
        if visibility < min_visibility:
            continue
        if swap_from is not None and frame >= swap_from and ident in (1, 2):
            ident = 3 - ident
        tracks.setdefault(frame - 1, []).append(TrackedBox(ident, (x, y, x + w, y + h), cls - 1, 0.9))
    return tracks


def test_the_ground_truth_fed_back_scores_one(gt_files: list[Path]) -> None:
    metrics = tracking_metrics(gt_files, {0: _as_predicted(_rows()), 1: _as_predicted(_rows())}, class_aware=True)
    assert metrics.HOTA == pytest.approx(1.0)
    assert (metrics.IDF1, metrics.MOTA, metrics.IDSW) == (1.0, 1.0, 0)
    assert (metrics.streams, metrics.frames, metrics.false_positives) == (2, 2 * FRAMES, 0)


def test_two_ids_swapped_halfway_cost_idf1_and_two_switches(gt_files: list[Path]) -> None:
    swapped = _as_predicted(_rows(), swap_from=FRAMES // 2 + 1)
    metrics = tracking_metrics(gt_files[:1], {0: swapped})
    assert metrics.IDSW == 2
    assert metrics.IDF1 < 0.9 and metrics.HOTA < 0.9
    assert metrics.MOTA == pytest.approx(1 - 2 / metrics.true_positives)  # every box found; only the switches cost


def test_an_empty_prediction_scores_zero(gt_files: list[Path]) -> None:
    metrics = tracking_metrics(gt_files, {})
    assert (metrics.HOTA, metrics.IDF1, metrics.MOTA, metrics.true_positives) == (0.0, 0.0, 0.0, 0)
    assert metrics.false_negatives == 2 * (3 * FRAMES - 5)  # the five hidden rows are don't-care


def test_hidden_rows_are_dont_care_either_way(gt_files: list[Path]) -> None:
    kept = tracking_metrics(gt_files[:1], {0: _as_predicted(_rows())})
    dropped = tracking_metrics(gt_files[:1], {0: _as_predicted(_rows(), min_visibility=0.1)})
    assert kept.HOTA == dropped.HOTA == pytest.approx(1.0)
    strict = tracking_metrics(gt_files[:1], {0: _as_predicted(_rows(), min_visibility=0.1)}, min_visibility=0.0)
    assert strict.false_negatives == 5


def test_a_wrong_class_is_a_miss_only_when_class_aware(gt_files: list[Path]) -> None:
    wrong = {f: [TrackedBox(b.id, b.box, (b.cls + 1) % 3, b.score) for b in boxes]
             for f, boxes in _as_predicted(_rows()).items()}
    assert tracking_metrics(gt_files[:1], {0: wrong}).IDF1 == 1.0
    assert tracking_metrics(gt_files[:1], {0: wrong}, class_aware=True).IDF1 == 0.0


def test_json_lines_read_back_as_their_boxes(tmp_path: Path) -> None:
    lines = [json.dumps({"stream": 1, "frame": 12, "time": 1.5,
                         "tracks": [{"id": 3, "box": [1, 2, 30, 40], "class": 2, "score": 0.91}]}),
             "", json.dumps({"stream": 1, "frame": 13, "tracks": []})]
    path = tmp_path / "tracks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert read_tracks_jsonl(path) == {1: {12: [TrackedBox(3, (1.0, 2.0, 30.0, 40.0), 2, 0.91)], 13: []}}
