"""Tracking accuracy (the tracking gate's measure, docs/tracking-gate.md): ``metrics.py``, HOTA, IDF1 and MOTA
of predicted tracks against MOTChallenge ground truth, and edgebuild's tracked-frame JSON lines read back."""
