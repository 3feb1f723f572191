"""Tracking accuracy: HOTA, IDF1 and MOTA of predicted tracks against MOTChallenge ground truth, over all streams.

The metrics are Roboflow ``trackers.eval``'s, a re-implementation of TrackEval's HOTA, Identity and CLEAR that
matches it: each stream is scored as a TrackEval sequence, and the streams are combined as TrackEval combines
sequences (HOTA from summed TP/FN/FP per alpha with AssA weighted by TP; IDF1 and MOTA from summed counts).

What is ours is the preparation TrackEval's MOT loader does for pedestrians, done for any class:

- class-agnostic by default (``class_aware=True`` scores a box of the wrong class as no match);
- ground-truth rows less visible than ``min_visibility`` are "don't care" regions, as TrackEval treats MOT17's
  distractors: a predicted box that matches one (Hungarian, IoU >= 0.5) is dropped, neither a hit nor a false
  positive, and the row itself is no miss;
- frames: the ground truth's are numbered from 1 (MOTChallenge), edgebuild's records from 0; frame ``f`` of a
  record is line ``f + 1`` of gt.txt.
"""

from __future__ import annotations

import configparser
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgebuild.runtime.streams.records import TrackedFrame

__all__ = ["TrackedBox", "tracking_metrics"]


@dataclass(frozen=True)
class TrackedBox:
    """One predicted track in one frame: ``box`` is (x1, y1, x2, y2) in the frame's pixels."""

    id: int
    box: tuple[float, float, float, float]
    cls: int = 0
    score: float = 1.0


#: a stream's predicted tracks: frame (from 0, as edgebuild's records count) -> the boxes in it
Tracks = Mapping[int, Sequence[TrackedBox]]


@dataclass(frozen=True)
class TrackingMetrics:
    """The streams' tracking accuracy combined (HOTA, DetA, AssA, IDF1, MOTA in [0, 1]; MOTA may go below 0)."""

    HOTA: float
    DetA: float
    AssA: float
    LocA: float
    IDF1: float
    IDP: float
    IDR: float
    MOTA: float
    MOTP: float
    IDSW: int
    true_positives: int  # CLEAR's matches at IoU 0.5
    false_negatives: int
    false_positives: int
    streams: int
    frames: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class _GroundTruth:
    """A stream's gt.txt: per frame (from 0) the rows' ids, boxes (xyxy), classes (from 0) and visibility."""

    frames: int
    ids: dict[int, np.ndarray]
    boxes: dict[int, np.ndarray]
    classes: dict[int, np.ndarray]
    visibility: dict[int, np.ndarray]


def _sequence_length(gt_file: Path) -> int | None:
    seqinfo = gt_file.parent.parent / "seqinfo.ini"
    if not seqinfo.is_file():
        return None
    config = configparser.ConfigParser()
    config.read(seqinfo)
    return config.getint("Sequence", "seqLength", fallback=None)


def _read_ground_truth(gt_file: Path) -> _GroundTruth:
    """gt.txt's rows with conf != 0: frame, id, x, y, w, h, conf, class (from 1), visibility (1 where absent)."""
    rows = np.loadtxt(gt_file, delimiter=",", ndmin=2, dtype=np.float64)
    if rows.size and rows.shape[1] < 6:
        raise ValueError(f"{gt_file}: a MOT row has at least 6 columns (frame, id, x, y, w, h); got {rows.shape[1]}")
    rows = rows.reshape(-1, rows.shape[1] if rows.size else 9)
    if rows.shape[1] > 6:
        rows = rows[rows[:, 6] != 0]
    frame_of = rows[:, 0].astype(np.int64) - 1
    classes = rows[:, 7].astype(np.int64) - 1 if rows.shape[1] > 7 else np.zeros(len(rows), np.int64)
    visibility = rows[:, 8] if rows.shape[1] > 8 else np.ones(len(rows))
    boxes = np.concatenate([rows[:, 2:4], rows[:, 2:4] + rows[:, 4:6]], axis=1)
    length = _sequence_length(gt_file)
    frames = length if length is not None else int(frame_of.max(initial=-1)) + 1
    out: _GroundTruth = _GroundTruth(frames, {}, {}, {}, {})
    for frame in np.unique(frame_of):
        mask = frame_of == frame
        out.ids[int(frame)] = rows[mask, 1].astype(np.int64)
        out.boxes[int(frame)] = boxes[mask]
        out.classes[int(frame)] = classes[mask]
        out.visibility[int(frame)] = visibility[mask]
    return out


def read_tracks_jsonl(lines: Path | Iterable[str]) -> dict[int, dict[int, list[TrackedBox]]]:
    """edgebuild's tracked-frame JSON lines (``edgebuild track --jsonl``, runtime/streams/records.py) as
    stream -> frame -> boxes; blank lines are skipped, and a frame with no tracks is kept as an empty list."""
    if isinstance(lines, Path):
        with lines.open() as f:
            return read_tracks_jsonl(f.readlines())
    out: dict[int, dict[int, list[TrackedBox]]] = {}
    for line in lines:
        if not line.strip():
            continue
        record = TrackedFrame.from_dict(json.loads(line))
        boxes = out.setdefault(record.stream, {}).setdefault(record.frame, [])
        boxes.extend(TrackedBox(t.id, (t.box[0], t.box[1], t.box[2], t.box[3]), t.cls, t.score) for t in record.tracks)
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from trackers.eval import box_iou

    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), np.float64)
    return np.asarray(box_iou(a, b, box_format="xyxy"), np.float64)


def _drop_dont_care(iou: np.ndarray, dont_care: np.ndarray) -> np.ndarray:
    """Which predictions to keep: those not matched (Hungarian, IoU >= 0.5) to a don't-care ground-truth row."""
    from scipy.optimize import linear_sum_assignment

    keep = np.ones(iou.shape[1], bool)
    if not dont_care.any() or iou.shape[1] == 0:
        return keep
    scores = np.where(iou >= 0.5 - 1e-10, iou, 0.0)
    rows, cols = linear_sum_assignment(-scores)
    matched = scores[rows, cols] > 1e-10
    keep[cols[matched & dont_care[rows]]] = False
    return keep


def _prepare(gt: _GroundTruth, tracks: Tracks, min_visibility: float, class_aware: bool) -> dict[str, Any]:
    """The sequence as ``trackers.eval``'s compute functions take it: per frame 0-indexed gt and tracker ids and
    the IoU matrix between them."""
    frames = max([gt.frames, *(f + 1 for f in tracks)])
    gt_ids, tracker_ids, similarity = [], [], []
    for frame in range(frames):
        g_ids = gt.ids.get(frame, np.zeros(0, np.int64))
        g_boxes = gt.boxes.get(frame, np.zeros((0, 4)))
        g_classes = gt.classes.get(frame, np.zeros(0, np.int64))
        scored = gt.visibility.get(frame, np.zeros(0)) >= min_visibility
        predicted = list(tracks.get(frame, ()))
        p_ids = np.array([b.id for b in predicted if b.id >= 0], np.int64)
        p_boxes = np.array([b.box for b in predicted if b.id >= 0], np.float64).reshape(-1, 4)
        p_classes = np.array([b.cls for b in predicted if b.id >= 0], np.int64)
        iou = _iou(g_boxes, p_boxes)
        keep = _drop_dont_care(iou, ~scored)
        iou = iou[scored][:, keep]
        if class_aware:
            iou = np.where(g_classes[scored][:, None] == p_classes[keep][None, :], iou, 0.0)
        gt_ids.append(g_ids[scored])
        tracker_ids.append(p_ids[keep])
        similarity.append(iou)
    return {"gt_ids": _remap(gt_ids), "tracker_ids": _remap(tracker_ids), "similarity_scores": similarity}


def _remap(ids: list[np.ndarray]) -> list[np.ndarray]:
    """Ids renumbered 0, 1, ... in sorted order, as the metrics index arrays by them."""
    known = np.unique(np.concatenate(ids)) if ids else np.zeros(0, np.int64)
    return [np.searchsorted(known, frame_ids).astype(np.intp) for frame_ids in ids]


def tracking_metrics(ground_truth: Sequence[Path], predicted: Mapping[int, Tracks] | Path, *,
                     min_visibility: float = 0.1, class_aware: bool = False, threshold: float = 0.5) -> TrackingMetrics:
    """HOTA, IDF1, MOTA and their parts of ``predicted`` (stream -> frame -> boxes, or the path of
    ``edgebuild track --jsonl``'s lines, read by ``read_tracks_jsonl``; the i-th gt.txt in
    ``ground_truth`` is stream i, and a stream with no predictions scores as an empty prediction), combined over
    the streams as TrackEval combines sequences. ``threshold``: the IoU of a match for IDF1 and MOTA (HOTA
    averages over 0.05..0.95)."""
    from trackers.eval import (
        aggregate_clear_metrics,
        aggregate_hota_metrics,
        aggregate_identity_metrics,
        compute_clear_metrics,
        compute_hota_metrics,
        compute_identity_metrics,
    )

    if isinstance(predicted, (str, Path)):
        predicted = read_tracks_jsonl(predicted)
    hota, identity, clear = [], [], []
    frames = 0
    for stream, gt_file in enumerate(ground_truth):
        gt = _read_ground_truth(Path(gt_file))
        sequence = _prepare(gt, predicted.get(stream, {}), min_visibility, class_aware)
        frames += len(sequence["gt_ids"])
        hota.append(compute_hota_metrics(**sequence))
        identity.append(compute_identity_metrics(**sequence, threshold=threshold))
        clear.append(compute_clear_metrics(**sequence, threshold=threshold))
    h, i, c = aggregate_hota_metrics(hota), aggregate_identity_metrics(identity), aggregate_clear_metrics(clear)
    return TrackingMetrics(
        HOTA=float(h["HOTA"]), DetA=float(h["DetA"]), AssA=float(h["AssA"]), LocA=float(h["LocA"]),
        IDF1=float(i["IDF1"]), IDP=float(i["IDP"]), IDR=float(i["IDR"]), MOTA=float(c["MOTA"]),
        MOTP=float(c["MOTP"]), IDSW=int(c["IDSW"]), true_positives=int(c["CLR_TP"]),
        false_negatives=int(c["CLR_FN"]), false_positives=int(c["CLR_FP"]), streams=len(ground_truth),
        frames=frames)
