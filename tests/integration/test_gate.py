"""The accuracy gate on real models: candidates, retention, INT8 fallback, caching, the CLI."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from edgebuild.accuracy.gate import require_pass, run_gate
from edgebuild.cli import main
from edgebuild.datasets.project_data import prepare_data
from edgebuild.errors import AccuracyGateError
from edgebuild.project.config import load_project
from edgebuild.sources.export.onnx_export import choose_opset, export_model
from edgebuild.targets.profiles import load_catalog

FRAGILE = '''
"""The trained digits network made fragile on purpose: one activation channel of the first
block is scaled by 1000 and the next convolution scales it back, so FP32 outputs are unchanged
but a per-tensor INT8 range for that activation crushes every other channel to zero."""
from pathlib import Path

import torch

from digits_classifier.model import build_model

WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "digits_classifier.pt"


class Fragile(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = build_model()
        self.net.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
        scale = torch.ones(1, 16, 1, 1)
        scale[0, 0] = 1000.0
        self.register_buffer("scale", scale)
        with torch.no_grad():
            self.net.features[1][0].weight[:, 0] /= 1000.0

    def forward(self, x):
        features = self.net.features
        y = features[0](x) * self.scale
        for block in features[1:]:
            y = block(y)
        return self.net.classifier(torch.flatten(self.net.pool(y), 1))


def build():
    return Fragile().eval()
'''


def _fragile_project(example_copy, settings: str) -> Path:
    root = example_copy("digits-classifier")
    (root / "digits_classifier" / "fragile.py").write_text(FRAGILE)
    toml = (root / "edgebuild.toml").read_text()
    toml = toml.replace('entry_point = "digits_classifier.model:build_model"',
                        'entry_point = "digits_classifier.fragile:build"')
    toml = toml.replace('weights = "weights/digits_classifier.pt"\n', "")
    toml = toml.replace('[[fleet]]', f'[export]\nexporter = "torchscript"\n\n[quantize]\n{settings}\n\n[[fleet]]', 1)
    (root / "edgebuild.toml").write_text(toml)
    return root


def _gate(root: Path, **kwargs):
    project = load_project(root)
    prepare_data(project)
    releases = [load_catalog().releases[g.jetpack] for g in project.fleet]
    opset, why = choose_opset(project, releases)
    return project, run_gate(project, export_model(project, opset, why), progress=False, **kwargs)


def test_fragile_model_fails_plain_int8_and_the_fallback_recovers(example_copy) -> None:
    # minmax: the range the outlier channel sets crushes the rest (the other methods clip it instead)
    root = _fragile_project(example_copy, 'precisions = ["int8"]\nmax_kept_layers = 4\nsensitivity_images = 100\n'
                                          'calibration_method = "minmax"\nbias_correction = "off"')
    messages: list[str] = []
    project, result = _gate(root, say=messages.append)
    fp32, int8, mixed = (result.candidate(p) for p in ("fp32", "int8", "int8-mixed"))
    print(f"\nfragile digits: FP32 top-1 {fp32.value:.4f}; plain INT8 {int8.value:.4f} "
          f"(retention {int8.retention:.3f}); INT8 keeping {mixed.kept_fp32} in FP32: "
          f"{mixed.value:.4f} (retention {mixed.retention:.3f}) [{result.backend}]")
    assert fp32.value > 0.98  # the outlier channel changes nothing in FP32
    assert int8.retention < 0.5 and not int8.passed  # plain INT8 collapses
    assert mixed.passed and mixed.retention >= 0.92
    assert 1 <= len(mixed.kept_fp32) <= 4
    assert result.selected == "int8-mixed"
    top = [s.layer for s in result.sensitivity[: len(mixed.kept_fp32)]]
    assert top == mixed.kept_fp32, "the kept layers are the most sensitive ones"
    print("ranking:", [(s.layer.split("/")[-2], s.sqnr_db) for s in result.sensitivity])
    worst, rest = result.sensitivity[0].sqnr_db, [s.sqnr_db for s in result.sensitivity[1:]]
    assert worst < min(rest) - 10, "the crushed layer stands out by its quantization error"
    # kept in float means no Q/DQ on its inputs or weights in the candidate's graph
    graph = onnx.load(str(result.folder / mixed.onnx))
    produced = {out: node.op_type for node in graph.graph.node for out in node.output}
    kept = [n for n in graph.graph.node if n.name in mixed.kept_fp32]
    assert kept and all(produced.get(i) != "DequantizeLinear" for n in kept for i in n.input)
    plain = onnx.load(str(result.folder / int8.onnx))
    produced = {out: node.op_type for node in plain.graph.node for out in node.output}
    assert any(produced.get(i) == "DequantizeLinear" for n in plain.graph.node if n.name in mixed.kept_fp32
               for i in n.input), "in the plain INT8 graph the same layer is quantized"
    assert any("ranked" in m and "quantization error" in m for m in messages)
    assert not any(p.name.startswith("probe") for p in result.folder.iterdir())


def test_without_fallback_the_gate_refuses_and_says_what_to_try(example_copy) -> None:
    root = _fragile_project(example_copy, 'precisions = ["int8"]\nmax_kept_layers = 0')
    project, result = _gate(root)
    assert result.selected is None and result.next_steps
    with pytest.raises(AccuracyGateError) as caught:
        require_pass(project, result)
    message = str(caught.value)
    assert "no candidate keeps 92% of the FP32 top-1" in message
    assert "fp32: top-1" in message and "(not in quantize.precisions)" in message
    assert "quantize.measure_best" in message and "max_kept_layers" in message

    cli = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert cli.exit_code == 11, cli.output
    assert "FAIL" in cli.output and "Traceback" not in cli.output


def test_digits_candidates_reuse_and_report(example_copy) -> None:
    root = example_copy("digits-classifier")
    result = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert result.exit_code == 0, result.output
    for precision in ("fp32", "fp16", "int8"):
        assert precision in result.output
    assert "selected: int8" in result.output and "onnxruntime-cpu" in result.output
    again = CliRunner().invoke(main, ["validate", "-p", str(root), "--json"])
    assert again.exit_code == 0
    import json

    report = json.loads(again.output[again.output.index("{"): again.output.rindex("}") + 1])
    assert report["reused"] is True and report["selected"] == "int8"
    fp32 = next(c for c in report["candidates"] if c["precision"] == "fp32")
    assert fp32["value"] > 0.95 and fp32["retention"] == 1.0
    # the baseline judged beside the table, and carried in gate.json (issue 34)
    assert report["baseline"]["verdict"] == "ok" and report["baseline"]["chance"] == pytest.approx(0.1)
    assert report["baseline"]["value"] == fp32["value"] and report["baseline"]["causes"] == []
    assert "baseline: OK: FP32 top-1 " in result.output and "chance 0.100 (10 classes), floor 0.150" in result.output


def test_tensorrt_backend_without_tensorrt_stops_before_measuring(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["validate", "-p", str(tiny_project), "--backend", "tensorrt"])
    assert result.exit_code == 10, result.output
    assert "TensorRT is not installed on this host" in result.output
    assert not (tiny_project / "build" / "gate" / "gate.json").exists()


def _validate_json(root: Path) -> dict:
    import json

    result = CliRunner().invoke(main, ["validate", "-p", str(root), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_changing_only_the_decision_settings_measures_nothing_again(example_copy) -> None:
    root = example_copy("digits-classifier")
    first = _validate_json(root)
    assert first["measured"] == 5 and first["selected"] == "int8"  # fp32, fp16, the 3 best INT8 variants
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    assert "min_retention = 0.92" in text
    for changed, selected in ((text.replace("min_retention = 0.92", "min_retention = 0.9"), "int8"),
                              (text.replace("[accuracy]", '[accuracy]\nselect = "fastest"'), None),
                              (text.replace("[accuracy]", '[accuracy]\nbaseline = "accept"'), "int8"),
                              # select "auto" picks by the latency plan's prediction at each group's power mode
                              (text.replace('module = "orin-nano-4gb"', 'module = "orin-nano-4gb"\npower_mode = "7W"'),
                               "int8"),
                              (text.replace("[fleet]", "[fleet]", 1).replace(
                                  "[accuracy]", '[quantize]\nprecisions = ["fp16", "fp32"]\n\n[accuracy]'), "fp16")):
        toml.write_text(changed)
        report = _validate_json(root)
        assert report["reused"] is False, "the decision settings are part of the gate's key"
        assert report["measured"] == 0 and report["stored"] >= 2, report
        if selected:
            assert report["selected"] == selected
    toml.write_text(text)
    back = _validate_json(root)
    assert back["reused"] is False and back["measured"] == 0 and back["selected"] == "int8"


def _digits_with(example_copy, quantize: str = "") -> Path:
    root = example_copy("digits-classifier")
    if quantize:
        toml = root / "edgebuild.toml"
        toml.write_text(toml.read_text().replace("[accuracy]", f"[quantize]\n{quantize}\n\n[accuracy]", 1))
    return root


def test_a_model_without_quantizable_layers_says_int8_is_not_applicable(example_copy) -> None:
    root = _digits_with(example_copy, 'op_types = ["ConvInteger"]\nprecisions = ["int8"]')
    result = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert result.exit_code == 11, result.output
    assert "INT8 not applicable: the model has no ConvInteger node (quantize.op_types)" in result.output
    assert "Traceback" not in result.output


def test_an_op_type_that_is_not_an_onnx_operator_is_a_config_error(example_copy) -> None:
    root = _digits_with(example_copy, 'op_types = ["Conv", "Convolution"]')
    result = CliRunner().invoke(main, ["check", "-p", str(root)])
    assert result.exit_code == 3, result.output
    assert "quantize.op_types" in result.output and "'Convolution' is not ONNX operator" in result.output


def test_calibration_images_that_are_all_the_same_are_refused_and_one_image_is_warned_about(example_copy) -> None:
    root = _digits_with(example_copy)
    CliRunner().invoke(main, ["data", "prepare", "-p", str(root)])
    images = sorted((root / "data" / "calibration").iterdir())
    for image in images[1:]:
        image.write_bytes(images[0].read_bytes())
    result = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert result.exit_code == 5, result.output
    assert f"all {len(images)} images in" in result.output and "are identical" in result.output
    for image in images[1:]:
        image.unlink()
    result = CliRunner().invoke(main, ["validate", "-p", str(root)])
    assert "WARNING: only 1 calibration image(s)" in result.output
    assert "Traceback" not in result.output


def test_a_kept_layer_that_changes_no_graph_is_not_measured_twice(example_copy) -> None:
    from edgebuild.accuracy.measurements import MeasurementStore, int8_variants

    root = example_copy("digits-classifier")
    messages: list[str] = []
    project, result = _gate(root)  # measures and stores fp32, fp16, the INT8 variants
    releases = [load_catalog().releases[g.jetpack] for g in project.fleet]
    export = export_model(project, *choose_opset(project, releases))
    store = MeasurementStore(project, export, force=False, progress=False, say=messages.append)
    assert result.int8_choice is not None
    variant = next(v for v in int8_variants(project) if v.name == result.int8_choice.variant)
    int8 = store.candidate("int8", variant=variant)
    relu = next(n.name for n in onnx.load(str(store.prepared_path())).graph.node if n.op_type == "Relu")
    assert store.candidate("int8", (relu,), variant) is None  # a Relu is never quantized: same graph as int8
    assert "gives the graph of int8" in messages[-1] and store.measured == 0 and int8 is not None


def test_a_new_calibration_method_or_set_measures_only_int8_again(example_copy) -> None:
    """Issue 27 item 4: FP32 and FP16 do not depend on calibration; each INT8 variant is keyed by its own method."""
    root = _digits_with(example_copy, 'calibration_method = "minmax"\nbias_correction = "off"')
    first = _validate_json(root)
    assert first["measured"] == 3 and first["int8_choice"]["variant"] == "minmax"
    toml = root / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('calibration_method = "minmax"', 'calibration_method = "percentile"'))
    second = _validate_json(root)
    assert (second["measured"], second["stored"]) == (1, 2), second  # only the percentile INT8
    assert second["int8_choice"]["variant"] == "percentile-99.999"
    assert "percentile-99.999 ranges" in next(c for c in second["candidates"] if c["precision"] == "int8")["note"]
    images = sorted((root / "data" / "calibration").iterdir())
    images[0].unlink()  # a new calibration set
    third = _validate_json(root)
    assert (third["measured"], third["stored"]) == (1, 2), third
    toml.write_text(toml.read_text().replace('calibration_method = "percentile"', 'calibration_method = "auto"'))
    auto = _validate_json(root)
    choice = auto["int8_choice"]
    assert len(choice["variants"]) == 5 and "output SQNR" in choice["why"]  # 5 methods, bias correction off
    measured = [v for v in choice["variants"] if v["value"] is not None]
    best = max(measured, key=lambda v: (v["value"], v["sqnr_db"]))  # the highest retention; ties: the better signal
    assert len(measured) <= 3 and choice["variant"] == best["variant"]
    assert auto["stored"] >= 2 and auto["measured"] <= 3  # fp32 and fp16 stored; only INT8 variants measured
