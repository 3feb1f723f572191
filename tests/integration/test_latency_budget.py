"""A latency budget no candidate can meet stops the group at the budget stage, before its engine (issues 37, 44):
its own exit code, the table of predictions, nothing built for the group, and the build report saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.project import TINY_TOML, write_tiny_project


def test_an_impossible_budget_refuses_the_group_before_its_engine_and_the_others_go_on(tmp_path: Path) -> None:
    two_groups = TINY_TOML.split('[[fleet]]\nname = "legacy"')[0]  # yard-cams and dock
    write_tiny_project(tmp_path, two_groups.replace('jetpack = "6.2"\n',
                                                    'jetpack = "6.2"\nlatency_budget_ms = 0.0001\n'))
    # --no-gate: the tiny model is untrained; the budget is checked after the gate either way
    done = CliRunner().invoke(main, ["compile", "-p", str(tmp_path), "--no-progress", "--no-gate",
                                     "--ship-ungated"])
    assert done.exit_code == 17, done.output
    # one walk: the budget stage refuses the group, the runner runs none of its later stages
    assert "budget     failed   yard-cams: failed" in done.output and "dock: ran" in done.output
    assert "yard-cams: not run (budget did not succeed for yard-cams)" in done.output  # the engine stage's line
    assert list((tmp_path / "build" / "packages" / "dock").glob("*.edgebundle"))  # the other group went on
    assert "error: latency budget: yard-cams: every candidate's predicted latency misses the 0.0001 ms" in done.output
    for words in ("precision  p50 ms  band ms", "misses", "orin-nano-8gb MAXN_SUPER", "not a measurement",
                  "yard-cams: not run (engine did not succeed for yard-cams)"):
        assert words in done.output
    assert not (tmp_path / "build" / "engines" / "yard-cams").exists()  # nothing was built for it
    last = json.loads((tmp_path / "build" / ".records" / "last-compile.json").read_text())
    assert last["exit_code"] == 17
    summary = (tmp_path / "build" / "report" / "summary.md").read_text()
    assert "### Predicted latency" in summary and "| yard-cams | orin-nano-8gb MAXN_SUPER" in summary
    assert "| dock | agx-orin-64gb" in summary and "| no budget |" in summary
    assert "Predicted latency" in (tmp_path / "build" / "report" / "index.html").read_text()


@pytest.mark.slow  # the shapes detector's gate: minutes on a busy 2-core machine
def test_a_fleet_group_whose_model_misses_its_budget_gets_no_engine(example_copy) -> None:
    for name in ("shapes-detector", "digits-classifier"):
        example_copy(name)  # siblings, as in examples/: the fleet file names them as ../<name>
    box = example_copy("camera-box")
    toml = box / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('models = ["detector"]\n',
                                             'models = ["detector"]\nlatency_budget_ms = 0.0001\n'))
    done = CliRunner().invoke(main, ["compile", "--target", "dock", "-p", str(box), "--no-progress"])
    assert done.exit_code == 17, done.output
    assert "dock (detector): every candidate's predicted latency misses the 0.0001 ms budget" in done.output
    assert "predicted latency (p50 GPU compute, batch 1; not measured)" in done.output
    fleet = json.loads((box / "build" / "fleet.json").read_text())
    dock = next(g for g in fleet["groups"] if g["group"] == "dock")
    assert dock["memory_plan"]["fits"] and "misses the 0.0001 ms budget" in dock["error"]
    assert dock["predicted_latency"]["groups"][0]["model"] == "detector"
    assert {c["verdict"] for c in dock["predicted_latency"]["groups"][0]["candidates"]} == {"misses"}
    assert not (box / "build" / "models" / "detector" / "engines" / "dock").exists()  # nothing built for it
    assert not (box / "build" / "groups" / "dock").exists()
    assert "dock: predicted latency" in (box / "build" / "report" / "summary.md").read_text()
