"""Pascal VOC detection data: one XML file per image, 1-based inclusive pixel coordinates.

Two layouts: a VOC root (``Annotations/<id>.xml``, ``JPEGImages/<id>.jpg``, the split lists
``ImageSets/Main/<split>.txt``), named by ``[data] dataset``; or a folder of XML files with a folder
of images, named by ``[data.validation] annotations`` and ``images``.

Coordinates: VOC counts pixels from 1 and a box covers the pixels ``xmin..xmax`` inclusive (the
devkit's own overlap adds 1 to each side's length), so in COCO's continuous coordinates, where
pixel i (0-based) spans [i, i + 1), the box is [xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1].

``difficult`` objects become COCO ``iscrowd`` regions: COCO's evaluation ignores them, so a
detection on one is neither a true nor a false positive and missing one costs nothing, as VOC's
own evaluation treats them.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgebuild.datasets.images import (
    IMAGE_SUFFIXES,
    CocoSet,
    Sample,
    image_size,
    image_stem,
    refuse_duplicate_stems,
    spread,
)
from edgebuild.errors import DataError
from edgebuild.jsontypes import JsonObject

__all__ = ["load_voc_root", "voc_object_files", "voc_split_images"]


@dataclass(frozen=True)
class VocObject:
    name: str
    box: tuple[float, float, float, float]  # COCO [x, y, w, h] in pixels
    difficult: bool


@dataclass(frozen=True)
class VocFile:
    filename: str | None  # <filename>
    size: tuple[int, int] | None  # <size> width, height where given and not 0
    objects: list[VocObject]


def read_voc_xml(path: Path, key: str) -> VocFile:
    try:
        root = ElementTree.parse(path).getroot()
    except FileNotFoundError:
        raise DataError(f"{key}: file not found: {path}") from None
    except ElementTree.ParseError as exc:
        raise DataError(f"{key}: {path} is not valid XML: {exc}") from None
    if root.tag != "annotation":
        raise DataError(f"{key}: {path} is not a Pascal VOC annotation: its root element is <{root.tag}>, "
                        "not <annotation>")
    size = None
    width, height = root.findtext("size/width"), root.findtext("size/height")
    if width and height:
        try:
            size = (int(float(width)), int(float(height)))
        except ValueError:
            raise DataError(f"{key}: {path}: <size> is not numbers: {width!r} x {height!r}") from None
        size = size if size[0] > 0 and size[1] > 0 else None
    objects = []
    for index, element in enumerate(root.findall("object"), 1):  # direct children: a <part> has its own boxes
        where = f"{key}: {path}: object {index}"
        name = (element.findtext("name") or "").strip()
        if not name:
            raise DataError(f"{where}: no <name>")
        box = element.find("bndbox")
        if box is None:
            raise DataError(f"{where} ({name}): no <bndbox>")
        corners = ("xmin", "ymin", "xmax", "ymax")
        try:
            xmin, ymin, xmax, ymax = (float((box.findtext(tag) or "").strip()) for tag in corners)
        except ValueError:
            found = {tag: box.findtext(tag) for tag in corners}
            raise DataError(f"{where} ({name}): <bndbox> needs numbers xmin, ymin, xmax, ymax, found {found}") from None
        if not all(math.isfinite(v) for v in (xmin, ymin, xmax, ymax)):
            raise DataError(f"{where} ({name}): <bndbox> needs finite numbers, found ({xmin}, {ymin}, {xmax}, {ymax})")
        if xmax < xmin or ymax < ymin:
            raise DataError(f"{where} ({name}): xmax/ymax below xmin/ymin: ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g})")
        difficult = (element.findtext("difficult") or "0").strip()
        if difficult not in ("0", "1"):
            raise DataError(f"{where} ({name}): <difficult> must be 0 or 1, found {difficult!r}")
        objects.append(VocObject(name, (xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1), difficult == "1"))
    filename = (root.findtext("filename") or "").strip() or None
    return VocFile(filename, size, objects)


class _ImageIndex:
    """The images of a folder by id (file name without suffix)."""

    def __init__(self, folder: Path, key: str) -> None:
        if not folder.is_dir():
            raise DataError(f"{key}: not a folder: {folder}")
        self.folder, self.key = folder, key
        self.by_id: dict[str, list[Path]] = {}
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith("."):
                self.by_id.setdefault(path.stem, []).append(path)

    def get(self, image_id: str) -> Path | None:
        found = self.by_id.get(image_id, [])
        if len(found) > 1:
            refuse_duplicate_stems(found, self.key, str(self.folder))
        return found[0] if found else None


def _split_ids(root: Path, split: str, key: str) -> tuple[list[str], Path]:
    listing = root / "ImageSets" / "Main" / f"{split}.txt"
    if not listing.is_file():
        lists = sorted(p.stem for p in (root / "ImageSets" / "Main").glob("*.txt") if "_" not in p.stem)
        raise DataError(f"{key}: {root} has no split list ImageSets/Main/{split}.txt "
                        f"(lists: {', '.join(lists) or 'none'})",
                        hint="write the split's image ids one a line there, or give the folders as "
                             "data.validation.annotations (Annotations/) and data.validation.images (JPEGImages/)")
    ids: list[str] = []
    first: dict[str, int] = {}
    for number, line in enumerate(listing.read_text(encoding="utf-8-sig").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] in first:
            raise DataError(f"{key}: {listing}:{number}: image id {fields[0]!r} again (first on line "
                            f"{first[fields[0]]})")
        first[fields[0]] = number
        ids.append(fields[0])
    if not ids:
        raise DataError(f"{key}: {listing} lists no images")
    return ids, listing


def voc_object_files(root: Path, split: str, key: str = "data.dataset") -> dict[str, Path]:
    """Every object name of a split's XML files, with the first file that uses it."""
    first: dict[str, Path] = {}
    for image_id in _split_ids(root, split, key)[0]:
        xml = root / "Annotations" / f"{image_id}.xml"
        for obj in read_voc_xml(xml, key).objects if xml.is_file() else ():
            first.setdefault(obj.name, xml)
    return first


def voc_class_sources(root: Path, split: str, key: str = "data.dataset") -> str:
    """Where a split's object names come from, rarest first (the likeliest a model lacks: a class it was not
    trained on is usually a stray label in a few files): "'hexagon' in 1 XML file (.../a2.xml), ..."."""
    files: dict[str, list[Path]] = {}
    for image_id in _split_ids(root, split, key)[0]:
        xml = root / "Annotations" / f"{image_id}.xml"
        for name in dict.fromkeys(o.name for o in (read_voc_xml(xml, key).objects if xml.is_file() else ())):
            files.setdefault(name, []).append(xml)
    rarest = sorted(files.items(), key=lambda item: (len(item[1]), item[0]))
    return ", ".join(f"{name!r} in {len(found)} XML file{'s' if len(found) > 1 else ''} (first {found[0]})"
                     for name, found in rarest)


def voc_split_images(root: Path, split: str, key: str = "data.dataset") -> tuple[list[Path], Path]:
    """The images of a split of a VOC root (its XML files are not read), and the split list."""
    ids, listing = _split_ids(root, split, key)
    index = _ImageIndex(root / "JPEGImages", key)
    found = [index.get(i) for i in ids]
    missing = [i for i, image in zip(ids, found) if image is None]
    if missing:
        raise DataError(f"{key}: {listing}: {len(missing)} image(s) not in {root / 'JPEGImages'}: "
                        f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return [image for image in found if image is not None], listing


def load_voc_root(root: Path, split: str, classes: list[str], limit: int | None = None,
                  key: str = "data.dataset") -> CocoSet:
    """A split of a VOC root in COCO form; ``limit`` keeps that many images, evenly spread over the
    split by id (``images.spread``)."""
    ids, listing = _split_ids(root, split, key)
    available = len(ids)
    ids = spread(ids, limit, str)
    index = _ImageIndex(root / "JPEGImages", key)
    entries = []
    for image_id in ids:
        xml = root / "Annotations" / f"{image_id}.xml"
        if not xml.is_file():
            raise DataError(f"{key}: {listing}: {image_id!r} has no annotation {xml}")
        entries.append((xml, index.get(image_id)))
    return _build(entries, root / "JPEGImages", classes, key, listing, (listing,), available)


def load_voc_folder(annotations: Path, images: Path, classes: list[str], limit: int | None = None,
                    key: str = "data.validation.annotations") -> CocoSet:
    if not annotations.is_dir():
        raise DataError(f"{key}: not a folder: {annotations}")
    xmls = sorted(p for p in annotations.iterdir() if p.suffix.lower() == ".xml" and not p.name.startswith("."))
    if not xmls:
        raise DataError(f"{key}: no Pascal VOC .xml files in {annotations}")
    available = len(xmls)
    xmls = spread(xmls, limit, image_stem)
    index = _ImageIndex(images, "data.validation.images")
    return _build([(x, index.get(x.stem)) for x in xmls], images, classes, key, annotations, (), available)


def _build(entries: list[tuple[Path, Path | None]], images_dir: Path, classes: list[str], key: str,
           described_by: Path, extra_files: tuple[Path, ...], available: int) -> CocoSet:
    """The COCO form of (XML file, its image by id if found) pairs; <filename> finds an image not found by id."""
    category = {name: i + 1 for i, name in enumerate(classes)}
    records: list[JsonObject] = []
    annotations: list[JsonObject] = []
    samples: list[Sample] = []
    unknown: dict[str, Path] = {}
    tally: Counter[str] = Counter()
    for image_id, (xml, image) in enumerate(entries, 1):
        parsed = read_voc_xml(xml, key)
        if image is None and parsed.filename and (images_dir / parsed.filename).is_file():
            image = images_dir / parsed.filename
        if image is None:
            raise DataError(f"{key}: {xml}: its image ({parsed.filename or xml.stem + '.*'}) is not in {images_dir}")
        width, height = image_size(image, key)
        if parsed.size and parsed.size != (width, height):
            raise DataError(f"{key}: {xml}: <size> says {parsed.size[0]}x{parsed.size[1]}, but {image} is "
                            f"{width}x{height}: the boxes were drawn on another version of the image")
        records.append({"id": image_id, "file_name": image.name, "width": width, "height": height})
        samples.append(Sample(image, image_id))
        for obj in parsed.objects:
            if obj.name not in category:
                unknown.setdefault(obj.name, xml)
                continue
            box = _clip(obj.box, width, height, tally)
            if box is None:
                continue
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category[obj.name],
                                "bbox": box, "area": box[2] * box[3], "iscrowd": int(obj.difficult)})
    if unknown:
        shown = ", ".join(f"{name!r} ({xml.name})" for name, xml in sorted(unknown.items())[:8])
        raise DataError(f"{key}: objects of classes that are not in task.classes {classes}: {shown}",
                        hint="task.classes names the model's outputs; every class the annotations use must be one")
    if not samples:
        raise DataError(f"{key}: {described_by} lists no images")
    refuse_duplicate_stems([s.path for s in samples], key, str(described_by))
    ground_truth = {"images": records, "annotations": annotations,
                    "categories": [{"id": i + 1, "name": n} for i, n in enumerate(classes)]}
    said = {"clipped": "box(es) reach past the image edge: clipped to the image",
            "zero-area": "box(es) of zero width or height after clipping: dropped (no detection can match them)"}
    notes = tuple(f"{described_by.name}: {tally[k]} {text}" for k, text in said.items() if tally.get(k))
    return CocoSet(described_by, ground_truth, samples, list(range(1, len(classes) + 1)), "voc",
                   (*extra_files, *(xml for xml, _ in entries)), available, notes)


def _clip(box: tuple[float, float, float, float], width: int, height: int,
          tally: Counter[str]) -> list[float] | None:
    """A COCO box clipped to the image (counted), or None where nothing of it is left (counted)."""
    x, y, w, h = box
    x1, y1 = min(max(x, 0.0), width), min(max(y, 0.0), height)
    x2, y2 = min(max(x + w, 0.0), width), min(max(y + h, 0.0), height)
    if (x1, y1, x2, y2) != (x, y, x + w, y + h):
        tally["clipped"] += 1
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        tally["zero-area"] += 1
        return None
    return [x1, y1, x2 - x1, y2 - y1]
