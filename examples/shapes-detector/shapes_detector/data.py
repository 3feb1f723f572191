"""Deterministic synthetic detection data: circles, squares and triangles on noisy backgrounds.

Everything is drawn with numpy from a seeded ``numpy.random.Generator``, so the same seed always
gives the same pixels. Shapes are rendered anti-aliased from signed distances; their boxes are the
exact geometric extents (xyxy, continuous pixel coordinates, pixel (i, j) has its centre at
(j + 0.5, i + 0.5)).
"""

import functools
import json
import os
import shutil
import tempfile

import numpy as np

CLASS_NAMES = ("circle", "square", "triangle")
IMAGE_SIZE = 160  # square images, height = width
MIN_OBJECTS, MAX_OBJECTS = 1, 6
MIN_SIZE, MAX_SIZE = 12.0, 64.0  # box side, pixels

TRAIN_SEED = 0
VAL_SEED = 20_240_601
CALIBRATION_SEED = 20_240_602
NUM_VAL_IMAGES = 200
NUM_CALIBRATION_IMAGES = 64

_GRID = np.arange(IMAGE_SIZE, dtype=np.float32) + 0.5


@functools.cache
def _interp_matrix(low: int, size: int) -> np.ndarray:
    """size x low matrix of bilinear weights (half-pixel centres, edges clamped)."""
    pos = ((np.arange(size, dtype=np.float64) + 0.5) * (low / size) - 0.5).clip(0, low - 1)
    i0 = np.floor(pos).astype(np.int64)
    i1 = np.minimum(i0 + 1, low - 1)
    frac = pos - i0
    m = np.zeros((size, low), np.float64)
    m[np.arange(size), i0] += 1 - frac
    m[np.arange(size), i1] += frac
    return m.astype(np.float32)


def _upsample(low: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsample of an h x w x c array to size x size."""
    my = _interp_matrix(low.shape[0], size)
    mx = _interp_matrix(low.shape[1], size)
    h, w, c = low.shape
    rows = (my @ low.reshape(h, w * c)).reshape(size, w, c)  # size x w x c
    return np.matmul(mx, rows)  # (size, size, w) @ (size, w, c) -> size x size x c


def _background(rng: np.random.Generator) -> np.ndarray:
    n = IMAGE_SIZE
    # Linear gradient between two random colours in a random direction, plus low-frequency
    # colour blobs at two scales: all of it is smooth, so it is built at low resolution.
    c0 = rng.uniform(0, 255, 3).astype(np.float32)
    c1 = rng.uniform(0, 255, 3).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    g = np.linspace(0, 1, 16, dtype=np.float32)
    t = np.cos(angle) * g[None, :] + np.sin(angle) * g[:, None]
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    low = c0 + (c1 - c0) * t[..., None]
    img = _upsample(low, n)
    for cells, amp in ((int(rng.integers(3, 6)), rng.uniform(20, 60)), (int(rng.integers(8, 14)), rng.uniform(10, 35))):
        blobs = rng.standard_normal((cells, cells, 3), dtype=np.float32) * np.float32(amp)
        img += _upsample(blobs, n)
    # Faint stripes (a texture the network must learn to ignore).
    if rng.random() < 0.5:
        freq = rng.uniform(0.05, 0.35)
        a = rng.uniform(0, np.pi)
        phase = np.float32(np.cos(a) * freq) * _GRID[None, :] + np.float32(np.sin(a) * freq) * _GRID[:, None]
        stripes = np.sin(phase + np.float32(rng.uniform(0, 2 * np.pi)))
        tint = (rng.uniform(5, 20) * rng.uniform(-1, 1, 3)).astype(np.float32)
        img += stripes[..., None] * tint
    return img


def _draw(img: np.ndarray, x0: int, y0: int, coverage: np.ndarray, colour: np.ndarray) -> None:
    h, w = coverage.shape
    region = img[y0 : y0 + h, x0 : x0 + w]
    region += (colour - region) * coverage[..., None]


def _window(box: np.ndarray) -> tuple[int, int, int, int]:
    x0 = max(int(np.floor(box[0])) - 1, 0)
    y0 = max(int(np.floor(box[1])) - 1, 0)
    x1 = min(int(np.ceil(box[2])) + 1, IMAGE_SIZE)
    y1 = min(int(np.ceil(box[3])) + 1, IMAGE_SIZE)
    return x0, y0, x1, y1


def _polygon_coverage(vertices: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Anti-aliased coverage of a convex polygon (vertices counter-clockwise in image coords)."""
    dist = np.full((ys.size, xs.size), -np.inf, np.float32)
    k = len(vertices)
    for i in range(k):
        p, q = vertices[i], vertices[(i + 1) % k]
        edge = q - p
        normal = np.array([edge[1], -edge[0]], np.float32)
        normal /= np.linalg.norm(normal)
        d = (xs[None, :] - p[0]) * normal[0] + (ys[:, None] - p[1]) * normal[1]
        dist = np.maximum(dist, d)
    return np.clip(0.5 - dist, 0.0, 1.0)


def _orient(vertices: np.ndarray) -> np.ndarray:
    """Order vertices so the outward normal (e_y, -e_x) points outside."""
    v = vertices
    area = np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
    return v if area > 0 else v[::-1].copy()


def _shape(rng: np.random.Generator, label: int, size: float, cx: float, cy: float):
    """Geometry of one shape whose box side is ``size``: (box xyxy, polygon vertices or None)."""
    if label == 0:  # circle
        r = size / 2
        return np.array([cx - r, cy - r, cx + r, cy + r], np.float32), None
    if label == 1:  # square, rotated a little
        theta = rng.uniform(-np.pi / 9, np.pi / 9)
        side = size / (abs(np.cos(theta)) + abs(np.sin(theta)))
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float32) * (side / 2)
        rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], np.float32)
        corners = corners @ rot.T
    else:  # triangle, random orientation and slightly irregular
        angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3 + rng.uniform(-0.25, 0.25, 3)
        radii = rng.uniform(0.85, 1.0, 3)
        corners = np.stack([np.cos(angles) * radii, np.sin(angles) * radii], 1).astype(np.float32)
        extent = corners.max(0) - corners.min(0)
        corners = (corners - (corners.max(0) + corners.min(0)) / 2) * (size / extent.max())
    verts = _orient(corners + np.array([cx, cy], np.float32))
    return np.concatenate([verts.min(0), verts.max(0)]).astype(np.float32), verts


def _coverage(box: np.ndarray, verts, window: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = window
    xs, ys = _GRID[x0:x1], _GRID[y0:y1]
    if verts is None:  # circle
        cx, cy, r = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2, (box[2] - box[0]) / 2
        d = np.sqrt((xs[None, :] - cx) ** 2 + (ys[:, None] - cy) ** 2) - r
        return np.clip(0.5 - d, 0.0, 1.0)
    return _polygon_coverage(verts, xs, ys)


def _overlaps(box: np.ndarray, boxes: list[np.ndarray], limit: float) -> bool:
    for other in boxes:
        iw = min(box[2], other[2]) - max(box[0], other[0])
        ih = min(box[3], other[3]) - max(box[1], other[1])
        if iw <= 0 or ih <= 0:
            continue
        small = min((box[2] - box[0]) * (box[3] - box[1]), (other[2] - other[0]) * (other[3] - other[1]))
        if iw * ih > limit * small:
            return True
    return False


def _contrasting_colour(rng: np.random.Generator, local: np.ndarray) -> np.ndarray:
    best, best_d = None, -1.0
    for _ in range(20):
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        d = float(np.linalg.norm(colour - local))
        if d > best_d:
            best, best_d = colour, d
        if d >= 80:
            break
    return best


def _line(img: np.ndarray, rng: np.random.Generator) -> None:
    p = rng.uniform(0, IMAGE_SIZE, 2).astype(np.float32)
    q = rng.uniform(0, IMAGE_SIZE, 2).astype(np.float32)
    width = np.float32(rng.uniform(0.6, 2.0))
    colour = rng.uniform(0, 255, 3).astype(np.float32)
    x0, y0, x1, y1 = _window(
        np.array([min(p[0], q[0]) - 2, min(p[1], q[1]) - 2, max(p[0], q[0]) + 2, max(p[1], q[1]) + 2])
    )
    e = q - p
    length2 = max(float(e @ e), 1e-6)
    gx, gy = _GRID[None, x0:x1] - p[0], _GRID[y0:y1, None] - p[1]
    t = np.clip((gx * e[0] + gy * e[1]) / np.float32(length2), 0, 1)
    d = np.sqrt((gx - t * e[0]) ** 2 + (gy - t * e[1]) ** 2) - width / 2
    _draw(img, x0, y0, np.clip(0.5 - d, 0, 1), colour)


def render_sample(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One 160x160 RGB image with 1-6 shapes: (uint8 HxWx3, boxes [K,4] xyxy float32, labels [K])."""
    img = _background(rng)
    for _ in range(int(rng.integers(0, 4))):  # distractor lines under the shapes
        _line(img, rng)
    count = int(rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1))
    boxes: list[np.ndarray] = []
    labels: list[int] = []
    for _ in range(count):
        for _attempt in range(30):
            label = int(rng.integers(0, len(CLASS_NAMES)))
            size = float(np.exp(rng.uniform(np.log(MIN_SIZE), np.log(MAX_SIZE))))
            margin = size / 2 + 1
            cx = rng.uniform(margin, IMAGE_SIZE - margin)
            cy = rng.uniform(margin, IMAGE_SIZE - margin)
            box, verts = _shape(rng, label, size, cx, cy)
            if _overlaps(box, boxes, 0.1):
                continue
            window = _window(box)
            coverage = _coverage(box, verts, window)
            x0, y0 = window[0], window[1]
            h, w = coverage.shape
            local = img[y0 : y0 + h, x0 : x0 + w].reshape(-1, 3).mean(0)
            colour = _contrasting_colour(rng, local)
            # Slight shading across the shape so it is not a flat fill.
            shade = rng.uniform(-25, 25) * np.linspace(-1, 1, w, dtype=np.float32)[None, :, None]
            _draw(img, x0, y0, coverage, colour + shade)
            boxes.append(box)
            labels.append(label)
            break
    if rng.random() < 0.3:  # a line over everything
        _line(img, rng)
    img += rng.standard_normal(img.shape, dtype=np.float32) * np.float32(rng.uniform(3, 16))
    image = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return (
        image,
        np.asarray(boxes, np.float32).reshape(-1, 4),
        np.asarray(labels, np.int64),
    )


def _save_png(path: str, image: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(image).save(path, format="PNG", optimize=False, compress_level=6)


def _write_val(target: str, seed: int, count: int) -> None:
    images, annotations = [], []
    os.makedirs(os.path.join(target, "images"))
    for i in range(count):
        image, boxes, labels = render_sample(np.random.default_rng([seed, i]))
        name = f"{i:06d}.png"
        _save_png(os.path.join(target, "images", name), image)
        images.append({"id": i + 1, "file_name": name, "width": IMAGE_SIZE, "height": IMAGE_SIZE})
        for box, label in zip(boxes, labels):
            x, y = round(float(box[0]), 3), round(float(box[1]), 3)
            w, h = round(float(box[2] - box[0]), 3), round(float(box[3] - box[1]), 3)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": int(label) + 1,
                    "bbox": [x, y, w, h],
                    "area": round(w * h, 3),
                    "iscrowd": 0,
                }
            )
    coco = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": n} for i, n in enumerate(CLASS_NAMES)],
    }
    with open(os.path.join(target, "annotations.json"), "w") as f:
        json.dump(coco, f, indent=1, sort_keys=True)
        f.write("\n")


def _write_calibration(target: str, seed: int, count: int) -> None:
    os.makedirs(target)
    for i in range(count):
        image, _, _ = render_sample(np.random.default_rng([seed, i]))
        _save_png(os.path.join(target, f"{i:06d}.png"), image)


def _atomic(final: str, writer, seed: int, count: int) -> None:
    if os.path.isdir(final):
        return
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(final) + ".tmp-", dir=parent)
    try:
        writer(os.path.join(tmp, "out"), seed, count)
        os.rename(os.path.join(tmp, "out"), final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(project_dir: str) -> None:
    """Write data/val (COCO, 200 images) and data/calibration (64 images) if missing.

    Each folder is built in a temporary sibling and renamed into place, so a folder that exists
    is complete. The same seeds always give byte-identical files.
    """
    data = os.path.join(os.path.abspath(project_dir), "data")
    _atomic(os.path.join(data, "val"), _write_val, VAL_SEED, NUM_VAL_IMAGES)
    _atomic(os.path.join(data, "calibration"), _write_calibration, CALIBRATION_SEED, NUM_CALIBRATION_IMAGES)
