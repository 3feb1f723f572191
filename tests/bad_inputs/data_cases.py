"""Bad data (issue 34, part 2): YOLO, COCO, Pascal VOC and class folders, each broken one way.

Every problem with the data is refused by ``init``, which reads it as ``check`` does (every label,
annotation and XML file parsed, every image decoded), so it never writes a project ``check``
refuses. What the readers do without refusing (boxes clipped or dropped, EXIF orientation applied,
16-bit scaled, alpha dropped) is a note ``check`` prints with counts. The ``*-after-init`` cases
break the data of a project ``init`` wrote: ``check`` must find what ``validate`` would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.bad_inputs.harness import Case, Inputs, invoke
from tests.bad_inputs.kit import SIZE, Kit, coco_dict, voc_xml

DATA = 5  # DataError's exit code

Make = Callable[[Kit, Path], Inputs]


# -- helpers: copy a kit input, break one file of the copy -----------------------------------------

def _yolo(change: Callable[[Path], object]) -> Make:
    """The detector with a copy of the YOLO data.yaml, ``change`` applied to the copy's root folder."""
    def make(kit: Kit, folder: Path) -> Inputs:
        data = kit.copy(kit.yolo, folder)
        change(data.parent)
        return Inputs(model=kit.detector, data=data)
    return make


def _coco(change: Callable[[dict], object] | None = None, files: Callable[[Path], object] | None = None,
          text: Callable[[str], str] | None = None) -> Make:
    """The detector with a copy of the COCO set: ``change`` edits the JSON dict, ``files`` the folder."""
    def make(kit: Kit, folder: Path) -> Inputs:
        data = kit.copy(kit.coco, folder)
        gt = coco_dict()
        if change is not None:
            change(gt)
        written = json.dumps(gt)
        data.write_text(text(written) if text else written, encoding="utf-8")
        if files is not None:
            files(data.parent)
        return Inputs(model=kit.detector, data=data)
    return make


def _voc(change: Callable[[Path], object]) -> Make:
    def make(kit: Kit, folder: Path) -> Inputs:
        root = kit.copy(kit.voc, folder)
        change(root)
        return Inputs(model=kit.detector, data=root)
    return make


def _folders(change: Callable[[Path], object]) -> Make:
    def make(kit: Kit, folder: Path) -> Inputs:
        root = kit.copy(kit.folders, folder)
        change(root)
        return Inputs(model=kit.classifier, data=root)
    return make


def _nameless(kit: Kit, folder: Path) -> Path:
    """The kit's detector without its class names (a model file that says only how many classes it scores)."""
    import onnx

    model = onnx.load(str(kit.detector))
    kept = [p for p in model.metadata_props if p.key != "names"]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "nameless.onnx"))
    return folder / "nameless.onnx"


def _yolo_nameless(change: Callable[[Path], object]) -> Make:
    def make(kit: Kit, folder: Path) -> Inputs:
        data = kit.copy(kit.yolo, folder)
        change(data.parent)
        return Inputs(model=_nameless(kit, folder), data=data)
    return make


def _after_init(of: str, change: Callable[[Path], object]) -> Make:
    """A project ``init`` wrote from valid data, whose data is then broken: ``check`` must refuse it."""
    def make(kit: Kit, folder: Path) -> Inputs:
        data = kit.copy(getattr(kit, of), folder)
        model = kit.classifier if of == "folders" else kit.detector
        ran = invoke("init", "--model", str(model), "--data", str(data), str(folder / "project"))
        assert ran.exit_code == 0, ran.output
        change(data if data.is_dir() else data.parent)
        return Inputs(project=folder / "project")
    return make


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _label(root: Path, text: str, stem: str = "a0") -> None:
    _write(root / "labels" / "val" / f"{stem}.txt", text)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _pixels(seed: int = 7, size: int = SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)


def _save(path: Path, mode: str) -> None:
    """Replace ``path`` with an image of the same size in ``mode`` (I;16, RGBA, P, L)."""
    from PIL import Image

    rgb = Image.fromarray(_pixels())
    if mode == "I;16":
        gray = np.asarray(rgb.convert("L")).astype(np.uint16) * 257
        Image.fromarray(gray).save(path)
    else:
        rgb.convert(mode).save(path)


def _exif_jpeg(png: Path) -> None:
    """``png`` replaced by a JPEG of the same name but suffix whose EXIF says: turn it a quarter (6)."""
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(_pixels()).save(png.with_suffix(".jpg"), exif=exif)
    png.unlink()


def _json_edit(path: Path, change: Callable[[dict], object]) -> None:
    gt = json.loads(path.read_text())
    change(gt)
    path.write_text(json.dumps(gt))


def _first_annotation(gt: dict, **fields: object) -> None:
    gt["annotations"][0].update(fields)


def _replace_xml(root: Path, stem: str, text: str) -> None:
    (root / "Annotations" / f"{stem}.xml").write_text(text)


def _yaml(root: Path, text: str) -> None:
    (root / "data.yaml").write_text(text, encoding="utf-8")


_NAMES = "names:\n  0: circle\n  1: square\n  2: triangle\n"

# -- YOLO -------------------------------------------------------------------------------------------

YOLO = [
    Case("data-yolo-class-out-of-range", _yolo(lambda r: _label(r, "7 0.5 0.5 0.2 0.2\n")), "init", DATA,
         ("a0.txt:1", "class 7"), "a class id the data.yaml does not name"),
    Case("data-yolo-box-outside", _yolo(lambda r: _label(r, "0 1.5 0.5 0.2 0.2\n")), "init", DATA,
         ("a0.txt:1", "1.5"), "a coordinate > 1 (not normalised)"),
    Case("data-yolo-box-past-edge-clipped", _yolo(lambda r: _label(r, "0 0.95 0.5 0.2 0.2\n")), "note", 0,
         ("data.yaml val: 1 box(es) reach past the image edge: clipped",), "a box over the image edge"),
    Case("data-yolo-within-tolerance-clipped", _yolo(lambda r: _label(r, "0 0.5 0.5 0.2 1.005\n")), "note", 0,
         ("1 box(es) reach past the image edge",), "a coordinate within Ultralytics' 1% tolerance"),
    Case("data-yolo-zero-area-box", _yolo(lambda r: _label(r, "0 0.5 0.5 0 0.2\n1 0.5 0.5 0.2 0.2\n")), "note", 0,
         ("1 box(es) of zero width or height: dropped",), "a box of zero width"),
    Case("data-yolo-duplicate-lines", _yolo(lambda r: _label(r, "0 0.3 0.3 0.2 0.2\n0 0.3 0.3 0.2 0.2\n")),
         "note", 0, ("1 label line(s) repeated exactly",), "a label line twice"),
    Case("data-yolo-orphan-label", _yolo(lambda r: _label(r, "0 0.5 0.5 0.2 0.2\n", "zz")), "note", 0,
         ("1 label file(s) without an image",), "a label file no image reads"),
    Case("data-yolo-no-labels-folder", _yolo(lambda r: __import__("shutil").rmtree(r / "labels")), "init", DATA,
         ("data.yaml", "labels", "has a label file"), "a dataset without its labels/ folder"),
    Case("data-yolo-wrong-field-count", _yolo(lambda r: _label(r, "0 0.5 0.5 0.2\n")), "init", DATA,
         ("a0.txt:1", "4 fields"), "a label line of 4 fields"),
    Case("data-yolo-not-numbers", _yolo(lambda r: _label(r, "0 a b c d\n")), "init", DATA,
         ("a0.txt:1", "not numbers"), "a label line of words"),
    Case("data-yolo-negative-size", _yolo(lambda r: _label(r, "0 0.5 0.5 -0.005 0.2\n")), "init", DATA,
         ("a0.txt:1", "negative"), "a negative width (within the tolerance)"),
    Case("data-yolo-negative-coordinate", _yolo(lambda r: _label(r, "0 -0.3 0.5 0.2 0.2\n")), "init", DATA,
         ("a0.txt:1", "-0.3"), "a negative centre"),
    Case("data-yolo-nan", _yolo(lambda r: _label(r, "0 nan 0.5 0.2 0.2\n")), "init", DATA,
         ("a0.txt:1", "finite"), "a NaN coordinate"),
    Case("data-yolo-label-bom", _yolo(lambda r: _write(r / "labels" / "val" / "a0.txt", "\ufeff0 0.3 0.3 0.2 0.2\n")),
         "note", 0, ("yolo data.yaml",), "a UTF-8 BOM in a label file is stripped"),
    Case("data-yolo-yaml-bom", _yolo(lambda r: _yaml(r, "\ufeffpath: .\ntrain: images/train\nval: images/val\n"
                                                       + _NAMES)), "note", 0, ("yolo data.yaml",),
         "a UTF-8 BOM in data.yaml is stripped"),
    Case("data-yolo-label-not-utf8", _yolo(lambda r: (r / "labels" / "val" / "a0.txt").write_bytes(b"0 \xff\xfe\n")),
         "init", DATA, ("a0.txt", "utf-8"), "a label file in another encoding"),
    Case("data-yolo-yaml-syntax", _yolo(lambda r: _yaml(r, "path: .\ntrain: images/train\nval: [images/val\n")),
         "init", DATA, ("data.yaml", "line"), "a YAML syntax error"),
    Case("data-yolo-no-val-key", _yolo(lambda r: _yaml(r, "path: .\ntrain: images/train\n" + _NAMES)), "init", DATA,
         ("data.yaml", "'val'"), "data.yaml without val"),
    Case("data-yolo-names-differ", _yolo(lambda r: _yaml(r, "path: .\ntrain: images/train\nval: images/val\n"
                                                           "names: [square, circle, triangle]\n")), "init", DATA,
         ("data.yaml", "circle"), "names in another order than the model's"),
    Case("data-yolo-names-duplicated",
         _yolo_nameless(lambda r: _yaml(r, "path: .\ntrain: images/train\nval: images/val\n"
                                           "names: [circle, square, circle]\n")),
         "init", DATA, ("data.yaml", "'names'", "'circle' at ids 0, 2"),
         "a class name twice in data.yaml (with a model that names no classes: it would become task.classes)"),
    Case("data-yolo-names-not-list", _yolo(lambda r: _yaml(r, "train: images/train\nval: images/val\nnames: 5\n")),
         "init", DATA, ("data.yaml", "'names'"), "names that are a number"),
    Case("data-yolo-val-folder-missing", _yolo(lambda r: _yaml(r, "path: .\ntrain: images/train\nval: images/nope\n"
                                                                 + _NAMES)), "init", DATA,
         ("data.yaml", "images/nope"), "a val folder that does not exist"),
    Case("data-yolo-val-folder-empty", _yolo(lambda r: [p.unlink() for p in (r / "images" / "val").iterdir()]),
         "init", DATA, ("data.yaml", "no images"), "an empty val folder"),
    Case("data-yolo-list-missing-image", _yolo(lambda r: (_write(r / "val.txt", "./images/val/a0.png\n"
                                                                 "./images/val/gone.png\n"),
                                                          _yaml(r, "path: .\ntrain: images/train\nval: val.txt\n"
                                                                + _NAMES))), "init", DATA,
         ("val.txt:2", "gone.png"), "an image list naming a missing image"),
    Case("data-yolo-duplicate-stem", _yolo(lambda r: _save_copy(r / "images" / "val" / "a0.png", ".jpg")), "init",
         DATA, ("a0", "more than once"), "a0.png and a0.jpg share a0.txt"),
    Case("data-yolo-empty-image", _yolo(lambda r: (r / "images" / "val" / "a1.png").write_bytes(b"")), "init", DATA,
         ("a1.png", "empty"), "a validation image of 0 bytes"),
    Case("data-yolo-truncated-image", _yolo(lambda r: _truncate(r / "images" / "val" / "a1.png")), "init", DATA,
         ("a1.png", "truncated"), "a validation image cut short (its header reads)"),
    Case("data-yolo-corrupt-calibration-image", _yolo(lambda r: _truncate(r / "images" / "train" / "c2.png")),
         "init", DATA, ("c2.png", "cannot read image"), "a calibration image cut short"),
    Case("data-yolo-16bit-image", _yolo(lambda r: _save(r / "images" / "val" / "a0.png", "I;16")), "note", 0,
         ("1 of 4 images are 16-bit", "scaled"), "a 16-bit PNG (was read all white)"),
    Case("data-yolo-exif-rotated", _yolo(lambda r: _exif_jpeg(r / "images" / "val" / "a2.png")), "note", 0,
         ("1 of 4 images have an exif orientation, applied",), "a JPEG whose EXIF turns it a quarter"),
    Case("data-yolo-alpha-image", _yolo(lambda r: _save(r / "images" / "val" / "a1.png", "RGBA")), "note", 0,
         ("alpha channel", "dropped"), "an RGBA PNG"),
    Case("data-yolo-palette-image", _yolo(lambda r: _save(r / "images" / "val" / "a1.png", "P")), "note", 0,
         ("palette images",), "a palette PNG"),
    Case("data-yolo-gray-image", _yolo(lambda r: _save(r / "images" / "train" / "c1.png", "L")), "note", 0,
         ("calibration images: 1 of 4 images are grayscale",), "a grayscale calibration image"),
    Case("data-yolo-label-broken-after-init", _after_init("yolo", lambda r: _label(r, "9 0.5 0.5 0.2 0.2\n")),
         "check", DATA, ("a0.txt:1", "class 9"), "a label broken after init: check finds it"),
    Case("data-yolo-image-broken-after-init",
         _after_init("yolo", lambda r: (r / "images" / "val" / "a3.png").write_bytes(b"not an image")),
         "check", DATA, ("a3.png", "cannot read image"), "an image broken after init"),
]


def _save_copy(path: Path, suffix: str) -> None:
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").save(path.with_suffix(suffix))


# -- COCO -------------------------------------------------------------------------------------------

def _duplicate_image_id(gt: dict) -> None:
    gt["images"][1]["id"] = gt["images"][0]["id"]


def _more_annotation(gt: dict, **fields: object) -> None:
    gt["annotations"].append({"id": 99, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "area": 25,
                              "iscrowd": 0, **fields})


COCO = [
    Case("data-coco-duplicate-image-id", _coco(_duplicate_image_id), "init", DATA,
         ("annotations.json", "image id 1 appears more than once"), "two images with one id"),
    Case("data-coco-annotation-missing-image", _coco(lambda gt: _more_annotation(gt, image_id=42)), "init", DATA,
         ("annotations.json", "annotation id 99", "image_id 42"), "an annotation of an image not listed"),
    Case("data-coco-annotation-missing-category", _coco(lambda gt: _more_annotation(gt, category_id=9)), "init",
         DATA, ("annotations.json", "annotation id 99", "category_id 9"), "an annotation of an unknown category"),
    Case("data-coco-bbox-three-numbers", _coco(lambda gt: _more_annotation(gt, bbox=[1, 2, 3])), "init", DATA,
         ("annotations.json", "annotation id 99", "4 numbers"), "a bbox of three numbers"),
    Case("data-coco-bbox-strings", _coco(lambda gt: _more_annotation(gt, bbox=["1", "2", "3", "4"])), "init",
         DATA, ("annotation id 99", "4 numbers"), "a bbox of strings"),
    Case("data-coco-bbox-negative-size", _coco(lambda gt: _more_annotation(gt, bbox=[30, 30, -10, 5])), "init",
         DATA, ("annotations.json", "annotation id 99", "negative"), "a bbox written as corners"),
    Case("data-coco-duplicate-annotation-id", _coco(lambda gt: _more_annotation(gt, id=1)), "init", DATA,
         ("annotations.json", "annotation id 1 appears more than once"), "two annotations with one id"),
    Case("data-coco-size-disagrees", _coco(lambda gt: gt["images"][0].update(width=128)), "init", DATA,
         ("annotations.json", "image id 1", "a0.png", "128x64"), "width/height that are not the file's"),
    Case("data-coco-box-outside-clipped", _coco(lambda gt: _more_annotation(gt, bbox=[50, 50, 30, 30])), "note", 0,
         ("annotations.json: 1 box(es) reach past the image edge: clipped",), "a box past the image"),
    Case("data-coco-zero-area", _coco(lambda gt: _more_annotation(gt, bbox=[5, 5, 0, 8])), "note", 0,
         ("annotations.json: 1 box(es) of zero width or height: dropped",), "a box of zero width"),
    Case("data-coco-box-wholly-outside", _coco(lambda gt: _more_annotation(gt, bbox=[70, 70, 5, 5])), "note", 0,
         ("clipped", "dropped"), "a box wholly outside the image"),
    Case("data-coco-bom", _coco(text=lambda t: "\ufeff" + t), "note", 0, ("annotations.json",),
         "a UTF-8 BOM before the JSON"),
    Case("data-coco-image-file-missing", _coco(files=lambda r: (r / "images" / "a3.png").unlink()), "init", DATA,
         ("a3.png",), "an image listed that is not there"),
    Case("data-coco-image-without-id", _coco(lambda gt: gt["images"][2].pop("id")), "init", DATA,
         ("annotations.json", "images[2]", "'id'"), "an image entry without an id"),
    Case("data-coco-category-twice", _coco(lambda gt: gt["categories"].append({"id": 7, "name": "circle"})), "init",
         DATA, ("annotations.json", "'circle'", "more than once"), "a category name twice"),
    Case("data-coco-truncated-image", _coco(files=lambda r: _truncate(r / "images" / "a2.png")), "init", DATA,
         ("a2.png", "truncated"), "a validation image cut short"),
    Case("data-coco-corrupt-calibration-image",
         _coco(files=lambda r: (r / "calibration" / "c0.png").write_bytes(b"\x89PNG broken")), "init", DATA,
         ("c0.png", "cannot read image"), "a calibration image that is not one"),
    Case("data-coco-16bit-image", _coco(files=lambda r: _save(r / "images" / "a3.png", "I;16")), "note", 0,
         ("16-bit", "not clipped"), "a 16-bit validation image"),
    Case("data-coco-id-broken-after-init",
         _after_init("coco", lambda r: _json_edit(r / "annotations.json", _duplicate_image_id)), "check", DATA,
         ("annotations.json", "image id 1"), "a duplicate id written after init: check finds it"),
    Case("data-coco-bbox-broken-after-init",
         _after_init("coco", lambda r: _json_edit(r / "annotations.json",
                                                  lambda gt: _first_annotation(gt, bbox=[1, 2]))),
         "check", DATA, ("annotations.json", "annotation id 1", "4 numbers"), "a bbox broken after init"),
]


# -- Pascal VOC -------------------------------------------------------------------------------------

def _voc_object(root: Path, stem: str, name: str, box: tuple[int, int, int, int]) -> None:
    xml = root / "Annotations" / f"{stem}.xml"
    text = xml.read_text().replace("</annotation>", f"<object><name>{name}</name><difficult>0</difficult><bndbox>"
                                   f"<xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}</xmax>"
                                   f"<ymax>{box[3]}</ymax></bndbox></object></annotation>")
    xml.write_text(text)


def _voc_nameless(change: Callable[[Path], object]) -> Make:
    """The nameless detector with a copy of the VOC root: task.classes come from the XML files' object names."""
    def make(kit: Kit, folder: Path) -> Inputs:
        root = kit.copy(kit.voc, folder)
        change(root)
        return Inputs(model=_nameless(kit, folder), data=root)
    return make


VOC = [
    Case("data-voc-class-the-model-lacks", _voc_nameless(lambda r: _voc_object(r, "a2", "hexagon", (2, 2, 9, 9))),
         "init", DATA, ("hexagon", "a2.xml", "predicts 3 classes"),
         "an object name the model (which names no classes) was not trained on: a fourth class from the XML files"),
    Case("data-voc-unknown-class", _voc(lambda r: _voc_object(r, "a1", "hexagon", (2, 2, 9, 9))), "init", DATA,
         ("hexagon", "a1.xml"), "an object of a class the model does not have"),
    Case("data-voc-box-outside-clipped", _voc(lambda r: _voc_object(r, "a0", "circle", (40, 40, 90, 60))), "note", 0,
         ("1 box(es) reach past the image edge: clipped",), "a box past the image"),
    Case("data-voc-box-wholly-outside", _voc(lambda r: _voc_object(r, "a0", "circle", (80, 80, 90, 90))), "note", 0,
         ("dropped",), "a box wholly outside the image"),
    Case("data-voc-size-disagrees", _voc(lambda r: _replace_xml(r, "a0", voc_xml("a0.jpg", [(0, 8, 8, 30, 30)])
                                                                .replace("<width>64", "<width>100"))), "init", DATA,
         ("a0.xml", "<size>", "100x64"), "a <size> that is not the image's"),
    Case("data-voc-bad-xml", _voc(lambda r: _replace_xml(r, "a2", "<annotation><object>")), "init", DATA,
         ("a2.xml", "not valid xml"), "an XML file cut short"),
    Case("data-voc-no-bndbox", _voc(lambda r: _replace_xml(r, "a0", "<annotation><object><name>circle</name>"
                                                           "</object></annotation>")), "init", DATA,
         ("a0.xml", "bndbox"), "an object without a box"),
    Case("data-voc-xmax-below-xmin", _voc(lambda r: _voc_object(r, "a3", "circle", (30, 5, 10, 20))), "init", DATA,
         ("a3.xml", "xmax"), "corners the wrong way round"),
    Case("data-voc-box-not-numbers", _voc(lambda r: _replace_xml(r, "a3", voc_xml("a3.jpg", [(0, 2, 2, 20, 24)])
                                                                 .replace("<xmin>3</xmin>", "<xmin>x</xmin>"))),
         "init", DATA, ("a3.xml", "numbers"), "a box corner that is not a number"),
    Case("data-voc-difficult-bad", _voc(lambda r: _replace_xml(r, "a0", voc_xml("a0.jpg", [(0, 8, 8, 30, 30)])
                                                               .replace("<difficult>0", "<difficult>yes"))),
         "init", DATA, ("a0.xml", "difficult"), "a <difficult> that is not 0/1"),
    Case("data-voc-no-val-list", _voc(lambda r: (r / "ImageSets" / "Main" / "val.txt").unlink()), "init", DATA,
         ("imagesets/main/val.txt",), "a VOC root without its val list"),
    Case("data-voc-image-missing", _voc(lambda r: (r / "JPEGImages" / "a2.jpg").unlink()), "init", DATA,
         ("a2",), "a listed image that is not there"),
    Case("data-voc-annotation-missing", _voc(lambda r: (r / "Annotations" / "a3.xml").unlink()), "init", DATA,
         ("a3.xml",), "a listed id without its XML file"),
    Case("data-voc-list-bom", _voc(lambda r: (r / "ImageSets" / "Main" / "val.txt").write_text(
        "\ufeffa0\na1\na2\na3\n", encoding="utf-8")), "note", 0, ("pascal voc",), "a UTF-8 BOM in a split list"),
    Case("data-voc-truncated-image", _voc(lambda r: _truncate(r / "JPEGImages" / "a1.jpg")), "init", DATA,
         ("a1.jpg", "truncated"), "a JPEG cut short"),
    Case("data-voc-corrupt-calibration-image", _voc(lambda r: (r / "JPEGImages" / "c1.jpg").write_bytes(b"\xff\xd8")),
         "init", DATA, ("c1.jpg", "cannot read image"), "a calibration JPEG that is two bytes"),
    Case("data-voc-xml-broken-after-init", _after_init("voc", lambda r: _replace_xml(r, "a1", "<annotation>")),
         "check", DATA, ("a1.xml", "not valid xml"), "an XML file broken after init: check finds it"),
]


# -- class folders ----------------------------------------------------------------------------------

def _rm(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


FOLDERS = [
    Case("data-folders-empty-class", _folders(lambda r: [p.unlink() for p in (r / "val" / "fox").iterdir()]),
         "init", DATA, ("fox", "no images"), "a class folder without images"),
    Case("data-folders-no-train", _folders(lambda r: _rm(r / "train")), "init", DATA,
         ("'train'",), "split folders without train/"),
    Case("data-folders-empty-train", _folders(lambda r: [_rm(p) for p in (r / "train").iterdir()]), "init", DATA,
         ("train",), "a train split without images"),
    Case("data-folders-extra-class", _folders(lambda r: _save_copy_to(r / "val" / "cat" / "cat0.png",
                                                                      r / "val" / "wolf" / "wolf0.png")),
         "init", DATA, ("predicts 3 classes", "wolf"), "a fourth class folder for a 3-class model"),
    Case("data-folders-corrupt-image", _after_init("folders", lambda r: _truncate(r / "val" / "dog" / "dog1.png")),
         "check", DATA, ("dog1.png", "cannot read image"), "a validation image cut short"),
    Case("data-folders-empty-image",
         _after_init("folders", lambda r: (r / "val" / "cat" / "cat0.png").write_bytes(b"")), "check", DATA,
         ("cat0.png", "empty"), "a validation image of 0 bytes"),
    Case("data-folders-corrupt-calibration-image", _folders(lambda r: (r / "train" / "fox" / "fox2.png")
                                                            .write_bytes(b"GIF89a")), "init", DATA,
         ("fox2.png", "cannot read image"), "a calibration image that is not one"),
    Case("data-folders-16bit-image", _folders(lambda r: _save(r / "val" / "dog" / "dog0.png", "I;16")), "note", 0,
         ("1 of 9 images are 16-bit",), "a 16-bit class image"),
    Case("data-folders-gray-image", _folders(lambda r: _save(r / "val" / "fox" / "fox0.png", "L")), "note", 0,
         ("grayscale", "three equal channels"), "a grayscale class image"),
    Case("data-folders-rgba-image", _folders(lambda r: _save(r / "train" / "cat" / "cat0.png", "RGBA")), "note", 0,
         ("calibration images: 1 of 9 images have an alpha channel",), "an RGBA calibration image"),
    Case("data-folders-image-broken-after-init",
         _after_init("folders", lambda r: (r / "val" / "fox" / "fox1.png").write_bytes(b"junk")), "check", DATA,
         ("fox1.png", "cannot read image"), "an image broken after init: check finds it"),
]


def _save_copy_to(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())


CASES: list[Case] = [*YOLO, *COCO, *VOC, *FOLDERS]


# -- review of issue 34 (data2-): silent drops, nothing to score, names -----------------------------

def _swap_coco_names(gt: dict) -> None:
    first, second = gt["categories"][0], gt["categories"][1]
    first["name"], second["name"] = second["name"], first["name"]


def _to_tif(folder: Path, stems: list[str]) -> None:
    from PIL import Image

    for stem in stems:
        with Image.open(folder / f"{stem}.png") as png:
            png.save(folder / f"{stem}.tif")
        (folder / f"{stem}.png").unlink()


def _coco_in_subfolder(root: Path) -> None:
    (root / "images" / "val").mkdir()
    for stem in ("a0", "a1", "a2", "a3"):
        (root / "images" / f"{stem}.png").rename(root / "images" / "val" / f"{stem}.png")


def _coco_file_names_in(gt: dict) -> None:
    for entry in gt["images"]:
        entry["file_name"] = f"val/{entry['file_name']}"


def _voc_every_xml(root: Path, old: str, new: str) -> None:
    for stem in ("a0", "a1", "a2", "a3"):
        xml = root / "Annotations" / f"{stem}.xml"
        xml.write_text(xml.read_text().replace(old, new))


def _voc_no_objects(root: Path) -> None:
    for stem in ("a0", "a1", "a2", "a3"):
        _replace_xml(root, stem, voc_xml(f"{stem}.jpg", []))


def _voc_nested(kit: Kit, folder: Path) -> Inputs:
    devkit = folder / "VOCdevkit"
    kit.copy(kit.voc, folder).rename(devkit.with_name("tmp"))
    devkit.mkdir()
    devkit.with_name("tmp").rename(devkit / "VOC2012")
    return Inputs(model=kit.detector, data=devkit)


def _voc_pushed_down(root: Path) -> None:
    """The VOC root's contents moved into root/VOC2012: data.dataset now names a VOCdevkit-like folder."""
    inner = root / "VOC2012"
    inner.mkdir()
    for entry in [p for p in root.iterdir() if p != inner]:
        entry.rename(inner / entry.name)


NOTHING = "no object that can be scored"

REVIEW = [
    Case("data2-coco-names-swapped-after-init", _after_init("coco", lambda r: _json_edit(r / "annotations.json",
                                                                                         _swap_coco_names)),
         "check", DATA, ("annotations.json", "id order", "['square', 'circle', 'triangle']"),
         "names of categories 1 and 2 swapped after init: every box would score against another class"),
    Case("data2-folders-new-val-class-after-init",
         _after_init("folders", lambda r: _save_copy_to(r / "val" / "cat" / "cat0.png", r / "val" / "wolf" / "w.png")),
         "check", DATA, ("['wolf']", "not in task.classes"), "a class folder added after init: not dropped unsaid"),
    Case("data2-folders-tif-images", _folders(lambda r: (_to_tif(r / "val" / "dog", ["dog0", "dog1"]),
                                                         _write(r / "val" / "dog" / "notes.txt", "x"))),
         "note", 0, ("9 images", "1 file(s) that are not images skipped", "notes.txt"),
         "TIFF images read (as Ultralytics reads them), a text file counted as skipped"),
    Case("data2-folders-all-tif-class", _folders(lambda r: _to_tif(r / "val" / "dog", ["dog0", "dog1", "dog2"])),
         "note", 0, ("9 images",), "a class folder holding only TIFF images"),
    Case("data2-coco-same-file-two-ids",
         _coco(lambda gt: gt["images"].append({"id": 99, "file_name": "a0.png", "width": SIZE, "height": SIZE})),
         "init", DATA, ("annotations.json", "'a0.png'", "image id 1", "image id 99"), "one file under two ids"),
    Case("data2-yolo-every-label-empty", _yolo(lambda r: [_label(r, "", s) for s in ("a0", "a1", "a2", "a3")]),
         "init", DATA, ("data.yaml", NOTHING), "every YOLO label file empty"),
    Case("data2-coco-no-annotations", _coco(lambda gt: gt.update(annotations=[])), "init", DATA,
         ("annotations.json", NOTHING), "COCO annotations: []"),
    Case("data2-coco-all-iscrowd", _coco(lambda gt: [a.update(iscrowd=1) for a in gt["annotations"]]), "init",
         DATA, ("annotations.json", NOTHING, "crowd"), "every COCO annotation iscrowd=1"),
    Case("data2-voc-all-difficult", _voc(lambda r: _voc_every_xml(r, "<difficult>0", "<difficult>1")), "init", DATA,
         ("val.txt", NOTHING, "difficult"), "every VOC object difficult"),
    Case("data2-voc-no-objects", _voc(_voc_no_objects), "init", DATA, ("val.txt", NOTHING),
         "VOC XML files without <object>"),
    Case("data2-yolo-names-missing-nc", _yolo(lambda r: _yaml(r, "path: .\ntrain: images/train\nval: images/val\n"
                                                                 "nc: 3\n")),
         "note", 0, ("only nc: 3", "circle"), "a data.yaml with nc and no names: the model's names taken"),
    Case("data2-coco-file-name-subfolder", _coco(_coco_file_names_in, files=_coco_in_subfolder), "note", 0,
         ("annotations.json", "4 images"), "file_name val/a0.png with the image in images/val/"),
    Case("data2-coco-json-a-list", _coco(text=lambda t: f"[{t}]"), "init", DATA,
         ("annotations.json", "expected an object", "'images'"), "a COCO file whose top level is a list"),
    Case("data2-voc-nested-root", _voc_nested, "init", DATA, ("VOCdevkit", "VOC2012"),
         "VOCdevkit/ given for VOCdevkit/VOC2012/"),
    Case("data2-voc-nested-root-after-init", _after_init("voc", _voc_pushed_down), "check", DATA,
         ("data.dataset", "VOC2012"), "data.dataset naming the folder that holds the VOC root"),
]

CASES += REVIEW
