"""The build report's checks, JUnit and Markdown from a small last-compile.json written by hand.

Two groups: ``cams`` has a blocking preflight finding (so its engine never ran), ``belts`` passed
the gate but its device refused the engine it built. The compile exits 9 (preflight).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from junitparser import JUnitXml

from edgebuild.errors import ConfigError
from edgebuild.report import write_report
from edgebuild.report.build_report import from_compile
from edgebuild.report.html import to_html
from edgebuild.report.junit import to_junit
from edgebuild.report.markdown import to_markdown

FINDING = {"node": "/head/NonMaxSuppression", "op_type": "NonMaxSuppression", "severity": "blocking",
           "problem": "not in TensorRT 8.5's ONNX parser <& \x1b[31m>", "fix": "move NMS out of the graph",
           "source": "onnx-parser-8.5.toml"}


def _candidate(precision: str, retention: float, passed: bool, kept: list[str] | None = None) -> dict:
    return {"precision": precision, "onnx": f"measured/x/{precision}/model.onnx", "metric": "mAP50-95",
            "value": round(0.6 * retention, 4), "retention": retention, "passed": passed, "selectable": True,
            "backend": "onnxruntime-cpu 1.32.0", "latency_ms": 1.5, "kept_fp32": kept or [], "note": "",
            "rejected_by": []}


def _engine(group: str, **extra) -> dict:
    return {"group": group, "target": "t", "placement": "deferred", "reason": "no TensorRT here", "folder":
            f"engines/{group}", "build_key": "k", "built": False, "kept": False, "host": {}, "candidate": "int8-mixed",
            "accepted": None, "refused": [], "fallback": None, "board": None, **extra}


def _run(group: str | None, status: str, detail: str = "", record: dict | None = None, error: str | None = None,
         seconds: float = 0.5) -> dict:
    return {"group": group, "status": status, "detail": detail, "why": detail if status == "not run" else "changed",
            "seconds": seconds, **({"record": record} if record else {}), **({"error": error} if error else {})}


LAST_COMPILE = {
    "project": "yard", "project_file": "/p/edgebuild.toml", "selector": "all", "finished": "2026-01-01T00:00:00Z",
    "exit_code": 9, "error": "model.onnx: blocking problems for cams = xavier-nx@5.1.2\n<script>alert(1)</script>",
    "units": [{"group": "cams", "target": "xavier-nx@5.1.2", "module": "Jetson Xavier NX", "jetpack": "5.1.2",
               "l4t": "35.4.1", "tensorrt": "8.5.2.2"},
              {"group": "belts", "target": "orin-nano-8gb@6.2", "module": "Jetson Orin Nano 8GB", "jetpack": "6.2",
               "l4t": "36.4.3", "tensorrt": "10.3.0.30"}],
    "stages": [
        {"name": "export", "runs": [_run(None, "ran", "opset 17", seconds=4.0)]},
        {"name": "preflight", "runs": [
            _run("cams", "failed", "1 blocking problem(s)", {"group": "cams", "target": "xavier-nx@5.1.2",
                 "tensorrt": "8.5.2.2", "parser_table": "onnx-parser-8.5.toml", "findings": [FINDING], "blocking": 1},
                 error="model.onnx: blocking problems for cams"),
            _run("belts", "ran", "clean", {"group": "belts", "target": "orin-nano-8gb@6.2", "tensorrt": "10.3.0.30",
                 "parser_table": "onnx-parser-10.3.toml", "findings": [], "blocking": 0})]},
        {"name": "gate", "runs": [_run(None, "ran", "selected int8-mixed", {
            "folder": "/p/build/gate", "policy": {"metric": "mAP50-95", "min_retention": 0.95, "gated": True},
            "reference_value": 0.6, "backend":
            "onnxruntime-cpu 1.32.0", "images": 200, "selected": "int8-mixed", "selection_rule": "lowest precision",
            "candidates": [_candidate("fp32", 1.0, True), _candidate("int8", 0.9, False),
                           _candidate("int8-mixed", 0.97, True, ["/backbone/conv1", "/head/conv"])],
            "sensitivity": [{"layer": "/backbone/conv1", "sqnr_db": 12.5}], "next_steps": [], "notes": [],
            "measured": 3, "stored": 0, "seconds": 2.0, "stage": "gate/3"}, seconds=2.0)]},
        {"name": "engine", "runs": [
            _run("cams", "not run", "preflight did not succeed for cams", seconds=0.0),
            _run("belts", "failed", "ssh://jet, int8-mixed engine built; int8-mixed REFUSED", _engine(
                "belts", placement="ssh://nvidia@jet", built=True, refused=[
                    {"candidate": "int8-mixed", "build_key": "k", "plan_sha256": "p", "validation": "v",
                     "where": "ssh://nvidia@jet", "metric": "mAP50-95", "value": 0.5, "images": 200,
                     "reference": 0.6, "retention": 0.83, "backend": "tensorrt 10.3.0.30"}]),
                error="belts: no engine built ssh://nvidia@jet keeps it")]},
    ],
}


def _report(data: dict | None = None):
    return from_compile(copy.deepcopy(data or LAST_COMPILE))


def test_checks_fail_where_preflight_failed_and_where_the_device_refused_every_engine() -> None:
    found = {(c.suite, c.name): c for c in _report().checks}
    assert {k: c.status for k, c in found.items()} == {
        ("preflight", "cams (xavier-nx@5.1.2)"): "failed", ("preflight", "belts (orin-nano-8gb@6.2)"): "passed",
        ("gate", "cams (xavier-nx@5.1.2)"): "passed", ("gate", "belts (orin-nano-8gb@6.2)"): "failed",
        ("stages", "export"): "passed", ("stages", "engine/cams"): "skipped", ("stages", "engine/belts"): "skipped"}
    assert "NonMaxSuppression" in found["preflight", "cams (xavier-nx@5.1.2)"].text
    assert found["preflight", "cams (xavier-nx@5.1.2)"].message == "1 blocking problem(s) for TensorRT 8.5.2.2"
    assert "refused on the device" in found["gate", "belts (orin-nano-8gb@6.2)"].message


def test_junit_parses_and_its_failures_are_the_failing_checks(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(to_junit(_report()))
    xml = JUnitXml.fromfile(str(path))
    assert [s.name for s in xml] == ["preflight", "gate", "stages"]
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (7, 2, 0, 2)
    failing = sorted((s.name, c.name) for s in xml for c in s if not c.is_passed and not c.is_skipped)
    assert failing == [("gate", "belts (orin-nano-8gb@6.2)"), ("preflight", "cams (xavier-nx@5.1.2)")]
    preflight = next(c for c in next(s for s in xml if s.name == "preflight") if c.name.startswith("cams"))
    assert "not in TensorRT 8.5's ONNX parser <&" in preflight.result[0].text  # escaped, and the ESC dropped


def test_a_failed_compile_with_no_failing_check_still_fails_in_junit(tmp_path: Path) -> None:
    data = {**LAST_COMPILE, "stages": [], "exit_code": 5, "error": "data/val: no images"}
    path = tmp_path / "junit.xml"
    path.write_text(to_junit(_report(data)))
    xml = JUnitXml.fromfile(str(path))
    assert xml.failures == 1
    assert [c.name for s in xml for c in s if c.result and not c.is_skipped] == ["compile"]


def test_markdown_has_the_failure_the_fleet_and_the_gate() -> None:
    text = to_markdown(_report())
    assert text.startswith("## edgebuild compile `yard`: FAILED (exit 9, preflight)")
    assert "```\nmodel.onnx: blocking problems for cams = xavier-nx@5.1.2" in text
    assert ("| cams | xavier-nx@5.1.2 | Jetson Xavier NX | 5.1.2 | 35.4.1 | 8.5.2.2 | ❌ FAIL | ✅ pass | not run |"
            in text)
    assert "| belts | orin-nano-8gb@6.2 | Jetson Orin Nano 8GB | 6.2 | 36.4.3 | 10.3.0.30 | ✅ pass | ❌ FAIL |" in text
    assert "| int8-mixed ⭐ | 0.5820 | 0.970 | yes | yes | 1.500 | /backbone/conv1, /head/conv |" in text
    assert "| int8 | 0.5400 | 0.900 | **no** |" in text
    assert "| cams | blocking | /head/NonMaxSuppression | NonMaxSuppression |" in text
    assert "| belts | ssh://nvidia@jet | int8-mixed | built | - | int8-mixed (0.830) | - |" in text
    assert "| export | ran 4.00 s | · | · |" in text and "| engine | · | not run | ❌ FAIL 0.50 s |" in text


def test_html_escapes_what_it_shows_and_loads_nothing() -> None:
    page = to_html(_report())
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Compile failed: exit 9 (preflight)" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page and "url(" not in page
    assert page.count("<svg") == 2  # stage times, retention bars
    assert "/backbone/conv1" in page and "12.50" in page  # kept layers, the sensitivity ranking


def test_bench_results_in_the_build_folder_are_shown(tmp_path: Path) -> None:
    records = tmp_path / ".records"
    records.mkdir()
    (records / "last-compile.json").write_text(json.dumps(LAST_COMPILE))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "fleet.json").write_text(json.dumps({"schema": "edgebuild.bench-fleet/1", "groups": [
        {"group": "belts", "board": "orin-1", "url": "ssh://b", "retried_from": None, "error": None,
         "target": "orin-nano-8gb@6.2", "precision": "int8", "backend": "tensorrt 10.3.0.30", "power_mode": "MAXN",
         "cold_start_s": 1.2, "configs": [{"batch": 1, "concurrency": 1, "p50_ms": 2.25, "p99_ms": 3.5,
                                           "throughput_ips": 440.0}]},
        {"group": "cams", "board": None, "url": None, "retried_from": None, "error": "no board free"}]}))
    (tmp_path / "bench" / "fleet.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    paths = write_report(tmp_path)
    summary = paths["markdown"].read_text()
    assert "| belts | orin-1 | tensorrt 10.3.0.30 | int8 | 1 | 1 | 2.250 | 3.500 | 440.0 |" in summary
    page = paths["html"].read_text()
    assert "FAILED: no board free" in page and "src='data:image/png;base64,iVBORw0KGg" in page


def test_no_recorded_compile_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        write_report(tmp_path)
    assert "run `edgebuild compile` first" in str(caught.value)


def test_the_baseline_check_is_shown_beside_the_gate_table_and_an_old_record_loads_without_it() -> None:
    from edgebuild.accuracy.baseline import judge_baseline

    assert _report().gate.baseline is None  # a gate.json from before issue 34
    check = judge_baseline(0.6, metric="mAP50-95", classes=3, backend="onnxruntime-cpu 1.32.0", images=200,
                           dataset="data.yaml (split 'val')", accept=True, causes=["ignored: the verdict is ok"])
    data = copy.deepcopy(LAST_COMPILE)
    data["stages"][2]["runs"][0]["record"]["baseline"] = check.as_dict()
    report = from_compile(data)
    assert report.gate.baseline == check
    line = "baseline: OK: FP32 mAP50-95 0.6000 on 200 images [onnxruntime-cpu 1.32.0]; floor 0.020"
    assert line in to_markdown(report) and line in to_html(report)
    wrong = judge_baseline(0.001, metric="mAP50-95", classes=3, backend="onnxruntime-cpu 1.32.0", images=200,
                           dataset="data.yaml (split 'val')", enforced=False,
                           causes=["normalization: task.preprocess.mean = [0.0, 0.0, 0.0] <&>"])
    data["stages"][2]["runs"][0]["record"]["baseline"] = wrong.as_dict()
    report = from_compile(data)
    markdown, page = to_markdown(report), to_html(report)
    assert "AT CHANCE (gate off: reported, not enforced)" in markdown
    assert "- likely cause 1: normalization: task.preprocess.mean = [0.0, 0.0, 0.0]" in markdown
    assert "<li>normalization: task.preprocess.mean = [0.0, 0.0, 0.0] &lt;&amp;&gt;</li>" in page
