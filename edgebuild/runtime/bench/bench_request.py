"""One request, stage by stage, for ``edgebuild bench``: where a served model's time goes per image.

A request is timed as a client and the device would run it (batch 1): preprocessing from a JPEG
(the decode with PIL, else OpenCV, and ``vision.preprocess``), inference, and post-processing by
the recipe's output form (``vision.decode_outputs``' host decode and NMS for a raw head,
``vision.split_detections`` for a model with NMS inside, ``vision.top_k`` for a classifier, the server's
``task_decode.decode_instance_outputs`` for a pose, segmentation or OBB model's raw outputs,
``instances_in_model`` for pose's and segmentation's with NMS inside), and
end to end. A device image without a JPEG decoder gets no preprocessing figure, and the reason.

Python 3.8 and numpy (PIL or OpenCV where importable).
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import io
import time
from typing import Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np

from edgebuild.runtime.base import vision
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import Recipe, RecipeTask
from edgebuild.runtime.base.task_decode import (
    DEVICE_PRE_NMS_TOP_K,
    decode_instance_outputs,
    instances_in_model,
    server_decodes,
)
from edgebuild.runtime.engines.backends import Runner

__all__ = []

#: the camera frame the bench encodes when it measures preprocessing: 720p, as most Jetson cameras give
FRAME_SIZE = (720, 1280)
#: a classifier's post-processing: the best classes per image
TOP_K = 5
_POSTPROCESS = {"nms": "split_detections (NMS inside the model)",
                "raw_head": "decode_outputs (raw head: decode and class-aware NMS on the host)",
                "logits": "top_k ({} best classes of the logits)".format(TOP_K),
                "raw": "none (the application decodes the raw outputs: docs/tasks.md)",
                "raw_task": "decode_instance_outputs ({}: candidates, NMS and the per-detection gather on the host)",
                "in_model_task": "instances_in_model ({}: NMS inside the model, its detections read per image)"}


class JpegCodec:
    """Encode an RGB frame to JPEG and decode it back, with the library the device has."""

    def __init__(self, name: str, encode: Callable[[np.ndarray], bytes], decode: Callable[[bytes], np.ndarray]) -> None:
        self.name, self.encode, self.decode = name, encode, decode


def jpeg_codec() -> Tuple[Optional[JpegCodec], Optional[str]]:
    """(PIL's codec, else OpenCV's, None), or (None, why neither can be used): a device image may have neither."""
    why = []
    try:
        import PIL as pil  # optional on a device (tests/unit/runtime/test_portability.py: OPTIONAL_ON_THE_DEVICE)
        from PIL import Image as image

        def pil_encode(frame: np.ndarray) -> bytes:
            out = io.BytesIO()
            image.fromarray(frame).save(out, format="JPEG", quality=90)
            return out.getvalue()

        return JpegCodec("PIL " + pil.__version__, pil_encode,
                         lambda data: np.asarray(image.open(io.BytesIO(data)).convert("RGB"))), None
    except ImportError as exc:
        why.append("PIL ({})".format(exc))
    try:
        import cv2  # optional on a device, as PIL

        def cv2_encode(frame: np.ndarray) -> bytes:
            bgr = np.ascontiguousarray(frame[..., ::-1])
            return cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()

        def cv2_decode(data: bytes) -> np.ndarray:
            bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if bgr is None:  # OpenCV's answer to bytes it cannot decode
                raise ValueError("OpenCV could not decode the JPEG ({} bytes)".format(len(data)))
            return bgr[..., ::-1]  # BGR -> RGB is part of a user's decode

        return JpegCodec("OpenCV " + cv2.__version__, cv2_encode, cv2_decode), None
    except ImportError as exc:
        why.append("cv2 ({})".format(exc))
    return None, "no JPEG decoder importable here: " + ", ".join(why)


def synthetic_frame(height: int = FRAME_SIZE[0], width: int = FRAME_SIZE[1], seed: int = 0) -> np.ndarray:
    """A deterministic RGB frame with gradients, shapes and sensor noise, so its JPEG is of a camera's size."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    frame = np.stack([x / width * 200, y / height * 200, (x + y) / (width + height) * 255], axis=2)
    for _ in range(24):
        top, left = int(rng.integers(0, height - 40)), int(rng.integers(0, width - 40))
        frame[top:top + int(rng.integers(20, height // 3)), left:left + int(rng.integers(20, width // 4))] = \
            rng.integers(0, 256, 3)
    frame += rng.normal(0, 6, frame.shape)
    return frame.clip(0, 255).astype(np.uint8)


#: what a client's post-processing gives: each image's detections, or the top-k classes
Decoded = Union[List[Dict[str, np.ndarray]], np.ndarray]


def postprocess_step(task: RecipeTask) -> Tuple[str, Callable[[Dict[str, np.ndarray]], Decoded]]:
    """What a client does with the model's outputs, by the recipe's output form: (its name, the call)."""
    if task.outputs == "nms":
        return _POSTPROCESS["nms"], lambda outputs: vision.split_detections(outputs)
    if task.outputs == "raw_head":
        settings = dict(task.postprocess.as_dict(), in_model=False)
        return _POSTPROCESS["raw_head"], lambda outputs: vision.decode_outputs(outputs, settings)
    if task.outputs == "raw" and task.postprocess.in_model:  # pose, segmentation with NMS inside
        kind = task.kind
        return _POSTPROCESS["in_model_task"].format(kind), lambda outputs: instances_in_model(outputs, kind)
    if task.outputs == "raw" and server_decodes(task):  # pose, segmentation, OBB: the server's own decode
        kind, post = task.kind, task.postprocess.as_dict()
        return (_POSTPROCESS["raw_task"].format(kind),
                lambda outputs: decode_instance_outputs(outputs, kind, post, DEVICE_PRE_NMS_TOP_K))
    if task.outputs == "raw":
        return _POSTPROCESS["raw"], lambda outputs: []
    logits = task.postprocess.logits_output or "logits"
    return _POSTPROCESS["logits"], lambda outputs: vision.top_k(outputs[logits], TOP_K)


def _short_stats(samples: Sequence[float]) -> Dict[str, float]:
    points = np.percentile(np.asarray(samples, dtype=np.float64), [50, 99])
    return {"p50_ms": round(float(points[0]), 4), "p99_ms": round(float(points[1]), 4),
            "mean_ms": round(float(np.mean(samples)), 4)}


def measure_request(runner: Runner, recipe: Recipe, runs: int, warmup: int = 3,
                    codec: Union[JpegCodec, None, Literal["auto"]] = "auto") -> JsonObject:
    """One image per request through the stages a served detector or classifier goes through, timed apart.

    Preprocessing is the JPEG's decode plus ``vision.preprocess``; without a JPEG decoder it is not
    measured (``preprocess`` None, ``preprocess_unmeasured`` says why) and end to end is inference
    plus post-processing only. Returns ``{"measured": False, "reason": ...}`` for a folder whose
    recipe does not say what its input and outputs are.
    """
    task = recipe.task
    if task is None:
        return {"measured": False, "reason": "the recipe has no task (written before edgebuild recorded it): "
                                              "rebuild the folder to time preprocessing and post-processing"}
    if len(recipe.profiles) != 1:
        return {"measured": False, "reason": "the model has {} inputs; the per-request stages need one image "
                                              "input".format(len(recipe.profiles))}
    spec = task.preprocess
    name = next(iter(recipe.profiles))
    shape = [1, 1 if spec.channel_order == "GRAY" else 3] + list(spec.input_size)
    low, _, high = recipe.profiles[name]
    if len(shape) != len(low) or any(d < lo or d > hi for d, lo, hi in zip(shape, low, high)):
        return {"measured": False, "reason": "one preprocessed image, {}, is outside the profile of input {!r} "
                                              "(from {} to {})".format(shape, name, low, high)}
    frame = synthetic_frame()
    if codec == "auto":
        codec, why = jpeg_codec()
    else:
        why = None if codec is not None else "no JPEG decoder given"
    jpeg = codec.encode(frame) if codec is not None else b""
    step, post = postprocess_step(task)
    clock = time.perf_counter
    stages: Dict[str, List[float]] = {"preprocess": [], "inference": [], "postprocess": [], "end_to_end": []}
    detections: List[int] = []
    for index in range(warmup + runs):
        began = clock()
        tensor = vision.preprocess(codec.decode(jpeg) if codec is not None else frame, spec)[0][None]
        inferred = clock()
        outputs = runner.run({name: tensor})
        answered = clock()
        decoded = post(outputs)
        ended = clock()
        if index < warmup:
            continue
        if codec is not None:
            stages["preprocess"].append((inferred - began) * 1000.0)
        stages["inference"].append((answered - inferred) * 1000.0)
        stages["postprocess"].append((ended - answered) * 1000.0)
        stages["end_to_end"].append((ended - (began if codec is not None else inferred)) * 1000.0)
        if task.kind != "classification" and decoded:  # each image's detections (none: the application decodes)
            detections.append(len(decoded[0]["labels"]))
    result = {"measured": True, "batch": 1, "runs": runs, "input": name, "input_shape": [1] + list(tensor.shape[1:]),
              "outputs": task.outputs, "postprocess_step": step,
              "image": {"source": "synthetic {}x{} frame".format(FRAME_SIZE[1], FRAME_SIZE[0]),
                        "jpeg_bytes": len(jpeg), "decoder": codec.name} if codec is not None else None,
              "preprocess_unmeasured": why,
              "detections_p50": float(np.median(detections)) if detections else None}
    for key, samples in stages.items():
        result[key] = _short_stats(samples) if samples else None
    return result
