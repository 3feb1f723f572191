"""``edgebuild init --model best.pt --data data.yaml`` for an Ultralytics OBB checkpoint (read without running its
pickle) and a YOLO OBB dataset: the project is an obb task with the rotated-box outputs and the OBB metric."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from edgebuild._compat import tomllib
from edgebuild.errors import DataError
from edgebuild.workflows.init.project_file import init_from_files
from tests.support.task_datasets import obb_dataset, pose_dataset


def _obb_checkpoint(path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``ultralytics.nn.tasks.OBBModel`` saved with torch, as a trained best.pt says its facts; init
    never loads it, and its check only asks whether ultralytics is installed (it is said to be)."""
    import importlib.util

    torch = pytest.importorskip("torch")

    class OBBModel:
        pass

    with monkeypatch.context() as patched:
        for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks"):
            patched.setitem(sys.modules, name, types.ModuleType(name))
        OBBModel.__module__, OBBModel.__qualname__ = "ultralytics.nn.tasks", "OBBModel"
        sys.modules["ultralytics.nn.tasks"].OBBModel = OBBModel  # type: ignore[attr-defined]
        model = OBBModel()
        model.__dict__.update({"names": {0: "bar", 1: "block"}, "stride": torch.tensor([8.0, 16.0, 32.0]),
                               "args": {"imgsz": 128, "task": "obb"}})
        torch.save({"model": model, "version": "8.4.0", "train_args": {"imgsz": 128}}, path)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "ultralytics" else find_spec(name, *rest))
    return path


def test_an_obb_checkpoint_and_a_yolo_obb_dataset_make_an_obb_project(tmp_path: Path, monkeypatch) -> None:
    checkpoint = _obb_checkpoint(tmp_path / "best.pt", monkeypatch)
    init_from_files(tmp_path / "p", model=checkpoint, data=obb_dataset(tmp_path / "data", train=2, val=2),
                    trust_checkpoint=True)
    written = tomllib.loads((tmp_path / "p" / "edgebuild.toml").read_text())
    task = written["task"]
    assert (task["kind"], task["classes"]) == ("obb", ["bar", "block"])
    assert written["model"]["outputs"] == ["boxes", "scores"]
    assert task["postprocess"] == {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001,
                                   "nms_iou": 0.7, "max_detections": 300}
    assert written["accuracy"]["metric"] == "obb mAP50-95"
    assert "[N, A, 5] cx, cy, w, h in input pixels, angle in radians" in (tmp_path / "p" / "edgebuild.toml").read_text()


def test_an_obb_checkpoint_with_pose_labels_is_refused_at_the_first_bad_line(tmp_path: Path, monkeypatch) -> None:
    checkpoint = _obb_checkpoint(tmp_path / "best.pt", monkeypatch)
    with pytest.raises(DataError, match=r"labels/0.txt:1: coordinates must be normalised") as caught:
        init_from_files(tmp_path / "p", model=checkpoint, data=pose_dataset(tmp_path / "data", train=2, val=2),
                        trust_checkpoint=True)
    assert str(caught.value).startswith("--data: ") and not (tmp_path / "p" / "edgebuild.toml").exists()
