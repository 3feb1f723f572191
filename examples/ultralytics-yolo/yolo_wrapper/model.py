"""An Ultralytics YOLO detector wrapped to edgebuild's detection outputs (see ../README.md).

Ultralytics' detect head, in eval mode, returns ``[N, 4 + C, A]``: per anchor point a box
(cx, cy, w, h in input pixels) and C sigmoid class scores, channels first; anchors from strides
8, 16 and 32 (A = 8400 at 640x640). edgebuild wants two tensors, anchors first:

    boxes:  [N, A, 4] float32, x1 y1 x2 y2 in input-tensor pixels
    scores: [N, A, C] float32, per-class probabilities (C = len(task.classes))

``build_model()`` builds YOLOv8n from the ``yolov8n.yaml`` bundled with Ultralytics (random
weights, 80 COCO classes, no download), or, when the environment variable
``EDGEBUILD_YOLO_WEIGHTS`` or the constant ``WEIGHTS`` below names an Ultralytics checkpoint
(``best.pt`` from ``yolo train``, or ``yolov8n.pt``), loads that model (``YOLO("best.pt").model``);
its classes are the checkpoint's.
"""

from __future__ import annotations

import os

import torch

MODEL_YAML = "yolov8n.yaml"  # any detect yaml bundled with ultralytics: yolov8s.yaml, yolo11n.yaml, ...
NUM_CLASSES = 80  # for MODEL_YAML; a checkpoint brings its own
# An Ultralytics .pt checkpoint, relative to the project folder (or absolute); None: MODEL_YAML, random
# weights. The environment variable EDGEBUILD_YOLO_WEIGHTS, when set, wins (relative: to the working folder).
WEIGHTS: str | None = None
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class YoloBoxesScores(torch.nn.Module):
    """``[N, 4 + C, A]`` cxcywh + scores  ->  {"boxes": [N, A, 4] xyxy, "scores": [N, A, C]}."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        head = model.model[-1]
        # Compute the anchor grid from the input's size inside the graph, so the export takes any H and W
        # (multiples of 32). By default a Python shape check decides when to recompute it, which an
        # export runs once: the grid of the trace's input size would be baked into the ONNX.
        head.dynamic = True
        if getattr(head, "end2end", False):
            head.end2end = False  # YOLOv10/YOLO26: the one-to-many head, raw per-anchor outputs, no NMS inside

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.model(images)
        y = y[0] if isinstance(y, (list, tuple)) else y  # eval mode returns (decoded, raw maps)
        y = y.transpose(1, 2)  # [N, 4 + C, A] -> [N, A, 4 + C]
        centre, size, scores = y[..., 0:2], y[..., 2:4], y[..., 4:]
        boxes = torch.cat([centre - size / 2, centre + size / 2], dim=-1)
        return {"boxes": boxes, "scores": scores}


def weights_path() -> str | None:
    """The checkpoint build_model loads: $EDGEBUILD_YOLO_WEIGHTS, else WEIGHTS, else None."""
    if os.environ.get("EDGEBUILD_YOLO_WEIGHTS"):
        return os.path.abspath(os.environ["EDGEBUILD_YOLO_WEIGHTS"])
    return os.path.join(PROJECT, WEIGHTS) if WEIGHTS else None


def _detection_model(weights: str | None) -> torch.nn.Module:
    if weights:
        from ultralytics.nn.tasks import load_checkpoint

        if not os.path.isfile(weights):  # a bare name like "yolov8n.pt" would make Ultralytics download it
            raise FileNotFoundError(f"Ultralytics checkpoint not found: {weights} "
                                    "(EDGEBUILD_YOLO_WEIGHTS or yolo_wrapper/model.py WEIGHTS)")
        model, _ = load_checkpoint(weights)  # the same as YOLO(weights).model, in FP32
        return model
    from ultralytics.nn.tasks import DetectionModel

    return DetectionModel(MODEL_YAML, nc=NUM_CLASSES, verbose=False)


def build_model() -> torch.nn.Module:
    weights = weights_path()
    model = _detection_model(weights)
    if getattr(model, "task", "detect") != "detect":
        raise ValueError(f"{weights}: an Ultralytics {model.task} model; this wrapper takes detect models only")
    return YoloBoxesScores(model.float().eval())
