"""torchvision and timm models by name as the model (``[model] source = "torchvision:resnet18"``), no downloads.

Each project names a model by ``library:name``, with a state_dict the test saves as ``[model] weights``
(or none: random weights), and compiles through the CLI for the JetPack 6.2 group with the gate off
(the weights are random either way: accuracy means nothing here, the mechanics do).
"""

from __future__ import annotations

from pathlib import Path

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
        ["model", "reference", "export", "preflight", "gate", "engine", "container", "package"], "ran")
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
