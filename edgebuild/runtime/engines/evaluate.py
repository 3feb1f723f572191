"""Device-side evaluation: a model folder's backend over validation batches the host sent.

``edgebuild-device.pyz evaluate FOLDER --inputs inputs.npz --out results.npz`` runs what ``serve``
would run (the TensorRT engine where it fits this device, a deferred build, else ONNX Runtime,
said in the answer) over every batch of ``inputs.npz`` and writes what the host needs to score
it, compactly: for detection the decoded detections of each image (boxes in network-input
pixels, scores, labels: at most ``max_detections`` an image, with the same decode and NMS as the
host's evaluation), for other tasks the raw outputs. The host maps boxes back to the original
images and computes the metric with the gate's own code, so a device number and a host number
differ only by what the backend computed.

``inputs.npz``: ``batch_0000``, ``batch_0001``, ... float32 arrays of the preprocessed images
(the exact tensors the host's gate evaluated), and ``input_name``. Python 3.8 and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import io
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import numpy as np

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.files import atomic_write_bytes, sha256_file
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.base.vision import decode_outputs
from edgebuild.runtime.engines.backends.select import load_backend

__all__ = []


def evaluate_folder(folder: Path, inputs: Path, out: Path, *, backend: str = "auto",
                    engine_cache: Optional[Path] = None, detection: Optional[JsonObject] = None,
                    progress: Progress = lambda _: None) -> JsonObject:
    """Run the folder's backend over ``inputs``; write ``out``; say what ran and how long inference took.

    ``detection`` (boxes_output, scores_output, score_threshold, nms_iou, max_detections) turns
    on the on-device decode; without it the raw outputs are written.
    """
    recipe = Recipe.load(folder)
    runner, why = load_backend(Path(folder), backend, engine_cache, progress=progress, recipe=recipe)
    began = time.perf_counter()
    stored = _inputs(Path(inputs))
    files = list(stored.files if hasattr(stored, "files") else stored)
    names = sorted(k for k in files if k.startswith("batch_"))
    if not names or "input_name" not in files:
        raise ConfigError("{}: no batch_NNNN arrays or no input_name".format(inputs))
    input_name = str(stored["input_name"])
    collected = {}  # type: Dict[str, List[np.ndarray]]
    inference_s, images = 0.0, 0
    for index, name in enumerate(names):
        batch = np.ascontiguousarray(stored[name], dtype=np.float32)
        started = time.perf_counter()
        outputs = runner.run({input_name: batch})
        inference_s += time.perf_counter() - started
        images += batch.shape[0]
        if detection:
            _collect_detections(collected, outputs, detection)
        else:
            for key, value in outputs.items():
                collected.setdefault(key, []).append(np.asarray(value))
        progress("evaluate: batch {}/{}".format(index + 1, len(names)))
    buffer = io.BytesIO()
    # the keys are the model's output names; numpy's stub checks them against savez_compressed's allow_pickle
    # keyword, which the device's numpy 1.x does not have (there every keyword is an array)
    np.savez_compressed(buffer, **{k: np.concatenate(v) for k, v in collected.items()})  # type: ignore[arg-type]
    atomic_write_bytes(out, buffer.getvalue())
    return {"backend": runner.backend, "backend_reason": why, "images": images, "batches": len(names),
            "inference_s": round(inference_s, 6), "seconds": round(time.perf_counter() - began, 6),
            "decoded": bool(detection), "results": str(out),
            "results_sha256": sha256_file(out)}


def _inputs(path: Path) -> Mapping[str, np.ndarray]:
    """The host's inputs; compressed for the transfer, kept uncompressed beside it after the first
    read, so later evaluations of the same set do not pay the decompression again."""
    unpacked = path.with_name(path.stem + ".unpacked.npz")
    try:
        if unpacked.is_file():
            return np.load(str(unpacked), allow_pickle=False)
        stored = np.load(str(path), allow_pickle=False)
        arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError) as exc:
        raise ConfigError("{}: not an evaluation input file ({})".format(path, exc)) from None
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    try:
        atomic_write_bytes(unpacked, buffer.getvalue())
    except OSError:
        pass  # a read-only or full disk only costs the next run the decompression
    return arrays


def _collect_detections(collected: Dict[str, List[np.ndarray]], outputs: Dict[str, np.ndarray],
                        detection: JsonObject) -> None:
    for found in decode_outputs(outputs, detection):
        collected.setdefault("boxes", []).append(found["boxes"].astype(np.float32))
        collected.setdefault("scores", []).append(found["scores"].astype(np.float32))
        collected.setdefault("labels", []).append(found["labels"].astype(np.int64))
        collected.setdefault("counts", []).append(np.asarray([len(found["scores"])], np.int64))
