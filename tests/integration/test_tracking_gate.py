"""The tracking gate in the gate stage: the compiled shapes example with [accuracy.tracking] on a small set
(2 streams x 30 frames), every candidate's HOTA recorded and judged against FP32's (docs/tracking-gate.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main

TABLE = "\n[accuracy.tracking]\nstreams = 2\nframes = 30\n"


def _validate(root: Path, *more: str):
    return CliRunner().invoke(main, ["validate", "-p", str(root), "--target", "yard-cams", "--no-progress", *more])


def test_the_gate_tracks_every_candidate_and_refuses_below_min_retention(compiled_example) -> None:
    root = compiled_example("shapes-detector", "yard-cams")
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    toml.write_text(text + TABLE)
    first = _validate(root, "--json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert report["reused"] is False and report["measured"] == 0, "the mAP measurements are the compile's"
    tracking = report["tracking"]
    assert tracking["metric"] == "HOTA" and tracking["streams"] == 2 and tracking["frames"] == 60
    rows = {r["precision"]: r for r in tracking["rows"]}
    assert set(rows) == {c["precision"] for c in report["candidates"]} >= {"fp32", "fp16", "int8"}
    assert rows["fp32"]["retention"] == 1.0 and tracking["reference"] == rows["fp32"]["HOTA"] > 0.5
    for row in rows.values():
        assert row["retention"] == pytest.approx(row["HOTA"] / rows["fp32"]["HOTA"], abs=1e-5) and row["passed"]
        assert 0 < row["IDF1"] <= 1 and row["MOTA"] <= 1 and not row["stored"]
    shown = _validate(root)  # nothing changed: the stored decision, as text
    assert shown.exit_code == 0, shown.output
    assert "tracking gate: HOTA, min retention 0.99" in shown.output and "HOTA retention" in shown.output
    assert "IDF1" in shown.output and "MOTA" in shown.output

    toml.write_text(text + TABLE.replace("frames = 30", "frames = 30\nmin_retention = 1.5"))
    refused = _validate(root)
    assert refused.exit_code == 11, refused.output
    assert "Traceback" not in refused.output and "measuring" not in refused.output  # decided from stored results
    fp16 = next(line for line in refused.output.splitlines() if line.strip().startswith("- fp16:"))
    assert f"tracking HOTA {rows['fp16']['HOTA']:.4f} keeps {rows['fp16']['retention']:.3f} of FP32's " \
           f"{rows['fp32']['HOTA']:.4f}, below [accuracy.tracking] min_retention 1.5" in fp16
    gate = json.loads((root / "build" / "gate" / "gate.json").read_text())
    assert all(not r["passed"] and r["stored"] for r in gate["tracking"]["rows"])
    assert all("tracking HOTA" in c["refused"] and not c["passed"] for c in gate["candidates"])
