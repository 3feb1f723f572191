"""A short synthetic video for the stream tests: a circle moving right and a square moving up, slowly, on a plain
background (the shapes the example detector knows, examples/shapes-detector)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_video(path: Path, frames: int = 24, width: int = 320, height: int = 240) -> Path:
    import cv2

    fourcc = "MJPG" if path.suffix == ".avi" else "mp4v"
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 15, (width, height))
    for i in range(frames):
        image = np.full((height, width, 3), (90, 120, 110), np.uint8)
        cv2.circle(image, (60 + 2 * i, 80), 22, (40, 40, 220), -1)
        cv2.rectangle(image, (200, 140 - i), (244, 184 - i), (220, 180, 30), -1)
        out.write(image)
    out.release()
    return path
