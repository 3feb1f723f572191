"""The device plan of several models on one module (issue 47): each model on the GPU, DLA0 or DLA1 at one of its
precisions, the cores and DRAM shared, and why a model is not on a DLA core; ``plan`` of a fleet file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from edgebuild.cli import main
from edgebuild.errors import TargetError
from edgebuild.latency.cores import predict_core
from edgebuild.latency.device_plan import PlannedModel, plan_device
from edgebuild.latency.graph import GraphCost, graph_cost
from edgebuild.targets.profiles import ModulePerformance, load_catalog
from tests.support.project import TINY_TOML, write_tiny_project


def _cnn(layers: int, channels: int, size: int, *, norm: bool = False) -> GraphCost:
    """A stack of 3x3 convs + Relu (what the DLA runs); with ``norm``, an InstanceNormalization after each conv
    (what it does not: each falls back to the GPU)."""
    nodes, weights, last, cin = [], [], "x", 3
    for index in range(layers):
        name = f"w{index}"
        weights.append(numpy_helper.from_array(np.ones((channels, cin, 3, 3), np.float32), name))
        nodes.append(helper.make_node("Conv", [last, name], [f"c{index}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        out = f"c{index}"
        if norm:
            weights += [numpy_helper.from_array(np.ones(channels, np.float32), f"s{index}"),
                        numpy_helper.from_array(np.zeros(channels, np.float32), f"b{index}")]
            nodes.append(helper.make_node("InstanceNormalization", [out, f"s{index}", f"b{index}"], [f"n{index}"]))
            out = f"n{index}"
        nodes.append(helper.make_node("Relu", [out], [f"r{index}"]))
        last, cin = f"r{index}", channels
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], weights)
    return graph_cost(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _perf(module: str, mode: str = "MAXN") -> ModulePerformance:
    return next(p for p in load_catalog().modules[module].performance if p.power_mode == mode)


@pytest.fixture(scope="module")
def conv_heavy() -> GraphCost:
    return _cnn(8, 64, 224)


@pytest.fixture(scope="module")
def normalised() -> GraphCost:
    return _cnn(8, 64, 224, norm=True)


def test_two_conv_models_on_agx_orin_go_across_the_gpu_and_a_dla_core_and_beat_the_gpu_alone(
        conv_heavy: GraphCost) -> None:
    perf = _perf("agx-orin-64gb")
    models = [PlannedModel("a", conv_heavy, ("int8", "fp16")), PlannedModel("b", conv_heavy, ("int8", "fp16"))]
    plan = plan_device(models, perf, "agx-orin-64gb")
    cores = sorted(p.core for p in plan.placements)
    assert any(c.startswith("dla") for c in cores), plan.table()
    assert cores[0] != "dla1" and "dla1" not in cores or "dla0" in cores  # DLA1 only beside DLA0 (mirror images)
    assert plan.fps > plan.gpu_only_fps  # the second core is the point of placing
    # the numbers hold together: each model's own time is predict_core's, the frame time the busiest resource's
    for placed in plan.placements:
        kind = "gpu" if placed.core == "gpu" else "dla"
        assert placed.alone == predict_core(conv_heavy, perf, kind, placed.precision)
        assert placed.together_ms >= placed.alone.latency_ms
    assert plan.frame_ms == pytest.approx(max(plan.busy_ms.values()))
    assert plan.busiest in plan.busy_ms and plan.headroom is None and plan.meets is None
    assert plan.considered > 4
    assert "frames/s" in plan.table() and plan.as_dict()["source"].startswith("predicted")


def test_a_model_whose_layers_fall_back_stays_on_the_gpu_and_the_plan_says_why(normalised: GraphCost) -> None:
    plan = plan_device([PlannedModel("normed", normalised, ("int8",))], _perf("agx-orin-64gb"), "agx-orin-64gb")
    assert [p.core for p in plan.placements] == ["gpu"]
    (note,) = plan.notes
    assert note.startswith("normed: not on a DLA core") and "InstanceNormalization" in note
    assert "GPU<->DLA hand-overs" in note and "layers fall back to the GPU" in note


def test_the_budget_decides_and_its_headroom_is_the_tightest_ratio(conv_heavy: GraphCost) -> None:
    perf = _perf("agx-orin-64gb")
    models = [PlannedModel("a", conv_heavy, ("int8", "fp16"))]
    loose = plan_device(models, perf, "agx-orin-64gb", budget_ms=1000.0, min_fps=1.0)
    assert loose.meets and loose.headroom == pytest.approx(
        min(1000.0 / loose.placements[0].together_ms, loose.fps / 1.0))
    tight = plan_device(models, perf, "agx-orin-64gb", budget_ms=1e-4)
    assert tight.meets is False and tight.headroom is not None and tight.headroom < 1.0


def test_placements_pinned_by_the_user_are_kept(conv_heavy: GraphCost, normalised: GraphCost) -> None:
    perf = _perf("agx-orin-64gb")
    plan = plan_device([PlannedModel("on-dla", normalised, ("int8",), pinned="dla"),
                        PlannedModel("on-gpu", conv_heavy, ("int8",), pinned="gpu")], perf, "agx-orin-64gb")
    assert [(p.model, p.core) for p in plan.placements] == [("on-dla", "dla0"), ("on-gpu", "gpu")]
    assert plan.notes[0] == "on-gpu: on the GPU as placed (placement gpu)"
    with pytest.raises(TargetError, match="can run on none of \\['dla0', 'dla1'\\] at fp32.*FP16 and INT8 only"):
        plan_device([PlannedModel("fp32-only", conv_heavy, ("fp32",), pinned="dla")], perf, "agx-orin-64gb")


def test_a_module_without_dla_plans_the_gpu_alone_with_no_notes(conv_heavy: GraphCost) -> None:
    perf = _perf("orin-nano-8gb", "MAXN_SUPER")
    plan = plan_device([PlannedModel("a", conv_heavy, ("int8", "fp16")), PlannedModel("b", conv_heavy, ("fp16",))],
                       perf, "orin-nano-8gb")
    assert [p.core for p in plan.placements] == ["gpu", "gpu"] and plan.notes == ()
    assert plan.placements[0].precision == "int8"  # the faster of its precisions: the most frames per second
    assert plan.fps == pytest.approx(plan.gpu_only_fps)
    with pytest.raises(TargetError, match="can run on none of \\[\\]"):
        plan_device([PlannedModel("a", conv_heavy, ("int8",), pinned="dla0")], perf, "orin-nano-8gb")


def test_cores_asking_for_more_dram_than_the_module_gives_slow_every_inference(conv_heavy: GraphCost) -> None:
    # a bus the two cores would overrun
    narrow = _perf("agx-orin-64gb").model_copy(update={"memory_bandwidth_gbps": 0.5})
    models = [PlannedModel("a", conv_heavy, ("int8",), pinned="gpu"), PlannedModel("b", conv_heavy, ("int8",),
                                                                                    pinned="dla")]
    plan = plan_device(models, narrow, "agx-orin-64gb")
    assert plan.slowdown > 1.0 and plan.busy_ms["dram"] > 0
    assert all(p.together_ms > p.alone.latency_ms for p in plan.placements)


def test_plan_of_a_fleet_file_prints_each_groups_device_plan(tmp_path: Path) -> None:
    # a fleet running the tiny detector project twice on AGX Orin: the CLI path from the fleet file to the table
    write_tiny_project(tmp_path / "tiny")
    write_tiny_project(tmp_path / "tiny2", TINY_TOML.replace('name = "tiny"', 'name = "tiny2"', 1))
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "edgebuild.toml").write_text(
        '[project]\nname = "box"\n\n[models]\nfirst = "../tiny"\nsecond = "../tiny2"\n\n'
        '[[fleet]]\nname = "dock"\nmodule = "agx-orin-64gb"\njetpack = "5.1.2"\nmodels = ["first", "second"]\n'
        'min_fps = 30\n\n[ota]\nversion = "1.0.0"\n')
    done = CliRunner().invoke(main, ["plan", "-p", str(tmp_path / "box")])
    assert done.exit_code == 0, done.output
    assert "group dock (agx-orin-64gb@5.1.2, MAXN); min 30 frames/s: meets it" in done.output
    for words in ("first", "second", "frames/s", "all on the GPU", "predicted, not measured"):
        assert words in done.output
    as_json = CliRunner().invoke(main, ["plan", "-p", str(tmp_path / "box"), "--json"])
    (group,) = json.loads(as_json.stdout)["groups"]
    assert group["group"] == "dock" and [p["model"] for p in group["placements"]] == ["first", "second"]
    assert group["meets"] is True and group["error"] is None
    refused = CliRunner().invoke(main, ["plan", "-p", str(tmp_path / "box"), "--accelerator", "dla"])
    assert refused.exit_code == 2 and "places each model on the GPU or a DLA core itself" in refused.output


def test_a_tensorrt_without_the_dla_plans_the_gpu_and_a_dla_plan_says_how_to_build_it(conv_heavy: GraphCost) -> None:
    perf = _perf("agx-orin-64gb")
    models = [PlannedModel("a", conv_heavy, ("int8", "fp16")), PlannedModel("b", conv_heavy, ("int8", "fp16"))]
    without = plan_device(models, perf, "agx-orin-64gb", no_dla="TensorRT 10.16 runs no DLA")
    assert {p.core for p in without.placements} == {"gpu"}
    assert without.notes == ("no DLA core considered: TensorRT 10.16 runs no DLA",)
    placed = plan_device(models, perf, "agx-orin-64gb")
    (how,) = [n for n in placed.notes if n.startswith("to build this plan")]
    for p in placed.placements:
        assert f'{p.model} = "{p.core}"' in how
    assert any("INT8 on a DLA core ships only where its own layout" in n for n in placed.notes)
