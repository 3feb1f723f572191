"""YOLO label lines for every task, read as Ultralytics' ``verify_image_label`` reads them, and the
shapes a label becomes in the COCO ground truth (polygons, keypoints, oriented boxes).

One line is one object; what follows the class depends on the task (``LabelLayout``):

- detection: ``class cx cy w h``; a polygon counts as its bounding box, keypoints after the box
  (``kpt_shape``) are skipped;
- segmentation: ``class x1 y1 x2 y2 ...``, a polygon of 3 points or more;
- pose: ``class cx cy w h`` and ``K`` keypoints of ``x y`` or ``x y v`` (``kpt_shape: [K, 2|3]``);
  with 2 values a keypoint is labelled (v = 2) unless x or y is negative, as Ultralytics masks them;
- obb: ``class x1 y1 x2 y2 x3 y3 x4 y4``, the 4 corners; Ultralytics takes the minimum-area
  rectangle around them (``cv2.minAreaRect``), and so does this reader where they are not one.

Every value is normalised to [0, 1] by the image size, with Ultralytics' 1% tolerance. A line
repeated exactly counts once; a box reaching past the image is clipped, one of zero size dropped.
Every malformed line is a DataError naming the file and the line.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject

__all__: list[str] = []  # read through yolo.py and coco.py (``load_yolo_set``, ``read_coco``)

#: the task kinds a detection-like set is read for (classification has its own folders)
TASK_KINDS = ("detection", "segmentation", "pose", "obb")
#: how far outside [0, 1] Ultralytics takes a coordinate (``verify_image_label``: 1%)
TOLERANCE = 0.01
#: a quadrilateral within this share of its minimum-area rectangle's area is taken as that rectangle's corners
#: as written (labelling tools round corners); further off, the rectangle replaces it, as Ultralytics does
_RECTANGLE = 1e-3
_MODEL = {"detection": "a detection model", "segmentation": "a segmentation model", "pose": "a pose model",
          "obb": "an OBB model"}


@dataclass(frozen=True)
class LabelLayout:
    """What a label line holds: the task it is read for and the data.yaml's ``kpt_shape`` (None: none)."""

    task: str = "detection"
    kpt_shape: tuple[int, int] | None = None

    @property
    def keypoint_values(self) -> int:
        return self.kpt_shape[0] * self.kpt_shape[1] if self.kpt_shape else 0

    def wanted(self) -> str:
        """The fields a line needs, in words, for an error message."""
        if self.task == "pose" and self.kpt_shape:
            k, dims = self.kpt_shape
            return (f"5 + {k}*{dims} = {5 + k * dims} (class cx cy w h, then {k} keypoints of "
                    f"{'x y v' if dims == 3 else 'x y'}; kpt_shape {list(self.kpt_shape)})")
        if self.task == "segmentation":
            return "class x1 y1 x2 y2 x3 y3 ... (a polygon of 3 points or more: 7 fields or more, an odd number)"
        if self.task == "obb":
            return "9 (class x1 y1 x2 y2 x3 y3 x4 y4: the 4 corners)"
        if self.kpt_shape:
            return f"5 (class cx cy w h), 5 + {self.keypoint_values} (keypoints, skipped) or a polygon"
        return "5 (class cx cy w h) or a polygon"


@dataclass(frozen=True)
class YoloObject:
    """One label line, normalised: the box (cx, cy, w, h) clipped to the image, the polygon or OBB corners
    as written (x1, y1, x2, y2, ...), the keypoints (x1, y1, v1, ...; v 0, 1 or 2)."""

    label: int
    box: tuple[float, float, float, float]
    points: tuple[float, ...] = ()
    keypoints: tuple[float, ...] = ()


def read_objects(path: Path, classes: int, layout: LabelLayout, key: str = "data.dataset",
                 tally: Counter[str] | None = None) -> list[YoloObject]:
    """The objects of a label file, one a line; ``tally`` counts what reading did (``clipped``,
    ``zero-area``, ``duplicate``) for the set's notes."""
    tally = Counter() if tally is None else tally
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{key}: {path}: not a UTF-8 label file: {exc}") from None
    objects: list[YoloObject] = []
    seen: set[tuple[float, ...]] = set()
    first: dict[str, int] = {}  # the first line of each shape: boxes and polygons in one file are refused
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        where = f"{key}: {path}:{number}"
        shape = _shape(len(fields), layout, where, line.strip())
        first.setdefault(shape, number)
        if "box" in first and "polygon" in first:
            box, polygon = first["box"], first["polygon"]
            raise DataError(f"{where}: {'a box' if number == box else 'a polygon'} after "
                            f"{'the polygon' if number == box else 'the box'} of line {min(box, polygon)}: a label "
                            "file holds boxes (class cx cy w h) or polygons, not both (Ultralytics drops the image as "
                            "corrupt: 'labels mix segment and detection rows')")
        try:
            values = [float(v) for v in fields]
        except ValueError:
            raise DataError(f"{where}: not numbers: {line.strip()!r}") from None
        if not all(math.isfinite(v) for v in values):
            raise DataError(f"{where}: not finite numbers: {line.strip()!r}")
        if tuple(values) in seen:
            tally["duplicate"] += 1
            continue
        seen.add(tuple(values))
        label = values[0]
        if label != int(label) or not 0 <= label < classes:
            raise DataError(f"{where}: class {fields[0]} is out of range: the data.yaml names {classes} classes "
                            f"(0..{classes - 1})")
        found = _object(int(label), values[1:], shape, layout, where, line.strip(), tally)
        if found is not None:
            objects.append(found)
    return objects


def _shape(count: int, layout: LabelLayout, where: str, line: str) -> str:
    """What a line of ``count`` fields is for the layout: ``box``, ``polygon`` or ``pose`` (a DataError if none)."""
    values = count - 1
    polygon = count >= 7 and values % 2 == 0
    if layout.task == "pose":
        if count == 5 + layout.keypoint_values:
            return "pose"
        said = "5 fields (class cx cy w h: a box, no keypoints)" if count == 5 else f"{count} fields"
        raise DataError(f"{where}: {said}, a pose model needs {layout.wanted()}: {line!r}")
    if layout.task == "segmentation":
        if polygon:
            return "polygon"
        if count == 5:
            said = "5 fields (class cx cy w h: a box, not a polygon)"
        elif values % 2:
            said = f"{values} coordinates after the class, an odd number: a polygon is x y pairs"
        else:
            said = f"a polygon of {values // 2} point(s): it needs 3 or more"
        raise DataError(f"{where}: {said}; a segmentation model needs {layout.wanted()}: {line!r}")
    if layout.task == "obb":
        if polygon:
            return "polygon"
        said = ("5 fields (class cx cy w h: an axis-aligned box, not 4 corners)" if count == 5 else
                f"{values} values after the class" + (", an odd number" if values % 2 else ""))
        raise DataError(f"{where}: {said}; an OBB model needs {layout.wanted()}: {line!r}")
    if count == 5 or (layout.kpt_shape and count == 5 + layout.keypoint_values):
        return "box"
    if polygon and not (layout.kpt_shape and count == 5 + layout.keypoint_values):
        return "polygon"
    raise DataError(f"{where}: {count} fields, needs {layout.wanted()}: {line!r}")


def _object(label: int, values: list[float], shape: str, layout: LabelLayout, where: str, line: str,
            tally: Counter[str]) -> YoloObject | None:
    points: tuple[float, ...] = ()
    keypoints: tuple[float, ...] = ()
    if shape == "pose" and layout.kpt_shape:
        keypoints = _keypoints(values[4:], layout.kpt_shape, where, line)
    coords = values if shape == "polygon" else [*values[:4], *_xy(keypoints)]
    outside = [v for v in coords if not -TOLERANCE <= v <= 1.0 + TOLERANCE]
    if outside:
        raise DataError(f"{where}: coordinates must be normalised to [0, 1] by the image size, found "
                        f"{', '.join(f'{v:g}' for v in outside)} in {line!r} (Ultralytics drops the whole image "
                        "as corrupt)")
    if shape == "polygon":
        points = tuple(values)
        xs, ys = values[0::2], values[1::2]
        x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    else:
        cx, cy, w, h = values[:4]
        if w < 0 or h < 0:
            raise DataError(f"{where}: a negative width or height: {line!r}")
        x1, x2, y1, y2 = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
    clipped = [min(max(v, 0.0), 1.0) for v in (x1, x2, y1, y2)]
    if clipped != [x1, x2, y1, y2]:
        tally["clipped"] += 1
        x1, x2, y1, y2 = clipped
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        tally["zero-area"] += 1
        return None
    return YoloObject(label, ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1),
                      points if layout.task in ("segmentation", "obb") else (), keypoints)


def _keypoints(values: list[float], kpt_shape: tuple[int, int], where: str, line: str) -> tuple[float, ...]:
    """x, y, v of every keypoint: v as written (0, 1 or 2), or with 2 values a keypoint is labelled (2)
    unless x or y is negative (Ultralytics' mask: ``x < 0 or y < 0`` is not labelled)."""
    _, dims = kpt_shape
    found: list[float] = []
    for i in range(0, len(values), dims):
        x, y = values[i], values[i + 1]
        if dims == 3:
            v = values[i + 2]
            if v not in (0.0, 1.0, 2.0):
                raise DataError(f"{where}: keypoint {i // 3 + 1} has visibility {v:g}; it must be 0 (not labelled), "
                                f"1 (labelled, not visible) or 2 (visible): {line!r}")
        else:
            v = 0.0 if x < 0 or y < 0 else 2.0
        found += [x, y, v]
    return tuple(found)


def _xy(keypoints: tuple[float, ...]) -> list[float]:
    return [v for i, v in enumerate(keypoints) if i % 3 != 2]


def to_annotation(obj: YoloObject, layout: LabelLayout, width: int, height: int,
                  tally: Counter[str]) -> JsonObject | None:
    """The COCO fields of an object on a ``width`` x ``height`` image: ``bbox`` and ``area``, and the task's
    ``segmentation`` (polygon, pixels; area the mask's), ``keypoints``/``num_keypoints`` (pixels) or ``obb``
    (4 corners, pixels; bbox their bounding box). None: an OBB with no area (counted as ``zero-area``)."""
    cx, cy, w, h = obj.box
    box = [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]
    fields: JsonObject = {"bbox": box, "area": box[2] * box[3]}
    if layout.task == "segmentation":
        polygon = [v * (width if i % 2 == 0 else height) for i, v in enumerate(obj.points)]
        fields["segmentation"] = [polygon]
        fields["area"] = mask_area([polygon], width, height)
    elif layout.task == "pose":
        pixels = [v * (width, height, 1)[i % 3] for i, v in enumerate(obj.keypoints)]
        fields["keypoints"] = pixels
        fields["num_keypoints"] = sum(1 for v in pixels[2::3] if v > 0)
    elif layout.task == "obb":
        corners = [(obj.points[i] * width, obj.points[i + 1] * height) for i in range(0, len(obj.points), 2)]
        rectangle, area = min_area_rectangle(corners)
        if area <= 0:
            tally["zero-area"] += 1
            return None
        if len(corners) != 4 or abs(_polygon_area(corners) - area) > _RECTANGLE * area:
            tally["not-rectangle"] += 1
            corners = rectangle
        xs, ys = [x for x, _ in corners], [y for _, y in corners]
        x1, y1 = max(min(xs), 0.0), max(min(ys), 0.0)
        x2, y2 = min(max(xs), float(width)), min(max(ys), float(height))
        fields.update(bbox=[x1, y1, x2 - x1, y2 - y1], area=area, obb=[v for xy in corners for v in xy])
    return fields


def mask_area(segmentation: list[list[float]] | JsonObject, width: int, height: int) -> float:
    """The area in pixels of a COCO segmentation (polygons or RLE) on a ``width`` x ``height`` image, as
    COCO's mask utilities rasterise it (faster-coco-eval, pycocotools' rules)."""
    from faster_coco_eval.core import mask

    if isinstance(segmentation, dict):
        counts = segmentation["counts"]
        rle = mask.frPyObjects(segmentation, height, width) if isinstance(counts, list) else \
            {"size": segmentation["size"], "counts": counts.encode() if isinstance(counts, str) else counts}
        return float(mask.area(rle))
    return float(mask.area(mask.merge(mask.frPyObjects(segmentation, height, width))))


def min_area_rectangle(points: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], float]:
    """The smallest rectangle holding ``points`` (their convex hull's edges tried in turn: the rectangle has
    one of them as a side), as 4 corners in order, and its area (0 for points on one line)."""
    hull = _hull(points)
    if len(hull) < 3:
        return [hull[0], hull[-1], hull[-1], hull[0]], 0.0
    best: tuple[float, list[tuple[float, float]]] | None = None
    for (ax, ay), (bx, by) in zip(hull, hull[1:] + hull[:1]):
        length = math.hypot(bx - ax, by - ay)
        if length == 0:
            continue
        ux, uy = (bx - ax) / length, (by - ay) / length
        along = [x * ux + y * uy for x, y in hull]
        across = [-x * uy + y * ux for x, y in hull]
        lo, hi, near, far = min(along), max(along), min(across), max(across)
        area = (hi - lo) * (far - near)
        if best is None or area < best[0]:
            corners = [(a * ux - c * uy, a * uy + c * ux) for a, c in ((lo, near), (hi, near), (hi, far), (lo, far))]
            best = (area, corners)
    assert best is not None
    return best[1], best[0]


def _hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The convex hull, counter-clockwise (Andrew's monotone chain)."""
    ordered = sorted(set(points))
    if len(ordered) < 3:
        return ordered

    def turn(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list[tuple[float, float]] = []
    upper: list[tuple[float, float]] = []
    for chain, sequence in ((lower, ordered), (upper, ordered[::-1])):
        for p in sequence:
            while len(chain) >= 2 and turn(chain[-2], chain[-1], p) <= 0:
                chain.pop()
            chain.append(p)
    return lower[:-1] + upper[:-1]


def _polygon_area(points: list[tuple[float, float]]) -> float:
    return abs(sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in zip(points, points[1:] + points[:1]))) / 2


def flip_pairs(names: list[str]) -> list[int] | None:
    """A flip_idx from keypoint names: each ``left_*`` swaps with its ``right_*`` (COCO's person keypoints);
    None when no name has a left/right mirror."""
    def mirror(name: str) -> str:
        for a, b in (("left", "right"), ("right", "left")):
            if a in name:
                return name.replace(a, b)
        return name

    index = {n: i for i, n in enumerate(names)}
    flip = [index.get(mirror(n), i) for i, n in enumerate(names)]
    return flip if flip != list(range(len(names))) and sorted(flip) == list(range(len(names))) else None


def refuse_task(task: str, key: str) -> None:
    """A task kind the readers do not know is a DataError."""
    if task not in TASK_KINDS:
        raise DataError(f"{key}: no reader for task {task!r} (one of {', '.join(TASK_KINDS)})")


def model_of(task: str) -> str:
    """'a pose model', ... for messages."""
    return _MODEL.get(task, f"a {task} model")
