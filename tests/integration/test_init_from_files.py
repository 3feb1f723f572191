"""``edgebuild init --model --data``: a project file from a model file and a dataset, compiled with no edit.

The bundled digits classifier and shapes detector are exported to ONNX by the normal pipeline (with
their image size fixed, as an Ultralytics export fixes its imgsz), their data written as split
folders of class folders and as a YOLO data.yaml; the digits classifier is also traced to
TorchScript; ``init`` writes the project, and ``compile --target orin`` runs it as written, gate on.
A made-up Ultralytics export with the raw detection head is written the way the Ultralytics adapter
reads it; bad input (names that disagree, a model file of an unknown kind, a data path that is no
dataset) is refused with nothing written.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild._compat import tomllib
from edgebuild.cli import main
from edgebuild.datasets.project_data import prepare_data
from edgebuild.project.config import load_project
from edgebuild.sources.export.onnx_export import choose_opset, export_model
from edgebuild.targets.profiles import load_catalog
from tests.bad_inputs.kit import ultralytics_onnx
from tests.integration.test_dataset_formats import CLASSES, _write_formats
from tests.support.project import EXAMPLES


def _export(root: Path, fixed: tuple[str, str]) -> Path:
    """The example at ``root`` exported to ONNX by the normal pipeline, its image size fixed to ``fixed``
    (a profile line replaced for min, opt and max), copied to ``root/model.onnx``."""
    path = root / "edgebuild.toml"
    text = path.read_text()
    old, new = fixed
    text = re.sub(rf"(min|opt|max)_shape = \[(\d+), {old}\]", rf"\1_shape = [\2, {new}]", text)
    path.write_text(text)
    project = load_project(root)
    prepare_data(project)
    opset, why = choose_opset(project, [load_catalog().releases[g.jetpack] for g in project.fleet])
    onnx_path = export_model(project, opset, why).onnx_path
    shutil.copy(onnx_path, root / "model.onnx")
    return root / "model.onnx"


def _copy_example(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(EXAMPLES / name, root, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
    return root


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (str(result.exception) if result.exception and
                                               not isinstance(result.exception, SystemExit) else "")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> tuple[Path, Path]:
    """The digits classifier as model.onnx (batch dynamic, 1x16x16 fixed) and its data as
    data/split/{train,val}/<class>/."""
    root = _copy_example(tmp_path_factory.mktemp("init"), "digits-classifier")
    model = _export(root, ("1, \\d+, \\d+", "1, 16, 16"))
    split = root / "data" / "split"
    shutil.copytree(root / "data" / "val", split / "val")
    classes = sorted(p.name for p in (root / "data" / "val").iterdir())
    for n, image in enumerate(sorted((root / "data" / "calibration").iterdir())):
        folder = split / "train" / classes[n % len(classes)]  # calibration reads no labels
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, folder / image.name)
    return model, split


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> tuple[Path, Path]:
    """The shapes detector as model.onnx (3x160x160 fixed) and its data as a YOLO data.yaml."""
    root = _copy_example(tmp_path_factory.mktemp("init"), "shapes-detector")
    model = _export(root, ("3, \\d+, \\d+", "3, 160, 160"))
    _write_formats(root)
    return model, root / "data" / "formats" / "yolo" / "data.yaml"


def test_a_classifier_and_class_folders_compile_with_no_edit(digits, tmp_path) -> None:
    model, split = digits
    project = tmp_path / "digits"
    code, output = _run("init", "--model", str(model), "--data", str(split), str(project))
    assert code == 0, output
    assert "next: edgebuild compile --target orin -p " in output and "task classification" in output
    written = tomllib.loads((project / "edgebuild.toml").read_text())
    assert written["task"]["kind"] == "classification"
    assert written["task"]["classes"] == [str(i) for i in range(10)]
    assert written["model"]["inputs"][0]["max_shape"] == [4, 1, 16, 16]
    assert written["task"]["preprocess"]["channel_order"] == "GRAY"
    assert written["data"]["dataset"].endswith("data/split")
    assert written["fleet"][0]["module"] == "orin-nano-8gb"
    text = (project / "edgebuild.toml").read_text()
    assert "from model.onnx" in text and "measured by init (the model file does not say)" in text
    print(output)
    # the file says no preprocessing: init measured the conventions on 64 images and chose one far above
    # chance (the digits were trained with mean 0.31 std 0.32; 0-1 scored about 0.10 before issue 34)
    scores = dict(re.findall(r"^  (\S+ GRAY)\s+mean .*: ([\d.]+)", output, re.M))
    assert set(scores) == {"0-1 GRAY", "ImageNet GRAY", "0-255 GRAY", "data GRAY"}, output
    assert "on 64 validation images" in output and "<- chosen" in output
    chosen = written["task"]["preprocess"]
    assert chosen["mean"] != [0.0] and max(float(v) for v in scores.values()) > 0.5, output
    code, output = _run("compile", "--target", "orin", "-p", str(project))
    assert code == 0, output
    fp32 = float(re.search(r"baseline: OK: FP32 top-1 ([\d.]+)", output).group(1))
    print(f"FP32 top-1 with init's choice {chosen['mean']} / {chosen['std']}: {fp32}")
    assert fp32 > 0.5, output


def test_a_torchscript_classifier_and_class_folders_compile_with_no_edit(digits, tmp_path) -> None:
    """The trained digits model traced to TorchScript: init reads its size, channels and class count from the
    file (traced at [2, 1, 16, 16], one [N, 10] output), the class names from the folders."""
    import sys

    import torch

    model_onnx, split = digits
    example = model_onnx.parent
    sys.path.insert(0, str(example))
    try:
        from digits_classifier.model import build_model
    finally:
        sys.path.remove(str(example))
    model = build_model()
    model.load_state_dict(torch.load(example / "weights" / "digits_classifier.pt", map_location="cpu",
                                     weights_only=True))
    traced = tmp_path / "digits.ts"
    torch.jit.trace(model.eval(), torch.zeros(2, 1, 16, 16)).save(str(traced))
    project = tmp_path / "digits-ts"
    code, output = _run("init", "--model", str(traced), "--data", str(split), str(project))
    assert code == 0, output
    assert "a classification model of 10 classes" in output and "loaded with torch.jit.load" in output
    written = tomllib.loads((project / "edgebuild.toml").read_text())
    assert written["model"]["source"] == "../digits.ts" and written["model"]["outputs"] == ["logits"]
    assert written["model"]["inputs"][0]["max_shape"] == [4, 1, 16, 16]
    assert written["task"]["preprocess"]["channel_order"] == "GRAY"
    code, output = _run("compile", "--target", "orin", "-p", str(project))  # the gate on: trained weights
    assert code == 0, output
    assert "digits.ts [torchscript, told by its content (a TorchScript archive)]" in output, output


def test_a_detector_and_a_yolo_data_yaml_compile_with_no_edit(shapes, tmp_path) -> None:
    model, data_yaml = shapes
    project = tmp_path / "shapes"
    code, output = _run("init", "--model", str(model), "--data", str(data_yaml), "--name", "yard",
                        "--fleet", "cams=orin-nano-8gb@6.2,dock=agx-orin-64gb@5.1.2", str(project))
    assert code == 0, output
    written = tomllib.loads((project / "edgebuild.toml").read_text())
    assert written["project"]["name"] == "yard"
    assert written["task"]["kind"] == "detection" and written["model"]["outputs"] == ["boxes", "scores"]
    assert written["task"]["classes"] == ["circle", "square", "triangle"]
    assert [(g["name"], g["jetpack"]) for g in written["fleet"]] == [("cams", "6.2"), ("dock", "5.1.2")]
    assert "from data.yaml" in (project / "edgebuild.toml").read_text()
    print(output)  # what init measured: 8 conventions at letterbox, then the best one resized
    measured = re.findall(r"^  (\S+ (?:RGB|BGR) (?:letterbox|resize))\s+mean .*: ([\d.]+)", output, re.M)
    assert len(measured) == 9 and {c.rsplit(" ", 1)[1] for c, _ in measured} == {"letterbox", "resize"}, output
    # trained with mean 0.5 std 0.25: the data's own (about 0.48 / 0.26) scores best (0-1 about 0.57, 0-255 0.005)
    assert "chosen data RGB letterbox" in output and "<- chosen" in output, output
    assert max(abs(m - 0.5) for m in written["task"]["preprocess"]["mean"]) < 0.05, output
    code, output = _run("compile", "--target", "orin", "-p", str(project))
    assert code == 0, output
    assert "baseline: OK: FP32 mAP50-95" in output, output
    # the same data as a COCO JSON with its images beside it: [data.validation] + calibration_images
    coco = data_yaml.parents[2] / "val" / "annotations.json"
    code, output = _run("init", "--model", str(model), "--data", str(coco), str(tmp_path / "coco"))
    assert code == 0, output
    written = tomllib.loads((tmp_path / "coco" / "edgebuild.toml").read_text())
    assert written["data"]["calibration_images"].endswith("data/calibration")
    assert written["data"]["validation"]["images"].endswith("data/val/images")
    # and as a Pascal VOC root: its splits, the object names checked against the model's three scores
    code, output = _run("init", "--model", str(model), "--data", str(data_yaml.parents[1] / "VOC"),
                        str(tmp_path / "voc"))
    assert code == 0, output
    written = tomllib.loads((tmp_path / "voc" / "edgebuild.toml").read_text())
    assert written["data"]["dataset"].endswith("formats/VOC") and written["task"]["classes"] == list(CLASSES)


# -- an Ultralytics export with the raw head (tests.bad_inputs.kit.ultralytics_onnx) and its YOLO data ---------

def _yolo_set(root: Path, names: list[str]) -> Path:
    from PIL import Image

    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "images" / split / f"{i}.png")
            (root / "labels" / split / f"{i}.txt").write_text(f"{i % len(names)} 0.5 0.5 0.25 0.25\n")
    (root / "data.yaml").write_text("train: images/train\nval: images/val\nnames: [" + ", ".join(names) + "]\n")
    return root / "data.yaml"


def test_an_ultralytics_raw_head_is_written_for_the_adapter(tmp_path) -> None:
    names = ["circle", "square", "triangle"]
    model = ultralytics_onnx(tmp_path / "best.onnx", names)
    data = _yolo_set(tmp_path / "data", names)
    project = tmp_path / "yolo"
    code, output = _run("init", "--model", str(model), "--data", str(data), str(project))
    assert code == 0, output
    written = tomllib.loads((project / "edgebuild.toml").read_text())
    assert written["model"]["source"] == "../best.onnx" and written["model"]["outputs"] == ["boxes", "scores"]
    assert written["model"]["inputs"][0]["opt_shape"] == [1, 3, 64, 64]  # imgsz: fixed in the graph
    preprocess = written["task"]["preprocess"]
    assert (preprocess["resize"], preprocess["pad_value"], preprocess["std"]) == ("letterbox", 114, [1.0, 1.0, 1.0])
    assert "from best.onnx's metadata" in (project / "edgebuild.toml").read_text()
    code, output = _run("compile", "--target", "orin", "--no-gate", "--ship-ungated", "-p", str(project))
    # random weights: the gate off. edgebuild's Ultralytics adapter reads the raw head as boxes and scores
    # (before it, the model stage refused the head by name: "is the raw Ultralytics detection head").
    assert code == 0, output


def _fake_checkpoint(path: Path, names: list[str]) -> Path:
    """A zip checkpoint whose pickle names Ultralytics' DetectionModel (a stand-in class: init never runs it)."""
    import sys
    import types

    import torch

    module = types.ModuleType("ultralytics.nn.tasks")
    model_class = type("DetectionModel", (), {"__module__": "ultralytics.nn.tasks"})
    module.DetectionModel = model_class
    saved = {name: sys.modules.get(name) for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks")}
    sys.modules.update({"ultralytics": types.ModuleType("ultralytics"), "ultralytics.nn": types.ModuleType("u.nn"),
                        "ultralytics.nn.tasks": module})
    try:
        model = model_class()
        model.names, model.stride, model.args = dict(enumerate(names)), [8, 16, 32], {"task": "detect"}
        torch.save({"model": model, "train_args": {"imgsz": 96}, "version": "8.3.0"}, path)
    finally:
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value
    return path


def test_an_ultralytics_checkpoint_is_read_without_running_it(tmp_path) -> None:
    names = ["circle", "square", "triangle"]
    model = _fake_checkpoint(tmp_path / "best.pt", names)
    data = _yolo_set(tmp_path / "data", names)
    code, output = _run("init", "--model", str(model), "--data", str(data), "--trust-checkpoint",
                        str(tmp_path / "p"))
    assert code == 0, output
    written = tomllib.loads((tmp_path / "p" / "edgebuild.toml").read_text())
    assert written["model"]["source"] == "../best.pt" and written["model"]["trust_checkpoint"] is True
    assert written["model"]["inputs"][0]["max_shape"] == [4, 3, 96, 96]
    assert written["task"]["classes"] == names and written["model"]["outputs"] == ["boxes", "scores"]


# -- bad input: refused, nothing written ------------------------------------------------------------

def test_class_names_that_disagree_are_refused_naming_both(tmp_path) -> None:
    model = ultralytics_onnx(tmp_path / "best.onnx", ["circle", "square", "triangle"])
    data = _yolo_set(tmp_path / "data", ["cat", "dog", "fox"])
    code, output = _run("init", "--model", str(model), "--data", str(data), str(tmp_path / "p"))
    assert code == 5, output
    assert "['cat', 'dog', 'fox']" in output and "['circle', 'square', 'triangle']" in output
    assert not (tmp_path / "p").exists()


def test_a_model_file_of_an_unknown_kind_is_refused(tmp_path) -> None:
    data = _yolo_set(tmp_path / "data", ["a", "b"])
    (tmp_path / "model.bin").write_bytes(b"\x00\x01 not a model at all" * 10)
    code, output = _run("init", "--model", str(tmp_path / "model.bin"), "--data", str(data), str(tmp_path / "p"))
    assert code == 6 and "not a model file edgebuild init reads" in output, output
    (tmp_path / "best.pt").write_bytes(b"PK\x03\x04")
    code, output = _run("init", "--model", str(tmp_path / "best.pt"), "--data", str(data), str(tmp_path / "p"))
    assert code == 6 and "yolo export model=best.pt format=onnx" in output, output
    assert not (tmp_path / "p").exists()


def test_a_data_path_that_is_no_dataset_is_refused(tmp_path) -> None:
    model = ultralytics_onnx(tmp_path / "best.onnx", ["a", "b"])
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    code, output = _run("init", "--model", str(model), "--data", str(tmp_path / "notes"), str(tmp_path / "p"))
    assert code == 5 and "not a dataset edgebuild reads" in output, output
    code, output = _run("init", "--model", str(model), "--data", str(tmp_path / "missing.yaml"), str(tmp_path / "p"))
    assert code == 5 and "does not exist" in output, output
    assert not (tmp_path / "p").exists()


def test_an_existing_project_file_is_kept_without_force(tmp_path) -> None:
    names = ["a", "b"]
    model, data = ultralytics_onnx(tmp_path / "best.onnx", names), _yolo_set(tmp_path / "data", names)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "edgebuild.toml").write_text("# mine\n")
    code, output = _run("init", "--model", str(model), "--data", str(data), str(tmp_path / "p"))
    assert code == 3 and "already exists" in output, output
    assert (tmp_path / "p" / "edgebuild.toml").read_text() == "# mine\n"
    code, output = _run("init", "--model", str(model), "--data", str(data), "--force", str(tmp_path / "p"))
    assert code == 0 and load_project(tmp_path / "p").task.classes == names, output
    # no draft left behind; only the cache of the images init decoded (so the first `check` decodes none again)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["build", "edgebuild.toml"]
    assert [p.name for p in (tmp_path / "p" / "build").iterdir()] == [".cache"]


def test_init_without_model_and_data_still_writes_the_starter(tmp_path) -> None:
    code, output = _run("init", str(tmp_path / "starter"))
    assert code == 0 and "fill in the model" in output, output
    code, output = _run("init", "--model", "x.onnx", str(tmp_path / "half"))
    assert code == 2 and "--model and --data go together" in output, output
