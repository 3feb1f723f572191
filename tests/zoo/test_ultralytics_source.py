"""An Ultralytics model as ``[model] source``: a checkpoint (.pt) and an Ultralytics ONNX export, no wrapper.

YOLOv8n is built from its yaml with random weights (no download), saved as a checkpoint and exported
with ``model.export(format="onnx")``; each is the source of a project with a small generated COCO
dataset, compiled through the CLI for one Orin group. The project states only the task's kind: its
classes, input size and preprocessing come from the model.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.zoo import FLEET, SERVED_GROUP, train_briefly, write_images

pytestmark = pytest.mark.zoo

SIZE = 160  # imgsz: multiple of the stride, 32
CLASSES = [str(k) for k in range(80)]  # yolov8n.yaml's 80 classes, named "0".."79" by Ultralytics


def _project(source: str, extra_model: str = "", extra: str = "") -> str:
    return f"""\
[project]
name = "yolo-source"

[model]
source = "{source}"
outputs = ["boxes", "scores"]
{extra_model}
[[model.inputs]]
name = "images"
min_shape = [1, 3, 128, 128]
opt_shape = [1, 3, {SIZE}, {SIZE}]
max_shape = [2, 3, 192, 192]

[task]
kind = "detection"

[data]
calibration_images = "data/calibration"

[data.validation]
annotations = "data/val/annotations.json"
images = "data/val/images"

[quantize]
precisions = ["fp32"]

[accuracy]
gate = false
{extra}
{FLEET}
"""


@pytest.fixture(scope="module")
def yolo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A YOLOv8n checkpoint (random weights, imgsz 160) and its Ultralytics ONNX export (opset 17)."""
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("yolo")
    model = YOLO("yolov8n.yaml")
    model.model.args["imgsz"] = SIZE
    checkpoint = folder / "yolov8n-random.pt"
    model.save(str(checkpoint))
    files = {"pt": checkpoint}
    here = os.getcwd()
    os.chdir(folder)  # a model built from a yaml is exported into the working folder
    try:
        exported = model.export(format="onnx", dynamic=True, imgsz=SIZE, opset=17, simplify=False)
        files["onnx"] = (folder / exported).resolve()
    except Exception as exc:  # an offline export that cannot run here: the checkpoint route is still tested
        print(f"Ultralytics ONNX export failed here: {type(exc).__name__}: {exc}")
    finally:
        os.chdir(here)
    return files


def _compile(root: Path) -> str:
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["compile", "-p", str(root), "--no-gate", "--ship-ungated", "--no-progress",
                                       "--target", SERVED_GROUP])
    print(f"compile {root.name}: {time.perf_counter() - started:.1f} s")
    assert result.exit_code == 0, result.output
    return result.output


def _setup(root: Path, source: Path, extra_model: str = "", extra: str = "") -> None:
    root.mkdir(parents=True)
    (root / source.name).write_bytes(source.read_bytes())
    (root / "edgebuild.toml").write_text(_project(source.name, extra_model, extra))
    write_images(root, "detection", CLASSES)


def _export_outputs(root: Path) -> tuple[dict, list[list]]:
    import onnx

    record = json.loads(next((root / "build" / "export").rglob("export.json")).read_text())
    proto = onnx.load(record["onnx_path"], load_external_data=False)
    dims = [[d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in proto.graph.output]
    assert [o.name for o in proto.graph.output] == ["boxes", "scores"]
    return record, dims


@pytest.mark.slow
def test_an_ultralytics_checkpoint_compiles_as_the_source(tmp_path: Path, yolo_files: dict[str, Path]) -> None:
    root = tmp_path / "pt"
    _setup(root, yolo_files["pt"], "trust_checkpoint = true")
    output = _compile(root)
    for stage in ("model", "reference", "export"):
        assert f"{stage}" in output
    assert "DetectionModel" in output, output
    record, dims = _export_outputs(root)
    assert record["exporter"] != "import" and record["parity"], record
    assert record["key_parts"]["kind"] == "ultralytics"
    assert dims[0][2] == 4 and dims[1][2] == 80, dims
    model = json.loads((root / "build" / ".records" / "model.json").read_text())["body"]["result"]
    assert model["kind"] == "ultralytics" and model["ultralytics"]["stride"] == 32
    assert model["output_shapes"]["opt_shape"] == {"boxes": [1, 525, 4], "scores": [1, 525, 80]}  # 20² + 10² + 5²
    # a retrained checkpoint under the same name is a new model: the stages keyed on its content run again
    from ultralytics import YOLO

    again = YOLO("yolov8n.yaml")
    again.model.args["imgsz"] = SIZE
    again.save(str(root / yolo_files["pt"].name))
    _compile(root)
    rerun = json.loads((root / "build" / ".records" / "model.json").read_text())["body"]["result"]
    assert rerun["files"] != model["files"]
    assert json.loads(next((root / "build" / "export").rglob("export.json")).read_text())["cache_key"] != \
        record["cache_key"]


def test_an_untrusted_checkpoint_is_refused_with_why(tmp_path: Path, yolo_files: dict[str, Path]) -> None:
    root = tmp_path / "untrusted"
    _setup(root, yolo_files["pt"])
    result = CliRunner().invoke(main, ["compile", "-p", str(root), "--no-gate", "--no-progress", "--target",
                                       SERVED_GROUP])
    assert result.exit_code != 0
    assert "trust_checkpoint" in result.output and "arbitrary code" in result.output, result.output


def test_a_checkpoint_that_disagrees_with_the_project_names_both(tmp_path: Path, yolo_files: dict[str, Path]) -> None:
    root = tmp_path / "mismatch"
    _setup(root, yolo_files["pt"], "trust_checkpoint = true")
    text = (root / "edgebuild.toml").read_text().replace('kind = "detection"\n', 'kind = "detection"\n'
                                                         'classes = ["cat", "dog"]\n')
    text = text.replace("max_shape = [2, 3, 192, 192]", "max_shape = [2, 3, 200, 200]")
    (root / "edgebuild.toml").write_text(text)
    result = CliRunner().invoke(main, ["check", "-p", str(root)])
    assert result.exit_code == 3, result.output
    assert "'cat', 'dog'" in result.output and "'0', '1', '2', '3'" in result.output, result.output
    assert "multiples of the model's stride 32" in result.output, result.output
    assert "[200, 200] are not" in result.output, result.output


@pytest.mark.slow
def test_an_ultralytics_onnx_export_compiles_with_the_adapter(tmp_path: Path, yolo_files: dict[str, Path]) -> None:
    if "onnx" not in yolo_files:
        pytest.skip("Ultralytics' ONNX export does not run here (see the fixture's output)")
    root = tmp_path / "onnx"
    _setup(root, yolo_files["onnx"])
    output = _compile(root)
    assert "adapter" in output, output
    record, dims = _export_outputs(root)
    assert record["exporter"] == "import" and "adapted" in record["exporter_note"], record
    assert dims[0][2] == 4 and dims[1][2] == 80, dims
    model = json.loads((root / "build" / ".records" / "model.json").read_text())["body"]["result"]
    assert model["output_shapes"]["opt_shape"] == {"boxes": [1, 525, 4], "scores": [1, 525, 80]}


@pytest.mark.slow
def test_an_ultralytics_classifier_checkpoint_outputs_the_task_s_logits(tmp_path: Path) -> None:
    import torch
    from ultralytics.nn.tasks import ClassificationModel

    model = ClassificationModel("yolov8n-cls.yaml", nc=3, verbose=False)
    model.names, model.args = {0: "cat", 1: "dog", 2: "bird"}, {"imgsz": 64, "task": "classify"}
    source = tmp_path / "cls.pt"
    torch.save({"model": model, "version": "test"}, source)
    root = tmp_path / "cls"
    _setup(root, source, "trust_checkpoint = true")
    text = (root / "edgebuild.toml").read_text()
    text = text.replace('outputs = ["boxes", "scores"]', 'outputs = ["logits"]').replace(
        'kind = "detection"', 'kind = "classification"').replace(
        'annotations = "data/val/annotations.json"\nimages = "data/val/images"', 'images = "data/val"')
    for old, new in (("[1, 3, 128, 128]", "[1, 3, 64, 64]"), (f"[1, 3, {SIZE}, {SIZE}]", "[1, 3, 64, 64]"),
                     ("[2, 3, 192, 192]", "[2, 3, 96, 96]")):
        text = text.replace(old, new)
    (root / "edgebuild.toml").write_text(text)
    for folder in ("calibration", "val"):
        shutil.rmtree(root / "data" / folder)
    write_images(root, "classification", ["cat", "dog", "bird"])
    output = _compile(root)
    assert "ClassificationModel" in output, output
    model_record = json.loads((root / "build" / ".records" / "model.json").read_text())["body"]["result"]
    assert model_record["output_shapes"]["opt_shape"] == {"logits": [1, 3]}


#: the images' (width, height): at imgsz 128 each scales to whole pixels (down, up, or not at all) and
#: all but the square ones are letterboxed; Ultralytics' val rounds a fractional side up, edgebuild
#: to the nearest pixel (docs/model-sources.md), which these sizes leave out
SIZES = [(160, 120), (120, 160), (128, 128), (256, 192), (64, 48), (200, 150), (96, 128)]


def _shapes_dataset(root: Path, train: int = 48, val: int = 64) -> Path:
    """A YOLO dataset of red and blue rectangles on grey, in the sizes of ``SIZES``; ``val`` held-out
    images of the same kind. Returns its data.yaml."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("val", val)):
        for folder in ("images", "labels"):
            (root / split / folder).mkdir(parents=True)
        for i in range(count):
            width, height = SIZES[int(rng.integers(0, len(SIZES)))]
            pixels, lines = np.full((height, width, 3), 40, np.uint8), []
            for _ in range(2):
                label = int(rng.integers(0, 2))
                w, h = int(rng.integers(width * 3 // 16, width * 7 // 16)), int(rng.integers(height * 3 // 16,
                                                                                               height * 7 // 16))
                x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
                pixels[y:y + h, x:x + w] = (230, 30, 30) if label == 0 else (30, 30, 230)
                lines.append(f"{label} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} {w / width:.6f} "
                             f"{h / height:.6f}")
            Image.fromarray(pixels).save(root / split / "images" / f"{i}.png")
            (root / split / "labels" / f"{i}.txt").write_text("\n".join(lines))
    (root / "data.yaml").write_text(f"path: {root}\ntrain: train/images\nval: val/images\n"
                                    "names:\n  0: red\n  1: blue\n")
    return root / "data.yaml"


@pytest.mark.slow
def test_the_reference_map_of_an_ultralytics_onnx_matches_ultralytics_val(tmp_path: Path, monkeypatch) -> None:
    """Issue 26 item 4: the FP32 reference of an Ultralytics export against Ultralytics' own `val`, same ONNX and split.

    A YOLOv8n trained here for 30 epochs on 48 images (30 to 55 s on 2 CPU cores), validated on 64
    held-out ones, most of them letterboxed. Ultralytics' val runs with ``rect=False``: every image at
    imgsz, as an engine of that size runs it (its default for a dynamic export pads each image to its
    own shape plus half a stride: docs/model-sources.md). Ultralytics' trainer imports polars only to
    read its results.csv, and its NMS calls torchvision's compiled op: both are stood in for here.

    Two checks: the detections (Ultralytics' own, its save_json, scored by the same
    COCOeval as edgebuild's) must be the same, and Ultralytics' own mAP (its ap_per_class, on boxes
    it does not clip to the image) within the issue's 0.01 of edgebuild's.
    """
    from PIL import Image
    from ultralytics import YOLO

    data = _shapes_dataset(tmp_path / "shapes")
    trained = YOLO(str(train_briefly(tmp_path, monkeypatch, "yolov8n.yaml", data, 30, 128)))
    exported = Path(trained.export(format="onnx", dynamic=True, imgsz=128, opset=17, simplify=False))
    theirs = YOLO(str(exported), task="detect").val(data=str(data), imgsz=128, batch=1, rect=False, device="cpu",
                                                     plots=False, workers=0, save_json=True,
                                                     project=str(tmp_path / "val"), name="v", exist_ok=True).box.map
    theirs_coco = _cocoeval(data.parent / "val", tmp_path / "val" / "v" / "predictions.json")
    root = tmp_path / "parity"
    (root / "calibration").mkdir(parents=True)
    shutil.copy(exported, root / "model.onnx")
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)).save(root / "calibration" / f"{i}.png")
    text = _project("model.onnx").replace(f"[1, 3, {SIZE}, {SIZE}]", "[1, 3, 128, 128]")
    text = text.replace("[2, 3, 192, 192]", "[1, 3, 128, 128]")
    text = text.replace('calibration_images = "data/calibration"', f'dataset = "{data}"\ncalibration_images = '
                                                                    '"calibration"')
    text = text.replace('[data.validation]\nannotations = "data/val/annotations.json"\nimages = "data/val/images"\n',
                        "")
    (root / "edgebuild.toml").write_text(text)
    _compile(root)
    ours = json.loads((root / "build" / ".records" / "reference.json").read_text())["body"]["result"]["metrics"]
    print(f"mAP50-95: Ultralytics val {theirs:.4f} (its predictions by COCOeval {theirs_coco:.4f}), "
          f"edgebuild reference {ours['mAP50-95']:.4f}")
    assert theirs > 0.3  # trained: a parity of near-zeros would say little
    assert abs(ours["mAP50-95"] - theirs_coco) <= 0.002  # the same detections (cv2's uint8 resize: < 1/255 a pixel)
    assert abs(ours["mAP50-95"] - theirs) <= 0.01


def _cocoeval(split: Path, predictions: Path) -> float:
    """mAP50-95 by faster-coco-eval of Ultralytics' save_json predictions (image ids the file stems, category
    ids 1-based) on a split's YOLO labels, every prediction scored (maxDets 300, Ultralytics' max_det)."""
    from faster_coco_eval import COCO, COCOeval_faster
    from PIL import Image

    images, annotations = [], []
    for label in sorted((split / "labels").glob("*.txt")):
        with Image.open(split / "images" / f"{label.stem}.png") as image:
            width, height = image.size
        images.append({"id": int(label.stem), "file_name": f"{label.stem}.png", "width": width, "height": height})
        for line in label.read_text().splitlines():
            c, x, y, w, h = (float(v) for v in line.split())
            annotations.append({"id": len(annotations) + 1, "image_id": int(label.stem), "category_id": int(c) + 1,
                                "bbox": [(x - w / 2) * width, (y - h / 2) * height, w * width, h * height],
                                "area": w * h * width * height, "iscrowd": 0})
    truth = COCO({"images": images, "annotations": annotations,
                  "categories": [{"id": 1, "name": "red"}, {"id": 2, "name": "blue"}]})
    evaluator = COCOeval_faster(truth, truth.loadRes(json.loads(predictions.read_text())), iouType="bbox",
                                print_function=lambda *_: None)
    evaluator.params.maxDets = [1, 10, 300]
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return float(evaluator.stats[0])
