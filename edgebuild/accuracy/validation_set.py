"""The project's validation set: its images decoded and preprocessed once, in batches, with their ground truth.

Every backend a compile compares (PyTorch, ONNX Runtime FP32 and each quantized candidate, a device)
is scored over one ``ValidationSet``, so the images are read and preprocessed once
(``edgebuild.accuracy.evaluate`` runs the backends; ``task_decode`` scores pose, segmentation and
oriented boxes over the same set).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.datasets.project_data import Sample, load_validation_set, read_image
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.vision import ImageTransform, PreprocessSpec, preprocess, stack_batch

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = []

#: preprocessed batches are kept in memory up to this size; bigger sets are decoded per pass
CACHE_BUDGET_BYTES = 1 << 30


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


def evaluation_batch_size(project: Project, requested: int = 8) -> int:
    spec = project.model.inputs[0]
    return max(spec.min_shape[0], min(requested, spec.max_shape[0]))


class ValidationSet:
    """The project's validation images, preprocessed, in batches, with their ground truth."""

    def __init__(self, project: Project, *, limit: int | None = None, batch_size: int = 8) -> None:
        self.project = project
        self.batch_size = evaluation_batch_size(project, batch_size)
        # whatever the format on disk (COCO, YOLO, VOC, class folders): the COCO form of a detection set
        self.coco, self.samples = load_validation_set(project, limit)
        self._spec = preprocess_spec(project)
        channels, (height, width) = project.task.preprocess.channels, self._spec.input_size
        self._cacheable = len(self.samples) * channels * height * width * 4 <= CACHE_BUDGET_BYTES
        self._cache: list[tuple[list[Sample], np.ndarray, list[ImageTransform]]] = []
        self._ground_truth: Any = None
        #: segmentation: each image's ground-truth masks, drawn once per set (every candidate is scored against them)
        self.truth_masks: dict[int, list[JsonObject]] = {}

    @property
    def ground_truth(self) -> Any:
        """The COCO index of the detection ground truth, built once per set (every candidate reuses it)."""
        if self._ground_truth is None:
            from edgebuild.accuracy.metrics import coco_ground_truth

            assert self.coco is not None, "only a detection set has ground truth boxes, and its COCO form"
            self._ground_truth = coco_ground_truth(self.coco.ground_truth)
        return self._ground_truth

    def __len__(self) -> int:
        return len(self.samples)

    def batches(self) -> Iterator[tuple[list[Sample], np.ndarray, list[ImageTransform]]]:
        if self._cache:
            yield from self._cache
            return
        gray = self._spec.channel_order == "GRAY"
        filled = []
        for start in range(0, len(self.samples), self.batch_size):
            chunk = self.samples[start : start + self.batch_size]
            tensors, transforms = zip(*(preprocess(read_image(s.path, gray), self._spec) for s in chunk))
            batch = (chunk, stack_batch(tensors), list(transforms))
            if self._cacheable:
                filled.append(batch)
            yield batch
        self._cache = filled
