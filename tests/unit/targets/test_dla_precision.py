"""Which gate candidates a DLA group builds from: fp16 stands for the DLA's own layout, fp32 is refused (the DLA
has no FP32), and an INT8 candidate is refused with the DLA tensors its Q/DQ leaves without a scale; the engine's
candidate order and its builder settings (one static shape, the core) follow the group's placement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.gate import CandidateResult, GateResult
from edgebuild.accuracy.policy import AccuracyPolicy
from edgebuild.devices.placement import candidate_order, chosen_candidate, fallback_candidate
from edgebuild.targets.dla_precision import dla_refusal, int8_scale_gaps
from edgebuild.targets.profiles import SelectedGroup, load_catalog


def _qdq(x: str, name: str) -> list:
    return [helper.make_node("QuantizeLinear", [x, "s", "z"], [f"{name}_q"], name=f"{name}_quantize"),
            helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [f"{name}_dq"], name=f"{name}_dequantize")]


def int8_graph() -> onnx.ModelProto:
    """x -Q/DQ-> conv1 -> relu -Q/DQ-> conv2 -> y, weights through Q/DQ of constants (what edgebuild's INT8 writes)."""
    nodes = [*_qdq("x", "x"), *_qdq("w1", "w1"),
             helper.make_node("Conv", ["x_dq", "w1_dq"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             *_qdq("r", "r"), *_qdq("w2", "w2"),
             helper.make_node("Conv", ["r_dq", "w2_dq"], ["y"], name="conv2")]
    inits = [numpy_helper.from_array(np.full((4, 3, 1, 1), 0.5, np.float32), "w1"),
             numpy_helper.from_array(np.full((2, 4, 1, 1), 0.5, np.float32), "w2"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_int8_candidate_names_the_dla_tensors_it_gives_no_scale() -> None:
    gaps = int8_scale_gaps(int8_graph(), "10.3.0.30")
    # the DLA runs conv1, relu, conv2: their activations x_dq, c1, r, r_dq, y; Q/DQ scales x_dq, r and r_dq only
    assert gaps.tensors == 5 and gaps.missing == ("c1", "y") and gaps.qdq_layers == 4
    why = gaps.refusal()
    assert "3 of the 5 tensors the DLA would run a scale (none for c1, y)" in why
    assert "4 activation Q/DQ layer(s) would each fall back to the GPU" in why and "TensorRT#2222" in why


def _group(accelerator: str) -> SelectedGroup:
    return SelectedGroup("dock", load_catalog().parse_target("agx-orin-64gb@6.2"), accelerator)


def test_only_the_fp16_candidate_is_the_dlas_own_layout(tmp_path: Path) -> None:
    path = tmp_path / "int8.onnx"
    onnx.save(int8_graph(), path)
    dla, gpu = (_group("dla0"),), (_group("gpu"),)
    assert dla_refusal("fp16", path, dla) == ""
    assert "no FP32" in dla_refusal("fp32", path, dla)
    assert "scale" in dla_refusal("int8", path, dla) and "scale" in dla_refusal("int8-mixed", path, dla)
    assert dla_refusal("int8", path, gpu) == dla_refusal("fp32", path, gpu) == ""


def _candidate(precision: str, dla_refused: str = "") -> CandidateResult:
    return CandidateResult(precision, f"{precision}/model.onnx", "mAP50-95", 0.5, 0.99, True, True, "onnxruntime",
                           1.0, [], "", [], dla_refused=dla_refused)


def _gate(tmp_path: Path) -> GateResult:
    candidates = [_candidate("fp32", "the DLA has no FP32"), _candidate("fp16"), _candidate("int8", "no scales")]
    return GateResult(tmp_path, AccuracyPolicy("mAP50-95", 0.92), 0.5, "onnxruntime", 10, candidates, "int8", "",
                      [], [], [], 0, 0, 0.0)


def test_a_dla_group_builds_the_first_passing_candidate_the_dla_runs(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    assert candidate_order(gate) == ["int8", "fp16", "fp32"]
    assert candidate_order(gate, "dla0") == candidate_order(gate, "dla") == ["fp16"]
    assert chosen_candidate(gate) == "int8" and chosen_candidate(gate, accelerator="dla1") == "fp16"
    gate = replace(gate, candidates=[replace(c, passed=c.precision != "fp16") for c in gate.candidates])
    assert candidate_order(gate, "dla0") == []
    # the record keeps dla_refused only where it says something: older gate.json files read back as they were
    written = _gate(tmp_path).as_dict()["candidates"]
    assert "dla_refused" not in written[1] and written[2]["dla_refused"] == "no scales"
    assert GateResult.from_dict(_gate(tmp_path).as_dict(), tmp_path).candidates[2].dla_refused == "no scales"


def test_a_first_boot_fallback_on_the_dla_is_never_fp32(tmp_path: Path, example_copy) -> None:
    from edgebuild.project.config import load_project

    project = load_project(example_copy("shapes-detector"))
    gate = replace(_gate(tmp_path), candidates=[c for c in _gate(tmp_path).candidates if c.precision != "fp16"])
    assert fallback_candidate(project, gate, "int8") == "fp32"
    assert fallback_candidate(project, gate, "int8", "dla0") is None


def test_a_dla_groups_engine_is_built_at_one_static_shape_for_its_core(example_copy) -> None:
    from edgebuild.devices.recipes import builder_settings
    from edgebuild.project.config import load_project
    from edgebuild.workflows.work import select_work

    project = load_project(example_copy("shapes-detector"))
    group = next(g for g in select_work(project, "all").groups if g.name == "dock")
    spec = project.model.inputs[0]
    gpu = builder_settings(project, group, "fp16")
    assert gpu["profiles"]["images"] == [spec.min_shape, spec.opt_shape, spec.max_shape] and gpu["dla_core"] is None
    for accelerator, core in (("dla0", 0), ("dla1", 1), ("dla", 0)):
        placed = builder_settings(project, replace(group, accelerator=accelerator), "fp16")
        assert placed["profiles"]["images"] == [spec.opt_shape] * 3 and placed["dla_core"] == core


def test_int8_runs_on_the_dla_where_its_own_layout_keeps_the_gate(tmp_path: Path) -> None:
    from edgebuild.accuracy.dla_int8.layout import DlaInt8, DlaLayout

    path = tmp_path / "int8.onnx"
    onnx.save(int8_graph(), path)
    dla = (_group("dla0"),)
    version = dla[0].target.release.tensorrt
    assert dla_refusal("int8", path, dla, {version: ""}) == ""  # the gate measured its DLA layout: it passed
    assert dla_refusal("int8", path, dla, {version: "retention 0.9 < 0.92"}) == "retention 0.9 < 0.92"
    assert "scale" in dla_refusal("int8-mixed", path, dla, {version: ""})  # a Q/DQ layout: still refused
    trt11 = replace(dla[0], target=load_catalog().parse_target("agx-orin-64gb@7.2.2"))  # TensorRT 11.4.1
    assert "strongly typed networks only" in dla_refusal("int8", path, (trt11,))  # no dynamic ranges there
    layout = DlaLayout(version, 10, 2, 12, 3, [], "e.onnx", 0.45, 0.9, False)
    record = DlaInt8("fp32/model.onnx", "ranges.json", "minmax", 20, 64, {version: layout})
    assert "keeps retention 0.900 < 0.92 on its emulation" in record.refusals(0.92)[version]
    assert record.refusals(0.9) == {version: "its DLA layout (implicit INT8, a range on each of 12 DLA tensors, 2 "
                                             "GPU fallback layer(s) in FP16) keeps retention 0.900 < 0.9 on its "
                                             "emulation"}
    # the gate's record keeps it beside the INT8 candidate and reads it back, and leaves it out where none
    gate = _gate(tmp_path)
    gate = replace(gate, candidates=[replace(c, dla_int8=record) if c.precision == "int8" else c
                                     for c in gate.candidates])
    written = gate.as_dict()["candidates"]
    assert "dla_int8" not in written[1] and written[2]["dla_int8"]["layouts"][version]["retention"] == 0.9
    assert GateResult.from_dict(gate.as_dict(), tmp_path).candidate("int8").dla_int8 == record
