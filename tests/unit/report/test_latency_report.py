"""The predicted latency per group and candidate in the compile summary, the fleet summary and the fleet's
build report: p50, band, budget verdict, and what produced the numbers."""

from __future__ import annotations

import json
from pathlib import Path

from edgebuild.cli.render import predicted_latency_lines
from edgebuild.latency.budget import CandidateLatency, GroupLatency, PredictedLatency
from edgebuild.report.fleet_report import FleetGroupRecord, FleetRecord, write_fleet_report

SOURCE = "latency model fitted to 53 published figures of TensorRT latency, not a measurement"


def _group(name: str, budget: float | None, verdicts: dict[str, str], model: str = "") -> GroupLatency:
    candidates = tuple(CandidateLatency(p, ms, ms * 0.8, ms * 1.3, verdicts.get(p, "no budget"))
                       for p, ms in (("fp16", 4.0), ("int8", 3.0)))
    return GroupLatency(name, model, "orin-nano-8gb", "MAXN_SUPER", True, "6.2", budget, candidates, SOURCE)


def test_the_compile_summary_shows_each_candidate_its_band_and_verdict() -> None:
    latency = PredictedLatency((_group("yard-cams", None, {}),
                                _group("dock", 2.0, {"fp16": "misses", "int8": "misses"}),
                                _group("gate", 2.8, {"fp16": "misses", "int8": "in band"})),
                               ("legacy: no latency prediction: power mode any of xavier-nx has no known GPU clock",))
    text = "\n".join(predicted_latency_lines(latency))
    assert "predicted latency (p50 GPU compute, batch 1; not measured)" in text
    assert "yard-cams  orin-nano-8gb MAXN_SUPER*  int8       3.00    2.40-3.90  -" in text
    assert "no budget" in text and "misses" in text and "in band" in text
    assert f"from the {SOURCE}" in text
    assert "REFUSED: dock: dock: every candidate's predicted latency misses the 2 ms budget" in text
    assert "WARNING: gate: no candidate's predicted p50 meets the 2.8 ms budget" in text
    assert "legacy: no latency prediction" in text
    assert predicted_latency_lines(PredictedLatency(())) == []


def test_the_fleet_record_keeps_the_prediction_and_its_report_shows_it(tmp_path: Path) -> None:
    latency = PredictedLatency((_group("yard-cams", 20.0, {"fp16": "meets", "int8": "meets"}, model="detector"),))
    group = FleetGroupRecord("yard-cams", "orin-nano-8gb@6.2", ("detector",), {"detector": "int8"}, latency=latency)
    assert FleetGroupRecord.from_dict(json.loads(json.dumps(group.as_dict()))) == group
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "fleet.json").write_text(json.dumps(FleetRecord("box", (group,)).as_dict()))
    written = write_fleet_report(tmp_path / "build")
    markdown = written["markdown"].read_text()
    assert f"## yard-cams: predicted latency ({SOURCE})" in markdown
    assert "| yard-cams (detector) | orin-nano-8gb MAXN_SUPER (assumed: the fastest) | int8 | 3.00 | 2.40-3.90 | 20 " \
           "| meets |" in markdown
    html = written["html"].read_text()
    assert "<h3>Predicted latency (" in html and "predicted p50 ms" in html
