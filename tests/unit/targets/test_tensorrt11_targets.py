"""TensorRT 11 targets: the JetPack 7.2.2 profile, the 11.4 parser table and the strongly typed check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.targets.preflight import WARNING, check_target, parser_table
from edgebuild.targets.profiles import SelectedGroup, load_catalog


def _group(target: str) -> SelectedGroup:
    return SelectedGroup(target, load_catalog().parse_target(target), in_fleet=False)


def _model(dtype: int = TensorProto.FLOAT, qdq: bool = False, op: str = "Relu") -> onnx.ModelProto:
    """x -> [Q -> DQ ->] op -> y, at opset 17."""
    nodes, inits, name = [], [], "x"
    if qdq:
        inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                 numpy_helper.from_array(np.array(0, np.int8), "z")]
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
                  helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq")]
        name = "dq"
    nodes.append(helper.make_node(op, [name], ["y"], name="op"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", dtype, [1, 3, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_jetpack_7_2_2_is_the_tensorrt_11_release_and_says_what_is_unconfirmed() -> None:
    catalog = load_catalog()
    release = catalog.releases["7.2.2"]
    assert release.tensorrt == "11.4.1" and release.tensorrt_major_minor == (11, 4)
    assert {"l4t", "tensorrt", "cuda", "modules"} <= set(release.unconfirmed)
    assert release.modules == ["agx-orin-64gb", "agx-orin-32gb", "agx-thor"]
    assert any("tensorrt-10x-to-11x-jetson" in s for s in release.sources)
    assert catalog.parse_target("agx-thor@7.2.2").release is release
    # TensorRT 11.4.1 names AGX Orin and Thor only: Orin Nano keeps its 7.2 (TensorRT 10.16) target
    assert "7.2.2" not in catalog.modules["orin-nano-8gb"].jetpack
    assert max(catalog.releases, key=lambda j: tuple(int(p) for p in j.split("."))) == "7.2.2"


def test_the_11_4_table_is_11_0_with_the_later_release_notes() -> None:
    table, before = parser_table("11.4.1"), parser_table("10.16.2.10")
    assert table["_path"] == "onnx-parser-11.4.toml" and (table["min_opset"], table["max_opset"]) == (9, 24)
    changed = {op for op, row in table["operators"].items() if row != before["operators"].get(op)}
    assert changed == {"Swish", "DFT", "GridSample"}
    assert table["operators"]["Swish"]["supported"] and table["operators"]["DFT"]["supported"]
    assert not before["operators"]["DFT"]["supported"]
    assert "operators" in table["unconfirmed"]


def test_dft_finding_names_tensorrt_11_4_as_the_first_release_that_parses_it() -> None:
    model = _model(op="DFT")
    blocking = check_target(model, _group("agx-orin-64gb@7.2")).blocking
    assert [f.op_type for f in blocking] == ["DFT"] and "TensorRT 11.4 supports it" in blocking[0].fix
    assert not check_target(model, _group("agx-orin-64gb@7.2.2")).blocking


@pytest.mark.parametrize(("model", "warned"), [
    (_model(), True),                                  # FP32 only: builds only FP32 on TensorRT 11
    (_model(qdq=True), False),                         # the INT8 candidate: Q/DQ
    (_model(dtype=TensorProto.FLOAT16), False),        # the FP16 candidate: FP16 tensors
])
def test_strongly_typed_warning_on_tensorrt_11_only(model: onnx.ModelProto, warned: bool) -> None:
    found = [f for f in check_target(model, _group("agx-thor@7.2.2")).findings if f.op_type == "precision"]
    assert bool(found) is warned
    if warned:
        assert found[0].severity == WARNING and "no Q/DQ nodes and no FP16 tensors" in found[0].problem
        assert "TensorRT 11.4.1" in found[0].problem and "Q/DQ ONNX" in found[0].fix
    assert not [f for f in check_target(model, _group("agx-thor@7.2")).findings if f.op_type == "precision"]
