"""How an image becomes a model's input: the settings alone, standard library only.

``vision.preprocess`` applies them (numpy); the recipe carries them to the device
(``RecipeTask.preprocess``), so they live below both.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP035

from dataclasses import dataclass
from typing import Tuple

__all__ = ["PreprocessSpec"]


@dataclass(frozen=True)
class PreprocessSpec:
    """How a decoded image (H x W x 3 RGB uint8, or H x W gray) becomes a CHW float32 tensor."""

    input_size: Tuple[int, int]  # (height, width)
    resize: str = "letterbox"
    pad_value: int = 114
    channel_order: str = "RGB"
    mean: Tuple[float, ...] = (0.0, 0.0, 0.0)
    std: Tuple[float, ...] = (1.0, 1.0, 1.0)
