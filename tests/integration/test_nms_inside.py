"""NMS inside the model (``[task.postprocess] in_model``) through the compile: the gate's candidates
ship the appended decode and score what the host's decode scores, preflight refuses a TensorRT
without INMSLayer, the recipe says what the outputs are and the acceptance set reads them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.base.vision import NMS_OUTPUTS
from edgebuild.runtime.engines import acceptance
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.sources.export.nms_graph import is_nms_node


def _nms_project(root: Path, *, legacy_jetpack: str | None = None) -> Path:
    toml = (root / "edgebuild.toml").read_text()
    toml = toml.replace("max_detections = 100", "max_detections = 100\nin_model = true")
    if legacy_jetpack:
        toml = toml.replace('name = "legacy"\nmodule = "xavier-nx"\njetpack = "5.1.2"',
                            f'name = "legacy"\nmodule = "xavier-nx"\njetpack = "{legacy_jetpack}"')
    (root / "edgebuild.toml").write_text(toml)
    return root


def test_a_compile_with_nms_inside_ships_detections_scored_as_the_host_decodes(compiled_example) -> None:
    root = _nms_project(compiled_example("shapes-detector", "yard-cams"))  # the raw-head compile, then NMS inside
    result = CliRunner().invoke(main, ["compile", "--project", str(root), "--target", "yard-cams", "--no-progress"])
    assert result.exit_code == 0, result.output
    gate = json.loads((root / "build/gate/gate.json").read_text())
    parity = gate["nms_parity"]
    assert parity["difference"] <= 1e-6 and parity["same_detections"] == parity["images"] == 200
    assert "NMS inside the model: mAP50-95" in result.output
    for candidate in gate["candidates"]:  # every candidate ships the decode; the head stays beside it
        assert candidate["onnx"].endswith("/detections.onnx") and not candidate["rejected_by"]
        model = onnx.load(str(root / "build/gate" / candidate["onnx"]))
        assert [o.name for o in model.graph.output] == list(NMS_OUTPUTS)
        quantized = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
        assert not any(is_nms_node(n.name) for n in quantized)  # Q/DQ never reaches the NMS part
        assert candidate["precision"] != "int8" or quantized

    folder = root / "build/engines/yard-cams"
    recipe = Recipe.load(folder)
    assert recipe.task is not None and recipe.task.outputs == "nms" and recipe.task.postprocess.in_model is True
    assert list(recipe.outputs or {}) == list(NMS_OUTPUTS)
    assert recipe.outputs["detection_boxes"].shape == [-1, 100, 4]
    # the device's acceptance check reads the NMS outputs: the shipped model passes its own set
    stored = dict(np.load(folder / recipe.acceptance, allow_pickle=False))
    inputs = acceptance.unpack_inputs(stored["inputs_u8"], float(stored["inputs_scale"]),
                                      float(stored["inputs_offset"]))
    outputs = acceptance.run_outputs(OnnxRuntimeRunner(folder / recipe.onnx), inputs, "images", 8)
    assert acceptance.agreement_of(stored, outputs) >= float(stored["threshold"])
    counts = outputs["num_detections"].reshape(-1)
    assert counts.shape == (len(inputs),) and np.all(counts <= 100) and counts.max() > 0


def test_preflight_refuses_nms_inside_on_a_tensorrt_without_inmslayer(example_copy) -> None:
    root = _nms_project(example_copy("shapes-detector"), legacy_jetpack="4.6.4")
    preflight = CliRunner().invoke(main, ["preflight", "--project", str(root), "--target", "legacy"])
    assert preflight.exit_code == 9, preflight.output
    assert "edgebuild_nms/nms" in preflight.output and "INMSLayer came with TensorRT 8.5" in preflight.output
    assert "task.postprocess.in_model = false" in preflight.output
