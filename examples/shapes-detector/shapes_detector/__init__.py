"""Bundled edgebuild example: a small anchor-free detector for synthetic shapes.

``build_model()`` returns the network (load ``weights/shapes_detector.pt`` into it), ``data``
renders the synthetic data set and ``prepare(project_dir)`` writes the evaluation images.
"""

from .data import CLASS_NAMES, prepare, render_sample
from .model import build_model

# Preprocessing the weights were trained with (edgebuild.runtime.base.vision.PreprocessSpec fields).
INPUT_SIZE = (160, 160)  # (height, width)
RESIZE = "letterbox"
MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)

__all__ = ["CLASS_NAMES", "INPUT_SIZE", "MEAN", "RESIZE", "STD", "build_model", "prepare", "render_sample"]
