"""A dry run of an untrained model (--no-gate), and groups that fail on their own (issue: real architectures)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.project import TINY_MODEL, TINY_TOML, write_tiny_project


def _compile(root: Path, *args: str):
    return CliRunner().invoke(main, ["compile", "-p", str(root), "--no-progress", *args])


def test_an_untrained_model_stops_at_the_gate_and_dry_runs_with_no_gate(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.split('[[fleet]]\nname = "dock"')[0])  # one group: yard-cams
    stopped = _compile(tmp_path)
    assert stopped.exit_code == 11, stopped.output
    assert "retention cannot be measured" in stopped.output and "--no-gate" in stopped.output

    dry = _compile(tmp_path, "--no-gate")
    assert dry.exit_code == 11, dry.output  # everything ran but package, which refuses an ungated candidate
    assert "GATE OFF" in dry.output and "not packaged: the candidate was selected with the gate off" in dry.output
    assert "engine     ran" in dry.output and "container  ran" in dry.output
    assert (tmp_path / "build" / "containers" / "yard-cams" / "Dockerfile").is_file()
    gate = json.loads((tmp_path / "build" / "gate" / "gate.json").read_text())
    assert gate["selected"] == "int8" and "GATE OFF" in gate["selection_rule"]

    shipped = _compile(tmp_path, "--no-gate", "--ship-ungated")
    assert shipped.exit_code == 0, shipped.output
    assert list((tmp_path / "build" / "packages" / "yard-cams").glob("*.edgebundle"))


def test_a_group_blocked_by_preflight_is_skipped_and_the_others_go_on(tmp_path: Path) -> None:
    write_tiny_project(tmp_path)
    model = tmp_path / "tinydet" / "model.py"
    # LayerNormalization (opset 17): TensorRT 8.6 and 10.x parse it, 8.5 (JetPack 5) does not
    model.write_text(TINY_MODEL.replace('        y = self.conv(images).flatten(2).transpose(1, 2)\n',
                                        '        y = self.conv(images).flatten(2).transpose(1, 2)\n'
                                        '        y = torch.nn.functional.layer_norm(y, (6,))\n'))
    done = _compile(tmp_path, "--no-gate", "--ship-ungated", "--json")
    assert done.exit_code == 9, done.output  # some groups failed: preflight's exit code
    stages = {s["name"]: {r["group"]: r["status"] for r in s["runs"]} for s in json.loads(done.stdout)["stages"]}
    blocked = {g for g, status in stages["preflight"].items() if status == "failed"}
    assert blocked == {"dock", "legacy"}, stages["preflight"]
    assert stages["gate"] == {None: "ran"}
    assert stages["package"]["yard-cams"] == "ran"  # the clean group is packaged
    assert stages["engine"]["dock"] == "not run" and stages["package"]["legacy"] == "not run"
