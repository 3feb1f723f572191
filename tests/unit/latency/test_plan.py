"""``edgebuild plan``: the workflow (budget, cheapest module, project groups) and the command's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from edgebuild.cli import main
from edgebuild.errors import ConfigError, TargetError
from edgebuild.latency.plan import ModuleChoice, PlanRequest, plan_latency
from edgebuild.workflows.plan import plan_project


def _conv_silu(h: int | str = 8, w: int | str = 8) -> onnx.ModelProto:
    """x(1,3,H,W) -> Conv 3x3 (4 out) -> SiLU -> y."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def conv_file(tmp_path: Path) -> Path:
    path = tmp_path / "conv.onnx"
    onnx.save(_conv_silu(), str(path))
    return path


def test_plan_budget_names_the_cheapest_mode_meeting_it(conv_file: Path) -> None:
    plan = plan_latency(conv_file, PlanRequest(("fp16",), budget_ms=1e3), ModuleChoice("orin-nano-8gb,agx-orin-64gb"))
    assert [r.module for r in plan.rows][0] == "orin-nano-8gb"  # fewer tensor cores: the cheaper module first
    assert plan.cheapest["fp16"] == plan.rows[0]
    assert all(r.low_ms <= r.latency_ms <= r.high_ms for r in plan.rows)
    none_meet = plan_latency(conv_file, PlanRequest(("fp16",), budget_ms=1e-6), ModuleChoice("orin-nano-8gb"))
    assert none_meet.cheapest["fp16"] is None
    with pytest.raises(TargetError):
        plan_latency(conv_file, modules=ModuleChoice("orin-nano-9gb"))


def test_plan_asks_for_an_input_size_the_model_does_not_fix(tmp_path: Path) -> None:
    path = tmp_path / "dynamic.onnx"
    onnx.save(_conv_silu("h", "w"), str(path))
    with pytest.raises(ConfigError, match="--input-size"):
        plan_latency(path, modules=ModuleChoice("orin-nano-8gb"))
    assert plan_latency(path, modules=ModuleChoice("orin-nano-8gb"), input_size=[32, 32]).input_hw == (32, 32)


def test_cli_plan_json_rows(conv_file: Path) -> None:
    result = CliRunner().invoke(main, ["plan", "--model", str(conv_file), "--module", "orin-nx-16gb", "--jetpack",
                                       "6.2", "--precision", "fp16,int8", "--batch", "2", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert [(r["power_mode"], r["precision"]) for r in rows] == [("MAXN_SUPER", "fp16"), ("MAXN_SUPER", "int8")]
    for row in rows:
        assert {"module", "power_mode", "jetpack", "precision", "batch", "latency_ms", "low_ms", "high_ms",
                "fps"} <= set(row)
        assert row["jetpack"] == "6.2" and row["batch"] == 2
        assert row["fps"] == pytest.approx(2000 / row["latency_ms"], rel=1e-2)
    text = CliRunner().invoke(main, ["plan", "--model", str(conv_file), "--min-fps", "1"]).output
    assert "cheapest module and power mode" in text


def test_project_plan_has_a_row_per_group_batch_and_precision(tiny_project: Path) -> None:
    plan = plan_project(tiny_project, request=PlanRequest(("fp16",), min_fps=30))
    groups = {(r.group, r.module, r.batch) for r in plan.rows}
    # the tiny project's groups: yard-cams (orin-nano-8gb), dock (agx-orin-64gb), legacy (xavier-nx); its
    # input profile allows batch 1 to 4
    assert {(g, b) for g, _, b in groups} == {(g, b) for g in ("yard-cams", "dock", "legacy") for b in (1, 4)}
    assert all(r.jetpack in ("6.2", "5.1.2") for r in plan.rows)
    assert all(r.meets_budget is not None for r in plan.rows)
    assert [r.extrapolated for r in plan.rows if r.group == "legacy"] == [True, True]  # Volta: nothing fitted
    result = CliRunner().invoke(main, ["plan", "-p", str(tiny_project), "--module", "nano"])
    assert result.exit_code == 2 and "--module go with --model" in result.output


def test_plan_takes_a_model_without_an_image_input(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones((64, 32), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    path = tmp_path / "tokens.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    plan = plan_latency(path, PlanRequest(("fp16",)), ModuleChoice("agx-orin-64gb"))
    assert plan.input_hw is None and plan.gflops == pytest.approx(2 * 16 * 32 * 64 / 1e9)
    assert plan.as_dict()["input_size"] is None


def test_project_plan_rows_are_the_gate_s_candidates_with_end_to_end_and_the_group_s_budget(tmp_path: Path) -> None:
    from tests.support.project import TINY_TOML, write_tiny_project

    toml = TINY_TOML.replace('jetpack = "6.2"\n', 'jetpack = "6.2"\nlatency_budget_ms = 1000\n', 1)
    write_tiny_project(tmp_path, toml.replace("[accuracy]\n", '[quantize]\nprecisions = ["fp16", "int8"]\n\n'
                                                               "[accuracy]\n"))
    plan = plan_project(tmp_path, "yard-cams", PlanRequest(batch=1))
    assert [(r.group, r.power_mode, r.precision) for r in plan.rows] == [("yard-cams", "MAXN_SUPER", "fp16"),
                                                                        ("yard-cams", "MAXN_SUPER", "int8")]
    for row in plan.rows:
        assert row.meets_budget is True  # the group's own latency_budget_ms
        assert row.end_to_end_ms is not None and row.end_to_end_ms > row.latency_ms
    # the memory plan's estimate before any engine: an INT8 engine's weights take a quarter of FP32's, its
    # activations (kept at 2 bytes) FP16's
    from edgebuild.devices.memory_plan import estimate_model_memory

    onnx_path = next((tmp_path / "build").rglob("model.onnx"))
    shapes = {"images": [4, 3, 96, 96]}  # the input profile's max_shape
    fp16, int8 = (estimate_model_memory("m", onnx_path, p, shapes, 0, False).engine for p in ("fp16", "int8"))
    assert [r.engine_memory_bytes for r in plan.rows] == [fp16, int8] and int8 < fp16
    result = CliRunner().invoke(main, ["plan", "-p", str(tmp_path), "--target", "yard-cams", "--batch", "1",
                                       "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {"module", "power_mode", "jetpack", "precision", "batch", "latency_ms", "low_ms", "high_ms", "fps",
            "end_to_end_ms", "group", "engine_memory_bytes"} <= set(rows[0])
    text = CliRunner().invoke(main, ["plan", "-p", str(tmp_path), "--target", "yard-cams", "--batch", "1"]).output
    assert "end to end ms" in text and "memory bandwidth" in text and "engine memory" in text


def test_end_to_end_adds_copies_at_the_memory_bandwidth_and_the_preprocessing() -> None:
    from edgebuild.latency.plan import CPU_BANDWIDTH_SHARE, PREPROCESS_PASSES, _host_ms
    from edgebuild.targets.profiles import load_catalog

    perf = load_catalog().modules["orin-nano-8gb"].performance[0]
    inputs, outputs = 3 * 640 * 640 * 4, 8400 * 84 * 4
    bandwidth = perf.memory_bandwidth_gbps * 1e9
    expected = (2 * (inputs + outputs) / bandwidth + PREPROCESS_PASSES * 2 * inputs / (bandwidth * CPU_BANDWIDTH_SHARE))
    assert _host_ms((inputs, outputs), perf) == pytest.approx(expected * 1e3)
