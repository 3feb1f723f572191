"""Ultralytics models as edgebuild models.

``adapter``: a checkpoint's or an Ultralytics ONNX export's head as the task's outputs, and what a
checkpoint says of itself; ``checkpoint``: a checkpoint as the model source (``[model] source =
"best.pt"``), its key, check, runner and export.
"""
