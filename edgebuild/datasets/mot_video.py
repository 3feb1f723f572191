"""A generated tracking validation set: streams of moving shapes with their ground-truth tracks (MOTChallenge).

The shapes are those of the shapes-detector example (circles, squares, triangles in a contrasting colour, over a
smooth background with noise), so that detector sees them as it saw its training images. Each stream is a fixed
camera: one background, per-frame noise, and shapes moving at a constant velocity plus a little noise, bouncing
at the edges, crossing each other (the later-drawn shape hides the earlier one: MOT's visibility field), some
leaving through an edge and others entering. Everything comes from ``numpy.random.default_rng([seed, stream])``,
so a seed always gives the same pixels and the same tracks.

Each stream is written as a MOTChallenge sequence::

    <root>/stream-00/
        seqinfo.ini         name, frameRate, seqLength, imWidth, imHeight, imDir, imExt
        gt/gt.txt           frame, id, x, y, w, h, conf=1, class, visibility (frames and ids from 1)
        img1/000001.png     the frames, lossless (what the tracking gate reads)
        video.mp4           the same frames as MP4 (mp4v: lossy, for sources that want a video file)

``class`` in gt.txt is the class index + 1 (MOTChallenge numbers classes from 1); boxes are clipped to the
frame; ``visibility`` is the share of the shape's area that is in the frame and not hidden by another shape.
"""

from __future__ import annotations

import configparser
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["MotVideoSpec", "write_mot_video_set"]

CLASS_NAMES = ("circle", "square", "triangle")


@dataclass(frozen=True)
class MotVideoSpec:
    """What to generate: ``streams`` sequences of ``frames`` frames of ``width`` x ``height`` pixels, each with
    ``objects`` shapes at the start and ``entering`` more coming in through an edge later."""

    streams: int = 4
    frames: int = 150
    width: int = 160
    height: int = 160
    objects: int = 4
    entering: int = 2
    fps: int = 15
    seed: int = 20_261_207
    min_size: float = 16.0
    max_size: float = 40.0


@dataclass
class _Shape:
    """One tracked object: its geometry (relative to its centre), look and motion."""

    id: int
    label: int
    size: float
    verts: np.ndarray | None  # polygon vertices around (0, 0); None for a circle
    colour: np.ndarray
    shade: float
    centre: np.ndarray
    velocity: np.ndarray
    start: int  # first frame (0-based) it moves
    leaves: int  # from this frame on it no longer bounces, and so drifts out
    inside: bool = False  # has been wholly inside the frame (from then on it bounces)
    boxes: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)


def _grid(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32) + 0.5


def _upsample(low: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear upsample of a small h x w x c array (half-pixel centres, edges clamped)."""

    def matrix(lo: int, size: int) -> np.ndarray:
        pos = ((np.arange(size) + 0.5) * (lo / size) - 0.5).clip(0, lo - 1)
        i0 = np.floor(pos).astype(np.int64)
        i1 = np.minimum(i0 + 1, lo - 1)
        m = np.zeros((size, lo), np.float32)
        m[np.arange(size), i0] += 1 - (pos - i0)
        m[np.arange(size), i1] += pos - i0
        return m

    h, w, c = low.shape
    rows = (matrix(h, height) @ low.reshape(h, w * c)).reshape(height, w, c)
    return np.matmul(matrix(w, width), rows)


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """The example's background: a two-colour gradient plus low-frequency colour blobs at two scales."""
    c0, c1 = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    g = np.linspace(0, 1, 16, dtype=np.float32)
    t = np.cos(angle) * g[None, :] + np.sin(angle) * g[:, None]
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = _upsample(c0 + (c1 - c0) * t[..., None], height, width)
    for cells, amp in ((int(rng.integers(3, 6)), rng.uniform(20, 60)), (int(rng.integers(8, 14)), rng.uniform(10, 35))):
        img += _upsample(rng.standard_normal((cells, cells, 3), dtype=np.float32) * np.float32(amp), height, width)
    return img


def _orient(v: np.ndarray) -> np.ndarray:
    area = np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
    return v if area > 0 else v[::-1].copy()


def _geometry(rng: np.random.Generator, label: int, size: float) -> np.ndarray | None:
    """The example's shapes, around (0, 0), with a box side of ``size``: a circle (None), a square turned by up to
    20 degrees, or a slightly irregular triangle."""
    if label == 0:
        return None
    if label == 1:
        theta = rng.uniform(-np.pi / 9, np.pi / 9)
        side = size / (abs(np.cos(theta)) + abs(np.sin(theta)))
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float32) * (side / 2)
        rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], np.float32)
        return _orient(corners @ rot.T)
    angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3 + rng.uniform(-0.25, 0.25, 3)
    corners = (np.stack([np.cos(angles), np.sin(angles)], 1) * rng.uniform(0.85, 1.0, 3)[:, None]).astype(np.float32)
    extent = corners.max(0) - corners.min(0)
    return _orient((corners - (corners.max(0) + corners.min(0)) / 2) * (size / extent.max()))


def _area(shape: _Shape) -> float:
    if shape.verts is None:
        return math.pi * (shape.size / 2) ** 2
    v = shape.verts
    return float(abs(np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])) / 2)


def _coverage(shape: _Shape, height: int, width: int) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    """The shape's anti-aliased coverage inside the frame: ((x0, y0, x1, y1) window, coverage), or None outside."""
    cx, cy = float(shape.centre[0]), float(shape.centre[1])
    half = shape.size / 2
    x0, y0 = max(int(np.floor(cx - half)) - 1, 0), max(int(np.floor(cy - half)) - 1, 0)
    x1, y1 = min(int(np.ceil(cx + half)) + 1, width), min(int(np.ceil(cy + half)) + 1, height)
    if x1 <= x0 or y1 <= y0:
        return None
    xs, ys = _grid(width)[x0:x1] - cx, _grid(height)[y0:y1] - cy
    if shape.verts is None:
        dist = np.sqrt(xs[None, :] ** 2 + ys[:, None] ** 2) - half
    else:
        dist = np.full((ys.size, xs.size), -np.inf, np.float32)
        v = shape.verts
        for i in range(len(v)):
            edge = v[(i + 1) % len(v)] - v[i]
            normal = np.array([edge[1], -edge[0]], np.float32) / np.float32(np.linalg.norm(edge))
            dist = np.maximum(dist, (xs[None, :] - v[i][0]) * normal[0] + (ys[:, None] - v[i][1]) * normal[1])
    coverage = np.clip(0.5 - dist, 0.0, 1.0).astype(np.float32)
    return ((x0, y0, x1, y1), coverage) if coverage.sum() > 0 else None


def _box(shape: _Shape) -> tuple[float, float, float, float]:
    """The shape's exact box (x1, y1, x2, y2), unclipped."""
    if shape.verts is None:
        lo = shape.centre - shape.size / 2
        hi = shape.centre + shape.size / 2
    else:
        lo, hi = shape.centre + shape.verts.min(0), shape.centre + shape.verts.max(0)
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def _new_shape(rng: np.random.Generator, spec: MotVideoSpec, ident: int, start: int, entering: bool) -> _Shape:
    label = int(rng.integers(0, len(CLASS_NAMES)))
    size = float(np.exp(rng.uniform(np.log(spec.min_size), np.log(spec.max_size))))
    speed = rng.uniform(0.8, 2.5)
    heading = rng.uniform(0, 2 * np.pi)
    velocity = np.array([np.cos(heading), np.sin(heading)]) * speed
    dims = np.array([spec.width, spec.height], np.float64)
    if entering:  # just outside an edge, heading in
        axis = int(rng.integers(0, 2))
        side = int(rng.integers(0, 2))
        centre = rng.uniform(size, dims - size)
        centre[axis] = -size / 2 if side == 0 else dims[axis] + size / 2
        velocity[axis] = abs(velocity[axis]) + 0.8 if side == 0 else -abs(velocity[axis]) - 0.8
    else:
        centre = rng.uniform(size / 2 + 1, dims - size / 2 - 1)
    leaves = int(rng.integers(spec.frames // 2, spec.frames)) if rng.random() < 0.35 else spec.frames
    return _Shape(ident, label, size, _geometry(rng, label, size), rng.uniform(0, 255, 3).astype(np.float32),
                  float(rng.uniform(-25, 25)), centre, velocity, start, leaves)


def _step(shape: _Shape, rng: np.random.Generator, spec: MotVideoSpec, frame: int) -> None:
    """Move one frame: constant velocity plus a little noise; bounce at an edge once wholly inside, unless leaving."""
    shape.velocity = shape.velocity + rng.normal(0, 0.05, 2)
    shape.centre = shape.centre + shape.velocity
    x1, y1, x2, y2 = _box(shape)
    lo, hi = np.array([x1, y1]), np.array([x2, y2])
    dims = np.array([spec.width, spec.height], np.float64)
    if not shape.inside:
        shape.inside = bool(np.all(lo >= 0) and np.all(hi <= dims))
    if shape.inside and frame < shape.leaves:
        shape.velocity = np.where(lo < 0, np.abs(shape.velocity), shape.velocity)
        shape.velocity = np.where(hi > dims, -np.abs(shape.velocity), shape.velocity)


def _contrasting(colour: np.ndarray, local: np.ndarray) -> np.ndarray:
    """The shape's colour, pushed away from the background under it where the two are close."""
    gap = colour - local
    distance = float(np.linalg.norm(gap))
    if distance >= 80:
        return colour
    direction = gap / distance if distance > 1e-3 else np.array([1.0, 1.0, 1.0], np.float32) / np.sqrt(3)
    return np.clip(local + direction * 80, 0, 255).astype(np.float32)


def _render_frame(background: np.ndarray, shapes: list[_Shape], rng: np.random.Generator, noise: float,
                  frame: int) -> tuple[np.ndarray, list[tuple[_Shape, tuple[float, float, float, float], float]]]:
    """One frame, the shapes drawn in id order (a later id passes in front), and each visible shape's clipped box
    and visibility."""
    height, width = background.shape[:2]
    img = background.copy()
    drawn = []
    for shape in shapes:
        found = _coverage(shape, height, width)
        if found is None:
            continue
        (x0, y0, x1, y1), coverage = found
        region = img[y0:y1, x0:x1]
        colour = _contrasting(shape.colour, background[y0:y1, x0:x1].reshape(-1, 3).mean(0))
        shade = shape.shade * np.linspace(-1, 1, x1 - x0, dtype=np.float32)[None, :, None]
        region += (colour + shade - region) * coverage[..., None]
        drawn.append((shape, (x0, y0, x1, y1), coverage))
    uncovered = np.ones((height, width), np.float32)
    rows = []
    for shape, (x0, y0, x1, y1), coverage in reversed(drawn):  # front to back
        visible = float((coverage * uncovered[y0:y1, x0:x1]).sum()) / _area(shape)
        uncovered[y0:y1, x0:x1] *= 1 - coverage
        bx1, by1, bx2, by2 = _box(shape)
        box = (max(bx1, 0.0), max(by1, 0.0), min(bx2, float(width)), min(by2, float(height)))
        if box[2] - box[0] >= 2 and box[3] - box[1] >= 2:
            rows.append((shape, box, min(max(visible, 0.0), 1.0)))
    img += rng.standard_normal(img.shape, dtype=np.float32) * np.float32(noise)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), rows[::-1]


def render_stream(spec: MotVideoSpec, stream: int) -> tuple[list[np.ndarray], list[tuple]]:
    """A stream's frames (RGB uint8) and its ground-truth rows (frame, id, x, y, w, h, class, visibility), frames
    and ids from 1 as in MOTChallenge files."""
    rng = np.random.default_rng([spec.seed, stream])
    background = _background(rng, spec.height, spec.width)
    noise = float(rng.uniform(3, 8))
    shapes = [_new_shape(rng, spec, i + 1, 0, entering=False) for i in range(spec.objects)]
    for k in range(spec.entering):
        start = int(rng.integers(5, max(6, spec.frames * 2 // 3)))
        shapes.append(_new_shape(rng, spec, spec.objects + k + 1, start, entering=True))
    frames, rows = [], []
    for frame in range(spec.frames):
        live = [s for s in shapes if s.start <= frame]
        image, visible = _render_frame(background, live, rng, noise, frame)
        frames.append(image)
        for shape, (x1, y1, x2, y2), visibility in visible:
            rows.append((frame + 1, shape.id, round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2),
                         shape.label + 1, round(visibility, 3)))
        for shape in live:
            _step(shape, rng, spec, frame)
    return frames, rows


def _write_ground_truth(path: Path, rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: (r[1], r[0]))  # by track, then frame, as MOTChallenge's files are
    path.write_text("".join(f"{f},{i},{x:.2f},{y:.2f},{w:.2f},{h:.2f},1,{c},{v:.3f}\n"
                            for f, i, x, y, w, h, c, v in rows))


def _write_seqinfo(path: Path, name: str, spec: MotVideoSpec) -> None:
    config = configparser.ConfigParser()
    config.optionxform = str  # type: ignore[assignment,method-assign]  # MOTChallenge's keys are camelCase
    config["Sequence"] = {"name": name, "imDir": "img1", "frameRate": str(spec.fps), "seqLength": str(spec.frames),
                          "imWidth": str(spec.width), "imHeight": str(spec.height), "imExt": ".png"}
    with path.open("w") as f:
        config.write(f, space_around_delimiters=False)


def _write_frames(folder: Path, frames: list[np.ndarray]) -> None:
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    for index, frame in enumerate(frames):
        cv2.imwrite(str(folder / f"{index + 1:06d}.png"), frame[..., ::-1])


def _write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    import cv2

    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), float(fps), (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {path} with the mp4v codec")
    try:
        for frame in frames:
            writer.write(np.ascontiguousarray(frame[..., ::-1]))
    finally:
        writer.release()


def write_mot_video_set(root: Path, spec: MotVideoSpec = MotVideoSpec(), *, png: bool = True,
                        mp4: bool = True) -> list[Path]:
    """Write ``spec.streams`` MOTChallenge sequences under ``root`` (``stream-00``, ...); returns their folders.
    ``png``: the lossless frames in ``img1/``; ``mp4``: ``video.mp4``."""
    folders = []
    for stream in range(spec.streams):
        name = f"stream-{stream:02d}"
        folder = Path(root) / name
        frames, rows = render_stream(spec, stream)
        _write_ground_truth(folder / "gt" / "gt.txt", rows)
        _write_seqinfo(folder / "seqinfo.ini", name, spec)
        if png:
            _write_frames(folder / "img1", frames)
        if mp4:
            _write_mp4(folder / "video.mp4", frames, spec.fps)
        folders.append(folder)
    return folders
