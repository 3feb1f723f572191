"""Tracking accuracy (the tracking gate, docs/tracking-gate.md): ``metrics.py``, HOTA, IDF1 and MOTA of predicted
tracks against MOTChallenge ground truth, and edgebuild's tracked-frame JSON lines read back; ``gate.py``, one ONNX
file tracked over the gate's video set the device's way, scored and stored."""
