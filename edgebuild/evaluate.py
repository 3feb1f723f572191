"""Task evaluation: run a backend over the validation set and compute the project's metric.

Works with any runner that has ``backend`` (a name) and ``run({input: array}) -> {output: array}``;
every result records which backend produced it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edgebuild.backends import Runner
from edgebuild.datasets import Sample, load_class_folder_set, load_coco_set, read_image
from edgebuild.metrics import coco_detection_metrics, top_k_accuracy
from edgebuild.runtime.vision import (
    DetectionParams,
    ImageTransform,
    PreprocessSpec,
    decode_detections,
    preprocess,
    stack_batch,
)

if TYPE_CHECKING:
    from edgebuild.config import Project


@dataclass(frozen=True)
class Evaluation:
    metric: str
    value: float
    metrics: dict[str, float]
    backend: str
    images: int
    seconds: float

    def as_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "metrics": self.metrics,
                "backend": self.backend, "images": self.images, "seconds": round(self.seconds, 3)}


def preprocess_spec(project: Project) -> PreprocessSpec:
    pre = project.task.preprocess
    return PreprocessSpec(
        input_size=(pre.input_size[0], pre.input_size[1]),
        resize=pre.resize,
        pad_value=pre.pad_value,
        channel_order=pre.channel_order,
        mean=tuple(pre.mean),
        std=tuple(pre.std),
    )


def _batches(samples: list[Sample], project: Project, batch_size: int,
             progress: bool, desc: str) -> Iterator[tuple[list[Sample], np.ndarray, list[ImageTransform]]]:
    from tqdm import tqdm

    spec = preprocess_spec(project)
    gray = spec.channel_order == "GRAY"
    bar = tqdm(total=len(samples), desc=desc, unit="img", disable=not progress, leave=False)
    try:
        for start in range(0, len(samples), batch_size):
            chunk = samples[start : start + batch_size]
            tensors, transforms = zip(*(preprocess(read_image(s.path, gray), spec) for s in chunk))
            yield chunk, stack_batch(tensors), list(transforms)
            bar.update(len(chunk))
    finally:
        bar.close()


def evaluation_batch_size(project: Project, requested: int = 8) -> int:
    spec = project.model.inputs[0]
    return max(spec.min_shape[0], min(requested, spec.max_shape[0]))


def evaluate(project: Project, runner: Runner, *, batch_size: int = 8, progress: bool = True) -> Evaluation:
    """The project's metric for ``runner`` on the validation set."""
    started = time.perf_counter()
    batch_size = evaluation_batch_size(project, batch_size)
    input_name = project.model.inputs[0].name
    desc = f"evaluate [{runner.backend}]"
    if project.task.kind == "detection":
        metrics, count = _evaluate_detection(project, runner, input_name, batch_size, progress, desc)
    else:
        metrics, count = _evaluate_classification(project, runner, input_name, batch_size, progress, desc)
    return Evaluation(project.metric, metrics[project.metric], metrics, runner.backend, count,
                      time.perf_counter() - started)


def _evaluate_detection(project: Project, runner: Runner, input_name: str, batch_size: int,
                        progress: bool, desc: str) -> tuple[dict[str, float], int]:
    coco = load_coco_set(project)
    post = project.task.postprocess
    params = DetectionParams(post.score_threshold, post.nms_iou, post.max_detections)
    results = []
    for chunk, batch, transforms in _batches(coco.samples, project, batch_size, progress, desc):
        outputs = runner.run({input_name: batch})
        boxes, scores = outputs[post.boxes_output], outputs[post.scores_output]
        for i, (sample, transform) in enumerate(zip(chunk, transforms)):
            found = decode_detections(boxes[i], scores[i], params)
            xyxy = transform.boxes_to_original(found["boxes"])
            for box, score, label in zip(xyxy, found["scores"], found["labels"]):
                x1, y1, x2, y2 = (float(v) for v in box)
                results.append({
                    "image_id": sample.image_id,
                    "category_id": coco.category_ids[int(label)],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": float(score),
                })
    return coco_detection_metrics(coco.ground_truth, results), len(coco.samples)


def _evaluate_classification(project: Project, runner: Runner, input_name: str, batch_size: int,
                             progress: bool, desc: str) -> tuple[dict[str, float], int]:
    samples = load_class_folder_set(project)
    logits_name = project.task.postprocess.logits_output
    logits = []
    for _, batch, _ in _batches(samples, project, batch_size, progress, desc):
        logits.append(runner.run({input_name: batch})[logits_name])
    labels = np.array([s.label for s in samples])
    return top_k_accuracy(np.concatenate(logits), labels), len(samples)
