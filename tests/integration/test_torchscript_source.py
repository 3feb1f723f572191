"""A TorchScript file as the model (``[model] source = "digits.ts"``): loaded with torch.jit.load, exported by
the normal export stage, every stage after it unchanged.

The bundled digits classifier, with its trained weights, is traced with ``torch.jit.trace`` and saved; a new
project names that file as its model and compiles through the same CLI.
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from click.testing import Result

from edgebuild.datasets.project_data import prepare_data
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project, model_source_kind
from tests.support.project import EXAMPLES, compile_json, digits_model_file_toml, report_stages, stage_record

ORIN = "orin"  # the digits project's Orin group (sorters, JetPack 6.2)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits example with its data prepared: its folder."""
    root = tmp_path_factory.mktemp("example") / "digits-classifier"
    shutil.copytree(EXAMPLES / "digits-classifier", root, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
    prepare_data(load_project(root))
    return root


def _traced(example: Path, path: Path) -> None:
    sys.path.insert(0, str(example))
    try:
        from digits_classifier.model import build_model
    finally:
        sys.path.remove(str(example))
    model = build_model()
    model.load_state_dict(torch.load(example / "weights" / "digits_classifier.pt", map_location="cpu",
                                     weights_only=True))
    torch.jit.trace(model.eval(), torch.zeros(2, 1, 16, 16)).save(str(path))


def _project(root: Path, example: Path, source: str = "digits.ts", extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    model = f'source = "{source}"' + (f"\n{extra}" if extra else "")
    (root / "edgebuild.toml").write_text(digits_model_file_toml(example, model, name="digits-torchscript"))
    return root


def _compile(root: Path, *extra: str) -> tuple[Result, dict]:
    return compile_json(root, "--target", ORIN, *extra)


@pytest.mark.slow
def test_a_torchscript_file_compiles_end_to_end(example: Path, tmp_path: Path) -> None:
    root = _project(tmp_path / "digits-ts", example)
    _traced(example, root / "digits.ts")
    assert model_source_kind(load_project(root)) == ("torchscript", "its content (a TorchScript archive)")
    result, report = _compile(root)
    assert result.exit_code == 0, result.output
    stages = report_stages(report)
    assert {n: s["status"] for n, s in stages.items()} == dict.fromkeys(
        ["model", "reference", "export", "preflight", "gate", "budget", "engine", "container", "package"], "ran")
    assert "digits.ts [torchscript, told by its content (a TorchScript archive)]" in stages["model"]["detail"]
    assert "loaded with torch.jit.load" in stages["model"]["detail"]
    model = stage_record(report, "model")
    assert model["kind"] == "torchscript" and list(model["files"]) == ["digits.ts"]
    assert model["output_shapes"]["max_shape"] == {"logits": [32, 10]} and model["parameters"] > 0
    reference = stage_record(report, "reference")
    assert reference["backend"].startswith("torch-cpu") and reference["value"] > 0.9, reference
    export = stage_record(report, "export")
    assert export["opset"] == 20 and export["parity"] and "from the torchscript model digits.ts" in \
        export["exporter_note"]
    assert (root / "build" / "packages" / "fleet.json").is_file()

    again, report = _compile(root)  # nothing changed: every stage reused
    assert again.exit_code == 0, again.output
    assert {s["status"] for s in report["stages"]} == {"reused"}

    with zipfile.ZipFile(root / "digits.ts", "a") as archive:  # other bytes under the same name: a new model
        archive.writestr("digits/extra/note.txt", "retrained")
    rerun, report = _compile(root)
    assert rerun.exit_code == 0, rerun.output
    statuses = {n: s["status"] for n, s in report_stages(report).items()}
    assert {statuses[n] for n in ("model", "reference", "export")} == {"ran"}, statuses


def test_kind_torchscript_may_be_declared(example: Path, tmp_path: Path) -> None:
    root = _project(tmp_path / "declared", example, extra='kind = "torchscript"')
    _traced(example, root / "digits.ts")
    assert model_source_kind(load_project(root)) == ("torchscript", "model.kind")


def test_a_zip_that_is_not_torchscript_is_refused_with_advice(example: Path, tmp_path: Path) -> None:
    root = _project(tmp_path / "state-dict", example, source="weights.pt")
    shutil.copyfile(example / "weights" / "digits_classifier.pt", root / "weights.pt")  # a state_dict's zip
    with pytest.raises(ConfigError) as raised:
        load_project(root)
    assert "neither TorchScript nor an Ultralytics checkpoint" in str(raised.value)
    assert "model.entry_point" in str(raised.value)


def test_a_plain_pickle_is_refused_with_advice(example: Path, tmp_path: Path) -> None:
    root = _project(tmp_path / "pickle", example, source="weights.pkl")
    torch.save({"w": torch.zeros(2)}, root / "weights.pkl", _use_new_zipfile_serialization=False)
    with pytest.raises(ConfigError) as raised:
        load_project(root)
    assert "a Python pickle" in str(raised.value) and "model.entry_point" in str(raised.value)
