"""The tracking gate's measurement: one ONNX file (FP32 or a candidate) tracking a video set, scored.

Every frame goes the device's way (``edgebuild track``, ``edgebuild.runtime.streams``): the frames of all
streams at one frame number are batched and preprocessed by ``prepare_batch`` with the recipe's own
``task`` (``recipe_task``: the same preprocessing and decode settings the model folder carries), run with
ONNX Runtime on the CPU, decoded by ``detections_of`` and followed by a ``StreamTracker`` per stream. The
streams advance in lock step (the device takes each stream's newest frame as it comes), so a run is
deterministic: the same file and settings give the same tracks.

The set is the user's MOTChallenge folder (``[accuracy.tracking] sequences``) or one generated once under
``build/gate/tracking-set/`` (``edgebuild.datasets.mot_video``). A result is stored under the model's
measurement folder (``build/gate/measured/<model>/tracking/``) by a key of the scored file's content and
everything else it depends on, never the thresholds, so a new ``min_retention`` re-decides without tracking.
"""

from __future__ import annotations

import configparser
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.accuracy.gate_records import TrackingGate, TrackingRow
from edgebuild.content import atomic_output_dir, digest, file_sha256, files_digest, tool_versions
from edgebuild.errors import DataError
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.text import Progress

if TYPE_CHECKING:
    import numpy as np

    from edgebuild.accuracy.tracking.metrics import TrackedBox, TrackingMetrics
    from edgebuild.datasets.mot_video import MotVideoSpec
    from edgebuild.project.config import Project
    from edgebuild.project.tracking_section import TrackingGateSection
    from edgebuild.runtime.streams.batching import BatchLimits

__all__: list[str] = []

SET_DIR = "tracking-set"
#: the most INT8 variants the INT8 choice tracks, best by the gate's metric first, among those that keep its
#: min_retention (each costs one run over the set: about 15 s for the shapes example's 600 frames on 2 cores)
TRACKED_INT8_VARIANTS = 3
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class VideoSequence:
    """One stream of the set: its frames in order (frame 0 first), its gt.txt and its frame rate."""

    name: str
    frames: tuple[Path, ...]
    ground_truth: Path
    fps: float


def _section(project: Project) -> TrackingGateSection:
    section = project.accuracy.tracking
    assert section is not None and section.enabled, "the tracking gate runs only where [accuracy.tracking] is on"
    return section


def enabled(project: Project) -> bool:
    return project.accuracy.tracking is not None and project.accuracy.tracking.enabled


def _spec(section: TrackingGateSection) -> MotVideoSpec:
    from edgebuild.datasets.mot_video import MotVideoSpec

    return MotVideoSpec(streams=section.streams, frames=section.frames, seed=section.seed)


def _read_sequence(folder: Path) -> VideoSequence:
    info = configparser.ConfigParser()
    if (folder / "seqinfo.ini").is_file():
        info.read(folder / "seqinfo.ini")
    seq = info["Sequence"] if info.has_section("Sequence") else {}
    images = folder / seq.get("imDir", "img1")
    suffixes = (seq["imExt"].lower(),) if "imExt" in seq else FRAME_SUFFIXES
    frames = tuple(sorted(p for p in images.glob("*") if p.suffix.lower() in suffixes)) if images.is_dir() else ()
    gt = folder / "gt" / "gt.txt"
    if not frames or not gt.is_file():
        raise DataError(f"{folder}: a tracking sequence needs its frames in {images.name}/ (*.png or *.jpg) and "
                        f"gt/gt.txt; found {len(frames)} frames{'' if gt.is_file() else ' and no gt/gt.txt'}",
                        hint="lay each sequence out as MOTChallenge does: <seq>/img1/000001.jpg, <seq>/gt/gt.txt")
    return VideoSequence(folder.name, frames, gt, float(seq.get("frameRate", 30.0)))


def tracking_sequences(project: Project) -> tuple[str, list[VideoSequence]]:
    """The set in words, and its sequences (the generated one written first where it is not yet)."""
    from edgebuild.datasets.mot_video import write_mot_video_set

    section = _section(project)
    if section.sequences:
        root = project.path(section.sequences)
        folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        if not folders:
            raise DataError(f"accuracy.tracking.sequences: {root} holds no sequence folder",
                            hint="one folder per sequence, each with img1/ and gt/gt.txt (MOTChallenge)")
        return str(root), [_read_sequence(f) for f in folders]
    spec = _spec(section)
    folder = BuildLayout.of(project).gate / SET_DIR / digest(asdict(spec))[:12]
    if not (folder / "done").is_file():
        with atomic_output_dir(folder) as staging:
            write_mot_video_set(staging, spec, mp4=False)
            (staging / "done").write_text(json.dumps(asdict(spec)))
    words = f"generated, {spec.streams} streams x {spec.frames} frames, seed {spec.seed}"
    return words, [_read_sequence(f) for f in sorted(p for p in folder.iterdir() if p.is_dir())]


def tracking_key_parts(project: Project) -> dict[str, str]:
    """What a tracking measurement depends on besides the scored file ({} where the gate is off, so a project
    without the table keeps its gate key)."""
    if not enabled(project):
        return {}
    from edgebuild.accuracy.evaluate import recipe_task

    section = _section(project)
    if section.sequences:
        root = project.path(section.sequences)
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        video = files_digest(files, root)
    else:
        video = digest(asdict(_spec(section)))
    return {"tracking": digest({
        "measurement": "tracking/1", "video": video, "tracker": section.tracker, "min_score": section.min_score,
        "task": digest(asdict(recipe_task(project))),  # the preprocessing and decode the device runs
        "inputs": digest([s.model_dump() for s in project.model.inputs]),
        "tools": digest(tool_versions("onnxruntime", "trackers", "supervision"))})}


def tracking_decision(project: Project) -> dict[str, object]:
    """The tracking settings only the decision reads ({} where the gate is off)."""
    if not enabled(project):
        return {}
    section = _section(project)
    return {"tracking": {"metric": section.metric, "min_retention": section.min_retention,
                         "int8_tracked": TRACKED_INT8_VARIANTS}}


def _limits(project: Project) -> BatchLimits:
    from edgebuild.runtime.streams.batching import BatchLimits

    spec = project.model.inputs[0]
    return BatchLimits(spec.name, spec.min_shape[0], spec.max_shape[0])


def track_onnx(project: Project, onnx: Path, sequences: list[VideoSequence], *, progress: bool = True,
               desc: str = "track") -> dict[int, dict[int, list[TrackedBox]]]:
    """``onnx``'s tracks over ``sequences``: stream -> frame (from 0) -> the confirmed tracks' boxes."""
    import cv2
    from tqdm import tqdm

    from edgebuild.accuracy.evaluate import recipe_task
    from edgebuild.accuracy.lowbit import host_runner
    from edgebuild.accuracy.tracking.metrics import TrackedBox
    from edgebuild.runtime.streams.batching import detections_of, prepare_batch
    from edgebuild.runtime.streams.tracking import StreamTracker

    section = _section(project)
    task, limits = recipe_task(project), _limits(project)
    postprocess = task.postprocess.as_dict()
    runner = host_runner(onnx)  # FP8/NVFP4: ONNX Runtime's basic optimizations only
    trackers = [StreamTracker(section.tracker, seq.fps, section.min_score) for seq in sequences]
    predicted: dict[int, dict[int, list[TrackedBox]]] = {i: {} for i in range(len(sequences))}
    bar = tqdm(total=sum(len(s.frames) for s in sequences), desc=desc, unit="frame", disable=not progress,
               leave=False)
    try:
        for number in range(max(len(s.frames) for s in sequences)):
            images = [(i, _read_frame(cv2, s.frames[number])) for i, s in enumerate(sequences)
                      if number < len(s.frames)]
            runs, _ = prepare_batch(images, task.preprocess, limits)
            for run in runs:
                for stream, found in zip(run.streams, detections_of(runner.run(run.inputs), run, postprocess)):
                    predicted[stream][number] = [TrackedBox(t.id, (t.box[0], t.box[1], t.box[2], t.box[3]), t.cls,
                                                            t.score) for t in trackers[stream].update(found)]
            bar.update(len(images))
    finally:
        bar.close()
    return predicted


def _read_frame(cv2: Any, path: Path) -> np.ndarray:
    """A frame as OpenCV reads it (BGR, what the device's readers hand ``prepare_batch``)."""
    import numpy as np

    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise DataError(f"{path}: not an image OpenCV can read")
    return np.asarray(image)


class TrackingRun:
    """The tracking gate's measurements of one compile: the set made once, each scored file tracked once."""

    def __init__(self, project: Project, store_root: Path, *, force: bool, progress: bool, say: Progress) -> None:
        self.project, self.force, self.progress, self.say = project, force, progress, say
        self.section = _section(project)
        self.folder = store_root / "tracking"
        self.parts = tracking_key_parts(project)
        self.words, self.sequences = tracking_sequences(project)
        self.done: dict[str, tuple[TrackingMetrics, float, bool]] = {}  # by key: each file tracked once a run

    def measure(self, precision: str, onnx: Path) -> tuple[TrackingMetrics, float, bool]:
        """``onnx``'s metrics, seconds and whether they were stored (read back) rather than measured now."""
        external = onnx.with_name(f"{onnx.name}.data")
        key = digest({**self.parts, "onnx": file_sha256(onnx),
                      "data": file_sha256(external) if external.exists() else ""})[:16]
        if key not in self.done:
            self.done[key] = self._measure(precision, onnx, self.folder / f"{key}.json")
        return self.done[key]

    def retention(self, precision: str, onnx: Path, fp32: Path) -> float:
        """``onnx``'s tracking metric (``[accuracy.tracking] metric``) over FP32's, as ``judge`` computes it."""
        reference = getattr(self.measure("fp32", fp32)[0], self.section.metric)
        value = getattr(self.measure(precision, onnx)[0], self.section.metric)
        return value / reference if reference > 0 else 0.0

    def _measure(self, precision: str, onnx: Path, path: Path) -> tuple[TrackingMetrics, float, bool]:
        from edgebuild.accuracy.tracking.metrics import TrackingMetrics, tracking_metrics

        if path.is_file() and not self.force:
            try:
                stored = json.loads(path.read_text())
                metrics = TrackingMetrics(**stored["metrics"])
                self.say(f"gate: tracking {precision} (stored): {_line(metrics)}")
                return metrics, float(stored["seconds"]), True
            except (ValueError, KeyError, TypeError) as exc:
                self.say(f"gate: stored tracking of {precision} unreadable ({exc}); tracking again")
        if not self.progress:  # no bar: one line when the long step starts
            self.say(f"gate: tracking {precision} over {self.words} [{self.section.tracker}]")
        started = time.perf_counter()
        tracks = track_onnx(self.project, onnx, self.sequences, progress=self.progress, desc=f"track {precision}")
        metrics = tracking_metrics([s.ground_truth for s in self.sequences], tracks)
        seconds = round(time.perf_counter() - started, 3)
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"precision": precision, "onnx": str(onnx), "seconds": seconds,
                                            "metrics": metrics.as_dict()}, indent=2))
        self.say(f"gate: tracking {precision}: {_line(metrics)} in {seconds:.1f} s")
        return metrics, seconds, False

    def judge(self, candidates: list[tuple[str, Path]]) -> TrackingGate:
        """Every candidate (FP32 first) tracked and judged on its retention of FP32's metric."""
        measured = [(precision, *self.measure(precision, onnx)) for precision, onnx in candidates]
        metric = self.section.metric
        reference = getattr(measured[0][1], metric)
        rows = []
        for precision, m, seconds, stored in measured:
            value = getattr(m, metric)
            retention = value / reference if reference > 0 else 0.0
            rows.append(TrackingRow(
                precision=precision, HOTA=round(m.HOTA, 6), IDF1=round(m.IDF1, 6), MOTA=round(m.MOTA, 6),
                IDSW=m.IDSW, value=round(value, 6), retention=round(retention, 6),
                passed=retention >= self.section.min_retention, seconds=seconds, stored=stored))
        first = measured[0][1]
        return TrackingGate(metric=metric, min_retention=self.section.min_retention, tracker=self.section.tracker,
                            video_set=self.words, streams=first.streams, frames=first.frames,
                            reference=round(reference, 6), rows=tuple(rows))


def _line(m: TrackingMetrics) -> str:
    return f"HOTA {m.HOTA:.4f}, IDF1 {m.IDF1:.4f}, MOTA {m.MOTA:.4f}, {m.IDSW} id switches"
