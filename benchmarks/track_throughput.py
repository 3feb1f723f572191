"""End-to-end tracking throughput: ``edgebuild track`` against Ultralytics' ``model.track(stream=True)``, the same
YOLOv8n, the same videos, the same host, 1, 4 and 8 streams (issue 46's bench).

    PYTHONPATH=. .venv/bin/python benchmarks/track_throughput.py [--seconds 30] [--rounds 2] [--streams 1,4,8]
        [--size 640x480] [--precisions fp32,shipped] [--json]

- The model: the YOLOv8n ``tracking_vs_ultralytics.py`` trains on the shapes (cached under
  ``build/bench-models/tracking-yolov8n-<key>/best.pt``), 160x160 input. Ultralytics runs that ``best.pt`` (FP32
  PyTorch on the CPU). edgebuild runs what ``edgebuild init --model best.pt --data data.yaml
  --trust-checkpoint`` and ``edgebuild compile`` make of it (ONNX Runtime on the CPU): ``fp32`` from a project
  with ``[quantize] precisions = ["fp32"]`` (the like-for-like row), ``shipped`` from the project as ``init``
  wrote it (what its gate shipped: INT8 here). Both compiled once, cached under ``build/bench-track/``.
- The videos: 4 streams of the generated MOT set (``edgebuild/datasets/mot_video.py``) at ``--size``, shapes
  scaled with the frame, played forward then backward (no jump at the loop) until ``--loop-frames`` frames
  (default: 120 fps x ``--seconds``, enough for one stream here; a run whose videos end first is marked).
  Stream i reads video i mod 4.
- edgebuild: ``run_tracking`` (``edgebuild track --seconds S``) in a process of its own; fps, the stage times
  and the latency (start of a frame's read to its tracks) are its summary's.
- Ultralytics: in a process of its own, one thread per stream with a ``YOLO(best.pt)`` each (Ultralytics' own
  advice for several streams: a model, so a tracker, per thread), ``model.track(source=video, stream=True,
  tracker="bytetrack.yaml", persist=True, imgsz=160, conf=0.1, device="cpu")``. Each thread takes its first
  result (model set-up and warm-up) before the clock starts. Latency is the time ``next()`` takes (read,
  preprocess, inference, NMS, tracking). Stage times are the results' own ``speed``.
- Rounds alternate the order (edgebuild first, then Ultralytics first); the table gives medians over rounds.
  The host's load average is recorded at the start and the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "bench-track"
IMGSZ, CONF, SET_STREAMS, SET_FRAMES = 160, 0.1, 4, 150


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _weights() -> tuple[Path, Path]:
    """(best.pt, its data.yaml): the YOLOv8n tracking_vs_ultralytics.py trains, trained first if not cached."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tracking_vs_ultralytics as peer

    weights, _ = peer.trained_weights()
    return weights, weights.parent / "data" / "data.yaml"


def compiled_folder(weights: Path, data: Path, precision: str) -> Path:
    """The model folder ``edgebuild compile`` writes for ``weights`` (``fp32``: FP32 only; ``shipped``: as
    ``edgebuild init`` wrote the project), compiled once per checkpoint."""
    from click.testing import CliRunner

    from edgebuild.cli import main

    root = OUT / f"project-{precision}-{_sha(weights)}"
    folder = root / "build" / "engines" / "orin"
    if (folder / "recipe.json").exists():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    (root / "best.pt").write_bytes(weights.read_bytes())
    for args in (["init", str(root), "--force", "--model", str(root / "best.pt"), "--data", str(data),
                  "--trust-checkpoint", "--fleet", "orin=orin-nano-8gb@6.2.2"],
                 ["compile", "--target", "orin", "-p", str(root)]):
        if args[0] == "compile" and precision == "fp32":
            toml = root / "edgebuild.toml"
            toml.write_text(toml.read_text() + '\n[quantize]\nprecisions = ["fp32"]\n')
        result = CliRunner().invoke(main, args)
        if result.exit_code != 0:
            raise SystemExit(f"edgebuild {args[0]} failed:\n{result.output}")
    return folder


def videos(size: tuple[int, int], loop_frames: int) -> list[Path]:
    """The MOT set's 4 streams at ``size``, each played forward and backward to ``loop_frames`` frames."""
    import cv2

    from edgebuild.datasets.mot_video import MotVideoSpec, write_mot_video_set

    width, height = size
    folder = OUT / f"videos-{width}x{height}-{loop_frames}"
    paths = [folder / f"stream-{i}.mp4" for i in range(SET_STREAMS)]
    if (folder / "done").exists():
        return paths
    scale = min(width, height) / 160  # the shapes as large against the frame as in the 160x160 set
    spec = MotVideoSpec(streams=SET_STREAMS, frames=SET_FRAMES, width=width, height=height,
                        min_size=16 * scale, max_size=40 * scale)
    sequences = write_mot_video_set(folder / "set", spec, png=False)
    for sequence, path in zip(sequences, paths):
        capture, frames = cv2.VideoCapture(str(sequence / "video.mp4")), []
        while (read := capture.read())[0]:
            frames.append(read[1])
        capture.release()
        cycle = frames + frames[-2:0:-1]
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), spec.fps, (width, height))
        for i in range(loop_frames):
            writer.write(cycle[i % len(cycle)])
        writer.release()
    (folder / "done").write_text("")
    return paths


def run_edgebuild(folder: Path, sources: list[str], seconds: float) -> dict:
    from edgebuild.runtime.streams.pipeline import TrackSettings, run_tracking

    jsonl = OUT / f"tracks-{os.getpid()}.jsonl"
    try:
        summary = run_tracking(folder, TrackSettings(sources=sources, seconds=seconds, min_score=CONF), jsonl,
                               progress=lambda message: None)
    finally:
        jsonl.unlink(missing_ok=True)
    return {"fps": summary["fps"], "frames": summary["frames"], "seconds": summary["seconds"],
            "stage_ms": summary["stage_ms_per_frame"], "latency_ms": summary["latency_ms"],
            "backend": summary["backend"], "batching": summary["batching"],
            "ended_early": summary["seconds"] < seconds - 1.0}


def run_ultralytics(weights: Path, sources: list[str], seconds: float) -> dict:
    """One thread and one ``YOLO`` per stream, ``model.track(stream=True)``, until ``seconds`` are up."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _trained_models

    _trained_models.offline_ultralytics(weights.parent)
    _trained_models._cpu_torchvision.patch_nms()  # Ultralytics' predict calls torchvision's NMS
    from ultralytics import YOLO

    clock: dict[str, float] = {}

    def start_clock() -> None:  # run once, before any thread passes the barrier
        clock["start"] = time.perf_counter()
        clock["end"] = clock["start"] + seconds

    ready = threading.Barrier(len(sources) + 1, action=start_clock)
    errors: list[BaseException] = []
    per_stream: list[dict] = [{"frames": 0, "latency": [], "speed": [], "ended": False} for _ in sources]

    def track(index: int, source: str) -> None:
        try:
            follow(index, source)
        except BaseException as error:  # noqa: BLE001 (handed to the main thread, which fails the run)
            errors.append(error)
            ready.abort()

    def follow(index: int, source: str) -> None:
        model, mine = YOLO(str(weights)), per_stream[index]
        results = model.track(source=source, stream=True, tracker="bytetrack.yaml", persist=True, imgsz=IMGSZ,
                              conf=CONF, device="cpu", verbose=False)
        next(results)  # set-up and warm-up, before the clock
        ready.wait(timeout=600)
        while time.perf_counter() < clock["end"]:
            start = time.perf_counter()
            result = next(results, None)
            if result is None:
                mine["ended"] = True
                return
            mine["latency"].append(time.perf_counter() - start)
            mine["speed"].append(result.speed)
            mine["frames"] += 1
        results.close()

    threads = [threading.Thread(target=track, args=(i, s), daemon=True) for i, s in enumerate(sources)]
    for thread in threads:
        thread.start()
    try:
        ready.wait(timeout=600)
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    wall = time.perf_counter() - clock["start"]
    frames = sum(s["frames"] for s in per_stream)
    latency = sorted(x for s in per_stream for x in s["latency"])
    speeds = [x for s in per_stream for x in s["speed"]]
    stage_ms = {k: round(statistics.fmean(x[k] for x in speeds), 3) for k in speeds[0]} if speeds else {}
    return {"fps": round(frames / wall, 2), "frames": frames, "seconds": round(wall, 3), "stage_ms": stage_ms,
            "latency_ms": _percentiles(latency), "ended_early": any(s["ended"] for s in per_stream)}


def _percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}

    def rank(q: float) -> float:
        return round(1000 * seconds[min(len(seconds) - 1, int(q * len(seconds)))], 3)

    return {"p50": rank(0.5), "p99": rank(0.99), "max": round(1000 * seconds[-1], 3)}


def _worker(side: str, target: Path, sources: list[str], seconds: float, timeout: float) -> dict:
    """One side's run in a fresh process (its own thread pools, nothing warm from the other side)."""
    worker = "ultralytics" if side == "ultralytics" else "edgebuild"
    command = [sys.executable, __file__, "--worker", worker, "--target", str(target), "--seconds", str(seconds),
               *[a for s in sources for a in ("--source", s)]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"{side} worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], *keys: str) -> float:
    values = []
    for run in runs:
        value = run
        for key in keys:
            value = value[key]
        values.append(value)
    return round(statistics.median(values), 3)


def summarize(runs: dict, streams: list[int], sides: list[str]) -> list[dict]:
    rows = []
    for side in [s for s in sides if s != "ultralytics"]:
        for n in streams:
            ours, theirs = runs[(side, n)], runs[("ultralytics", n)]
            fps, peer = _median(ours, "fps"), _median(theirs, "fps")
            rows.append({"edgebuild": side, "precision": ours[0]["precision"], "streams": n, "edgebuild_fps": fps,
                         "ultralytics_fps": peer, "ratio": round(fps / peer, 2) if peer else None,
                         "fps_rounds": [r["fps"] for r in ours], "ultralytics_fps_rounds": [r["fps"] for r in theirs],
                         "stage_ms": {k: _median(ours, "stage_ms", k) for k in ours[0]["stage_ms"]},
                         "ultralytics_stage_ms": {k: _median(theirs, "stage_ms", k) for k in theirs[0]["stage_ms"]},
                         "latency_ms": {k: _median(ours, "latency_ms", k) for k in ("p50", "p99")},
                         "ultralytics_latency_ms": {k: _median(theirs, "latency_ms", k) for k in ("p50", "p99")},
                         "backend": ours[0]["backend"], "mean_rows": ours[0]["batching"]["mean_rows"],
                         "ended_early": any(r["ended_early"] for r in ours + theirs)})
    return rows


def render(rows: list[dict], load: dict) -> str:
    lines = [f"load average (1, 5, 15 min): start {load['start']}, end {load['end']}",
             "| streams | edgebuild | edgebuild fps | Ultralytics fps | ratio | latency p50/p99 ms edgebuild | "
             "Ultralytics | edgebuild ms/frame: decode, pre, infer, out, track, publish | Ultralytics ms/frame: "
             "pre, infer, post |", "|---" * 9 + "|"]
    for r in rows:
        s, u = r["stage_ms"], r["ultralytics_stage_ms"]
        lines.append(
            f"| {r['streams']} | {r['precision']} | {r['edgebuild_fps']:.1f} | {r['ultralytics_fps']:.1f} | "
            f"{r['ratio'] or 0:.2f}x | {r['latency_ms']['p50']:.1f} / {r['latency_ms']['p99']:.1f} | "
            f"{r['ultralytics_latency_ms']['p50']:.1f} / {r['ultralytics_latency_ms']['p99']:.1f} | "
            + ", ".join(f"{s[k]:.2f}" for k in ("video_decode", "preprocess", "inference", "output_decode",
                                                 "tracking", "publish"))
            + " | " + ", ".join(f"{u.get(k, 0):.2f}" for k in ("preprocess", "inference", "postprocess"))
            + (" | ENDED EARLY" if r["ended_early"] else " |"))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per configuration and side (default 30)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating edgebuild/Ultralytics order (default 2)")
    parser.add_argument("--streams", default="1,4,8", help="stream counts (default 1,4,8)")
    parser.add_argument("--size", default="640x480", help="the videos' WIDTHxHEIGHT (default 640x480)")
    parser.add_argument("--precisions", default="fp32,shipped",
                        help="edgebuild's models: fp32 (FP32 only) and/or shipped (what the gate shipped)")
    parser.add_argument("--loop-frames", type=int, help="frames per video (default 120 x --seconds)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--worker", choices=("edgebuild", "ultralytics"), help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", action="append", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.worker:
        run = run_edgebuild if args.worker == "edgebuild" else run_ultralytics
        print(json.dumps(run(args.target, args.source, args.seconds)))
        return
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    streams = [int(n) for n in args.streams.split(",")]
    width, height = (int(x) for x in args.size.lower().split("x"))
    weights, data = _weights()
    targets = {p: compiled_folder(weights, data, p) for p in args.precisions.split(",")}
    paths = videos((width, height), args.loop_frames or int(120 * args.seconds))
    sides = [*targets, "ultralytics"]
    runs: dict[tuple[str, int], list[dict]] = {(side, n): [] for side in sides for n in streams}
    timeout = args.seconds + 300
    for round_ in range(args.rounds):
        for n in streams:
            sources = [str(paths[i % len(paths)]) for i in range(n)]
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                target = weights if side == "ultralytics" else targets[side]
                result = _worker(side, target, sources, args.seconds, timeout)
                if side != "ultralytics":
                    result["precision"] = json.loads((target / "recipe.json").read_text())["precision"]
                runs[(side, n)].append(result)
                print(f"round {round_ + 1}, {n} stream(s), {side}: {result['fps']} fps", file=sys.stderr)
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    rows = summarize(runs, streams, sides)
    report = {"host": {"cpus": os.cpu_count(), "load_average": load}, "seconds": args.seconds,
              "rounds": args.rounds, "size": [width, height], "weights": str(weights), "rows": rows}
    (OUT / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1) if args.json else render(rows, load))


if __name__ == "__main__":
    main()
