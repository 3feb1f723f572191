"""An ONNX file as the model (``[model] source``): no PyTorch code, every stage after it unchanged.

The bundled digits classifier is exported once with the normal pipeline (its entry point); a new
project names that ONNX file as its model and compiles through the same CLI.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner, Result
from onnx import TensorProto, helper

from edgebuild.cli import main
from edgebuild.datasets.project_data import prepare_data
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project, model_source_kind
from tests.support.project import (
    EXAMPLES,
    REPO,
    TINY_TOML,
    compile_json,
    digits_model_file_toml,
    report_stages,
    stage_record,
    write_tiny_project,
)

ORIN = "orin"  # the digits example's Orin group (sorters, JetPack 6.2: opset 20); "all" adds JetPack 5.1.2 (17)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits example, exported to ONNX by its entry point (and its data prepared): the example's folder."""
    root = tmp_path_factory.mktemp("entry-point") / "digits-classifier"
    shutil.copytree(EXAMPLES / "digits-classifier", root, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
    result = CliRunner().invoke(main, ["export", "-p", str(root), "--target", ORIN])
    assert result.exit_code == 0, result.output
    prepare_data(load_project(root))
    return root


def _exported_onnx(example: Path) -> Path:
    return example / "build" / "export" / "opset20" / "model.onnx"


def _digits_toml(example: Path, model: str = 'source = "model.onnx"', classes: int = 10) -> str:
    return digits_model_file_toml(example, model, classes=classes, groups=LINE_CAMS)


LINE_CAMS = """
[[fleet]]
name = "line-cams"
module = "xavier-nx"
jetpack = "5.1.2"
"""


def _onnx_project(root: Path, example: Path, onnx_model: onnx.ModelProto | bytes | None = None,
                  name: str = "model.onnx", **toml: object) -> Path:
    """A project with no Python code: its model is ``name`` (the example's export unless ``onnx_model`` is given)."""
    root.mkdir(parents=True, exist_ok=True)
    if onnx_model is None:
        shutil.copyfile(_exported_onnx(example), root / name)
    elif isinstance(onnx_model, bytes):
        (root / name).write_bytes(onnx_model)
    else:
        onnx.save(onnx_model, str(root / name))
    (root / "edgebuild.toml").write_text(_digits_toml(example, **toml))  # type: ignore[arg-type]
    return root


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _compile(root: Path, target: str = ORIN) -> tuple[Result, dict]:
    return compile_json(root, "--target", target)


@pytest.mark.slow
def test_an_onnx_file_compiles_end_to_end_like_its_entry_point(exported: Path, tmp_path: Path) -> None:
    entry, entry_report = _compile(exported)  # the entry point's route, on the same ONNX
    assert entry.exit_code == 0, entry.output
    entry_fp32 = next(c["value"] for c in stage_record(entry_report, "gate")["candidates"] if c["precision"] == "fp32")

    root = _onnx_project(tmp_path / "digits-onnx", exported)
    result, report = _compile(root)
    assert result.exit_code == 0, result.output
    stages = report_stages(report)
    assert {n: s["status"] for n, s in stages.items()} == dict.fromkeys(
        ["model", "reference", "export", "preflight", "gate", "budget", "engine", "container", "package"], "ran")
    assert "model.onnx [onnx, told by its .onnx suffix] (opset 20" in stages["model"]["detail"]
    model = stage_record(report, "model")
    assert model["kind"] == "onnx" and model["opset"] == 20 and model["fleet_opset"] == 20
    assert model["output_shapes"]["max_shape"] == {"logits": [32, 10]} and model["parameters"] > 0
    reference = stage_record(report, "reference")
    assert reference["backend"].startswith("onnxruntime-cpu ")
    assert abs(reference["value"] - entry_fp32) <= 1e-6, (reference["value"], entry_fp32)
    export = stage_record(report, "export")
    copied = root / "build" / "export" / "opset20" / "model.onnx"
    assert export["exporter"] == "import" and export["opset"] == 20 and export["parity"] == []
    assert Path(export["onnx_path"]) == copied and copied.read_bytes() == (root / "model.onnx").read_bytes()
    assert "checks run: ONNX checker" in export["exporter_note"]
    assert export["dynamic_axes"] == {"images": {"0": "batch", "2": "height", "3": "width"}}
    gate = stage_record(report, "gate")
    assert gate["selected"] and abs(gate["reference_value"] - entry_fp32) <= 1e-6
    assert (root / "build" / "packages" / "fleet.json").is_file()

    again, report = _compile(root)  # nothing changed: every stage reused
    assert again.exit_code == 0, again.output
    assert {s["status"] for s in report["stages"]} == {"reused"}

    changed = onnx.load(str(root / "model.onnx"))  # the same graph, other bytes: a new file
    changed.doc_string = "re-exported"
    onnx.save(changed, str(root / "model.onnx"))
    rerun, report = _compile(root)
    assert rerun.exit_code == 0, rerun.output
    statuses = {n: s["status"] for n, s in report_stages(report).items()}
    assert {statuses[n] for n in ("model", "reference", "export")} == {"ran"}, statuses


def test_the_onnx_route_never_imports_torch(exported: Path, tmp_path: Path) -> None:
    root = _onnx_project(tmp_path / "digits-onnx", exported)
    script = ("import json, sys\nfrom click.testing import CliRunner\nfrom edgebuild.cli import main\n"
              f"r = CliRunner().invoke(main, ['export', '-p', {str(root)!r}, '--target', 'orin'])\n"
              "print(json.dumps([r.exit_code, r.output, sorted(m for m in sys.modules "
              "if m.split('.')[0] in ('torch', 'ultralytics'))]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    code, output, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0, output
    assert "importing model.onnx (opset 20) as given" in output and imported == []


def test_check_and_export_show_a_model_file_without_importing_it_as_code(exported: Path, tmp_path: Path) -> None:
    root = _onnx_project(tmp_path / "digits-onnx", exported)
    # check judges the file against the whole fleet, as validate and compile without --target do: the
    # line-cams group's TensorRT (JetPack 5.1.2) takes up to opset 17, the file is opset 20
    refused = _invoke("check", "-p", str(root))
    assert refused.exit_code == 6 and "model.onnx is ONNX opset 20" in refused.output, refused.output
    assert "line-cams (xavier-nx@5.1.2: TensorRT 8.5.2.2 takes up to opset 17)" in refused.output
    (root / "edgebuild.toml").write_text(digits_model_file_toml(exported, 'source = "model.onnx"'))  # Orin only
    checked = _invoke("check", "-p", str(root))
    assert checked.exit_code == 0 and "valid (classification, 10 classes" in checked.output, checked.output
    assert "model.source: model.onnx: ONNX opset 20" in checked.output  # checked as the model stage does
    shown = _invoke("export", "-p", str(root), "--target", ORIN)
    assert shown.exit_code == 0 and "parity vs PyTorch" not in shown.output, shown.output
    assert "an imported model file: no PyTorch to compare with" in shown.output


def test_external_data_is_part_of_the_model(exported: Path, tmp_path: Path) -> None:
    root = _onnx_project(tmp_path / "p", exported)
    onnx.save_model(onnx.load(str(root / "model.onnx")), str(root / "model.onnx"), save_as_external_data=True,
                    location="weights.bin", size_threshold=1024)
    first = _invoke("export", "-p", str(root), "--target", ORIN)
    assert first.exit_code == 0, first.output
    folder = root / "build" / "export" / "opset20"
    stored = json.loads((folder / "export.json").read_text())
    assert sorted(stored["files"]) == ["model.onnx", "model.onnx.data"]  # the names later stages carry
    with open(root / "weights.bin", "ab") as data:
        data.write(b"\0")
    again = _invoke("export", "-p", str(root), "--target", ORIN)
    assert again.exit_code == 0 and "model: changed since the last run: files" in again.output, again.output
    (root / "weights.bin").unlink()
    assert "model.onnx keeps weights in weights.bin, not found in" in _model_error(root)


def _model_error(root: Path, target: str = ORIN) -> str:
    result = _invoke("export", "-p", str(root), "--target", target)
    assert result.exit_code == 6, result.output  # ModelError, from the model stage
    return result.output


def test_a_fixed_batch_that_the_profile_varies_names_the_input_and_axis(exported: Path, tmp_path: Path) -> None:
    model = onnx.load(str(_exported_onnx(exported)))
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    batch.ClearField("dim_param")
    batch.dim_value = 1
    output = _model_error(_onnx_project(tmp_path / "p", exported, model))
    assert "model.inputs[0] ('images'): axis 0 (batch) is fixed at 1 in the file [1, 1, height, width], " \
           "but the profile varies it (min 1, opt 8, max 32)" in output
    assert "dynamic=True" in output


def test_outputs_that_do_not_fit_the_task_are_named(exported: Path, tmp_path: Path) -> None:
    output = _model_error(_onnx_project(tmp_path / "p", exported, classes=11))
    assert "the model's outputs do not fit the classification task" in output
    assert "logits have 10 classes, task.classes lists 11" in output
    assert "export it again with such outputs" in output  # the hint speaks of the file, not a wrapper's forward


def test_an_output_name_the_file_lacks_is_named(exported: Path, tmp_path: Path) -> None:
    model = onnx.load(str(_exported_onnx(exported)))
    root = _onnx_project(tmp_path / "p", exported, model)
    toml = root / "edgebuild.toml"
    renamed = toml.read_text().replace('"logits"', '"scores"')
    toml.write_text(renamed + '\n[task.postprocess]\nlogits_output = "scores"\n')
    assert "its outputs are ['logits'], model.outputs lists ['scores']" in _model_error(root)


@pytest.mark.parametrize("content, words", [
    (b"\x08\x09garbage that is not a protobuf" * 3, "truncated or damaged"),
    ("truncated", "truncated or damaged|the ONNX checker refuses"),
    (b"<html>404</html>" * 8, "is not an ONNX model: its bytes are neither ONNX"),
    (b"", "model.onnx is empty (0 bytes)"),
])
def test_a_corrupt_file_is_a_model_error_naming_it(exported: Path, tmp_path: Path, content, words: str) -> None:
    if content == "truncated":
        content = _exported_onnx(exported).read_bytes()[:2000]
    output = _model_error(_onnx_project(tmp_path / "p", exported, content))
    assert "model.source: model.onnx" in output
    assert any(w in output for w in words.split("|")), output


def test_an_opset_above_the_fleets_maximum_names_the_targets_that_cap_it(exported: Path, tmp_path: Path) -> None:
    output = _model_error(_onnx_project(tmp_path / "p", exported), target="all")
    assert "model.onnx is ONNX opset 20, above what these targets' TensorRT parser takes: line-cams " \
           "(xavier-nx@5.1.2: TensorRT 8.5.2.2 takes up to opset 17)" in output
    assert "sorters" not in output.split("hint:")[0].split("takes:")[1]
    assert "opset=17" in output


@pytest.mark.parametrize("model, words", [
    ('entry_point = "digits_classifier.model:build_model"\nsource = "model.onnx"', "found both"),
    ('python_path = ["."]', "found neither"),
    ('source = "model.onnx"\nweights = "w.pt"', "weights applies to entry_point"),
    ('entry_point = "digits_classifier.model:build_model"\nkind = "onnx"', "kind applies to source"),
    ('source = "model.onnx"\nkind = "tflite"', "model.kind"),
])
def test_the_model_section_needs_exactly_one_source(exported: Path, tmp_path: Path, model: str, words: str) -> None:
    root = _onnx_project(tmp_path / "p", exported, model=model)
    result = _invoke("export", "-p", str(root), "--target", ORIN)
    assert result.exit_code == 3, result.output  # ConfigError
    assert words in result.output
    with pytest.raises(ConfigError, match="model"):
        load_project(root)


def test_export_settings_do_not_apply_to_a_model_file(exported: Path, tmp_path: Path) -> None:
    root = _onnx_project(tmp_path / "p", exported)
    (root / "edgebuild.toml").write_text(_digits_toml(exported) + "\n[export]\nopset = 17\n")
    with pytest.raises(ConfigError, match=r"export.opset: applies to an export from model.entry_point"):
        load_project(root)


def test_the_kind_is_told_by_suffix_content_or_model_kind(exported: Path, tmp_path: Path) -> None:
    onnx_bytes = _exported_onnx(exported).read_bytes()
    by_content = _onnx_project(tmp_path / "a", exported, onnx_bytes, name="digits.bin",
                               model='source = "digits.bin"')
    assert model_source_kind(load_project(by_content)) == ("onnx", "its content (an ONNX ModelProto)")
    by_key = _onnx_project(tmp_path / "b", exported, b"PK\x03\x04 a zip", name="digits.pt",
                           model='source = "digits.pt"\nkind = "onnx"')
    assert model_source_kind(load_project(by_key)) == ("onnx", "model.kind")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("digits/data.pkl", b"\x80\x02N.")
    zipped = _onnx_project(tmp_path / "c", exported, archive.getvalue(), name="digits.pt", model='source = "digits.pt"')
    with pytest.raises(ConfigError, match=r"a zip archive that is neither TorchScript nor an Ultralytics checkpoint"):
        load_project(zipped)
    cut = _onnx_project(tmp_path / "e", exported, b"PK\x03\x04 a zip", name="digits.pt", model='source = "digits.pt"')
    with pytest.raises(ConfigError, match=r"digits.pt is a truncated or damaged zip archive"):
        load_project(cut)
    missing = _onnx_project(tmp_path / "d", exported, model='source = "other.onnx"')
    with pytest.raises(ConfigError, match=r"model.source: path does not exist: .*other.onnx"):
        load_project(missing)


# -- Ultralytics' exports: metadata read, the raw detection head refused (an adapter comes later) ------

def _ultralytics_detector(classes: int = 2, batch: str | int = "batch") -> onnx.ModelProto:
    """What an Ultralytics detection export looks like from outside: images [N, 3, H, W] -> output0
    [N, 4+C, A] with its metadata_props; a strided conv stands in for the network."""
    channels = 4 + classes
    rng = np.random.default_rng(0)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [channels, 3, 3, 3],
                                rng.standard_normal((channels, 3, 3, 3)).astype(np.float32).ravel())
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [0, channels, -1])
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["y"], strides=[8, 8], pads=[1, 1, 1, 1]),
         helper.make_node("Reshape", ["y", "shape"], ["output0"])],
        "ultralytics-like",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, channels, "anchors"])],
        initializer=[weight, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    names = "{" + ", ".join(f"{i}: '{n}'" for i, n in enumerate("ab"[:classes])) + "}"
    for key, value in {"author": "Ultralytics", "description": "Ultralytics YOLO11n model", "version": "8.3.0",
                       "task": "detect", "stride": "8", "batch": "1", "imgsz": "[64, 64]", "names": names}.items():
        model.metadata_props.add(key=key, value=value)
    return model


def _tiny_onnx_project(root: Path, model: onnx.ModelProto) -> Path:
    toml = TINY_TOML.replace('entry_point = "tinydet.model:build_model"', 'source = "yolo.onnx"')
    write_tiny_project(root, toml)
    onnx.save(model, str(root / "yolo.onnx"))
    return root


def test_an_ultralytics_detection_head_is_adapted_by_appended_nodes(tmp_path: Path) -> None:
    root = _tiny_onnx_project(tmp_path / "yolo", _ultralytics_detector())
    result = _invoke("export", "-p", str(root), "--target", "orin-nano-8gb")
    assert result.exit_code == 0, result.output
    assert "model: Ultralytics 8.3.0 export: task detect, 2 classes (a, b), imgsz [64, 64], stride 8" \
        in result.output  # the metadata, said as the stage runs
    assert "appended edgebuild's Ultralytics adapter: output0 [N, 4+C, A] -> boxes, scores" in result.output
    imported = onnx.load(str(root / "build" / "export" / "opset17" / "model.onnx"))
    assert [o.name for o in imported.graph.output] == ["boxes", "scores"]


def test_an_input_without_a_batch_axis_is_named(tmp_path: Path) -> None:
    model = _ultralytics_detector()
    del model.metadata_props[:]  # not Ultralytics': the input is what is wrong
    model.graph.node.insert(0, helper.make_node("Unsqueeze", ["image", "axis"], ["images"]))
    model.graph.initializer.append(helper.make_tensor("axis", TensorProto.INT64, [1], [0]))
    del model.graph.input[:]
    model.graph.input.append(helper.make_tensor_value_info("image", TensorProto.FLOAT, [3, "height", "width"]))
    root = _tiny_onnx_project(tmp_path / "nobatch", model)
    (root / "edgebuild.toml").write_text((root / "edgebuild.toml").read_text().replace('name = "images"',
                                                                                    'name = "image"'))
    result = _invoke("export", "-p", str(root), "--target", "orin-nano-8gb")
    assert result.exit_code == 6, result.output
    assert "model.inputs[0] ('image'): the profile has rank 4 ([2, 3, 64, 64]), the file's input has rank 3 " \
           "[3, height, width] (no batch axis" in result.output
