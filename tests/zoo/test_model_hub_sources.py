"""torchvision and timm models by name as the model (``[model] source = "torchvision:resnet18"``), no downloads.

Each project names a model by ``library:name``, with a state_dict the test saves as ``[model] weights``
(or none: random weights), and compiles through the CLI for the JetPack 6.2 group with the gate off
(the weights are random either way: accuracy means nothing here, the mechanics do).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result

from edgebuild.cli import main
from edgebuild.errors import AccuracyGateError, CapabilityMissing, ModelError
from edgebuild.project.config import load_project, model_source_kind
from edgebuild.sources import model_hub
from tests.support.project import compile_json, report_stages, stage_record
from tests.support.zoo import SERVED_GROUP, import_torchvision, project_toml, write_images

pytestmark = pytest.mark.zoo

CLASSES = ["cat", "dog", "bird"]
SHAPES = ([1, 3, 64, 64], [2, 3, 96, 96], [2, 3, 96, 96])


def _project(root: Path, source: str, weights: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = project_toml("hub", "unused.module:unused", "classification", CLASSES, 96, SHAPES, ["logits"])
    model = f'source = "{source}"' + (f'\nweights = "{weights}"' if weights else "")
    (root / "edgebuild.toml").write_text(text.replace('entry_point = "unused.module:unused"', model))
    if not (root / "data").exists():
        write_images(root, "classification", CLASSES)
    return root


def _compile(root: Path) -> tuple[Result, dict]:
    return compile_json(root, "--target", SERVED_GROUP, "--no-gate", "--ship-ungated", "--no-progress")


def test_a_torchvision_model_by_name_with_its_state_dict_compiles(tmp_path: Path) -> None:
    torchvision = import_torchvision()
    root = _project(tmp_path / "resnet", "torchvision:resnet18", "resnet18.pth")
    torch.save(torchvision.models.resnet18(num_classes=len(CLASSES)).state_dict(), root / "resnet18.pth")
    assert model_source_kind(load_project(root)) == ("hub", "its name (library:model)")
    result, report = _compile(root)
    assert result.exit_code == 0, result.output
    stages = report_stages(report)
    assert {n: s["status"] for n, s in stages.items()} == dict.fromkeys(
        ["model", "reference", "export", "preflight", "gate", "budget", "engine", "container", "package"], "ran")
    detail = stages["model"]["detail"]
    assert "torchvision:resnet18 [hub, told by its name (library:model)]" in detail, detail
    assert "resnet18, 3 classes, weights resnet18.pth (sha256" in detail and "weights_only=True" in detail, detail
    model = stage_record(report, "model")
    assert model["kind"] == "hub" and list(model["files"]) == ["resnet18.pth"]
    assert model["output_shapes"]["max_shape"] == {"logits": [2, 3]}
    export = stage_record(report, "export")
    assert export["parity"] and "from the hub model torchvision:resnet18" in export["exporter_note"]

    torch.save(torchvision.models.resnet18(num_classes=len(CLASSES)).state_dict(), root / "resnet18.pth")
    rerun, report = _compile(root)  # other weights under the same name: a new model
    assert rerun.exit_code == 0, rerun.output
    statuses = {n: s["status"] for n, s in report_stages(report).items()}
    assert {statuses[n] for n in ("model", "reference", "export")} == {"ran"}, statuses


def test_a_timm_model_by_name_with_random_weights_compiles_with_the_gate_off(tmp_path: Path) -> None:
    root = _project(tmp_path / "timm", "timm:mobilenetv3_small_050")
    text = (root / "edgebuild.toml").read_text()
    (root / "edgebuild.toml").write_text(text.replace("gate = false", "gate = true"))
    refused = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", SERVED_GROUP, "--no-progress"])
    assert refused.exit_code == AccuracyGateError.exit_code, refused.output
    assert "has no model.weights: its weights are random" in refused.output, refused.output
    (root / "edgebuild.toml").write_text(text)
    result, report = _compile(root)
    assert result.exit_code == 0, result.output
    detail = report_stages(report)["model"]["detail"]
    assert "timm" in detail and "random weights (no model.weights)" in detail, detail
    assert stage_record(report, "model")["files"] == {}


def test_a_misspelt_name_is_a_model_error_with_close_matches(tmp_path: Path) -> None:
    import_torchvision()
    project = load_project(_project(tmp_path / "typo", "torchvision:resnet81"))
    with pytest.raises(ModelError) as raised:
        model_hub.load(project)
    assert "has no model 'resnet81'; did you mean" in str(raised.value) and "resnet18" in str(raised.value)
    result = CliRunner().invoke(main, ["export", "-p", str(project.root), "--target", SERVED_GROUP])
    assert result.exit_code == ModelError.exit_code and "did you mean" in result.output, result.output


def test_weights_that_do_not_fit_are_a_model_error(tmp_path: Path) -> None:
    torchvision = import_torchvision()
    root = _project(tmp_path / "misfit", "torchvision:resnet18", "w.pth")
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), root / "w.pth")
    with pytest.raises(ModelError, match="does not fit torchvision:resnet18 with 3 classes"):
        model_hub.load(load_project(root))


def test_a_missing_library_names_the_pip_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    project = load_project(_project(tmp_path / "nolib", "timm:resnet18"))
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with pytest.raises(CapabilityMissing) as raised:
        model_hub.load(project)
    assert "needs the timm package" in str(raised.value) and raised.value.hint == "pip install timm"


def test_a_hub_name_is_a_classifier(tmp_path: Path) -> None:
    from edgebuild.errors import ConfigError

    root = _project(tmp_path / "det", "torchvision:resnet18")
    text = (root / "edgebuild.toml").read_text().replace('kind = "classification"', 'kind = "detection"')
    (root / "edgebuild.toml").write_text(text.replace('outputs = ["logits"]', 'outputs = ["boxes", "scores"]'))
    with pytest.raises(ConfigError, match="is a classifier here"):
        load_project(root, check_paths=False)


# -- edgebuild init --model library:name --------------------------------------------------------------

def _split_folders(root: Path) -> Path:
    """train/<class>/ and val/<class>/, two random images each."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in CLASSES:
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 255, (72, 80, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def _init(*args: str) -> Result:
    return CliRunner().invoke(main, ["init", *args])


def test_init_writes_a_torchvision_name_with_its_weights_and_compile_runs_it(tmp_path: Path) -> None:
    torchvision = import_torchvision()
    data = _split_folders(tmp_path / "data")
    torch.save(torchvision.models.resnet18(num_classes=len(CLASSES)).state_dict(), tmp_path / "resnet18.pth")
    root = tmp_path / "resnet"
    done = _init("--model", "torchvision:resnet18", "--weights", str(tmp_path / "resnet18.pth"), "--data", str(data),
                 "--input-size", "96", "--fleet", f"{SERVED_GROUP}=orin-nano-8gb@6.2", str(root))
    assert done.exit_code == 0, done.output
    assert "loaded: torchvision" in done.output and "resnet18, 3 classes, weights resnet18.pth" in done.output
    written = load_project(root)
    assert (written.model.source, written.model.weights, written.model.outputs) == \
        ("torchvision:resnet18", "../resnet18.pth", ["logits"])
    assert written.task.kind == "classification" and written.task.classes == sorted(CLASSES)
    assert written.model.inputs[0].max_shape == [4, 3, 96, 96]
    # torchvision's transforms for the pretrained weights: ImageNet's mean and std
    assert written.task.preprocess.mean == pytest.approx([0.485, 0.456, 0.406])
    result, report = _compile(root)  # random weights: the gate off, the file as init wrote it
    assert result.exit_code == 0, result.output
    assert stage_record(report, "model")["kind"] == "hub"


def test_init_with_a_timm_name_and_no_weights_says_they_are_random(tmp_path: Path) -> None:
    done = _init("--model", "timm:mobilenetv3_small_050", "--data", str(_split_folders(tmp_path / "data")),
                 str(tmp_path / "p"))
    assert done.exit_code == 0, done.output
    assert "no --weights" in done.output and "random weights (no model.weights)" in done.output, done.output
    assert "next: edgebuild compile --target orin --no-gate --ship-ungated" in done.output
    text = (tmp_path / "p" / "edgebuild.toml").read_text()
    assert '# weights = "model.pth"' in text and "timm's pretrained config of mobilenetv3_small_050" in text
    assert load_project(tmp_path / "p").model.weights is None


def test_init_refuses_a_misspelt_name_with_close_matches_and_a_torchvision_detector(tmp_path: Path) -> None:
    import_torchvision()
    data = str(_split_folders(tmp_path / "data"))
    typo = _init("--model", "torchvision:resnet81", "--data", data, str(tmp_path / "typo"))
    assert typo.exit_code == ModelError.exit_code, typo.output
    assert "has no model 'resnet81'; did you mean" in typo.output and "resnet18" in typo.output
    detector = _init("--model", "torchvision:fasterrcnn_resnet50_fpn", "--data", data, str(tmp_path / "det"))
    assert detector.exit_code == ModelError.exit_code, detector.output
    assert "is one of torchvision's detection models" in detector.output
    assert "export it to ONNX with outputs boxes" in detector.output
    assert not (tmp_path / "typo").exists() and not (tmp_path / "det").exists()
