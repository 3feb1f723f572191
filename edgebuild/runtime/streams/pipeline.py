"""From cameras to tracked objects: sources read in threads, their newest frames batched into the engine, the
detections decoded as the recipe says, a tracker per stream, every tracked frame handed to ``on_frame``.

``run_tracking`` is ``edgebuild track`` (the host's click command and the device's argparse command both call
it): the model folder chosen, the JSON lines file attached as the first ``on_frame`` callback, a summary at
the end. Other publishers (server-sent events, MQTT, ...) attach as callbacks of their own.

Time is measured per stage and frame: decoding the video (in the reader), preprocessing, inference and the
decode of the outputs (a batch's time shared by its frames), tracking and publishing; and each frame's latency,
from the start of its read to the moment its tracks are handed to ``on_frame`` (p50, p99 and max).

Python 3.8, numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.group import model_folders
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.streams.batching import BatchLimits, PreparedBatch, detections_of, prepare_batch
from edgebuild.runtime.streams.publish import (
    AnnotatedVideo,
    EventStream,
    JsonLinesWriter,
    MqttPublisher,
    Publisher,
    ResultsOut,
)
from edgebuild.runtime.streams.records import TrackedFrame
from edgebuild.runtime.streams.regions import RegionWatcher, load_regions
from edgebuild.runtime.streams.sources import Frame, Source, StreamReader, open_capture, parse_source
from edgebuild.runtime.streams.tracking import StreamTracker

__all__ = ["render_summary", "run_tracking"]

STAGES = ("video_decode", "preprocess", "inference", "output_decode", "tracking", "publish")
Progress = Callable[[str], None]
#: a tracked frame's receiver: the frame, and its picture (HxWx3 BGR uint8) for those that draw it
OnFrame = Callable[[TrackedFrame, Any], Any]


@dataclass(frozen=True)
class TrackSettings:
    """What ``edgebuild track`` was asked: the sources as written and how to run them."""

    sources: Sequence[str]
    tracker: str = "bytetrack"
    max_fps: Optional[float] = None
    frames: Optional[int] = None  # per stream
    seconds: Optional[float] = None
    min_score: float = 0.1
    codec: str = "h264"
    backend: str = "auto"
    engine_cache: Optional[Path] = None
    model: Optional[str] = None  # a group folder's model (its served name)
    max_reconnects: Optional[int] = 5
    # results out beside the JSON lines (publish.py): server-sent events, MQTT, region events, annotated video
    sse_port: Optional[int] = None
    mqtt: Optional[str] = None  # HOST[:PORT]
    mqtt_topic: str = "edgebuild"
    regions: Optional[Path] = None
    video: Optional[Path] = None
    video_stream: int = 0
    # per stream, in the order of ``sources`` (shorter: the rest unnamed, at ``max_fps``): each stream's name
    # (the records' "name") and its own frame rate cap (``[[streams]] max_fps``)
    names: Sequence[Optional[str]] = ()
    stream_max_fps: Sequence[Optional[float]] = ()

    def name_of(self, stream: int) -> Optional[str]:
        return self.names[stream] if stream < len(self.names) else None

    def max_fps_of(self, stream: int) -> Optional[float]:
        own = self.stream_max_fps[stream] if stream < len(self.stream_max_fps) else None
        return own or self.max_fps


class StageTimes:
    """Seconds per stage, summed over frames; ``ms_per_frame`` their means. ``latencies``: each frame's seconds
    from the start of its read to its result; ``latency_ms`` their p50, p99 and max."""

    def __init__(self) -> None:
        self.total = {stage: 0.0 for stage in STAGES}
        self.frames = 0
        self.latencies = array("d")  # 8 bytes a frame: an hour at 150 fps is 4 MB

    def add(self, stage: str, seconds: float) -> None:
        self.total[stage] += seconds

    def ms_per_frame(self) -> Dict[str, float]:
        return {stage: round(1000 * s / self.frames, 3) if self.frames else 0.0 for stage, s in self.total.items()}

    def latency_ms(self) -> Dict[str, float]:
        ordered = sorted(self.latencies)
        if not ordered:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}

        def rank(q: float) -> float:  # nearest rank: a value some frame really had
            return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

        return {"p50": rank(0.50), "p99": rank(0.99), "max": round(1000 * ordered[-1], 3)}


@dataclass
class _Stream:
    reader: StreamReader
    tracker: StreamTracker
    tracked: int = 0
    last_frame: Optional[int] = None


@dataclass
class _Batches:
    runs: int = 0
    rows: int = 0
    padded: int = 0
    sizes: Dict[int, int] = field(default_factory=dict)


class TrackingPipeline:
    """Sources, one runner, a tracker per stream; ``run()`` until the sources end or ``--frames``/``--seconds``.

    ``runner.run({input: batch}) -> {output: array}``; ``opener(source)`` a capture (OpenCV's by default);
    ``on_frame``: callbacks each tracked frame is handed to, in order.
    """

    def __init__(self, recipe: Recipe, runner: Any, settings: TrackSettings, *, on_frame: Sequence[OnFrame] = (),
                 opener: Optional[Callable[[Source], Any]] = None, jetpack_major: Optional[int] = None,
                 progress: Progress = lambda message: None) -> None:
        if recipe.task is None or recipe.task.kind != "detection":
            raise ConfigError("{}: tracking follows a detector's boxes; this model's task is {}".format(
                recipe.model_name, recipe.task.kind if recipe.task else "not recorded"),
                hint="track with a detection model (pose, segmentation and OBB tracking are not done yet)")
        self.recipe, self.runner, self.settings, self.progress = recipe, runner, settings, progress
        self.task = recipe.task
        self.limits = BatchLimits.of(recipe)
        self.on_frame = list(on_frame)
        self.times = StageTimes()
        self.batches = _Batches()
        open_with = opener or (lambda source: open_capture(source, jetpack_major))
        sources = [parse_source(text, i, settings.codec) for i, text in enumerate(settings.sources)]
        self.streams = [_Stream(StreamReader(s, open_with, max_fps=settings.max_fps_of(s.index),
                                             max_frames=settings.frames, max_reconnects=settings.max_reconnects,
                                             progress=progress),
                                StreamTracker(settings.tracker, settings.max_fps_of(s.index) or 30.0,
                                              settings.min_score)) for s in sources]
        self.arrived = threading.Event()
        for stream in self.streams:
            stream.reader.slot.arrived = self.arrived
        self.wall_s = 0.0

    def run(self) -> JsonObject:
        started = time.monotonic()
        deadline = started + self.settings.seconds if self.settings.seconds else None
        for stream in self.streams:
            stream.reader.start()
        shown = started
        try:
            while True:
                self.arrived.clear()
                ready = [(s, f) for s, f in ((s, s.reader.slot.take()) for s in self.streams) if f is not None]
                if ready:
                    self._process(ready)
                elif all(s.reader.finished.is_set() for s in self.streams) and not self._waiting():
                    break
                else:
                    self.arrived.wait(0.05)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if now - shown >= 2.0:
                    shown = now
                    self.progress(self._progress_line(now - started))
        except KeyboardInterrupt:
            self.progress("track: interrupted; stopping the sources")
        finally:
            for stream in self.streams:
                stream.reader.stop()
            for stream in self.streams:
                stream.reader.join(timeout=2.0)
        self.wall_s = time.monotonic() - started
        return self.summary()

    def _waiting(self) -> bool:
        return any(s.reader.slot.wait_for_any(0.0) for s in self.streams)

    def _process(self, ready: List[Tuple[_Stream, Frame]]) -> None:
        runs, preprocess_s = prepare_batch([(f.stream, f.image) for _, f in ready], self.task.preprocess,
                                           self.limits)
        by_stream = {f.stream: (s, f) for s, f in ready}
        self.times.add("preprocess", preprocess_s)
        for run in runs:
            self._run_batch(run, by_stream)

    def _run_batch(self, run: PreparedBatch, by_stream: Dict[int, Tuple[_Stream, Frame]]) -> None:
        start = time.perf_counter()
        outputs = self.runner.run(run.inputs)
        inference_s = time.perf_counter() - start
        start = time.perf_counter()
        detections = detections_of(outputs, run, self.task.postprocess.as_dict())
        self.times.add("inference", inference_s)
        self.times.add("output_decode", time.perf_counter() - start)
        self.batches.runs += 1
        self.batches.rows += len(run.streams)
        self.batches.padded += run.padded
        size = len(run.streams) + run.padded
        self.batches.sizes[size] = self.batches.sizes.get(size, 0) + 1
        for index, found in enumerate(detections):
            stream, frame = by_stream[run.streams[index]]
            start = time.perf_counter()
            tracks = stream.tracker.update(found)
            self.times.add("tracking", time.perf_counter() - start)
            start = time.perf_counter()
            tracked = TrackedFrame(frame.stream, frame.number, tracks, frame.time, self.settings.name_of(frame.stream))
            self.times.latencies.append(time.time() - frame.time + frame.decode_s)
            for callback in self.on_frame:
                callback(tracked, frame.image)
            self.times.add("publish", time.perf_counter() - start)
            self.times.add("video_decode", frame.decode_s)
            self.times.frames += 1
            stream.tracked += 1
            stream.last_frame = frame.number

    def _progress_line(self, elapsed_s: float) -> str:
        per_stream = ", ".join("{}: {}".format(s.reader.source.index, s.tracked) for s in self.streams)
        return "track: {} frames in {:.1f} s ({:.1f} fps); per stream {}".format(
            self.times.frames, elapsed_s, self.times.frames / max(elapsed_s, 1e-9), per_stream)

    def summary(self) -> JsonObject:
        streams = [{"stream": s.reader.source.index, "source": s.reader.source.uri, "kind": s.reader.source.kind,
                    "frames": s.tracked, "read": s.reader.frames_read, "dropped": s.reader.dropped,
                    "reconnects": s.reader.reconnects, "errors": list(s.reader.errors),
                    "fps": round(s.tracked / self.wall_s, 2) if self.wall_s else 0.0} for s in self.streams]
        return {"model": self.recipe.model_name, "tracker": self.settings.tracker, "streams": streams,
                "frames": self.times.frames, "seconds": round(self.wall_s, 3),
                "fps": round(self.times.frames / self.wall_s, 2) if self.wall_s else 0.0,
                "stage_ms_per_frame": self.times.ms_per_frame(), "latency_ms": self.times.latency_ms(),
                "batching": {"profile": self.limits.describe(), "runs": self.batches.runs,
                             "mean_rows": round(self.batches.rows / self.batches.runs, 2) if self.batches.runs else 0,
                             "padded_rows": self.batches.padded,
                             "sizes": {str(k): v for k, v in sorted(self.batches.sizes.items())}}}


def render_summary(summary: JsonObject) -> str:
    """The summary as the lines ``edgebuild track`` ends with."""
    lines = ["track: {} frames in {:.1f} s, {:.1f} fps ({}, {}; {} runs, {} rows each on average)".format(
        summary["frames"], summary["seconds"], summary["fps"], summary["tracker"], summary["batching"]["profile"],
        summary["batching"]["runs"], summary["batching"]["mean_rows"])]
    for s in summary["streams"]:
        lines.append("  stream {stream} ({kind} {source}): {frames} frames tracked, {read} read, {dropped} dropped, "
                     "{reconnects} reconnects, {fps} fps".format(**s))
        lines += ["    FAILED: " + error for error in s["errors"]]
    lines.append("  ms per frame: " + ", ".join("{} {:.2f}".format(k, v)
                                                for k, v in summary["stage_ms_per_frame"].items()))
    lines.append("  latency, read to result: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max:.1f} ms".format(
        **summary["latency_ms"]))
    lines += ["  out: " + line for line in summary.get("published", [])]
    return "\n".join(lines)


def track_settings(values: Dict[str, Any]) -> TrackSettings:
    """The settings from the command line's values (``options.TRACK``'s names, argparse's or click's)."""
    return TrackSettings(sources=list(values["source"] or []), tracker=values["tracker"], max_fps=values["max_fps"],
                         frames=values["frames"], seconds=values["seconds"], min_score=values["min_score"],
                         codec=values["codec"], backend=values["backend"], engine_cache=values["engine_cache"],
                         model=values["model"], sse_port=values.get("sse_port"), mqtt=values.get("mqtt"),
                         mqtt_topic=values.get("mqtt_topic") or "edgebuild", regions=values.get("regions"),
                         video=values.get("video"), video_stream=values.get("video_stream") or 0)


def results_out(settings: TrackSettings, jsonl: Path, class_names: Sequence[str], fps: float,
                progress: Progress) -> ResultsOut:
    """Where the tracked frames go: the JSON lines file, then what ``settings`` asks for (server-sent
    events, MQTT, an annotated video), with the region events of ``settings.regions`` to each."""
    regions = load_regions(str(settings.regions)) if settings.regions else []
    publishers: List[Publisher] = [JsonLinesWriter(str(jsonl), fresh=True)]
    try:
        if settings.sse_port is not None:
            stream = EventStream(settings.sse_port)
            progress("track: server-sent events on port {} (GET /tracks, /events, /health)".format(stream.port))
            publishers.append(stream)
        if settings.mqtt:
            host, _, port = settings.mqtt.rpartition(":") if ":" in settings.mqtt else (settings.mqtt, "", "1883")
            publishers.append(MqttPublisher(host, int(port), settings.mqtt_topic))
            progress("track: MQTT to {}:{} under {}/stream/<i>/tracks and .../events".format(
                host, port, settings.mqtt_topic))
        if settings.video:
            publishers.append(AnnotatedVideo(str(settings.video), fps, settings.video_stream, class_names, regions))
    except BaseException:
        for publisher in publishers:
            publisher.close()
        raise
    return ResultsOut(publishers, RegionWatcher(regions) if regions else None)


def choose_model(folder: Path, name: Optional[str]) -> Path:
    """The model folder to track with: the folder itself, or a group folder's detector (``name`` where it has
    more than one)."""
    found = model_folders(folder)
    if name is not None:
        if name not in found:
            raise ConfigError("{} has no model {!r} (it has {})".format(folder, name, ", ".join(sorted(found))))
        return found[name]
    detectors = {n: p for n, p in found.items() if _is_detector(p)}
    if len(detectors) == 1:
        return next(iter(detectors.values()))
    raise ConfigError("{} holds {} detection models ({}): say which with --model".format(
        folder, len(detectors), ", ".join(sorted(detectors)) or "none"))


def _is_detector(folder: Path) -> bool:
    task = Recipe.load(folder).task
    return task is not None and task.kind == "detection"


def jetpack_major() -> Optional[int]:
    """This device's JetPack (5 for L4T R35, 6 for R36), None off a Jetson."""
    from edgebuild.runtime.engines.device import probe

    l4t = probe().l4t
    if not l4t:
        return None
    return {32: 4, 35: 5, 36: 6}.get(int(l4t.split(".")[0]))


def run_tracking(folder: Path, options: Union[TrackSettings, Dict[str, Any]], jsonl: Path, *, progress: Progress,
                 on_frame: Sequence[OnFrame] = ()) -> JsonObject:
    """``edgebuild track``: track the sources of ``options`` (the settings, or the command line's values as
    ``track_settings`` reads them) with the model in ``folder`` into ``jsonl``; the summary
    (``render_summary`` writes it as text). Fails only where no source gave a frame."""
    from edgebuild.runtime.engines.backends.select import load_backend

    settings = options if isinstance(options, TrackSettings) else track_settings(options)
    if not settings.sources:
        raise ConfigError("no --source given", hint="give one or more: a video file, rtsp://..., /dev/videoN, csi://N")
    model = choose_model(Path(folder), settings.model)
    recipe = Recipe.load(model)
    runner, why = load_backend(model, settings.backend, settings.engine_cache, progress=progress, recipe=recipe)
    out = results_out(settings, jsonl, recipe.task.classes if recipe.task is not None else [],
                      settings.max_fps or 30.0, progress)
    try:
        pipeline = TrackingPipeline(recipe, runner, settings, on_frame=[out.on_frame, *on_frame],
                                    jetpack_major=jetpack_major(), progress=progress)
        progress("track: {} ({}) on {} stream(s), {}, tracker {}".format(
            recipe.model_name, why, len(pipeline.streams), pipeline.limits.describe(), settings.tracker))
        summary = pipeline.run()
    finally:
        out.close()
    summary.update(backend=why, jsonl=str(jsonl), published=out.summary().splitlines())
    failed = [s for s in summary["streams"] if s["errors"]]
    if failed and len(failed) == len(summary["streams"]) and not summary["frames"]:
        raise ConfigError("no source gave a frame: " + "; ".join(e for s in failed for e in s["errors"]),
                          hint="check each --source: a video file's path, an RTSP URL, /dev/videoN, csi://N")
    return summary
