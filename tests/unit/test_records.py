"""Records typed through: a field of a record is a type of its own, never a JSON object, and the typed
records read back what they write, key for key, so records stored before they were typed still read."""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from edgebuild.accuracy.evaluate import recipe_task
from edgebuild.accuracy.gate import GateResult
from edgebuild.devices.bench_records import BenchComparison, FleetBenchSummary
from edgebuild.devices.recipes import recipe_streams
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from edgebuild.project.template import FoundPostprocess
from edgebuild.runtime.base.recipe import RECIPE_FILE, Recipe, RecipePostprocess
from edgebuild.runtime.bench.bench_result import (
    BenchResult,
    Drift,
    GroupBenchResult,
    NotCompared,
    RequestBreakdown,
    TegrastatsSummary,
    Unavailable,
    read_bench_result,
)
from edgebuild.shipping.container import ContainerRecord
from edgebuild.shipping.ota import PackageRecord
from edgebuild.sources.export.onnx_export import ExportRecord
from edgebuild.sources.onnx_checks import UltralyticsSummary, ultralytics_summary
from edgebuild.sources.onnx_file import OnnxModelRecord, read_model_record
from edgebuild.targets.presets import load_preset
from edgebuild.targets.profiles import GroupFacts
from edgebuild.workflows.farm import FarmPlace
from edgebuild.workflows.validate import GroupOnDevice
from tests.support.bench_results import group_result_dict, jetson_result_dict, result_dict
from tests.support.project import TINY_TOML, write_tiny_project
from tests.support.runtime_artifacts import TARGET, recipe_for, write_artifact

PACKAGE = Path(__file__).resolve().parents[2] / "edgebuild"

#: fields that are the file boundary itself, where JSON is what they are
BOUNDARY = {
    "edgebuild/pipeline/records.py StageRecord.result",  # a stage's record as the store reads it, before from_dict
    "edgebuild/pipeline/runner.py Stage.from_dict",  # the reader at that boundary
    # the JSON an Ultralytics .engine file carries before the engine: Ultralytics' own free-form metadata,
    # shown by `inspect` as found and never read by key, so it stays the JSON it is
    "edgebuild/runtime/engines/engine_header.py EngineHeader.prefix_metadata",
    # a detection, segmentation, pose or OBB set's ground truth in COCO form (read from COCO, YOLO or VOC
    # files): the dict pycocotools/faster-coco-eval index as it is (accuracy.metrics.coco_ground_truth) and the
    # task metrics score in the same COCO form, so it stays the COCO JSON those libraries take
    "edgebuild/datasets/images.py CocoSet.ground_truth",
}

#: not typed yet: each is to get a record of its own; an entry goes when its field is typed (empty since issue 44)
PENDING: frozenset[str] = frozenset()


def json_fields(source: str, where: str) -> set[str]:
    """``where Class.field`` for every class-level annotated field whose annotation names JsonObject or JsonValue."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                        and any(word in ast.unparse(item.annotation) for word in ("JsonObject", "JsonValue")):
                    found.add(f"{where} {node.name}.{item.target.id}")
    return found


def _all_json_fields() -> set[str]:
    return {field for path in PACKAGE.rglob("*.py")
            for field in json_fields(path.read_text(), str(path.relative_to(PACKAGE.parent)))}


def test_no_record_field_is_a_json_object() -> None:
    found = _all_json_fields() - BOUNDARY - PENDING
    assert not found, ("a record's field is a JsonObject (Any by another name): give it a frozen dataclass with "
                       "as_dict/from_dict at the file boundary:\n" + "\n".join(sorted(found)))


def test_the_pending_list_holds_only_fields_still_untyped() -> None:
    typed = PENDING - _all_json_fields()
    assert not typed, "typed now: remove from PENDING:\n" + "\n".join(sorted(typed))


def test_the_scan_finds_a_json_field() -> None:
    source = "class A:\n    x: JsonObject\n    y: list[JsonValue] | None = None\n    z: int = 0\n"
    assert json_fields(source, "m.py") == {"m.py A.x", "m.py A.y"}


def _same_json(written: object, stored: object) -> None:
    assert json.dumps(written, sort_keys=False) == json.dumps(stored, sort_keys=False)


def _gate(int8_choice: dict, nms_parity: dict) -> dict:
    candidate = {"precision": "int8", "onnx": "measured/x/int8/model.onnx", "metric": "mAP50-95", "value": 0.5,
                 "retention": 0.9, "passed": False, "selectable": True, "backend": "onnxruntime-cpu 1.32.0",
                 "latency_ms": 1.5, "kept_fp32": [], "note": "", "rejected_by": [], "metrics": {"mAP50-95": 0.5}}
    return {"folder": "/p/build/gate", "policy": {"metric": "mAP50-95", "min_retention": 0.95, "gated": True},
            "reference_value": 0.6, "backend": "onnxruntime-cpu 1.32.0", "images": 200, "candidates": [candidate],
            "selected": None, "selection_rule": "lowest precision that passes",
            "sensitivity": [{"layer": "/backbone/conv1", "sqnr_db": 12.5}], "next_steps": ["x"], "notes": [],
            "measured": 3, "stored": 0, "seconds": 2.0, "int8_choice": int8_choice, "nms_parity": nms_parity,
            "baseline": None, "stage": "gate/5"}


def test_the_gate_record_reads_back_what_it_wrote() -> None:
    ranked = {"variant": "minmax", "why": "highest", "variants": [
        {"variant": "minmax", "sqnr_db": 30.1, "value": 0.5, "retention": 0.9},
        {"variant": "entropy", "sqnr_db": None, "value": None, "retention": None}]}
    one = {"variant": "minmax", "why": "the one variant", "variants": [{"variant": "minmax", "value": 0.5}]}
    tracked = {"variant": "minmax", "why": "tracks best", "variants": [  # [accuracy.tracking]'s INT8 choice
        {"variant": "minmax", "sqnr_db": 30.1, "value": 0.5, "retention": 0.9, "tracking_retention": 0.999},
        {"variant": "mse", "sqnr_db": 31.0, "value": 0.6, "retention": 1.0, "tracking_retention": 0.98}]}
    parity = {"metric": "mAP50-95", "host_decode": 0.6, "in_model": 0.6, "difference": 0.0, "images": 2,
              "same_detections": 2, "largest_difference": 0.0, "nms_free": False}
    for stored in (_gate(ranked, parity), _gate(one, {}), _gate({}, {}), _gate(tracked, {})):
        result = GateResult.from_dict(stored, Path("/p/build/gate"))
        _same_json(result.as_dict(), stored)
    typed = GateResult.from_dict(_gate(ranked, parity), Path("/p/build/gate"))
    assert typed.int8_choice is not None and typed.int8_choice.variants[0].sqnr_db == 30.1
    assert typed.nms_parity is not None and typed.nms_parity.same_detections == 2
    assert typed.sensitivity[0].layer == "/backbone/conv1" and typed.int8_choice.variants[0].tracking_retention is None
    choice = GateResult.from_dict(_gate(tracked, {}), Path("/p")).int8_choice
    assert choice is not None and choice.variants[1].tracking_retention == 0.98
    assert GateResult.from_dict(_gate({}, {}), Path("/p")).int8_choice is None


def test_a_gate_record_with_the_tracking_gate_reads_back_what_it_wrote() -> None:
    stored = _gate({}, {})
    stored["candidates"][0]["refused"] = ("tracking HOTA 0.5000 keeps 0.833 of FP32's 0.6000, below "
                                          "[accuracy.tracking] min_retention 0.99")
    row = {"precision": "fp32", "HOTA": 0.6, "IDF1": 0.7, "MOTA": 0.8, "IDSW": 3, "value": 0.6, "retention": 1.0,
           "passed": True, "seconds": 1.5, "stored": False}
    stored["tracking"] = {"metric": "HOTA", "min_retention": 0.99, "tracker": "bytetrack",
                          "video_set": "generated, 2 streams x 30 frames, seed 0", "streams": 2, "frames": 60,
                          "reference": 0.6, "rows": [row, {**row, "precision": "int8", "HOTA": 0.5, "value": 0.5,
                                                          "retention": 0.833333, "passed": False}]}
    stored["stage"] = stored.pop("stage")  # the stage's version is written last
    result = GateResult.from_dict(stored, Path("/p/build/gate"))
    _same_json(result.as_dict(), stored)
    assert result.tracking is not None and result.tracking.row("int8").IDSW == 3  # type: ignore[union-attr]
    assert result.tracking.refusal("int8").startswith("tracking HOTA 0.5000 keeps 0.833 of FP32's 0.6000")
    assert result.tracking.refusal("fp32") == "" and result.candidates[0].refused


def test_the_container_record_reads_back_what_it_wrote() -> None:
    stored = {"group": "cams", "target": "orin-nano-8gb@6.2", "flavor": "jetson", "image": "i", "base_image": "b",
              "ships_engine": False, "limits": load_preset("orin-nano-8gb").as_dict(), "systemd_unit": None,
              "context": "containers/cams", "notes": [],
              "triton": {"repository": "triton/cams/models", "platform": "onnxruntime_onnx", "image": None,
                         "triton": None, "notes": []},
              "deepstream": {"written": False, "folder": None, "files": [], "deepstream": None, "engine_file": None,
                             "ships_engine": False, "reason": "no task", "notes": []}}
    record = ContainerRecord.from_dict(stored)
    assert record.limits.name == "orin-nano-8gb" and record.triton is not None and record.deepstream is not None
    _same_json(record.as_dict(), stored)
    _same_json(ContainerRecord.from_dict({**stored, "triton": None, "deepstream": None}).as_dict(),
               {**stored, "triton": None, "deepstream": None})


def test_the_export_and_checkpoint_records_read_back_what_they_wrote(tmp_path: Path) -> None:
    stored = {"onnx_path": str(tmp_path / "model.onnx"), "files": {"model.onnx": "ab"}, "opset": 17,
              "opset_reason": "r", "exporter": "torchscript", "exporter_note": "", "simplified": False,
              "simplify_note": "", "inputs": [{"name": "images", "dtype": "float32", "min_shape": [1, 3, 8, 8],
                                                "opt_shape": [1, 3, 8, 8], "max_shape": [2, 3, 8, 8]}],
              "outputs": ["logits"], "dynamic_axes": {"images": {"0": "batch"}}, "atol": 1e-4, "rtol": 1e-3,
              "parity": [], "cache_key": "k", "key_parts": {}, "versions": {}, "seconds": 1.0, "failed_attempts": [],
              "stage": "export/2"}
    record = ExportRecord.from_dict(stored, tmp_path)
    assert record.inputs[0].max_shape == [2, 3, 8, 8]
    _same_json(record.as_dict(), stored)
    facts = {"task": "detect", "classes": ["a"], "imgsz": [640, 640], "stride": 32, "version": "8.3.0",
             "told_by": "checkpoint", "model_class": "DetectionModel", "nms_free": False, "max_det": 0, "kpt_shape": [],
             "detr": False}
    model = {"entry_point": "best.pt", "parameters": 3, "output_shapes": {}, "seconds": 0.1, "loaded_files": {},
             "kind": "ultralytics", "told_by": "its content", "path": "/p/best.pt", "files": {"best.pt": "ab"},
             "ultralytics": facts, "checks": []}
    checkpoint = read_model_record(model)
    assert checkpoint.ultralytics.stride == 32  # type: ignore[attr-defined]
    _same_json(asdict(checkpoint), model)


def test_the_recipe_reads_back_what_it_wrote(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    stored = recipe_for(folder, TARGET).to_dict()
    # the limits and the preprocessing as recipes wrote them before they were typed: the preset's and
    # PreprocessSpec's fields, in their order, tuples as lists
    stored["limits"] = load_preset("orin-nano-8gb").as_dict()
    stored["task"] = {"kind": "detection", "classes": ["a"], "outputs": "nms",
                      "postprocess": RECIPE_FORMS["detection in_model"][2],
                      "preprocess": {"input_size": [64, 48], "resize": "letterbox", "pad_value": 114,
                                     "channel_order": "RGB", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}}
    # the device's measurement of a device-built engine, as devices.engines.Acceptance.shown() wrote it
    stored["accepted"] = {"candidate": "fp16", "plan_sha256": "ab", "where": "ssh://nvidia@orin-01",
                          "backend": "tensorrt 10.3.0.30", "metric": "mAP50-95", "value": 0.51, "images": 200,
                          "reference": 0.52, "retention": 0.98}
    recipe = Recipe.from_dict(json.loads(json.dumps(stored)))
    assert recipe.limits.name == "orin-nano-8gb" and recipe.limits.cpuset == "2-5"
    assert recipe.accepted is not None and recipe.accepted.retention == 0.98
    assert recipe.task is not None and recipe.task.preprocess.input_size == (64, 48)
    _same_json(recipe.to_dict(), stored)


def _with_task(kind: str, outputs: list[str], extra: str = "") -> str:
    return TINY_TOML.replace('outputs = ["boxes", "scores"]', f"outputs = {json.dumps(outputs)}").replace(
        'kind = "detection"\n', f'kind = "{kind}"\n{extra}')


def _nms_inside(text: str) -> str:
    return text.replace("[task.preprocess]", "[task.postprocess]\nin_model = true\n\n[task.preprocess]")


_POSE = _with_task("pose", ["boxes", "scores", "keypoints"], "kpt_shape = [4, 3]\n")
_SEGMENTATION = _with_task("segmentation", ["boxes", "scores", "mask_coefficients", "prototypes"])
_BOXES = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001}
_INSTANCES = {**_BOXES, "nms_iou": 0.7, "max_detections": 300}
#: each task form's project and its recipe's ``task.postprocess`` as recipes held it before it was typed (the
#: writer's dicts: detection_settings', ``logits_output``, the instance task's ``[task.postprocess]``), key for key
RECIPE_FORMS = {
    "detection raw head": (TINY_TOML, "raw_head", {**_BOXES, "nms_iou": 0.6, "max_detections": 100,
                                                   "pre_nms_top_k": 1000, "in_model": False}),
    "detection in_model": (_nms_inside(TINY_TOML), "nms", {**_BOXES, "nms_iou": 0.6, "max_detections": 100,
                                                           "pre_nms_top_k": 1000, "in_model": True}),
    "classification": (_with_task("classification", ["logits"]), "logits", {"logits_output": "logits"}),
    "pose": (_POSE, "raw", {**_INSTANCES, "keypoints_output": "keypoints", "kpt_shape": [4, 3]}),
    "pose in_model": (_nms_inside(_POSE), "raw", {**_INSTANCES, "keypoints_output": "keypoints", "in_model": True,
                                                   "kpt_shape": [4, 3]}),
    "segmentation": (_SEGMENTATION, "raw", {**_INSTANCES, "coefficients_output": "mask_coefficients",
                                            "prototypes_output": "prototypes"}),
    "segmentation in_model": (_nms_inside(_SEGMENTATION), "raw", {
        **_INSTANCES, "coefficients_output": "mask_coefficients", "prototypes_output": "prototypes",
        "in_model": True}),
    "obb": (_with_task("obb", ["boxes", "scores"]), "raw", _INSTANCES),
}


@pytest.mark.parametrize("form", sorted(RECIPE_FORMS))
def test_a_recipe_of_each_task_form_reads_back_what_it_wrote(tmp_path: Path, form: str) -> None:
    toml, outputs, post = RECIPE_FORMS[form]
    write_tiny_project(tmp_path / "project", toml)
    task = recipe_task(load_project(tmp_path / "project", check_paths=False))
    assert task.outputs == outputs
    folder = write_artifact(tmp_path / "folder")
    path = recipe_for(folder, TARGET, task=task).save(folder)
    written = path.read_text()
    stored = json.loads(written)
    _same_json(stored["task"]["postprocess"], post)  # the writer's keys, in the order recipes held them
    again = Recipe.load(folder)
    assert again.task == task
    _same_json(again.to_dict(), stored)
    assert again.save(folder).read_text() == written  # the file byte for byte
    # the file as an edgebuild before the record wrote it (the same JSON) loads and is written back the same
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(folder / "model.onnx", old / "model.onnx")
    (old / RECIPE_FILE).write_text(json.dumps(stored, indent=2) + "\n")
    assert Recipe.load(old).save(old).read_text() == written


_STREAMS_TOML = TINY_TOML + """
[[streams]]
source = "rtsp://10.0.0.21/stream1"
name = "gate"
max_fps = 15

[[streams]]
source = "/dev/video0"
group = "dock"

[runtime.tracking]
mode = "instead"
mqtt = "broker.local"
regions = "regions.json"
"""


def test_the_recipe_streams_are_the_groups_own_and_read_back_key_for_key(tmp_path: Path) -> None:
    write_tiny_project(tmp_path / "project", _STREAMS_TOML)
    (tmp_path / "project" / "regions.json").write_text('[{"name": "door", "box": [0, 0, 10, 10]}]')
    project = load_project(tmp_path / "project")
    streams = recipe_streams(project, "yard-cams")
    assert streams is not None and [(s.source, s.name, s.max_fps) for s in streams.sources] == [
        ("rtsp://10.0.0.21/stream1", "gate", 15.0)]
    assert (streams.mode, streams.tracker, streams.mqtt, streams.regions) == ("instead", "bytetrack", "broker.local",
                                                                              "regions.json")
    assert len(recipe_streams(project, "dock").sources) == 2  # type: ignore[union-attr]
    folder = write_artifact(tmp_path / "folder")
    (folder / "regions.json").write_text("[]")
    path = recipe_for(folder, TARGET, streams=streams).save(folder)
    stored = json.loads(path.read_text())
    # every field as the record holds it, in its order
    assert stored["streams"] == {"sources": [{"source": "rtsp://10.0.0.21/stream1", "name": "gate", "max_fps": 15.0}],
                                 "tracker": "bytetrack", "mode": "instead", "jsonl": "tracks.jsonl", "sse_port": None,
                                 "mqtt": "broker.local", "mqtt_topic": "edgebuild", "regions": "regions.json"}
    again = Recipe.load(folder)
    assert again.streams == streams and "regions.json" in again.file_names(engine=False)
    _same_json(again.to_dict(), stored)
    # a group that tracks nothing: no streams key at all, as recipes were written before it
    plain = recipe_for(folder, TARGET).save(folder)
    assert "streams" not in json.loads(plain.read_text()) and Recipe.load(folder).streams is None
    stored["streams"]["mode"] = "alone"
    with pytest.raises(ConfigError, match="field 'streams.mode' is 'alone', not one of beside, instead"):
        Recipe.from_dict(stored)
    stored["streams"] = {"sources": [{"source": "a.mp4", "fps": 3}]}
    with pytest.raises(ConfigError, match="unknown field 'streams.sources\\[0\\].fps'"):
        Recipe.from_dict(stored)


def test_the_recipe_postprocess_is_typed_and_sparse() -> None:
    pose = RecipePostprocess.from_dict(RECIPE_FORMS["pose in_model"][2])
    assert pose.kpt_shape == [4, 3] and pose.in_model is True and pose.max_detections == 300
    assert pose.logits_output is None and pose.pre_nms_top_k is None
    # a recipe written before kpt_shape and pre_nms_top_k: the keys it has, no more
    older = {"boxes_output": "b", "scores_output": "s", "max_detections": 10}
    assert RecipePostprocess.from_dict(older).as_dict() == older
    assert RecipePostprocess().as_dict() == {}
    with pytest.raises(ConfigError, match="'task.postprocess.max_detections' must be a whole number"):
        RecipePostprocess.from_dict({"max_detections": "ten"})
    with pytest.raises(ConfigError, match="unknown field 'task.postprocess.anchors'"):
        RecipePostprocess.from_dict({"anchors": 3})


def test_a_fleet_group_reads_back_what_it_wrote() -> None:
    stored = {"group": "cams", "in_fleet": True, "target": "orin-nano-8gb@6.2", "module": "Jetson Orin Nano 8GB",
              "compute_capability": "8.7", "jetpack": "6.2", "l4t": "36.4.3", "tensorrt": "10.3.0.30",
              "cuda": "12.6", "max_onnx_opset": 20, "use_dla": False, "limits": "orin-nano-8gb"}
    _same_json(GroupFacts.from_dict(stored).as_dict(), stored)
    without = {k: v for k, v in stored.items() if k != "limits"}
    assert GroupFacts.from_dict(without).limits is None
    _same_json(GroupFacts.from_dict(without).as_dict(), without)


def test_the_package_record_reads_back_what_it_wrote() -> None:
    stored = {"group": "dock", "target": "orin-nano-8gb@6.2",
              "bundle": {"path": "build/packages/dock/tiny-1.0-dock.ebundle", "size": 1234, "sha256": "ab"},
              "mender": {"path": "build/packages/dock/tiny-1.0-dock.mender", "size": 2345, "sha256": "cd"},
              "signed": True, "delta_over": None, "files": 4, "carried": 4, "notes": [],
              "accepted": {"candidate": "int8", "where": "ssh://nvidia@orin-01", "backend": "tensorrt 10.3.0.30",
                           "metric": "mAP50-95", "value": 0.77, "images": 200, "retention": 0.98},
              "models": [{"name": "cams", "served_as": "tiny", "version": "1.0", "precision": "fp16"}]}
    record = PackageRecord.from_dict(stored)
    assert record.bundle.size == 1234 and record.accepted is not None and record.accepted.retention == 0.98
    assert record.models is not None and record.models[0].served_as == "tiny"
    _same_json(record.as_dict(), stored)
    bare = {**stored, "accepted": None, "models": None}
    _same_json(PackageRecord.from_dict(bare).as_dict(), bare)


def test_the_bench_comparison_and_fleet_summary_read_back_what_they_wrote() -> None:
    comparison = {"forced_over": ["different backends (a then, b now)"], "rows": [
        {"batch": 1, "concurrency": 1, "figure": "p50_ms", "baseline": 10.0, "current": 9.0, "change_pct": -10.0,
         "better": True},
        {"batch": 1, "concurrency": 1, "figure": "p99_ms", "baseline": 10.0, "current": 10.0, "change_pct": 0.0,
         "better": None}]}
    typed = BenchComparison.from_dict(comparison)
    assert typed.rows[0].better is True and typed.rows[1].better is None
    _same_json(typed.as_dict(), comparison)
    fleet = {"schema": "edgebuild.bench-fleet/1", "groups": [
        {"group": "belts", "board": "orin-1", "url": "ssh://b", "retried_from": None, "error": None,
         "target": "orin-nano-8gb@6.2", "precision": "int8", "backend": "tensorrt 10.3.0.30", "power_mode": "MAXN",
         "cold_start_s": None, "configs": [{"batch": 1, "concurrency": 1, "p50_ms": 2.25, "p99_ms": 3.5,
                                            "throughput_ips": 440.0}]},
        {"group": "cams", "board": "", "url": "", "retried_from": "orin-2", "error": "no board free"}]}
    summary = FleetBenchSummary.from_dict(fleet)
    assert [g.group for g in summary.measured] == ["belts"] and summary.groups[1].configs is None
    _same_json(summary.as_dict(), fleet)


def test_a_farm_place_and_a_group_measured_on_a_device_read_back_what_they_wrote() -> None:
    place = {"place": "agx-orin-1", "tags": {"module": "agx-orin-64gb"}, "serves": ["dock"], "held_by": "test/tester",
             "reservation": None}
    _same_json(FarmPlace.from_dict(place).as_dict(), place)
    device = {"tensorrt": "10.3.0.30", "tensorrt_problem": "", "compute_capability": "8.7", "l4t": "36.4.3",
              "compatible": ["nvidia,p3768-0000+p3767-0005", "nvidia,tegra234"], "python": "3.10.12",
              "machine": "aarch64"}
    row = {"group": "sorters", "candidate": "fp16", "metric": "top-1", "value": 0.98, "retention": 0.99,
           "passed": True, "backend": "tensorrt 10.3.0.30", "backend_reason": "the engine fits", "images": 200,
           "inference_s": 1.25, "device": device, "sent": ["2 model file(s)"], "url": "ssh://nvidia@orin-01"}
    typed = GroupOnDevice.from_dict(row)
    assert typed.device is not None and typed.device.compatible[-1] == "nvidia,tegra234" and typed.board is None
    _same_json(typed.as_dict(), row)
    on_farm = {**row, "device": None, "board": "orin-nano-1", "retried_from": None}
    assert GroupOnDevice.from_dict(on_farm).board == "orin-nano-1"
    _same_json(GroupOnDevice.from_dict(on_farm).as_dict(), on_farm)


def _onnx_model(ultralytics: dict) -> dict:
    return {"entry_point": "model.onnx", "parameters": 3, "output_shapes": {}, "seconds": 0.1, "loaded_files": {},
            "kind": "onnx", "told_by": "its suffix", "path": "/p/model.onnx", "files": {"model.onnx": "ab"},
            "opset": 17, "fleet_opset": 20, "producer": "pytorch 2.5", "metadata": {"task": "detect"},
            "ultralytics": ultralytics, "checks": ["ONNX checker"]}


def test_an_onnx_models_ultralytics_summary_reads_back_what_it_wrote() -> None:
    plain = {"task": "detect", "classes": ["a", "b"], "imgsz": [640, 640], "stride": 32, "version": "8.3.0",
             "summary": "Ultralytics 8.3.0 export: task detect, 2 classes (a, b), imgsz [640, 640], stride 32"}
    nms_free = {"task": "detect", "classes": ["a"], "imgsz": [640, 640], "stride": 32, "version": "8.3.0",
                "nms_free": True, "max_det": 300, "summary": "s"}
    pose = {"task": "pose", "classes": ["person"], "imgsz": 640, "stride": [8, 16, 32], "version": "",
            "kpt_shape": [17, 3], "summary": "s"}
    unread = {"task": "detect", "classes": [], "imgsz": None, "stride": "x", "version": "8.3.0",
              "names_unread": "{0: person", "summary": "s"}
    for said in (plain, nms_free, pose, unread, {}):
        record = read_model_record(_onnx_model(said))
        assert isinstance(record, OnnxModelRecord)
        _same_json(record.as_dict(), _onnx_model(said))
    typed = read_model_record(_onnx_model(pose))
    assert isinstance(typed, OnnxModelRecord) and typed.ultralytics is not None
    assert typed.ultralytics.kpt_shape == [17, 3] and typed.ultralytics.stride == [8, 16, 32]
    assert UltralyticsSummary.from_dict({}) is None
    props = {"task": "detect", "names": "{0: 'a', 1: 'b'}", "imgsz": "[640, 640]", "stride": "32",
             "version": "8.3.0", "description": "Ultralytics YOLO11n model"}
    found = ultralytics_summary(props)
    assert found is not None and found.as_dict() == plain
    assert UltralyticsSummary.from_dict(found.as_dict()) == found


def test_the_postprocess_init_found_is_sparse() -> None:
    for keys in ({}, {"logits_output": "logits"},
                 {"boxes_output": "boxes", "scores_output": "scores", "keypoints_output": "keypoints",
                  "score_threshold": 0.001, "nms_iou": 0.7, "max_detections": 300},
                 {"score_threshold": 0.001, "nms_iou": 0.7, "max_detections": 300, "in_model": True,
                  "boxes_output": "detection_boxes", "scores_output": "detection_scores"}):
        found = FoundPostprocess.from_dict(keys)
        assert found.as_dict() == keys  # the same keys (written in the record's order)
    assert list(FoundPostprocess.from_dict({"nms_iou": 0.7, "boxes_output": "b"}).as_dict()) == ["boxes_output",
                                                                                                "nms_iou"]
    assert FoundPostprocess().as_dict() == {}


def test_a_bench_result_reads_back_what_the_bench_wrote(tmp_path: Path) -> None:
    from edgebuild.runtime.bench.bench import run_bench

    folder = write_artifact(tmp_path / "yard")
    quiet = dict(progress=lambda _: None, warmup=1, batches=[1, 2])
    fixed = run_bench(folder, iterations=5, concurrency=[1, 2], **quiet)
    sustained = run_bench(folder, duration_s=0.2, window=0.1, **quiet)
    for stored in (json.loads(json.dumps(fixed)), json.loads(json.dumps(sustained)), result_dict(ran_on="h"),
                   jetson_result_dict()):
        result = BenchResult.from_dict(stored)
        _same_json(result.as_dict(), stored)
        assert read_bench_result(stored) == result
    here = BenchResult.from_dict(json.loads(json.dumps(sustained)))
    assert here.ran_on is None and "ran_on" not in here.as_dict()  # the build side adds it
    assert isinstance(here.tegrastats, Unavailable) and here.configs[0].sustained is not None
    assert here.configs[1].stages is None and here.power_mode() == "none (not a Jetson)"
    jetson = BenchResult.from_dict(jetson_result_dict())
    assert jetson.power_mode() == "MAXN_SUPER" and jetson.configs[0].stages is not None
    assert isinstance(jetson.tegrastats, TegrastatsSummary) and jetson.tegrastats.input_rail == "VDD_IN"
    windows = jetson.configs[0].sustained.windows
    assert windows[2].tegrastats is not None and windows[2].tegrastats.throttle_events[0].from_mhz == 1020
    assert isinstance(jetson.configs[0].sustained.drift, Drift)
    assert isinstance(jetson.request, RequestBreakdown) and jetson.request.stage("end_to_end") is not None
    assert jetson.memory.cgroup.limited and jetson.memory.cgroup.peak_bytes is None


def test_a_bench_result_keeps_the_keys_the_bench_leaves_out_out() -> None:
    stored = jetson_result_dict()
    window = stored["configs"][0]["sustained"]["windows"][0]
    for key in ("p50_ms", "p99_ms", "throughput_ips", "tegrastats"):  # a window without runs
        del window[key]
    stored["configs"][0]["sustained"]["drift"] = {"compared": False, "reason": "one window only"}
    stored["tegrastats"] = {"available": True, "interval_ms": 250, "samples": 0}  # no line parsed
    stored["jetson"]["clocks"] = {"available": True, "lines": ["SOC family:tegra234"]}  # no GPU line
    rails = {"available": True, "interval_ms": 250, "samples": 1, "rails_mw": {"VDD_X": {"mean": 1.0, "max": 1}},
             "input_rail": None}  # rails, none of them the module's input
    for case in (stored, {**stored, "tegrastats": rails}):
        result = BenchResult.from_dict(case)
        _same_json(result.as_dict(), case)
    typed = BenchResult.from_dict(stored)
    assert isinstance(typed.configs[0].sustained.drift, NotCompared)
    assert typed.configs[0].sustained.windows[0].p50_ms is None
    older = {k: v for k, v in result_dict().items() if k != "request"}  # before the per-request stages
    assert BenchResult.from_dict(older).request is None


def test_a_group_bench_result_reads_back_what_it_wrote() -> None:
    stored = group_result_dict()
    result = read_bench_result(stored)
    assert isinstance(result, GroupBenchResult) and result.alone["detector"].configs[0].latency.p50_ms == 4.0
    assert result.together.models["detector"].slowdown == 1.5 and result.together.models["classifier"].latency is None
    _same_json(result.as_dict(), stored)
