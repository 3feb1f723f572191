"""Frames of several streams as the engine's batches: the newest frame of each stream that has a new one,
letterboxed with the recipe's preprocessing, cut into the batch sizes the engine's profile allows.

The profile's batch axis (axis 0 of the recipe's input profile, min..max) decides the sizes: ``n`` frames run
as batches of ``max`` and one of the rest; a rest below ``min`` (a fixed-batch profile's min == max above 1,
or a profile whose min is above 1) is padded up to ``min`` with copies of its last frame, whose outputs are
dropped. Padding, not one run per frame: a fixed-batch engine cannot run a smaller batch at all.

Python 3.8, numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.base.vision import ImageTransform, PreprocessSpec, decode_outputs, preprocess

__all__ = []  # type: List[str]


@dataclass(frozen=True)
class BatchLimits:
    """The batch sizes the engine runs: its profile's min..max on axis 0, and the input's name."""

    input_name: str
    smallest: int
    largest: int

    @property
    def fixed(self) -> bool:
        return self.smallest == self.largest

    def describe(self) -> str:
        if self.fixed:
            return "fixed batch {}{}".format(self.largest, " (fewer frames are padded)" if self.largest > 1 else "")
        return "batch {}..{}{}".format(self.smallest, self.largest,
                                       " (fewer frames are padded)" if self.smallest > 1 else "")

    @classmethod
    def of(cls, recipe: Recipe) -> "BatchLimits":
        """From the recipe's input profile (one image input: what a vision model's recipe has)."""
        if len(recipe.profiles) != 1:
            raise ConfigError("tracking runs a model of one image input; {} has {} ({})".format(
                recipe.model_name, len(recipe.profiles), ", ".join(sorted(recipe.profiles))))
        (name, (low, _opt, high)), = recipe.profiles.items()
        if low[0] < 1 or high[0] < low[0]:
            raise ConfigError("{}: the input profile's batch axis runs {}..{}".format(name, low[0], high[0]))
        return cls(name, int(low[0]), int(high[0]))


def batch_sizes(frames: int, limits: BatchLimits) -> List[Tuple[int, int]]:
    """``frames`` cut into runs: (frames in the run, the run's batch size, padding included)."""
    runs = []
    left = frames
    while left > 0:
        take = min(left, limits.largest)
        runs.append((take, max(take, limits.smallest)))
        left -= take
    return runs


@dataclass(frozen=True)
class PreparedBatch:
    """One engine run: its inputs, the streams of its real rows (in row order) and each row's transform."""

    inputs: Dict[str, np.ndarray]
    streams: List[int]
    transforms: List[ImageTransform]
    padded: int  # rows of padding after the real ones


def prepare_batch(images: Sequence[Tuple[int, np.ndarray]], spec: PreprocessSpec, limits: BatchLimits,
                  ) -> Tuple[List[PreparedBatch], float]:
    """The runs for ``images`` ((stream, BGR image) pairs) and the seconds preprocessing took.

    The recipe's ``channel_order`` says what the model wants; OpenCV gives BGR, which ``preprocess`` is
    told, so an RGB model's channels are flipped on the resized image, not on the frame.
    """
    start = time.perf_counter()
    tensors, transforms = [], []
    for _stream, image in images:
        tensor, transform = preprocess(image, spec, image_order="BGR")
        tensors.append(tensor)
        transforms.append(transform)
    runs = []
    at = 0
    for real, size in batch_sizes(len(images), limits):
        rows = tensors[at:at + real] + [tensors[at + real - 1]] * (size - real)
        runs.append(PreparedBatch({limits.input_name: np.ascontiguousarray(np.stack(rows), dtype=np.float32)},
                                  [stream for stream, _ in images[at:at + real]], transforms[at:at + real],
                                  size - real))
        at += real
    return runs, time.perf_counter() - start


def detections_of(outputs: Dict[str, np.ndarray], run: PreparedBatch, postprocess: Dict[str, Any],
                  ) -> List[Dict[str, np.ndarray]]:
    """A run's outputs decoded as the recipe's ``task.postprocess`` says, one detections mapping per real row
    (the padding dropped), its boxes mapped back into that row's source pixels."""
    found = decode_outputs(outputs, postprocess)[: len(run.streams)]
    return [dict(d, boxes=run.transforms[i].boxes_to_original(d["boxes"])) for i, d in enumerate(found)]
