"""Real architectures through every stage: torchvision, timm and Ultralytics models, random weights, no downloads.

Each model is a small project in tmp_path (a wrapper module, an edgebuild.toml for a fleet on
JetPack 6.2 and 5.1.2, six synthetic images for calibration and six for validation) that goes
through the CLI as a user's would: check, export, preflight, validate with FP32 and INT8, compile
with the gate off (random weights: accuracy means nothing, the mechanics do), then the compiled
folder of the JetPack 6.2 group is served in-process and answers one inference.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild._compat import tomllib
from edgebuild.cli import main
from tests.support.runtime_artifacts import Client, infer_body
from tests.support.zoo import SERVED_GROUP, project_toml, write_images

pytestmark = pytest.mark.zoo

WRAPPERS = Path(__file__).with_name("wrappers.py")
CLASSES = ["cat", "dog", "bird"]  # tests/zoo/wrappers.py NUM_CLASSES


@dataclass(frozen=True)
class Zoo:
    function: str  # in tests/zoo/wrappers.py
    task: str
    input_size: int
    shapes: tuple[list[int], list[int], list[int]]
    extra: str = ""


MODELS = {
    "resnet18": Zoo("resnet18", "classification", 128, ([1, 3, 96, 96], [2, 3, 128, 128], [4, 3, 160, 160])),
    "mobilenet_v3_small": Zoo("mobilenet_v3_small", "classification", 128,
                              ([1, 3, 96, 96], [2, 3, 128, 128], [4, 3, 160, 160])),
    # SSDlite's anchors are made for 320x320; batch is dynamic
    "ssdlite320": Zoo("ssdlite", "detection", 320, ([1, 3, 320, 320], [1, 3, 320, 320], [2, 3, 320, 320])),
    # ViT's position embeddings fix 224x224. Opset 16: TensorRT 8.5 (JetPack 5) cannot parse opset 17's
    # LayerNormalization, which the TorchScript exporter decomposes at 16
    "vit_tiny_patch16_224": Zoo("vit_tiny", "classification", 224,
                                ([1, 3, 224, 224], [1, 3, 224, 224], [2, 3, 224, 224]), "[export]\nopset = 16\n"),
}
YOLO_SHAPES = ([1, 3, 160, 160], [1, 3, 256, 256], [2, 3, 320, 320])  # smaller than the example's, to be quick


def _cli(*args: str):
    started = time.perf_counter()
    result = CliRunner().invoke(main, list(args))
    return result, time.perf_counter() - started


def _write_project(root: Path, name: str, zoo: Zoo) -> None:
    package = root / f"zoo_{name}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(WRAPPERS, package / "model.py")
    outputs = ["boxes", "scores"] if zoo.task == "detection" else ["logits"]
    (root / "edgebuild.toml").write_text(project_toml(
        name.replace("_", "-"), f"zoo_{name}.model:{zoo.function}", zoo.task, CLASSES, zoo.input_size, zoo.shapes,
        outputs, zoo.extra))
    write_images(root, zoo.task, CLASSES)


def _write_yolo_project(root: Path, example: Path) -> None:
    """The bundled example's wrapper and data.prepare, in a zoo project (smaller shapes, the zoo's settings)."""
    shutil.copytree(example / "yolo_wrapper", root / "yolo_wrapper", ignore=shutil.ignore_patterns("__pycache__"))
    classes = tomllib.loads((example / "edgebuild.toml").read_text())["task"]["classes"]
    text = project_toml("yolov8n", "yolo_wrapper.model:build_model", "detection", classes, 256, YOLO_SHAPES,
                        ["boxes", "scores"])
    text = text.replace('calibration_images = "data/calibration"\n',
                        'calibration_images = "data/calibration"\nprepare = "yolo_wrapper.data:prepare"\n')
    (root / "edgebuild.toml").write_text(text)


def _through_every_stage(root: Path) -> dict[str, float]:
    """check, export, preflight, validate, compile --no-gate --ship-ungated, serve; seconds per step."""
    seconds = {}
    project = ["-p", str(root)]
    for step, args in (("check", ["check", *project]),
                       ("export", ["export", *project]),
                       ("preflight", ["preflight", *project]),
                       ("validate", ["validate", *project, "--no-progress"]),
                       ("compile", ["compile", *project, "--no-gate", "--ship-ungated", "--no-progress"])):
        result, seconds[step] = _cli(*args)
        assert result.exit_code == 0, f"edgebuild {step}: exit {result.exit_code}\n{result.output}"
        if step == "validate":
            assert "GATE OFF" in result.output or "gate off" in result.output.lower(), result.output
    started = time.perf_counter()
    _serve_one(root)
    seconds["serve"] = time.perf_counter() - started
    return seconds


def _serve_one(root: Path) -> None:
    from edgebuild.runtime.serving.server import Server

    config = tomllib.loads((root / "edgebuild.toml").read_text())
    folder = root / "build" / "engines" / SERVED_GROUP
    running = Server(folder, host="127.0.0.1", port=0, backend="auto", warmup_budget_s=1).start()
    try:
        client = Client(running.port)
        client.wait_ready()
        shape = config["model"]["inputs"][0]["opt_shape"]
        images = np.random.default_rng(1).random(shape, dtype=np.float32)
        status, answer = client.json("POST", f"/v2/models/{config['project']['name']}/infer", infer_body(images))
    finally:
        running.stop()
    assert status == 200, answer
    shapes = {out["name"]: out["shape"] for out in answer["outputs"]}
    assert sorted(shapes) == sorted(config["model"]["outputs"]), shapes
    classes = len(config["task"]["classes"])
    if config["task"]["kind"] == "classification":
        assert shapes["logits"] == [shape[0], classes]
    else:
        anchors = shapes["boxes"][1]
        assert shapes["boxes"] == [shape[0], anchors, 4] and shapes["scores"] == [shape[0], anchors, classes]
    for out in answer["outputs"]:
        assert np.isfinite(np.asarray(out["data"], dtype=np.float64)).all(), out["name"]


def _report(name: str, seconds: dict[str, float]) -> None:
    print(f"\nzoo {name}: " + ", ".join(f"{step} {s:.1f}s" for step, s in seconds.items())
          + f", total {sum(seconds.values()):.1f}s")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_through_every_stage(tmp_path: Path, name: str) -> None:
    _write_project(tmp_path, name, MODELS[name])
    _report(name, _through_every_stage(tmp_path))


@pytest.mark.slow
def test_ultralytics_yolov8n_through_every_stage_with_the_example_wrapper(tmp_path: Path, example_copy) -> None:
    root = tmp_path / "yolov8n"
    _write_yolo_project(root, example_copy("ultralytics-yolo"))
    _report("yolov8n", _through_every_stage(root))
    for record in sorted((root / "build" / "export").rglob("export.json")):  # which exporter and opset won
        exported = json.loads(record.read_text())
        print(f"yolov8n {record.parent.name}: {exported.get('exporter')} at opset {exported.get('opset')}: "
              f"{exported.get('exporter_note')}")


def test_the_ultralytics_example_checks_and_prepares_its_data(example_copy) -> None:
    """The bundled example as a user gets it: check says valid, data.prepare writes COCO data for its 80 classes."""
    root = example_copy("ultralytics-yolo")
    result, _ = _cli("check", "-p", str(root))
    assert result.exit_code == 0 and "80 classes" in result.output, result.output
    result, _ = _cli("data", "prepare", "-p", str(root))
    assert result.exit_code == 0, result.output
    coco = json.loads((root / "data" / "val" / "annotations.json").read_text())
    assert len(coco["categories"]) == 80 and len(coco["images"]) == 6 and coco["annotations"]
    assert len(list((root / "data" / "calibration").glob("*.png"))) == 6
