"""Pose, segmentation and OBB projects past the gate: `compile --target orin` on the CPU (engines deferred),
and what it writes for the device: the recipe, the acceptance set, the Triton repository, the DeepStream
config, the server's answers and the device-side evaluation (docs/tasks.md, "On the device")."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.base.vision import INSTANCE_NMS_OUTPUTS
from tests.support.task_datasets import obb_dataset, pose_dataset, segmentation_dataset

MODELS = '''
import torch


class Head(torch.nn.Module):
    """Not a useful model: each task's outputs, in the shapes of docs/tasks.md, from one stride-8 conv."""

    def __init__(self, kind, classes):
        super().__init__()
        self.kind, self.classes = kind, classes
        extra = {"pose": 12, "segmentation": 8, "obb": 1}[kind]
        self.conv = torch.nn.Conv2d(3, 4 + classes + extra, 3, stride=8, padding=1)
        self.protos = torch.nn.Conv2d(3, 8, 3, stride=4, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        n, a, c = y.shape[0], y.shape[1], self.classes
        scores = torch.sigmoid(y[..., 4:4 + c])
        if self.kind == "obb":
            return {"boxes": torch.cat([y[..., :4].abs() * 8.0, y[..., 4 + c:]], -1), "scores": scores}
        xy = y[..., :2].abs() * 8.0
        boxes = torch.cat([xy, xy + y[..., 2:4].abs() * 8.0 + 4.0], -1)
        if self.kind == "pose":
            return {"boxes": boxes, "scores": scores, "keypoints": y[..., 4 + c:].reshape(n, a, 4, 3).abs() * 8.0}
        return {"boxes": boxes, "scores": scores, "mask_coefficients": y[..., 4 + c:],
                "prototypes": self.protos(images)}


def pose():
    return Head("pose", 1)


def segmentation():
    return Head("segmentation", 2)


def obb():
    return Head("obb", 2)
'''

OUTPUTS = {"pose": ["boxes", "scores", "keypoints"],
           "segmentation": ["boxes", "scores", "mask_coefficients", "prototypes"], "obb": ["boxes", "scores"]}
CLASSES = {"pose": ["box"], "segmentation": ["triangle", "octagon"], "obb": ["bar", "block"]}
DATASETS = {"pose": pose_dataset, "segmentation": segmentation_dataset, "obb": obb_dataset}


def _project(root: Path, kind: str, postprocess: str = "") -> Path:
    (root / "heads").mkdir(parents=True)
    (root / "heads" / "__init__.py").write_text("")
    (root / "heads" / "model.py").write_text(textwrap.dedent(MODELS))
    DATASETS[kind](root / "data", train=4, val=4)
    extra = "kpt_shape = [4, 3]\n" if kind == "pose" else ""
    (root / "edgebuild.toml").write_text(f"""\
[project]
name = "tiny-{kind}"

[model]
entry_point = "heads.model:{kind}"
outputs = {json.dumps(OUTPUTS[kind])}

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = [1, 3, 32, 32]
opt_shape = [1, 3, 64, 64]
max_shape = [4, 3, 96, 96]

[task]
kind = "{kind}"
classes = {json.dumps(CLASSES[kind])}
{extra}{postprocess}
[task.preprocess]
input_size = [64, 64]
resize = "letterbox"

[data]
dataset = "data/data.yaml"

[accuracy]
gate = false  # random weights: the mechanics, not the accuracy

[runtime]
server = "both"

[[fleet]]
name = "yard"
module = "orin-nano-8gb"
jetpack = "6.2"
""")
    return root


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Each task's project compiled for the orin target (once for the module)."""
    done = {}

    def get(kind: str) -> tuple[Path, dict]:
        if kind not in done:
            root = _project(tmp_path_factory.mktemp(kind), kind)
            result = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "orin", "--ship-ungated",
                                               "--no-progress", "--json"])
            assert result.exit_code == 0, result.output
            done[kind] = (root, json.loads(result.stdout))
        return done[kind]
    return get


def _record(report: dict, stage: str) -> dict:
    return next(s for s in report["stages"] if s["name"] == stage)["runs"][0]["record"]


@pytest.mark.parametrize("kind", ["pose", "segmentation", "obb"])
def test_the_device_gets_the_raw_outputs_and_says_who_decodes_them(compiled, kind: str) -> None:
    root, report = compiled(kind)
    build = root / "build"
    recipe = Recipe.load(build / "engines" / "yard")
    assert recipe.placement == "deferred" and recipe.task is not None
    assert (recipe.task.kind, recipe.task.outputs) == (kind, "raw")  # answered as they are, never as detections
    assert recipe.task.postprocess.boxes_output == "boxes" and "in_model" not in recipe.task.postprocess.as_dict()
    if kind == "pose":
        assert recipe.task.postprocess.keypoints_output == "keypoints"
        assert recipe.task.postprocess.kpt_shape == [4, 3]
    assert list(recipe.outputs or {}) == OUTPUTS[kind]

    # Triton: every output with its dims (the batch axis implicit), and a note that the client decodes
    triton = _record(report, "container")["triton"]
    model_dir = build / triton["repository"] / recipe.model_name
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    dims = {o.name: list(o.dims) for o in config.output}
    assert dims == {"pose": {"boxes": [-1, 4], "scores": [-1, 1], "keypoints": [-1, 4, 3]},
                    "segmentation": {"boxes": [-1, 4], "scores": [-1, 2], "mask_coefficients": [-1, 8],
                                     "prototypes": [8, -1, -1]},
                    "obb": {"boxes": [-1, 5], "scores": [-1, 2]}}[kind]
    assert any(f"raw {kind} outputs" in n and f"docs/{kind}.md" in n for n in triton["notes"]), triton["notes"]

    # DeepStream: raw tensors to the app, and a note naming what to write
    deepstream = _record(report, "container")["deepstream"]
    assert deepstream["written"], deepstream
    text = (build / deepstream["folder"] / "config_infer_primary.txt").read_text()
    properties = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert properties["network-type"] == "100" and properties["output-tensor-meta"] == "1"
    assert properties["output-blob-names"] == ";".join(OUTPUTS[kind])
    assert not any(k.startswith(("parse-bbox", "custom-lib", "num-detected")) for k in properties)
    note = next(line for line in text.splitlines() if line.startswith(f"# NOTE: a {kind} model"))
    assert "stock parsers read none" in note and "custom parser" in note and f"docs/{kind}.md" in note

    # the package carries the recipe as the model folder has it
    package = _record(report, "package")
    assert (root / package["bundle"]["path"]).is_file()


def _acceptance(folder: Path) -> dict:
    with np.load(folder / "acceptance.npz", allow_pickle=False) as stored:
        return {k: stored[k] for k in stored.files}


class _Breaking:
    """A backend that computes the model's boxes and scores right and breaks only what the task adds: pose's
    keypoints (moved by a quarter of the input), segmentation's mask coefficients (sign flipped), OBB's angle
    (turned by 45 degrees)."""

    def __init__(self, runner, kind: str) -> None:  # noqa: ANN001 (a Runner)
        self.runner, self.kind, self.backend = runner, kind, runner.backend

    def run(self, inputs: dict) -> dict:
        outputs = dict(self.runner.run(inputs))
        if self.kind == "pose":
            outputs["keypoints"] = outputs["keypoints"] + np.asarray([32.0, 32.0, 0.0], np.float32)
        elif self.kind == "segmentation":
            outputs["mask_coefficients"] = -outputs["mask_coefficients"]
        else:
            outputs["boxes"] = outputs["boxes"] + np.asarray([0, 0, 0, 0, np.pi / 4], np.float32)
        return outputs


@pytest.mark.parametrize("kind", ["pose", "segmentation", "obb"])
def test_the_acceptance_set_compares_what_the_task_adds_and_the_model_passes_its_own(compiled, kind: str) -> None:
    from edgebuild.runtime.engines import acceptance
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    root, _ = compiled(kind)
    folder = root / "build" / "engines" / "yard"
    stored = _acceptance(folder)
    assert str(stored["kind"]) == kind and str(stored["match"]) == "instances"
    assert stored["fp32_counts"].sum() > 0  # random heads still score above min_score somewhere
    assert ("fp32_keypoints" in stored) is (kind == "pose") and ("fp32_masks" in stored) is (kind == "segmentation")
    runner = OnnxRuntimeRunner(folder / "model.onnx")
    check = acceptance.check(runner, folder, "images", 4)
    assert check["passed"] and check["value"] >= check["threshold"], check
    assert check["statistic"].startswith("detection agreement with FP32 (F1): ")
    broken = acceptance.check(_Breaking(runner, kind), folder, "images", 4)  # the boxes and scores unchanged
    assert not broken["passed"] and broken["value"] < check["value"], (check, broken)


def test_an_acceptance_file_of_an_earlier_release_still_compares_the_boxes(compiled) -> None:
    """Before the task's own match, pose's file held detection's decode of its boxes and scores (kind detection)."""
    from edgebuild.errors import ModelError
    from edgebuild.runtime.base.vision import decode_outputs
    from edgebuild.runtime.engines import acceptance
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    root, _ = compiled("pose")
    folder = root / "build" / "engines" / "yard"
    stored = _acceptance(folder)
    runner = OnnxRuntimeRunner(folder / "model.onnx")
    inputs = acceptance.unpack_inputs(stored["inputs_u8"], float(stored["inputs_scale"]),
                                      float(stored["inputs_offset"]))
    outputs = acceptance.run_outputs(runner, inputs, "images", 4)
    decode = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001, "nms_iou": 0.7,
              "max_detections": 300, "pre_nms_top_k": 1000, "in_model": False}
    found = [(f["boxes"], f["scores"], f["labels"]) for f in decode_outputs(outputs, decode)]
    earlier = {"kind": np.asarray("detection"), "min_score": 0.25, "iou": 0.85, **decode,
               **acceptance.pack_found(found, "fp32_")}
    assert acceptance.agreement_of(earlier, outputs) == 1.0
    with pytest.raises(ModelError, match="a newer edgebuild wrote the model folder"):  # a later form: said clearly
        acceptance.agreement_of(dict(earlier, kind=np.asarray("depth")), outputs)


def test_an_obb_acceptance_turns_boxes_upright_around_their_angle() -> None:
    from edgebuild.runtime.engines.acceptance import upright_boxes

    boxes = np.asarray([[[10.0, 20.0, 8.0, 2.0, 0.0], [10.0, 20.0, 8.0, 2.0, np.pi / 2]]], np.float32)
    got = upright_boxes({"boxes": boxes, "scores": np.ones((1, 2, 1))}, "boxes")
    np.testing.assert_allclose(got["boxes"][0], [[6, 19, 14, 21], [9, 16, 11, 24]], atol=1e-5)
    assert got["scores"].shape == (1, 2, 1)


def test_the_server_answers_a_pose_model_s_raw_tensors(compiled) -> None:
    from edgebuild.runtime.serving.server import Server
    from tests.support.runtime_artifacts import Client, infer_body

    root, _ = compiled("pose")
    folder = root / "build" / "engines" / "yard"
    running = Server(folder, host="127.0.0.1", port=0, backend="auto", warmup_budget_s=1).start()
    try:
        client = Client(running.port)
        client.wait_ready()
        status, meta = client.json("GET", "/v2/models/tiny-pose")
        assert status == 200, meta
        task = meta["parameters"]["task"]
        assert (task["kind"], task["output_form"], task["detections"]["decoded_by"]) == ("pose", "raw", "server")
        assert [o["name"] for o in meta["outputs"]] == OUTPUTS["pose"]
        image = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
        status, answer = client.json("POST", "/v2/models/tiny-pose/infer", infer_body(image))
        assert status == 200, answer
        shapes = {o["name"]: o["shape"] for o in answer["outputs"]}
        assert shapes == {"boxes": [1, 64, 4], "scores": [1, 64, 1], "keypoints": [1, 64, 4, 3]}
        body = dict(infer_body(image), parameters={"detections": True})  # decoded on the device when asked
        status, decoded = client.json("POST", "/v2/models/tiny-pose/infer", body)
        assert status == 200 and [o["name"] for o in decoded["outputs"]] == list(INSTANCE_NMS_OUTPUTS["pose"])
    finally:
        running.stop()


@pytest.mark.parametrize("kind", ["pose", "segmentation"])
def test_the_device_side_evaluation_scores_the_task_as_the_host_does(compiled, tmp_path: Path, kind: str) -> None:
    """What `validate --device` runs on the device (the raw outputs of every batch), scored here."""
    from edgebuild.accuracy.evaluate import ValidationSet, device_inputs, evaluate, score_device_results
    from edgebuild.project.config import load_project
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    from edgebuild.runtime.engines.evaluate import evaluate_folder

    root, _ = compiled(kind)
    project = load_project(root)
    folder = root / "build" / "engines" / "yard"
    data = ValidationSet(project)
    (tmp_path / "inputs.npz").write_bytes(device_inputs(project, data))
    answer = evaluate_folder(folder, tmp_path / "inputs.npz", tmp_path / "results.npz", backend="onnxruntime")
    device = score_device_results(project, data, (tmp_path / "results.npz").read_bytes(), answer["backend"], 0.0)
    host = evaluate(project, OnnxRuntimeRunner(folder / "model.onnx"), data=data, progress=False)
    assert device.metric == host.metric == project.metric
    assert device.metrics == pytest.approx(host.metrics, abs=1e-9)


def test_the_bench_times_the_server_s_decode_of_raw_outputs(compiled) -> None:
    from edgebuild.runtime.bench.bench_request import measure_request
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    root, _ = compiled("pose")
    folder = root / "build" / "engines" / "yard"
    measured = measure_request(OnnxRuntimeRunner(folder / "model.onnx"), Recipe.load(folder), runs=3, warmup=1,
                               codec=None)
    assert measured["measured"] and measured["outputs"] == "raw", measured
    assert measured["postprocess_step"].startswith("decode_instance_outputs (pose:"), measured
    assert measured["postprocess"]["p50_ms"] > 0 and measured["detections_p50"] is not None


def test_a_pose_project_with_nms_inside_ships_detections_with_keypoints_at_the_gate_s_parity(tmp_path: Path) -> None:
    """``[task.postprocess] in_model = true`` for pose: the gate scores the graph with NMS appended against the
    host's decode of the head, and the model folder ships it (docs/tasks.md, "On the device")."""
    from edgebuild.accuracy.evaluate import ValidationSet, device_inputs, score_device_results
    from edgebuild.project.config import load_project
    from edgebuild.runtime.base.vision import INSTANCE_NMS_OUTPUTS
    from edgebuild.runtime.bench.bench_request import measure_request
    from edgebuild.runtime.engines import acceptance
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    from edgebuild.runtime.engines.evaluate import evaluate_folder

    root = _project(tmp_path / "pose", "pose", "\n[task.postprocess]\nin_model = true\nmax_detections = 50\n")
    result = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "orin", "--ship-ungated",
                                       "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    assert "NMS inside the model: pose mAP50-95" in result.output and "the same detections on 4 of 4" in result.output
    gate = json.loads((root / "build/gate/gate.json").read_text())
    parity = gate["nms_parity"]
    assert parity["metric"] == "pose mAP50-95" and parity["difference"] <= 1e-6
    assert parity["same_detections"] == parity["images"] == 4

    folder = root / "build" / "engines" / "yard"
    recipe = Recipe.load(folder)
    assert recipe.task is not None and recipe.task.postprocess.in_model is True
    assert list(recipe.outputs or {}) == list(INSTANCE_NMS_OUTPUTS["pose"])
    assert recipe.outputs["detection_keypoints"].shape == [-1, 50, 4, 3]
    stored = _acceptance(folder)  # the detections and their keypoints, read as they are
    assert bool(stored["in_model"]) and stored["fp32_counts"].sum() > 0 and "fp32_keypoints" in stored
    assert acceptance.check(OnnxRuntimeRunner(folder / recipe.onnx), folder, "images", 4)["passed"]
    # the bench reads the detections as they are; Triton's and DeepStream's notes say the model decodes
    measured = measure_request(OnnxRuntimeRunner(folder / recipe.onnx), recipe, runs=3, warmup=1, codec=None)
    assert measured["postprocess_step"].startswith("instances_in_model (pose:"), measured
    container = _record(json.loads(result.stdout), "container")
    assert any("detections from NMS inside the model" in n for n in container["triton"]["notes"]), container["triton"]
    text = (root / "build" / container["deepstream"]["folder"] / "config_infer_primary.txt").read_text()
    assert "# NOTE: a pose model with NMS inside" in text
    # what `validate --device` sends back is scored as the gate scored the shipped graph
    project = load_project(root)
    data = ValidationSet(project)
    (tmp_path / "inputs.npz").write_bytes(device_inputs(project, data))
    answer = evaluate_folder(folder, tmp_path / "inputs.npz", tmp_path / "results.npz", backend="onnxruntime")
    device = score_device_results(project, data, (tmp_path / "results.npz").read_bytes(), answer["backend"], 0.0)
    assert device.value == pytest.approx(parity["in_model"], abs=1e-9)
