"""The FP32 baseline judged (issue 34): the digits classifier exported to ONNX, taken by ``init``.

Before the issue, ``init --model digits.onnx --data <split folders>`` wrote mean 0 / std 1 (the file says
no preprocessing; the model was trained with mean 0.31 std 0.32, GRAY), FP32 scored top-1 0.100 over 10
classes and every candidate passed the gate. Now init measures the conventions and writes one far above
chance; a user's wrong flags are kept, and ``validate`` refuses the chance-level baseline (exit 11)
naming the numbers and the causes, unless ``accuracy.baseline = "accept"``; a metric the model file
records far above the FP32 here is refused naming both.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from edgebuild.project.ultralytics_facts import recorded_metric_of
from tests.integration.test_init_from_files import _copy_example, _export, _run


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> tuple[Path, Path]:
    """The trained digits classifier as model.onnx (1x16x16) and its data as data/split/{train,val}/<class>/."""
    root = _copy_example(tmp_path_factory.mktemp("baseline"), "digits-classifier")
    model = _export(root, ("1, \\d+, \\d+", "1, 16, 16"))
    split = root / "data" / "split"
    shutil.copytree(root / "data" / "val", split / "val")
    classes = sorted(p.name for p in (root / "data" / "val").iterdir())
    for n, image in enumerate(sorted((root / "data" / "calibration").iterdir())):
        folder = split / "train" / classes[n % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, folder / image.name)
    return model, split


def _accept(project: Path) -> None:
    path = project / "edgebuild.toml"
    text = path.read_text()
    assert "\n[accuracy]\n" in text
    path.write_text(text.replace("\n[accuracy]\n", '\n[accuracy]\nbaseline = "accept"\n', 1))


def test_wrong_flags_are_kept_and_validate_refuses_the_chance_level_baseline(digits, tmp_path) -> None:
    model, split = digits
    project = tmp_path / "wrong"
    code, output = _run("init", "--model", str(model), "--data", str(split), "--mean", "0", "--std", "1",
                        "--channel-order", "GRAY", str(project))
    assert code == 0, output
    assert "preprocessing: as given (--mean, --std, --channel-order), not measured" in output, output
    code, output = _run("validate", "-p", str(project))
    print(output)
    assert code == 11, output
    found = re.search(r"scores top-1 ([\d.]+) on .*split.* \((\d+) images", output)
    assert found and float(found.group(1)) <= 0.15, output  # 0.100 before the issue, and now refused
    for said in ("at or near chance", "chance is 0.100 for 10 classes",
                 "1. normalization: task.preprocess.mean = [0.0], std = [1.0]", "task.preprocess.channel_order",
                 "0-255", "class order: task.classes",
                 'accuracy.baseline = "accept"'):
        assert said in output, (said, output)
    # the gate off (a dry run): the baseline is reported, not enforced
    code, output = _run("compile", "--target", "orin", "--no-gate", "--ship-ungated", "-p", str(project))
    assert code == 0, output
    assert "baseline: AT CHANCE (gate off: reported, not enforced): FP32 top-1 " in output, output
    assert "1. normalization: task.preprocess.mean = [0.0]" in output, output
    _accept(project)  # the project says it knows: the gate decides as before, the baseline shown as accepted
    code, output = _run("validate", "-p", str(project))
    assert code == 0, output
    assert 'baseline: ACCEPTED (accuracy.baseline = "accept"): FP32 top-1 ' in output, output


def test_init_measures_a_normalization_far_above_chance_and_validate_passes(digits, tmp_path) -> None:
    model, split = digits
    project = tmp_path / "measured"
    code, output = _run("init", "--model", str(model), "--data", str(split), str(project))
    assert code == 0, output
    scores = {name: float(v) for name, v in re.findall(r"^  (\S+) GRAY\s+mean .*: ([\d.]+)", output, re.M)}
    print(scores)
    assert scores["0-1"] < 0.2 and max(scores.values()) > 0.8, output  # 0-1 is the old default: chance
    code, output = _run("validate", "-p", str(project))
    assert code == 0, output
    fp32 = float(re.search(r"baseline: OK: FP32 top-1 ([\d.]+)", output).group(1))
    print(f"FP32 top-1 under init's choice: {fp32}")
    assert fp32 > 0.8, output


def _with_recorded(model: Path, out: Path, props: dict[str, str]) -> Path:
    import onnx

    proto = onnx.load(str(model))
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(out))
    return out


def _swapped(split: Path, out: Path) -> Path:
    """The split with six of ten class folders' images swapped in pairs: labels wrong for 60% of the images."""
    shutil.copytree(split, out)
    for a, b in (("0", "1"), ("2", "3"), ("4", "5")):
        val = out / "val"
        (val / a).rename(val / "tmp")
        (val / b).rename(val / a)
        (val / "tmp").rename(val / b)
    return out


def test_a_recorded_metric_far_above_the_fp32_here_is_refused_naming_both(digits, tmp_path) -> None:
    model, split = digits
    recorded = _with_recorded(model, tmp_path / "digits.onnx", {"val_metric.top-1": "0.97"})
    assert recorded_metric_of(recorded) == {"top-1": ("top-1", 0.97, "digits.onnx metadata_props['val_metric.top-1']")}
    data = _swapped(split, tmp_path / "swapped")
    project = tmp_path / "recorded"
    code, output = _run("init", "--model", str(recorded), "--data", str(data), "--mean", "0.31", "--std", "0.32",
                        str(project))
    assert code == 0, output
    code, output = _run("validate", "-p", str(project))
    print(output)
    assert code == 11, output
    found = re.search(r"scores top-1 ([\d.]+) on (\S+) .*far below the 0\.9700 its source records", output)
    assert found, output
    assert 0.15 < float(found.group(1)) < 0.485 and "swapped" in found.group(2), output
    assert "digits.onnx metadata_props['val_metric.top-1']" in output and "the data: the validation set" in output


def test_an_ultralytics_checkpoint_s_train_metrics_are_read_without_running_it(tmp_path) -> None:
    import sys
    import types

    import torch

    module = types.ModuleType("ultralytics.nn.tasks")
    model_class = type("ClassificationModel", (), {"__module__": "ultralytics.nn.tasks"})
    module.ClassificationModel = model_class
    saved = {name: sys.modules.get(name) for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks")}
    sys.modules.update({"ultralytics": types.ModuleType("ultralytics"), "ultralytics.nn": types.ModuleType("u.nn"),
                        "ultralytics.nn.tasks": module})
    try:
        torch.save({"model": model_class(), "version": "8.3.0",
                    "train_metrics": {"metrics/accuracy_top1": 0.912, "metrics/accuracy_top5": 0.99,
                                      "val/loss": 0.3, "fitness": 0.95}}, tmp_path / "best.pt")
    finally:
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value
    found = recorded_metric_of(tmp_path / "best.pt")
    assert found["top-1"] == ("top-1", 0.912, "best.pt train_metrics['metrics/accuracy_top1']")
    assert set(found) == {"top-1", "top-5"}
    assert "ultralytics" not in sys.modules or sys.modules["ultralytics"] is saved["ultralytics"]
