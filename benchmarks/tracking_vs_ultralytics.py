"""The tracking gate's peer: the same kind of detector tracked by Ultralytics' own ByteTrack, scored on the generated
MOT set (edgebuild/datasets/mot_video.py) with edgebuild's tracking metrics (edgebuild/accuracy/tracking/).

    .venv/bin/python benchmarks/tracking_vs_ultralytics.py [--weights best.pt] [--source png|mp4|both]
        [--edgebuild-jsonl tracks.jsonl] [--streams 4] [--frames 150]

Without ``--weights`` a YOLOv8n is trained from ``yolov8n.yaml`` (random init, nothing downloaded) on the shapes
example's generated images (examples/shapes-detector/shapes_detector/data.py, 160x160) on the CPU and cached
under ``build/bench-models/tracking-yolov8n-<key>/``. Each stream is then tracked by
``YOLO(best.pt).track(source=..., tracker="bytetrack.yaml", persist=True)`` (a fresh model, so a fresh tracker,
per stream), from the lossless PNG frames and/or the MP4, and scored: HOTA, DetA, AssA, IDF1, MOTA, IDSW.
``--edgebuild-jsonl`` scores ``edgebuild track --jsonl``'s output on the same set beside it (the gate's FP32 is
to be within 0.01 of Ultralytics' HOTA and IDF1). Prints one JSON object; writes it to ``--out``/results.json.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("YOLO_AUTOINSTALL", "False")  # never pip-install into the venv (its trackers need `lap`)
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "examples" / "shapes-detector"))
sys.path.insert(0, str(ROOT))
import _trained_models  # noqa: E402 (a sibling module of this script folder)
from shapes_detector import data as shapes  # noqa: E402 (the example's generator)

from edgebuild.accuracy.tracking.metrics import TrackedBox, tracking_metrics  # noqa: E402
from edgebuild.datasets.mot_video import MotVideoSpec, write_mot_video_set  # noqa: E402

#: the training's settings: all of them go into the cache key
TRAINING = {"train_images": 800, "val_images": 100, "epochs": 20, "batch": 16, "size": 160, "optimizer": "AdamW",
            "lr0": 0.002, "seed": 11, "data_version": 1}


def _cache_folder() -> Path:
    versions = {d: importlib.metadata.version(d) for d in ("torch", "ultralytics")}
    key = hashlib.sha256(json.dumps([TRAINING, versions], sort_keys=True).encode()).hexdigest()[:12]
    return _trained_models.CACHE / f"tracking-yolov8n-{key}"


def _shapes_yolo_set(root: Path) -> Path:
    """The example's shapes as a YOLO set (images/{train,val}, labels/{train,val}, data.yaml)."""
    from PIL import Image

    for split, count, seed in (("train", TRAINING["train_images"], TRAINING["seed"]),
                               ("val", TRAINING["val_images"], TRAINING["seed"] + 1)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            image, boxes, labels = shapes.render_sample(np.random.default_rng([seed, i]))
            Image.fromarray(image).save(root / "images" / split / f"{i:05d}.png")
            size = shapes.IMAGE_SIZE
            lines = [f"{int(k)} {(b[0] + b[2]) / 2 / size:.6f} {(b[1] + b[3]) / 2 / size:.6f} "
                     f"{(b[2] - b[0]) / size:.6f} {(b[3] - b[1]) / size:.6f}" for b, k in zip(boxes, labels)]
            (root / "labels" / split / f"{i:05d}.txt").write_text("\n".join(lines) + "\n")
    names = "".join(f"  {i}: {n}\n" for i, n in enumerate(shapes.CLASS_NAMES))
    (root / "data.yaml").write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n{names}")
    return root / "data.yaml"


def trained_weights() -> tuple[Path, dict]:
    """The cached YOLOv8n trained on the shapes, training it first if the cache lacks it: (best.pt, facts)."""
    folder = _cache_folder()
    done = folder / "done.json"
    if done.exists():
        return folder / "best.pt", json.loads(done.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    data_yaml = _shapes_yolo_set(folder / "data")
    _trained_models.offline_ultralytics(folder)
    _trained_models._cpu_torchvision.patch_nms()
    from ultralytics import YOLO
    from ultralytics.engine.trainer import BaseTrainer

    BaseTrainer.read_results_csv = lambda self: {}  # it needs polars only to copy results.csv into the checkpoint
    started = time.perf_counter()
    YOLO("yolov8n.yaml").train(
        data=str(data_yaml), epochs=TRAINING["epochs"], imgsz=TRAINING["size"], batch=TRAINING["batch"],
        nbs=TRAINING["batch"], optimizer=TRAINING["optimizer"], lr0=TRAINING["lr0"], warmup_epochs=1,
        close_mosaic=5, device="cpu", workers=2, plots=False, amp=False, val=False, seed=0,
        project=str(folder / "runs"), name="train", exist_ok=True, verbose=False)
    trained_s = time.perf_counter() - started
    weights = folder / "runs" / "train" / "weights"
    shutil.copy(weights / "best.pt" if (weights / "best.pt").exists() else weights / "last.pt", folder / "best.pt")
    val = YOLO(str(folder / "best.pt")).val(data=str(data_yaml), imgsz=TRAINING["size"], batch=16, device="cpu",
                                           plots=False, workers=0, project=str(folder / "runs"), name="val",
                                           exist_ok=True, verbose=False)
    facts = {"train_s": round(trained_s, 1), **TRAINING, "val_mAP50-95": round(float(val.box.map), 4),
             "val_mAP50": round(float(val.box.map50), 4)}
    done.write_text(json.dumps(facts, indent=1) + "\n")
    return folder / "best.pt", facts


def track_with_ultralytics(weights: Path, sequence: Path, source: str, imgsz: int = 160,
                           conf: float = 0.1) -> dict[int, list[TrackedBox]]:
    """One stream tracked by Ultralytics' ByteTrack: frame (from 0) -> the confirmed tracks' boxes."""
    from ultralytics import YOLO

    model = YOLO(str(weights))  # a fresh model per stream: its tracker starts empty
    path = sequence / "img1" if source == "png" else sequence / "video.mp4"
    tracks: dict[int, list[TrackedBox]] = {}
    results = model.track(source=str(path), tracker="bytetrack.yaml", persist=True, imgsz=imgsz, conf=conf,
                          device="cpu", stream=True, verbose=False)
    for frame, result in enumerate(results):
        boxes = result.boxes
        if boxes is None or boxes.id is None:
            tracks[frame] = []
            continue
        tracks[frame] = [TrackedBox(int(i), (float(b[0]), float(b[1]), float(b[2]), float(b[3])), int(c), float(s))
                         for i, b, c, s in zip(boxes.id.tolist(), boxes.xyxy.tolist(), boxes.cls.tolist(),
                                               boxes.conf.tolist())]
    return tracks


def _frames(sequence: Path, source: str) -> list[np.ndarray]:
    """A stream's frames, RGB, from its PNG folder or its MP4."""
    import cv2

    if source == "png":
        return [cv2.imread(str(p))[..., ::-1] for p in sorted((sequence / "img1").glob("*.png"))]
    capture, frames = cv2.VideoCapture(str(sequence / "video.mp4")), []
    while (read := capture.read())[0]:
        frames.append(read[1][..., ::-1])
    capture.release()
    return frames


def track_example_detector(sequence: Path, source: str, conf: float = 0.1) -> dict[int, list[TrackedBox]]:
    """One stream: the shapes example's FP32 detector (the model the gate compiles; PyTorch on the CPU, its own
    preprocessing and decoding) and Ultralytics' BYTETracker with bytetrack.yaml, fed as ``model.track`` feeds it."""
    import torch
    from shapes_detector import INPUT_SIZE, MEAN, RESIZE, STD, build_model
    from ultralytics.engine.results import Boxes
    from ultralytics.trackers.byte_tracker import BYTETracker
    from ultralytics.utils import YAML, IterableSimpleNamespace
    from ultralytics.utils.checks import check_yaml

    from edgebuild.runtime.base.vision import DetectionParams, PreprocessSpec, decode_detections, preprocess

    model = build_model()
    weights = ROOT / "examples" / "shapes-detector" / "weights" / "shapes_detector.pt"
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True), strict=True)
    model.eval()
    spec = PreprocessSpec(input_size=INPUT_SIZE, resize=RESIZE, mean=MEAN, std=STD)
    params = DetectionParams(score_threshold=conf, nms_iou=0.7, max_detections=100)  # Ultralytics' track defaults
    tracker = BYTETracker(IterableSimpleNamespace(**YAML.load(check_yaml("bytetrack.yaml"))))
    tracks: dict[int, list[TrackedBox]] = {}
    for frame, pixels in enumerate(_frames(sequence, source)):
        tensor, transform = preprocess(pixels, spec)
        with torch.no_grad():
            out = model(torch.from_numpy(tensor[None]))
        det = decode_detections(out["boxes"][0].numpy(), out["scores"][0].numpy(), params)
        xyxy = np.asarray(transform.boxes_to_original(det["boxes"]), np.float32).reshape(-1, 4)
        data = np.concatenate([xyxy, det["scores"].reshape(-1, 1), det["labels"].reshape(-1, 1)], 1)
        found = tracker.update(Boxes(data.astype(np.float32), pixels.shape[:2]), pixels)
        tracks[frame] = [TrackedBox(int(t[4]), (float(t[0]), float(t[1]), float(t[2]), float(t[3])), int(t[6]),
                                    float(t[5])) for t in found]
    return tracks


def _rounded(metrics: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, help="an Ultralytics detector trained on the shapes (best.pt)")
    parser.add_argument("--source", choices=("png", "mp4", "both"), default="both")
    parser.add_argument("--edgebuild-jsonl", type=Path, help="edgebuild track --jsonl's output on the same set")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "tracking-bench")
    args = parser.parse_args()

    weights, facts = (args.weights, {"weights": str(args.weights)}) if args.weights else trained_weights()
    _trained_models.offline_ultralytics(weights.parent)
    _trained_models._cpu_torchvision.patch_nms()  # Ultralytics' predict calls torchvision's NMS
    spec = MotVideoSpec(streams=args.streams, frames=args.frames)
    shutil.rmtree(args.out / "set", ignore_errors=True)
    sequences = write_mot_video_set(args.out / "set", spec)
    gt_files = [s / "gt" / "gt.txt" for s in sequences]
    report: dict = {"detector": facts, "set": {"streams": spec.streams, "frames": spec.frames, "seed": spec.seed,
                                               "size": [spec.width, spec.height]}}
    for source in ("png", "mp4") if args.source == "both" else (args.source,):
        started = time.perf_counter()
        predicted = {i: track_with_ultralytics(weights, s, source) for i, s in enumerate(sequences)}
        seconds = time.perf_counter() - started
        report[f"ultralytics bytetrack ({source})"] = {**_rounded(tracking_metrics(gt_files, predicted).as_dict()),
                                                       "seconds": round(seconds, 1)}
        started = time.perf_counter()
        predicted = {i: track_example_detector(s, source) for i, s in enumerate(sequences)}
        seconds = time.perf_counter() - started
        report[f"shapes example FP32 + ultralytics BYTETracker ({source})"] = {
            **_rounded(tracking_metrics(gt_files, predicted).as_dict()), "seconds": round(seconds, 1)}
    if args.edgebuild_jsonl:
        report["edgebuild track"] = _rounded(tracking_metrics(gt_files, args.edgebuild_jsonl).as_dict())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
