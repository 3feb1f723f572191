"""Preflight: ONNX nodes against each target's TensorRT parser tables and known restrictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from edgebuild.cli import main
from edgebuild.targets.preflight import BLOCKING, DLA_FALLBACK, WARNING, check_target, preflight, version_matches
from edgebuild.targets.profiles import SelectedGroup, load_catalog
from tests.support.project import TINY_TOML, write_tiny_project

LAYERNORM_MODEL = '''
import torch

class WithLayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, images):
        y = self.norm(self.conv(images).flatten(2).transpose(1, 2))
        return {"boxes": y[..., :4], "scores": torch.sigmoid(y[..., 4:])}

def build():
    return WithLayerNorm()
'''


def _group(target: str, use_dla: bool = False) -> SelectedGroup:
    return SelectedGroup(target, load_catalog().parse_target(target), "dla0" if use_dla else "gpu")


def test_layernorm_blocks_jetpack_5_1_and_is_clean_on_6_1(tmp_path: Path) -> None:
    toml = TINY_TOML.replace("tinydet.model:build_model", "tinydet.ln:build").replace(
        '[[fleet]]\nname = "legacy"\nmodule = "xavier-nx"\njetpack = "5.1.2"',
        '[[fleet]]\nname = "gate"\nmodule = "orin-nx-16gb"\njetpack = "6.1"')
    write_tiny_project(tmp_path, toml.replace("[accuracy]", '[export]\nopset = 17\n\n[accuracy]'))
    (tmp_path / "tinydet" / "ln.py").write_text(LAYERNORM_MODEL)
    result = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--target", "dock,gate", "--json"])
    assert result.exit_code == 9, result.output
    report = json.loads(result.output[result.output.index("{"): result.output.rindex("}") + 1])
    by_group = {t["group"]: t for t in report["targets"]}
    dock, gate = by_group["dock"], by_group["gate"]
    assert dock["tensorrt"].startswith("8.5") and gate["tensorrt"].startswith("10.3")
    blocking = [f for f in dock["findings"] if f["severity"] == BLOCKING]
    assert [f["op_type"] for f in blocking] == ["LayerNormalization"]
    assert "TensorRT 8.6 supports it" in blocking[0]["fix"]
    assert "operators.md" in blocking[0]["source"]
    assert gate["blocking"] == 0 and not [f for f in gate["findings"] if f["op_type"] == "LayerNormalization"]
    text = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--target", "dock,gate"])
    assert text.exit_code == 9 and "gate = orin-nx-16gb@6.1 (TensorRT 10.3.0.30" in text.output
    assert "blocking problems for dock = agx-orin-64gb@5.1.2" in text.output and "Traceback" not in text.output


def _model(nodes: list, inputs: list, outputs: list, initializers: list = (), opset: int = 17,
           extra_opsets: list = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])


def _float(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _problems(model: onnx.ModelProto, target: str, use_dla: bool = False) -> list[tuple[str, str, str]]:
    return [(f.op_type, f.severity, f.problem) for f in check_target(model, _group(target, use_dla)).findings]


def test_resize_antialias_is_blocking_everywhere() -> None:
    roi = numpy_helper.from_array(np.array([], np.float32), "roi")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="up", mode="linear", antialias=1)
    model = _model([node], [_float("x", [1, 3, 8, 8])], [_float("y", [1, 3, 16, 16])], [roi, scales], opset=18)
    for target in ("orin-nano-8gb@6.2", "agx-thor@7.2"):
        assert ("Resize", BLOCKING, "Resize with antialias=1: TensorRT's resize layer has no antialiasing") \
            in _problems(model, target)
    plain = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="up", mode="linear")
    clean = _model([plain], [_float("x", [1, 3, 8, 8])], [_float("y", [1, 3, 16, 16])], [roi, scales], opset=18)
    assert _problems(clean, "orin-nano-8gb@6.2") == []


def test_scatternd_reduction_einsum_ellipsis_and_topk_limits() -> None:
    idx = numpy_helper.from_array(np.zeros((1, 1), np.int64), "idx")
    scatter = helper.make_node("ScatterND", ["x", "idx", "u"], ["y"], name="scatter", reduction="add")
    model = _model([scatter], [_float("x", [4]), _float("u", [1])], [_float("y", [4])], [idx], opset=16)
    assert any(p[0] == "ScatterND" and p[1] == BLOCKING and "reduction" in p[2]
               for p in _problems(model, "orin-nano-8gb@6.2"))

    einsum = helper.make_node("Einsum", ["a", "b"], ["c"], name="ein", equation="...ij,...jk->...ik")
    model = _model([einsum], [_float("a", [2, 3, 4]), _float("b", [2, 4, 5])], [_float("c", [2, 3, 5])])
    assert any("ellipsis" in p[2] for p in _problems(model, "agx-orin-64gb@5.1.2"))
    assert not any("ellipsis" in p[2] for p in _problems(model, "orin-nano-8gb@6.2"))

    k = numpy_helper.from_array(np.array([5000], np.int64), "k")
    topk = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")
    model = _model([topk], [_float("x", [1, 8000])],
                   [_float("v", [1, 5000]), helper.make_tensor_value_info("i", TensorProto.INT64, [1, 5000])], [k])
    assert any(p[0] == "TopK" and "3840" in p[2] for p in _problems(model, "orin-nano-8gb@6.2"))


def test_int64_warns_on_tensorrt_8_only_and_custom_domains_block() -> None:
    shape = helper.make_node("Shape", ["x"], ["s"], name="shape")
    model = _model([shape], [_float("x", [1, 3])], [helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    assert ("INT64", WARNING) in [(p[0], p[1]) for p in _problems(model, "agx-orin-64gb@5.1.2")]
    assert _problems(model, "orin-nano-8gb@6.2") == []

    custom = helper.make_node("FusedConv", ["x"], ["y"], name="fused", domain="com.microsoft")
    model = _model([custom], [_float("x", [1, 3])], [_float("y", [1, 3])],
                   extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    assert any(p[1] == BLOCKING and "com.microsoft" in p[2] for p in _problems(model, "orin-nano-8gb@6.2"))


def test_opset_outside_the_parser_range_is_blocking() -> None:
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model([relu], [_float("x", [1])], [_float("y", [1])], opset=20)
    problems = _problems(model, "agx-orin-64gb@5.1.2")
    assert problems[0][:2] == ("opset", BLOCKING) and "opsets 7..17" in problems[0][2]


def test_dla_fallbacks_are_reported_for_dla_groups_only() -> None:
    conv_w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("NonMaxSuppression", ["b", "s"], ["n"], name="nms")]
    model = _model(nodes, [_float("x", ["batch", 3, 8, 8]), _float("b", [1, 10, 4]), _float("s", [1, 1, 10])],
                   [_float("r", ["batch", 4, 8, 8]),
                    helper.make_tensor_value_info("n", TensorProto.INT64, [None, 3])], [conv_w])
    dla = [(p[0], p[1]) for p in _problems(model, "agx-orin-64gb@6.2", use_dla=True) if p[1] == DLA_FALLBACK]
    assert ("NonMaxSuppression", DLA_FALLBACK) in dla and ("dynamic shapes", DLA_FALLBACK) in dla
    assert ("Conv", DLA_FALLBACK) not in dla and ("Relu", DLA_FALLBACK) not in dla
    assert not [p for p in _problems(model, "agx-orin-64gb@6.2") if p[1] == DLA_FALLBACK]


def test_version_specifiers() -> None:
    assert version_matches("10.3.0.30", ">=10.0,<10.9")
    assert not version_matches("10.9.0", ">=10.0,<10.9")
    assert version_matches("8.5.2.2", "<10.0") and version_matches("8.5.2.2", "")


def test_every_profile_release_has_a_parser_table(tmp_path: Path) -> None:
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    path = tmp_path / "relu.onnx"
    onnx.save(_model([relu], [_float("x", [1])], [_float("y", [1])], opset=13), path)
    catalog = load_catalog()
    groups = [SelectedGroup(t.id, t) for t in catalog.all_targets()]
    results = preflight(path, groups)
    assert len(results) == len(groups) and all(not r.blocking for r in results)


@pytest.mark.parametrize("example", ["shapes-detector", "digits-classifier"])
def test_bundled_examples_pass_preflight_on_their_fleet(example: str, example_copy) -> None:
    root = example_copy(example)
    result = CliRunner().invoke(main, ["preflight", "-p", str(root), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"): result.output.rindex("}") + 1])
    assert {t["group"] for t in report["targets"]} == {g["name"] for g in _fleet(root)}
    assert all(t["blocking"] == 0 for t in report["targets"])


def _fleet(root: Path) -> list[dict]:
    import tomllib

    return tomllib.loads((root / "edgebuild.toml").read_text())["fleet"]


def _qdq_model(*, data_type: int = TensorProto.INT8, zero_point: int = 0, scale: list[float] | None = None,
               on_activation: bool = False) -> onnx.ModelProto:
    """x + DequantizeLinear(w): the Q/DQ shapes TensorRT does or does not take, made by hand."""
    np_type = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT32: np.int32}[data_type]
    scale = scale or [0.1]
    inits = [numpy_helper.from_array(np.array(scale if len(scale) > 1 else scale[0], np.float32), "s"),
             numpy_helper.from_array(np.array(zero_point if len(scale) == 1 else [zero_point] * len(scale),
                                              np_type), "zp")]
    nodes = []
    if on_activation:  # per-tensor or per-channel Q/DQ of the input itself
        nodes.append(helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q", axis=1))
        nodes.append(helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["w"], name="dq", axis=1))
    else:
        inits.append(numpy_helper.from_array(np.ones((1, 3, 1, 1), np_type), "wq"))
        nodes.append(helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["w"], name="dq"))
    nodes.append(helper.make_node("Add", ["x", "w"], ["y"], name="add"))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target", ["agx-orin-64gb@5.1.2", "orin-nano-8gb@6.2"])
def test_quantization_nodes_are_checked_for_types_and_attributes(target: str) -> None:
    def blocking(model: onnx.ModelProto) -> list[str]:
        return [f"{f.node}: {f.problem}" for f in check_target(onnx.shape_inference.infer_shapes(model),
                                                               _group(target)).blocking]

    assert blocking(_qdq_model()) == []  # INT8 weights, zero point 0: what TensorRT takes
    int32 = blocking(_qdq_model(data_type=TensorProto.INT32))  # a quantized bias, quantize_static's default
    assert len(int32) == 1 and "dq: DequantizeLinear reads INT32" in int32[0] and "INT8" in int32[0]
    uint8 = blocking(_qdq_model(data_type=TensorProto.UINT8))
    assert any("reads UINT8" in p for p in uint8)
    assert any("non-zero zero point" in p for p in blocking(_qdq_model(zero_point=3)))
    assert blocking(_qdq_model(scale=[0.1, 0.2, 0.3])) == []  # per-channel on weights: fine
    per_channel = blocking(_qdq_model(scale=[0.1, 0.2, 0.3], on_activation=True))
    assert any(p.startswith("q: per-channel QuantizeLinear on an activation") for p in per_channel)
    assert any(p.startswith("dq: per-channel DequantizeLinear on an activation") for p in per_channel)
    assert blocking(_qdq_model(on_activation=True)) == []  # per-tensor activations: fine


def test_every_gate_candidate_of_both_examples_is_one_every_target_takes(example_copy) -> None:
    from edgebuild.accuracy.gate import GateResult

    for name in ("digits-classifier", "shapes-detector"):
        root = example_copy(name)
        result = CliRunner().invoke(main, ["validate", "-p", str(root), "--no-progress"])
        assert result.exit_code == 0, result.output
        project_gate = GateResult.load(gate_dir_of(root))
        groups = _fleet_groups(root)
        assert project_gate.candidates and {c.precision for c in project_gate.candidates} >= {"fp32", "fp16", "int8"}
        for candidate in project_gate.candidates:
            assert candidate.rejected_by == [], (name, candidate.precision, candidate.rejected_by)
            model = onnx.shape_inference.infer_shapes(onnx.load(str(project_gate.folder / candidate.onnx)))
            for group in groups:
                assert check_target(model, group).blocking == [], (name, candidate.precision, group.name)
            if candidate.precision.startswith("int8"):  # Q/DQ only where TensorRT runs INT8
                produced = {out: n.op_type for n in model.graph.node for out in n.output}
                reading = {n.op_type for n in model.graph.node if any(produced.get(i) == "DequantizeLinear"
                                                                     for i in n.input)}
                # Shape reads only the dimensions of what it is given
                assert reading <= {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Shape"}, (name, reading)


def gate_dir_of(root: Path) -> Path:
    return root / "build" / "gate"


def _fleet_groups(root: Path) -> list[SelectedGroup]:
    from edgebuild.project.config import load_project
    from edgebuild.workflows.work import select_work

    return list(select_work(load_project(root), "all").groups)


def test_the_gate_names_the_targets_that_would_reject_a_candidate(tmp_path: Path) -> None:
    path = tmp_path / "int32-bias.onnx"
    onnx.save(_qdq_model(data_type=TensorProto.INT32), str(path))
    problems = [r.rejection() for r in preflight(path, [_group("agx-orin-64gb@5.1.2"), _group("orin-nano-8gb@6.2")])]
    assert len(problems) == 2 and problems[0].startswith("agx-orin-64gb@5.1.2 (TensorRT 8.5.2.2): 1 node(s), e.g. dq:")
    onnx.save(_qdq_model(), str(path))
    assert [r.rejection() for r in preflight(path, [_group("agx-orin-64gb@5.1.2")])] == [""]


MANY_LAYERNORMS = '''
import torch

class Blocks(torch.nn.Module):
    """Five LayerNorms, as in a (very small) transformer."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(6) for _ in range(5))

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        for norm in self.norms:
            y = y + norm(y)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(y[..., 4:])}

def build():
    return Blocks()
'''


def test_identical_findings_are_one_row_with_a_count_and_the_opset_16_hint(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace("tinydet.model:build_model", "tinydet.blocks:build"))
    (tmp_path / "tinydet" / "blocks.py").write_text(MANY_LAYERNORMS)
    result = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--target", "dock"])
    assert result.exit_code == 9, result.output
    rows = [line for line in result.output.splitlines() if "LayerNormalization" in line]
    assert len(rows) == 1, result.output
    assert "LayerNormalization \u00d75" in rows[0] and " and 2 more" in rows[0]
    assert "export with export.opset = 16" in rows[0] and "TensorRT 8.6 supports it" in rows[0]
    assert "dock = agx-orin-64gb@5.1.2 (TensorRT 8.5.2.2, onnx-parser-8.5.toml): 5 blocking" in result.output

    as_json = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--target", "dock", "--json"])
    report = json.loads(as_json.output[as_json.output.index("{"): as_json.output.rindex("}") + 1])
    assert len([f for f in report["targets"][0]["findings"] if f["op_type"] == "LayerNormalization"]) == 5

    # the hint works: at opset 16 the exporter writes LayerNormalization out of basic operators
    toml = TINY_TOML.replace("tinydet.model:build_model", "tinydet.blocks:build")
    write_tiny_project(tmp_path, toml.replace("[accuracy]", "[export]\nopset = 16\n\n[accuracy]"))
    fixed = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--target", "dock"])
    assert fixed.exit_code == 0, fixed.output
    assert "LayerNormalization" not in fixed.output
    record = json.loads((tmp_path / "build" / "export" / "opset16" / "export.json").read_text())
    assert record["exporter"] == "torchscript" and record["failed_attempts"] == []  # the fast exporter, first


def test_a_computed_top_k_blocks_before_tensorrt_8_6_and_grid_sample_on_jetpack_4_says_what_to_do() -> None:
    """Transformer detectors (docs/transformer-detectors.md): a TopK whose K the graph computes (an RT-DETR or
    YOLO26 exported with dynamic=True) is refused by TensorRT 8.5's parser; GridSample (RT-DETR's deformable
    attention) has no importer in JetPack 4.6's TensorRT 8.2, and the finding names the JetPacks that have one."""
    shape = helper.make_node("Shape", ["x"], ["s"], name="shape")
    k = numpy_helper.from_array(np.array([1], np.int64), "one")
    gather = helper.make_node("Gather", ["s", "one"], ["k"], name="k_of_shape", axis=0)
    topk = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=1)
    outputs = [_float("v", [1, None]), helper.make_tensor_value_info("i", TensorProto.INT64, [1, None])]
    computed = _model([shape, gather, topk], [_float("x", [1, 300])], outputs, [k])
    assert any(p[0] == "TopK" and p[1] == BLOCKING and "initializer" in p[2]
               for p in _problems(computed, "agx-orin-64gb@5.1.2"))
    assert not any(p[0] == "TopK" for p in _problems(computed, "orin-nano-8gb@6.2"))
    constant = _model([helper.make_node("TopK", ["x", "one"], ["v", "i"], name="topk", axis=1)],
                      [_float("x", [1, 300])], outputs, [k])
    assert not any(p[0] == "TopK" for p in _problems(constant, "agx-orin-64gb@5.1.2"))

    grid = helper.make_node("GridSample", ["x4", "g"], ["y4"], name="sample", align_corners=0)
    model = _model([grid], [_float("x4", [1, 8, 16, 16]), _float("g", [1, 300, 4, 2])], [_float("y4", [1, 8, 300, 4])],
                   opset=16)
    found = [f for f in check_target(model, _group("xavier-nx@4.6.4")).findings if f.op_type == "GridSample"]
    assert found and found[0].severity == BLOCKING
    assert "TensorRT 8.5 supports it: target a JetPack with it (JetPack 5.1" in found[0].fix
    assert "deformable attention" in found[0].fix and "mmcv" in found[0].source
    assert not [f for f in check_target(model, _group("agx-orin-64gb@5.1.2")).findings if f.op_type == "GridSample"]
