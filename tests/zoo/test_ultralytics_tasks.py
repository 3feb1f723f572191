"""Pose, instance segmentation and oriented boxes as a user trains them (issue 38): a YOLO11n-pose, a YOLO11n-seg
and a YOLO11n-obb, built from their yaml files and trained briefly on a generated YOLO dataset of the task
(tests.support.task_datasets), go through ``edgebuild init --model best.pt --data data.yaml`` and ``edgebuild
validate`` with no edit, and so does its Ultralytics ONNX export (``--model best.onnx``: edgebuild's adapter
appended to the export's head as ONNX nodes).

The gate's FP32 pose, mask or OBB mAP50-95, and (pose, segmentation) the box mAP50-95 beside it (ONNX Runtime on
the exported graph), are within 0.01 of Ultralytics' own val of the same checkpoint (``rect=False``: every image
at imgsz, as an engine of that size runs it), the export's within 0.002 of the checkpoint's; the INT8 candidate's
retention is printed and must stay near 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.task_datasets import obb_dataset, pose_dataset, segmentation_dataset
from tests.support.zoo import train_briefly

pytestmark = pytest.mark.zoo

SIZE = 128
#: task -> (Ultralytics' yaml, the dataset, epochs, Ultralytics' metric attribute, edgebuild's metric)
TASKS = {
    "pose": ("yolo11n-pose.yaml", pose_dataset, 50, "pose", "pose mAP50-95"),
    "segmentation": ("yolo11n-seg.yaml", segmentation_dataset, 40, "seg", "mask mAP50-95"),
    # Ultralytics' OBB val reports the rotated boxes' mAP as its .box; edgebuild has no axis-aligned box mAP for obb
    "obb": ("yolo11n-obb.yaml", obb_dataset, 60, "box", "obb mAP50-95"),
}


def _train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str) -> tuple[Path, Path]:
    """(the checkpoint, data.yaml): the task's model trained on 48 generated images, 48 held out."""
    yaml, dataset, epochs, _, _ = TASKS[task]
    data = dataset(tmp_path / "data")
    return train_briefly(tmp_path, monkeypatch, yaml, data, epochs, SIZE), data


def _theirs(checkpoint: Path, data: Path, tmp_path: Path, task: str) -> tuple[float, float]:
    """Ultralytics' val of the checkpoint: (its task's mAP50-95, its box mAP50-95; OBB: its obb mAP50-95 twice)."""
    from ultralytics import YOLO

    found = YOLO(str(checkpoint)).val(data=str(data), imgsz=SIZE, batch=1, rect=False, device="cpu", plots=False,
                                      workers=0, project=str(tmp_path / "val"), name="v", exist_ok=True)
    return float(getattr(found, TASKS[task][3]).map), float(found.box.map)


def _init_and_validate(root: Path, model: Path, data: Path, task: str, *options: str) -> tuple[dict, dict, str]:
    """``edgebuild init --model <model> --data data.yaml`` and ``validate`` with no edit: (the FP32 candidate's
    metrics, the INT8 candidate, validate's output)."""
    root.mkdir()
    (root / model.name).write_bytes(model.read_bytes())
    made = CliRunner().invoke(main, ["init", "--model", str(root / model.name), "--data", str(data), *options,
                                     str(root)])
    assert made.exit_code == 0, made.output
    text = (root / "edgebuild.toml").read_text()
    assert f'kind = "{task}"' in text and f'metric = "{TASKS[task][4]}"' in text, text
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["validate", "-p", str(root), "--no-progress"])
    print(f"validate {model.name}: {time.perf_counter() - started:.1f} s")
    assert result.exit_code == 0, result.output
    gate = json.loads((root / "build" / ".records" / "gate.json").read_text())["body"]["result"]
    candidates = {c["precision"]: c for c in gate["candidates"]}
    return candidates["fp32"]["metrics"], candidates["int8"], result.output


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TASKS))
def test_a_trained_checkpoint_and_its_export_go_through_init_and_validate_at_ultralytics_val(
        tmp_path: Path, monkeypatch, task: str) -> None:
    """The checkpoint, then its ONNX export (``yolo export format=onnx``, the adapter appended as ONNX nodes): the
    same training serves both routes."""
    from ultralytics import YOLO

    checkpoint, data = _train(tmp_path, monkeypatch, task)
    theirs, theirs_box = _theirs(checkpoint, data, tmp_path, task)
    best = tmp_path / "best.pt"
    best.write_bytes(checkpoint.read_bytes())
    monkeypatch.chdir(tmp_path)
    fp32, int8, output = _init_and_validate(tmp_path / "project", best, data, task, "--trust-checkpoint")
    metric = TASKS[task][4]
    ours, ours_box = fp32[metric], fp32.get("box mAP50-95", fp32[metric])
    print(f"{task}: {metric} Ultralytics val {theirs:.4f}, edgebuild FP32 {ours:.4f}; box mAP50-95 "
          f"{theirs_box:.4f} vs {ours_box:.4f}; INT8 {int8['value']:.4f} (retention {int8['retention']:.3f})")
    assert theirs > 0.3  # trained: a parity of near-zeros would say little
    assert abs(ours - theirs) <= 0.01
    assert abs(ours_box - theirs_box) <= 0.01
    assert int8["retention"] >= 0.95
    beside = f", box mAP50-95 {ours_box:.4f}" if "box mAP50-95" in fp32 else ""
    assert f"{metric} {ours:.4f}{beside}" in output, output

    exported = Path(YOLO(str(best)).export(format="onnx", dynamic=True, imgsz=SIZE, opset=17, simplify=False))
    fp32, int8, output = _init_and_validate(tmp_path / "export", exported, data, task)
    from_export, export_box = fp32[metric], fp32.get("box mAP50-95", fp32[metric])
    print(f"{task} ONNX export: {metric} edgebuild FP32 {from_export:.4f} (checkpoint {ours:.4f}, Ultralytics val "
          f"{theirs:.4f}); box mAP50-95 {export_box:.4f}; INT8 {int8['value']:.4f} (retention "
          f"{int8['retention']:.3f})")
    assert "Ultralytics' raw" in (tmp_path / "export" / "edgebuild.toml").read_text()
    assert abs(from_export - theirs) <= 0.01 and abs(export_box - theirs_box) <= 0.01
    assert abs(from_export - ours) <= 0.002 and abs(export_box - ours_box) <= 0.002
