"""Ground-truth instance masks drawn where the predicted masks are, the way Ultralytics' val draws them.

Ultralytics' ``yolo val`` (rect=False, no save_json) compares masks at the prototypes' resolution
in the network input's (letterboxed) frame: a predicted mask is the prototype logit above 0 cropped
to its box (``edgebuild.runtime.base.vision.prototype_masks``), and a ground-truth polygon is resampled
to 1000 points, truncated to whole input pixels, filled at the input size by OpenCV's ``fillPoly``
and shrunk four times by ``cv2.resize`` (bilinear, uint8). Where instances overlap, each pixel
belongs to the smallest one (``overlap_mask=True``, its default). ``frame_masks`` does the same in
numpy: ``fill_polygon`` follows fillPoly's rule (8-connected outline plus an even-odd scanline fill
with 16-bit fixed-point edges) and ``shrink`` cv2's bilinear sampling of a 0/1 image; a test checks
both pixel for pixel against Ultralytics' own ``polygons2masks_overlap``.

Without a frame the masks are compared at the image's own size (a model that outputs full-size
masks): polygons are drawn by COCO's own rule (faster-coco-eval's copy of pycocotools' mask code), the
overlap rule applies as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.vision import ImageTransform

XY_SHIFT = 16  # OpenCV's fixed-point polygon edges
RESAMPLED_POINTS = 1000  # Ultralytics' YOLODataset resamples every polygon to this many points


@dataclass(frozen=True)
class MaskFrame:
    """Where one image's masks are compared: the network input at the prototypes' resolution."""

    transform: ImageTransform  # original image -> network input (edgebuild.runtime.base.vision.preprocess)
    input_size: tuple[int, int]  # (height, width) of the network input
    mask_size: tuple[int, int]  # (height, width) of the prototypes, input_size / 4 for YOLO-seg

    def ratio(self) -> int:
        ratio_h, ratio_w = self.input_size[0] / self.mask_size[0], self.input_size[1] / self.mask_size[1]
        if ratio_h != ratio_w or ratio_h != int(ratio_h):
            raise ValueError(f"input {self.input_size} is not a whole multiple of the masks' {self.mask_size}")
        return int(ratio_h)


def _lines(mask: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """8-connected lines [E, 2] -> [E, 2] as OpenCV's LineIterator draws them (clipped to the image, left to right)."""
    height, width = mask.shape
    a, b = starts.copy(), ends.copy()
    drawn = np.ones(len(a), bool)
    for i in np.flatnonzero(((a < 0) | (b < 0) | (a >= [width, height]) | (b >= [width, height])).any(axis=1)):
        drawn[i], a[i, 0], a[i, 1], b[i, 0], b[i, 1] = _clip_line(width, height, *a[i].tolist(), *b[i].tolist())
    a, b = a[drawn], b[drawn]
    flip = b[:, 0] < a[:, 0]
    a[flip], b[flip] = b[flip].copy(), a[flip].copy()
    dx, dy = b[:, 0] - a[:, 0], np.abs(b[:, 1] - a[:, 1])
    sy = np.where(b[:, 1] < a[:, 1], -1, 1)
    steep = dy > dx
    major, minor = np.where(steep, dy, dx), np.where(steep, dx, dy)
    line = np.repeat(np.arange(len(a)), major + 1)
    step = np.arange(len(line)) - np.repeat(np.cumsum(major + 1) - (major + 1), major + 1)
    big, small = major[line], minor[line]
    moved = np.maximum(0, -((big - 2 * small * step) // np.maximum(2 * big, 1)))  # Bresenham's minor steps
    along_y = steep[line]
    mask[a[line, 1] + sy[line] * np.where(along_y, step, moved), a[line, 0] + np.where(along_y, moved, step)] = 1


def _clip_line(width: int, height: int, x1: int, y1: int, x2: int, y2: int) -> tuple[bool, int, int, int, int]:
    """OpenCV's clipLine: the part of a segment inside the image, each cut truncated as its int64 cast does."""
    right, bottom = width - 1, height - 1

    def code(x: int, y: int, with_y: bool = True) -> int:
        return (x < 0) + (x > right) * 2 + ((y < 0) * 4 + (y > bottom) * 8 if with_y else 0)

    c1, c2 = code(x1, y1), code(x2, y2)
    if (c1 & c2) == 0 and (c1 | c2) != 0:
        if c1 & 12:
            a = 0 if c1 < 8 else bottom
            x1 += int((a - y1) * (x2 - x1) / (y2 - y1))
            y1, c1 = a, code(x1, 0, False)
        if c2 & 12:
            a = 0 if c2 < 8 else bottom
            x2 += int((a - y2) * (x2 - x1) / (y2 - y1))
            y2, c2 = a, code(x2, 0, False)
        if (c1 & c2) == 0 and (c1 | c2) != 0:
            if c1:
                a = 0 if c1 == 1 else right
                y1 += int((a - x1) * (y2 - y1) / (x2 - x1))
                x1, c1 = a, 0
            if c2:
                a = 0 if c2 == 1 else right
                y2 += int((a - x2) * (y2 - y1) / (x2 - x1))
                x2, c2 = a, 0
    return (c1 | c2) == 0, x1, y1, x2, y2


def fill_polygon(mask: np.ndarray, points: np.ndarray) -> None:
    """Fill one polygon of whole-pixel vertices [P, 2] into ``mask`` (H x W uint8) in place, as cv2.fillPoly."""
    pts = np.asarray(points, np.int64).reshape(-1, 2)
    if len(pts) == 0:
        return
    starts = np.roll(pts, 1, axis=0)
    _lines(mask, starts, pts)
    sloped = starts[:, 1] != pts[:, 1]
    if sloped.sum() < 2:
        return
    height, width = mask.shape
    a, b = starts[sloped], pts[sloped]
    ac, bc = a.copy(), b.copy()  # OpenCV (4.x) slopes an edge that leaves the image by its clipped ends
    for i in np.flatnonzero(((a < 0) | (b < 0) | (a >= [width, height]) | (b >= [width, height])).any(axis=1)):
        _, x1, y1, x2, y2 = _clip_line(width, height, *a[i].tolist(), *b[i].tolist())
        ac[i, 0], bc[i, 0] = x1, x2
        if y1 != y2:
            ac[i, 1], bc[i, 1] = y1, y2
    num, den = (bc[:, 0] - ac[:, 0]) << XY_SHIFT, bc[:, 1] - ac[:, 1]
    slope = np.sign(num) * np.sign(den) * (np.abs(num) // np.abs(den))  # C's division: toward zero
    down = a[:, 1] < b[:, 1]
    y0, y1 = np.where(down, a[:, 1], b[:, 1]), np.where(down, b[:, 1], a[:, 1])
    x0 = np.where(down, (ac[:, 0] << XY_SHIFT) + (a[:, 1] - ac[:, 1]) * slope,
                  (bc[:, 0] << XY_SHIFT) + (b[:, 1] - bc[:, 1]) * slope)
    rows = np.minimum(y1, height) - y0  # an edge covers rows y0 <= y < y1
    edge = np.repeat(np.arange(len(y0)), np.maximum(rows, 0))
    y = y0[edge] + (np.arange(len(edge)) - np.repeat(np.cumsum(np.maximum(rows, 0)) - np.maximum(rows, 0),
                                                     np.maximum(rows, 0)))
    x = x0[edge] + (y - y0[edge]) * slope[edge]
    order = np.lexsort((x, y))
    y, x = y[order].reshape(-1, 2), x[order].reshape(-1, 2)  # each row crosses an even number of edges: pair them
    left, right = (x[:, 0] + (1 << XY_SHIFT) - 1) >> XY_SHIFT, x[:, 1] >> XY_SHIFT
    keep = (y[:, 0] >= 0) & (left < width) & (right >= 0) & (left <= right)
    row, left, right = y[keep, 0], np.clip(left[keep], 0, width - 1), np.clip(right[keep], 0, width - 1)
    if not len(row):
        return
    top, first = row.min(), left.min()  # count spans only inside the polygon's bounding box
    spans = np.zeros((row.max() - top + 1, right.max() - first + 2), np.int32)
    np.add.at(spans, (row - top, left - first), 1)
    np.add.at(spans, (row - top, right + 1 - first), -1)
    mask[top : top + spans.shape[0], first : first + spans.shape[1] - 1] |= np.cumsum(spans[:, :-1], axis=1) > 0


def shrink(mask: np.ndarray, ratio: int) -> np.ndarray:
    """A 0/1 image made ``ratio`` times smaller as cv2.resize(INTER_LINEAR) makes it: each pixel samples the
    input at (i + 0.5) * ratio - 0.5, so an even ratio averages the 2 x 2 pixels around that point and
    rounds half up (1 where two of them are set), an odd ratio takes the pixel there."""
    if ratio == 1:
        return mask.astype(bool)
    height, width = mask.shape[0] // ratio, mask.shape[1] // ratio
    centre = ratio // 2
    if ratio % 2:
        return mask[centre::ratio, centre::ratio][:height, :width].astype(bool)
    block = mask[: height * ratio, : width * ratio].reshape(height, ratio, width, ratio)
    return block[:, centre - 1 : centre + 1, :, centre - 1 : centre + 1].sum(axis=(1, 3), dtype=np.int32) >= 2


def resample_polygon(points: np.ndarray, count: int) -> np.ndarray:
    """Ultralytics' resample_segments for one polygon: closed, its vertices kept, points added along its edges."""
    if len(points) == count:
        return points
    closed = np.concatenate((points, points[:1]), axis=0)
    at = np.linspace(0, len(closed) - 1, count - len(closed) if len(closed) < count else count)
    vertices = np.arange(len(closed))
    if len(closed) < count:
        at = np.insert(at, np.searchsorted(at, vertices), vertices)
    return np.stack([np.interp(at, vertices, closed[:, i]) for i in range(2)], axis=1)


def _polygons(annotation: JsonObject) -> list[np.ndarray]:
    segmentation = annotation.get("segmentation")
    if isinstance(segmentation, list):
        return [np.asarray(p, np.float64).reshape(-1, 2) for p in segmentation if len(p) >= 6]
    return []


def _rle_mask(annotation: JsonObject, image_size: tuple[int, int]) -> np.ndarray | None:
    from faster_coco_eval.core import mask as mask_utils

    segmentation = annotation.get("segmentation")
    if not isinstance(segmentation, dict):
        return None
    height, width = image_size
    rle = mask_utils.frPyObjects(segmentation, height, width) if isinstance(segmentation["counts"], list) \
        else segmentation
    return mask_utils.decode(rle).astype(bool)


def _framed(annotations: Sequence[JsonObject], frame: MaskFrame, image_size: tuple[int, int]) -> list[np.ndarray]:
    ratio, t = frame.ratio(), frame.transform
    polygons = [_polygons(a) for a in annotations]
    longest = max((len(p) for parts in polygons for p in parts), default=0)
    count = longest + 1 if longest > RESAMPLED_POINTS else RESAMPLED_POINTS
    masks = []
    # Ultralytics' arithmetic: float32 coordinates normalized to the image, resampled, times the resized
    # image's size, plus the padding; then truncated to whole pixels
    size = np.array([image_size[1], image_size[0]], np.float64)
    resized = np.array([round(t.scale_x * image_size[1]), round(t.scale_y * image_size[0])], np.float32)
    pad = np.array([t.pad_x, t.pad_y], np.float32)
    for annotation, parts in zip(annotations, polygons):
        canvas = np.zeros(frame.input_size, np.uint8)
        for part in parts:
            normalized = (part / size).astype(np.float32)
            framed = resample_polygon(normalized, count).astype(np.float32) * resized + pad
            fill_polygon(canvas, framed.astype(np.int32))
        mask = shrink(canvas, ratio)
        decoded = _rle_mask(annotation, image_size)
        if decoded is not None:  # RLE: each mask pixel takes the image pixel under its centre
            rows = ((np.arange(frame.mask_size[0]) + 0.5) * ratio - t.pad_y) / t.scale_y
            cols = ((np.arange(frame.mask_size[1]) + 0.5) * ratio - t.pad_x) / t.scale_x
            inside_r, inside_c = (rows >= 0) & (rows < image_size[0]), (cols >= 0) & (cols < image_size[1])
            r = np.clip(rows.astype(np.int64), 0, image_size[0] - 1)
            c = np.clip(cols.astype(np.int64), 0, image_size[1] - 1)
            mask |= decoded[r][:, c] & inside_r[:, None] & inside_c[None, :]
        masks.append(mask)
    return masks


def _native(annotations: Sequence[JsonObject], image_size: tuple[int, int]) -> list[np.ndarray]:
    from faster_coco_eval.core import mask as mask_utils

    height, width = image_size
    masks = []
    for annotation in annotations:
        decoded = _rle_mask(annotation, image_size)
        if decoded is None:
            parts = [p.reshape(-1).tolist() for p in _polygons(annotation)]
            decoded = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(parts, height, width))).astype(bool) \
                if parts else np.zeros(image_size, bool)
        masks.append(decoded)
    return masks


def frame_masks(annotations: Sequence[JsonObject], image: JsonObject, frame: MaskFrame | None) -> np.ndarray:
    """The ground-truth masks [G, h, w] (bool) of one image's annotations, in ``frame`` (or at the image's
    size without one), each pixel given to the smallest instance that covers it (Ultralytics' overlap rule)."""
    image_size = (int(image["height"]), int(image["width"]))
    masks = _framed(annotations, frame, image_size) if frame is not None else _native(annotations, image_size)
    shape = frame.mask_size if frame is not None else image_size
    if not masks:
        return np.zeros((0, *shape), bool)
    stacked = np.stack(masks)
    areas = stacked.sum(axis=(1, 2))
    order = np.argsort(-areas)  # Ultralytics' polygons2masks_overlap: larger first, smaller drawn over them
    owner = np.zeros(shape, np.int64)
    for rank, index in enumerate(order):
        owner = np.maximum(owner, stacked[index] * (rank + 1))
    overlapped = np.empty_like(stacked)
    overlapped[order] = owner[None] == np.arange(1, len(order) + 1)[:, None, None]
    return overlapped


def truth_rles(annotations: Sequence[JsonObject], image: JsonObject, frame: MaskFrame | None) -> list[JsonObject]:
    """``frame_masks`` as RLEs (faster-coco-eval's), the form ``rle_iou`` compares."""
    from faster_coco_eval.core import mask as mask_utils

    masks = frame_masks(annotations, image, frame)
    return list(mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0).astype(np.uint8)))) if len(masks) else []


def prediction_rle(prediction: JsonObject, shape: tuple[int, int]) -> JsonObject:
    """A prediction's mask as an RLE of ``shape``: its "segmentation" (an RLE) or its "mask" (an array)."""
    from faster_coco_eval.core import mask as mask_utils

    if prediction.get("mask") is not None:
        array = np.asarray(prediction["mask"]).astype(np.uint8)
        size = list(array.shape)
        rle = mask_utils.encode(np.asfortranarray(array)) if array.ndim == 2 else None
    else:
        rle = dict(prediction["segmentation"])
        size = list(rle["size"])
        if isinstance(rle["counts"], str):
            rle["counts"] = rle["counts"].encode()
    if size != list(shape) or rle is None:
        raise ValueError(f"a predicted mask of image {prediction.get('image_id')} is {size}, not {list(shape)} "
                         "(the prototypes' size with a MaskFrame, else the image's)")
    return rle


def rle_iou(truth: list[JsonObject], found: list[JsonObject]) -> np.ndarray:
    """[G, D] mask IoU, float32: each intersection over union counted exactly, divided once (in float32
    the result of Ultralytics' mask_iou, whose eps does not move a union of one pixel or more)."""
    from faster_coco_eval.core import mask as mask_utils

    return np.asarray(mask_utils.iou(found, truth, [0] * len(truth)), np.float64).reshape(len(found), -1).T.astype(
        np.float32)
