"""One validation set written as YOLO, COCO and Pascal VOC gives the same mAP; a YOLO data.yaml runs the gate.

The bundled detector (examples/shapes-detector) generates its data with ``data.prepare``; its
validation boxes are snapped to whole pixels (VOC stores whole pixels) and written out in the three
formats, with its calibration images as their training split.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild.accuracy.evaluate import ValidationSet, evaluate
from edgebuild.cli import main
from edgebuild.datasets.project_data import describe_data, prepare_data
from edgebuild.project.config import load_project
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.sources.export.onnx_export import choose_opset, export_model
from edgebuild.targets.profiles import load_catalog
from tests.support.project import EXAMPLES

CLASSES = ("circle", "square", "triangle")
SHAPES_DATA = """[data]
calibration_images = "data/calibration"
prepare = "shapes_detector.data:prepare"   # generates data/ deterministically on first use

[data.validation]
annotations = "data/val/annotations.json"
images = "data/val/images"
"""


def _snapped(coco: dict) -> list[tuple[dict, list[tuple[int, int, int, int, int]]]]:
    """Each image with its objects as (class index, x1, y1, x2, y2), edges on whole pixels."""
    objects: dict[int, list] = {im["id"]: [] for im in coco["images"]}
    for a in coco["annotations"]:
        x, y, w, h = a["bbox"]
        x1, y1 = round(x), round(y)
        x2, y2 = max(round(x + w), x1 + 1), max(round(y + h), y1 + 1)
        objects[a["image_id"]].append((a["category_id"] - 1, x1, y1, x2, y2))
    return [(im, objects[im["id"]]) for im in sorted(coco["images"], key=lambda im: im["id"])]


def _write_formats(root: Path) -> None:
    """data/formats/{coco.json, yolo/, VOC/} from data/val and data/calibration."""
    out = root / "data" / "formats"
    val, calibration = root / "data" / "val" / "images", sorted((root / "data" / "calibration").iterdir())
    images = _snapped(json.loads((root / "data" / "val" / "annotations.json").read_text()))
    annotations = [{"id": n, "image_id": im["id"], "category_id": c + 1, "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
                   for n, (im, (c, x1, y1, x2, y2)) in enumerate(((im, o) for im, objs in images for o in objs), 1)]
    out.mkdir(parents=True)
    categories = [{"id": i + 1, "name": n} for i, n in enumerate(CLASSES)]
    (out / "coco.json").write_text(json.dumps({"images": [im for im, _ in images], "annotations": annotations,
                                               "categories": categories}))
    yolo, voc = out / "yolo", out / "VOC"
    for folder in (yolo / "images" / "train", yolo / "images" / "val", yolo / "labels" / "val",
                   voc / "Annotations", voc / "JPEGImages", voc / "ImageSets" / "Main"):
        folder.mkdir(parents=True)
    for image in calibration:
        shutil.copy(image, yolo / "images" / "train" / f"cal{image.name}")
        shutil.copy(image, voc / "JPEGImages" / f"cal{image.name}")
        (voc / "Annotations" / f"cal{image.stem}.xml").write_text("<annotation><filename/></annotation>")
    for im, objects in images:
        width, height, stem = im["width"], im["height"], Path(im["file_name"]).stem
        shutil.copy(val / im["file_name"], yolo / "images" / "val" / im["file_name"])
        shutil.copy(val / im["file_name"], voc / "JPEGImages" / im["file_name"])
        (yolo / "labels" / "val" / f"{stem}.txt").write_text("".join(
            f"{c} {(x1 + x2) / 2 / width!r} {(y1 + y2) / 2 / height!r} {(x2 - x1) / width!r} {(y2 - y1) / height!r}\n"
            for c, x1, y1, x2, y2 in objects))
        # VOC: 1-based pixel indices, both ends inclusive
        (voc / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{im['file_name']}</filename><size><width>{width}</width><height>{height}"
            "</height><depth>3</depth></size>" + "".join(
                f"<object><name>{CLASSES[c]}</name><difficult>0</difficult><bndbox><xmin>{x1 + 1}</xmin>"
                f"<ymin>{y1 + 1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"
                for c, x1, y1, x2, y2 in objects) + "</annotation>")
    (yolo / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n"
                                    "names:\n  0: circle\n  1: square\n  2: triangle\n")
    (voc / "ImageSets" / "Main" / "train.txt").write_text("".join(f"cal{p.stem}\n" for p in calibration))
    (voc / "ImageSets" / "Main" / "val.txt").write_text("".join(f"{Path(im['file_name']).stem}\n" for im, _ in images))


FORMATS = {
    "coco": '[data]\ncalibration_images = "data/calibration"\n\n[data.validation]\n'
            'annotations = "data/formats/coco.json"\nimages = "data/val/images"\n',
    "yolo": '[data]\ndataset = "data/formats/yolo/data.yaml"\n',
    "voc": '[data]\ndataset = "data/formats/VOC"\n',
}


def _with_data(root: Path, name: str, data: str) -> Path:
    """A project file next to edgebuild.toml with its [data] section replaced."""
    text = (root / "edgebuild.toml").read_text()
    assert SHAPES_DATA in text
    path = root / f"{name}.toml"
    path.write_text(text.replace(SHAPES_DATA, data))
    return path


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> tuple[Path, Path]:
    """The shapes example with its data written in every format, and its exported ONNX model."""
    root = tmp_path_factory.mktemp("formats") / "shapes-detector"
    shutil.copytree(EXAMPLES / "shapes-detector", root, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
    project = load_project(root)
    prepare_data(project)
    _write_formats(root)
    opset, why = choose_opset(project, [load_catalog().releases[g.jetpack] for g in project.fleet])
    return root, export_model(project, opset, why).onnx_path


def test_one_validation_set_in_three_formats_gives_the_same_map(shapes) -> None:
    root, onnx_path = shapes
    runner = OnnxRuntimeRunner(onnx_path)
    results, sets = {}, {}
    for name, data in FORMATS.items():
        project = load_project(_with_data(root, name, data))
        sets[name] = data_set = ValidationSet(project)
        results[name] = evaluate(project, runner, data=data_set, progress=False)
        print(f"\nshapes [{name}]: {describe_data(project)}: mAP50-95 {results[name].value:.6f}")
    boxes = {name: sorted((a["image_id"], a["category_id"], *(round(v, 9) for v in a["bbox"]))
                          for a in data_set.coco.ground_truth["annotations"]) for name, data_set in sets.items()}
    assert boxes["yolo"] == boxes["coco"] == boxes["voc"] and len(boxes["coco"]) > 200
    assert {name: r.images for name, r in results.items()} == dict.fromkeys(FORMATS, 200)
    coco = results["coco"].metrics
    assert coco["mAP50-95"] > 0.4  # a trained model on its own data: the numbers mean something
    for name in ("yolo", "voc"):
        for metric, value in results[name].metrics.items():
            assert value == pytest.approx(coco[metric], abs=1e-9), (name, metric)


def _wide_and_turned(source: Path, target: Path) -> tuple[int, int]:
    """``target``: the YOLO set at ``source`` with its val images rewritten, each the same picture: every
    even one a 16-bit PNG (the 8-bit values times 257), every odd one stored turned a quarter with an EXIF
    orientation that turns it back (as a phone writes a photo)."""
    from PIL import Image

    cv2 = pytest.importorskip("cv2")
    shutil.copytree(source, target)
    wide = turned = 0
    for n, path in enumerate(sorted((target / "images" / "val").iterdir())):
        with Image.open(path) as image:
            upright = image.convert("RGB")
        if n % 2 == 0:
            pixels = np.asarray(upright)[..., ::-1].astype(np.uint16) * 257  # BGR for cv2, 16 bits a channel
            assert cv2.imwrite(str(path), pixels)
            wide += 1
        else:
            exif = Image.Exif()
            exif[0x0112] = 6  # shown turned a quarter clockwise: stored turned a quarter the other way
            upright.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif)
            turned += 1
    return wide, turned


def test_16_bit_and_exif_turned_images_score_as_their_plain_originals(shapes, tmp_path: Path) -> None:
    """Issue 34: a 16-bit PNG read all white scored FP32 0.0; an EXIF-turned image was refused. Read as
    Ultralytics reads them, the same pictures give the same mAP to 1e-9, and ``check`` says what it did."""
    root, onnx_path = shapes
    wide, turned = _wide_and_turned(root / "data" / "formats" / "yolo", root / "data" / "formats" / "yolo-wide")
    runner = OnnxRuntimeRunner(onnx_path)
    scores = {}
    for name in ("yolo", "yolo-wide"):
        project = load_project(_with_data(root, name, f'[data]\ndataset = "data/formats/{name}/data.yaml"\n'))
        scores[name] = evaluate(project, runner, progress=False).metrics
    assert scores["yolo"]["mAP50-95"] > 0.4
    for metric, value in scores["yolo-wide"].items():
        assert value == pytest.approx(scores["yolo"][metric], abs=1e-9), metric
    checked = CliRunner().invoke(main, ["check", "-p", str(_with_data(root, "yolo-wide",
                                                                       '[data]\ndataset = "data/formats/yolo-wide/'
                                                                       'data.yaml"\n'))])
    assert checked.exit_code == 0, checked.output
    assert f"{wide} of 200 images are 16-bit, scaled to 8 bits" in checked.output, checked.output
    assert f"{turned} of 200 images have an EXIF orientation, applied" in checked.output, checked.output


def test_validate_runs_the_gate_on_a_yolo_data_yaml(shapes) -> None:
    root, _ = shapes
    data = FORMATS["yolo"] + "max_calibration_images = 32\n\n[data.validation]\nmax_images = 60\n"
    (root / "edgebuild.toml").write_text(_with_data(root, "gate", data).read_text())
    checked = CliRunner().invoke(main, ["check", "-p", str(root)])
    assert checked.exit_code == 0 and "data.dataset: YOLO data.yaml (val: 60 images" in checked.output, checked.output
    result = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert result.exit_code == 0, result.output
    assert "data: YOLO data.yaml (val: 60 images, 3 classes; calibration: train, 32 images)" in result.output
    assert "selected:" in result.output and "Traceback" not in result.output
    # a label changed: the stages that read the validation data measure again
    label = root / "data" / "formats" / "yolo" / "labels" / "val" / "000000.txt"
    label.write_text(label.read_text().splitlines()[0] + "\n")
    again = CliRunner().invoke(main, ["validate", "-p", str(root), "--json"])
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["reused"] is False and report["measured"] >= 1
    fp32 = next(c for c in report["candidates"] if c["precision"] == "fp32")
    assert fp32["value"] > 0.4
