"""Predicted vs measured in a project, and ``plan --calibrate`` with bench results.

The Jetson results here are in the shape ``edgebuild bench --json`` writes on a Jetson with
TensorRT (backend, device facts, nvpmodel, the copy/compute split); their numbers are made up for
the test (no Jetson here). The CPU result is a real run of the bench on this host.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild.errors import ConfigError
from edgebuild.latency.calibration import calibrate_project, project_fit, record_measured
from edgebuild.latency.measured import CHECK_HEADERS, check_rows, latency_checks
from edgebuild.latency.plan import ModuleChoice, PlanRequest, plan_latency
from edgebuild.project.layout import project_latency_files
from edgebuild.report.build_report import from_compile
from edgebuild.report.markdown import to_markdown
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.bench.bench import run_bench
from edgebuild.runtime.bench.bench_result import BenchResult
from tests.support.bench_results import config_dict, jetson_result_dict
from tests.support.runtime_artifacts import recipe_for

MAXN_SUPER = ModuleChoice("orin-nano-8gb", "MAXN_SUPER")


def _conv_folder(folder: Path) -> Path:
    """A model folder as the engine stage writes it, with a small convolutional ONNX (two 3x3 convs)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((16, 3, 3, 3), dtype=np.float32), "w1")
    w2 = numpy_helper.from_array(rng.random((32, 16, 3, 3), dtype=np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Conv", ["b", "w2"], ["out"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 32, "h", "w"])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, folder / "model.onnx")
    recipe_for(folder, "orin-nano-8gb@6.2").save(folder)
    return folder


def _jetson_result(folder: Path, compute_ms: dict[int, float], precision: str = "fp16",
                   created: str = "2026-12-05T03:00:00Z", power_mode: str = "MAXN_SUPER") -> dict:
    recipe = Recipe.load(folder)
    result = jetson_result_dict()
    result["created"] = created
    result["artifact"] = {"group": recipe.group, "target": recipe.target, "model": recipe.model_name,
                          "version": "0.3.0", "precision": precision, "module": recipe.module.id,
                          "jetpack": recipe.jetpack,
                          "tensorrt": recipe.tensorrt, "onnx": recipe.onnx, "onnx_sha256": recipe.onnx_sha256,
                          "files": recipe.file_hashes(folder)}
    result["backend"], result["device"]["tensorrt"] = "tensorrt 10.3.0", "10.3.0"
    result["jetson"]["power_mode"] = {"available": True, "name": power_mode, "id": 2}
    configs = [config_dict(b, 1, ms + 0.4, stages={"h2d_ms": 0.2, "compute_ms": ms, "d2h_ms": 0.2})
               for b, ms in compute_ms.items()] + [config_dict(1, 2, 9.0)]
    for config in configs:
        config["shapes"] = {"images": [config["batch"], 3, 256, 256]}
    result["configs"] = configs
    return result


@pytest.fixture
def project(tiny_project: Path) -> Path:
    _conv_folder(tiny_project / "build" / "engines" / "yard")
    return tiny_project


def test_a_jetson_measurement_is_stored_next_to_its_prediction_and_a_cpu_one_is_not_compared(project: Path) -> None:
    folder = project / "build" / "engines" / "yard"
    written = record_measured(project, folder, BenchResult.from_dict(_jetson_result(folder, {1: 1.5, 4: 5.0})))
    assert written == [project / "build" / "latency" / "yard.json"]
    cpu = run_bench(folder, batches=[1], iterations=5, warmup=1, progress=lambda _: None)
    record_measured(project, folder, BenchResult.from_dict(dict(cpu, ran_on="this host")))
    checks = latency_checks(project / "build")
    assert [(c.batch, c.backend.split()[0], c.comparable) for c in checks] == [
        (1, "tensorrt", True), (4, "tensorrt", True), (1, "onnxruntime-cpu", False)]  # concurrency 2: not kept
    jetson = checks[0]
    assert (jetson.module, jetson.power_mode, jetson.includes, jetson.measured_ms) == (
        "orin-nano-8gb", "MAXN_SUPER", "gpu_compute", 1.5)
    assert jetson.predicted_ms and jetson.error == pytest.approx((jetson.predicted_ms - 1.5) / 1.5)
    assert jetson.low_ms < jetson.predicted_ms < jetson.high_ms
    assert checks[2].error is None and "not comparable" in checks[2].why_not and "onnxruntime" in checks[2].why_not
    rows = check_rows(checks)
    assert rows[0][CHECK_HEADERS.index("error")].startswith(("+", "-"))
    assert "measured on onnxruntime-cpu" in rows[2][CHECK_HEADERS.index("error")]
    report = from_compile({"project": "tiny", "stages": [], "units": []}, project / "build")
    text = to_markdown(report)
    assert "### Predicted vs measured latency" in text and "| yard | orin-nano-8gb | MAXN_SUPER | fp16 | 1 |" in text


def test_a_folder_outside_the_build_is_not_recorded(project: Path, tmp_path: Path) -> None:
    elsewhere = _conv_folder(tmp_path / "elsewhere" / "yard")
    said = []
    assert record_measured(project, elsewhere, BenchResult.from_dict(_jetson_result(elsewhere, {1: 1.5})),
                           progress=said.append) == []
    assert "not a model folder of" in said[0]


@pytest.mark.slow
def test_calibrate_refits_keeps_the_measurements_and_plan_says_so(project: Path, tmp_path: Path) -> None:
    folder = project / "build" / "engines" / "yard"
    before = project_fit(project)
    assert before.measured == 0
    predicted = plan_latency(folder / "model.onnx", PlanRequest(("fp16",)), MAXN_SUPER, input_size=[256],
                             fit=before).rows[0].latency_ms
    # the device is 1.8x slower than the published fit predicts, at batch 1 and 4
    batch4 = plan_latency(folder / "model.onnx", PlanRequest(("fp16",), batch=4), MAXN_SUPER, input_size=[256],
                          fit=before).rows[0].latency_ms
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_jetson_result(folder, {1: 1.8 * predicted, 4: 1.8 * batch4})))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(dict(run_bench(folder, batches=[1], iterations=3, warmup=1, progress=lambda _: None),
                                   ran_on="this host")))
    foreign = tmp_path / "foreign.json"
    result = _jetson_result(folder, {1: 2.0})
    result["artifact"]["onnx_sha256"] = "f" * 64  # measured with an ONNX this project never compiled
    foreign.write_text(json.dumps(result))

    done = calibrate_project(project, [bench, cpu, foreign])
    assert (done.new, done.kept) == (2, 0)
    assert any("cpu.json" in s and "not comparable" in s for s in done.skipped)
    assert any("foreign.json" in s and "is not in" in s and "engines/yard" in s for s in done.skipped)
    errors = [(done.calibration.error(s.row.latency_ms, b), done.calibration.error(s.row.latency_ms, a))
              for s, b, a in done.calibration.yours]
    assert all(b == pytest.approx(1 - 1 / 1.8, abs=0.01) and a < b for b, a in errors)
    model_path, measurements_path = project_latency_files(project)
    assert done.model_path == model_path and model_path.is_file() and measurements_path.is_file()
    fit = project_fit(project)
    assert (fit.published, fit.measured) == (60, 2) and fit.fitted_on[0].startswith("60 published figures + 2 of")
    after = plan_latency(folder / "model.onnx", PlanRequest(("fp16",)), MAXN_SUPER, input_size=[256], fit=fit)
    assert after.rows[0].latency_ms > 1.3 * predicted  # the plan follows the device now
    assert after.as_dict()["error_band"]["fitted_on"][0].startswith("60 published figures + 2 of your")

    again = calibrate_project(project, [bench])  # the same run again: nothing new, the kept ones refitted
    assert (again.new, again.kept) == (0, 2)
    with pytest.raises(ConfigError, match="not a bench result --calibrate reads"):
        bad = tmp_path / "fleet.json"
        bad.write_text(json.dumps({"schema": "edgebuild.bench-fleet/1", "groups": []}))
        calibrate_project(project, [bad])


def test_the_command_line_refuses_half_a_calibration_and_a_bad_duration(project: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from edgebuild.cli import main

    bench = tmp_path / "bench.json"
    bench.write_text("{}")
    no_flag = CliRunner().invoke(main, ["plan", "-p", str(project), str(bench)])
    assert no_flag.exit_code == 2 and "BENCH.json files go with --calibrate" in no_flag.output
    no_files = CliRunner().invoke(main, ["plan", "-p", str(project), "--calibrate"])
    assert no_files.exit_code == 2 and "--calibrate needs BENCH.json files" in no_files.output
    # a refit plans nothing: a plan's options with it are refused, not silently dropped
    planned = CliRunner().invoke(main, ["plan", "-p", str(project), "--calibrate", "--min-fps", "30", "--module",
                                        "nano", str(bench)])
    assert planned.exit_code == 2 and "plans nothing: --min-fps, --module go without it" in planned.output
    weight = CliRunner().invoke(main, ["plan", "-p", str(project), "--weight", "2"])
    assert weight.exit_code == 2 and "--weight goes with --calibrate" in weight.output
    folder = project / "build" / "engines" / "yard"
    bad = CliRunner().invoke(main, ["bench", str(folder), "-p", str(project), "--duration", "30x"])
    assert bad.exit_code != 0 and "write a duration like 90s, 30m, 2h or 1h30m" in bad.output
