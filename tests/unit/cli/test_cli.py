"""The command line: fast help, versions, doctor, compile's plan and summary."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from edgebuild import __version__
from edgebuild.cli import main

HEAVY = ("torch", "onnx", "onnxruntime", "pydantic", "PIL", "pycocotools")


def test_help_imports_nothing_heavy_and_is_fast() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); from edgebuild.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules], time.perf_counter() - t)"
    )
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    line = next(x for x in out.stdout.splitlines() if x.startswith("HEAVY"))
    assert line.startswith("HEAVY []"), line
    # "instant" is what the line above proves (nothing heavy imported); the wall-clock bound only catches a gross
    # regression and is loose enough that a busy machine does not fail it
    assert elapsed < 5.0, f"edgebuild --help took {elapsed:.2f} s"
    assert "Exit codes:" in out.stdout


def test_every_command_has_help() -> None:
    for args in (["init"], ["check"], ["compile"], ["profiles"], ["profiles", "list"],
                 ["profiles", "show"], ["doctor"]):
        result = CliRunner().invoke(main, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage:" in result.output


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_doctor_reports_each_capability_with_what_it_enables() -> None:
    result = CliRunner().invoke(main, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.output)}
    for name in ("torch", "onnx", "onnxruntime", "tensorrt", "cuda gpu", "cgroups", "podman",
                 "mender-artifact", "ssh"):
        assert name in checks and checks[name]["enables"]
    assert checks["torch"]["ok"] and checks["torch"]["found"].startswith("torch 2.")
    text = CliRunner().invoke(main, ["doctor"]).output
    if not checks["tensorrt"]["ok"]:
        assert "missing: TensorRT engine builds" in text


def test_check_lists_fleet_with_versions(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["check", "-p", str(tiny_project)])
    assert result.exit_code == 0, result.output
    assert "yard-cams" in result.output and "R36.4.3" in result.output and "10.3.0.30" in result.output


def test_unknown_target_exits_4_with_choices(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["compile", "-p", str(tiny_project), "--target", "orion"])
    assert result.exit_code == 4
    assert "unknown target 'orion'" in result.output and "yard-cams" in result.output


def test_compile_plans_orin_groups_and_says_which_stages_ran(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["compile", "-p", str(tiny_project), "--target", "orin", "--json"])
    # the tiny model detects nothing, so the gate refuses: retention of a 0 metric is undefined
    assert result.exit_code == 11, result.output
    assert "the FP32 model scores mAP50-95 0.0000" in result.stderr
    report = json.loads(result.stdout)
    assert [u["group"] for u in report["units"]] == ["yard-cams", "dock"]
    assert {u["target"]: (u["l4t"], u["tensorrt"]) for u in report["units"]} == {
        "orin-nano-8gb@6.2": ("36.4.3", "10.3.0.30"), "agx-orin-64gb@5.1.2": ("35.4.1", "8.5.2.2")}
    status = {s["name"]: s["status"] for s in report["stages"]}
    assert [status[n] for n in ("model", "reference", "export", "preflight", "gate")] == ["ran"] * 4 + ["failed"]
    assert status["engine"] == "not run" and status["container"] == "not run"
    reference = next(s for s in report["stages"] if s["name"] == "reference")["runs"][0]["record"]
    assert reference["backend"] == "torch-cpu" and reference["images"] == 4


def test_compile_force_takes_an_optional_stage_and_refuses_unknown_ones(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["compile", "-p", str(tiny_project), "--force", "exprot"])
    assert result.exit_code == 2 and "unknown stage exprot; stages: model, reference, export" in result.output
    help_text = CliRunner().invoke(main, ["compile", "--help"]).output
    assert "--force [STAGE]" in help_text and "reused" in help_text
    from edgebuild.cli.build import _STAGE_NAMES_HELP
    from edgebuild.stages import stage_names

    assert _STAGE_NAMES_HELP == ", ".join(stage_names())  # --help names the stages without importing them


def test_model_errors_are_clear(tiny_project: Path) -> None:
    toml = tiny_project / "edgebuild.toml"
    for entry, words in (("tinydet.model:broken_model", "raised RuntimeError: cannot build"),
                         ("tinydet.model:not_a_module", "returned int, not a torch.nn.Module"),
                         ("tinydet.nothere:build_model", "cannot import module 'tinydet.nothere'"),
                         ("tinydet.model:missing", "has no function 'missing'")):
        toml.write_text(toml.read_text().replace(
            toml.read_text().split('entry_point = "')[1].split('"')[0], entry))
        result = CliRunner().invoke(main, ["compile", "-p", str(tiny_project)])
        assert result.exit_code == 6, result.output
        assert words in result.output and "Traceback" not in result.output


def test_every_command_and_subcommand_has_its_own_help() -> None:
    import click

    def walk(group: click.Group, path: list[str]) -> list[list[str]]:
        found = []
        for name, command in group.commands.items():
            found.append([*path, name])
            if isinstance(command, click.Group):
                found += walk(command, [*path, name])
        return found

    commands = walk(main, [])
    assert {"compile", "validate", "bench", "farm", "ota"} <= {c[0] for c in commands}
    for args in commands:
        result = CliRunner().invoke(main, [*args, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, (args, result.output)


def test_verbose_is_carried_by_the_cli_context(tmp_path: Path) -> None:
    from edgebuild.cli.context import CliContext

    quiet = CliRunner().invoke(main, ["check", "-p", str(tmp_path)])
    loud = CliRunner().invoke(main, ["-v", "check", "-p", str(tmp_path)])
    assert quiet.exit_code == loud.exit_code == 3, quiet.output
    assert "Traceback" not in quiet.stderr and "Traceback" in loud.stderr
    context = CliContext(verbose=True)
    assert context.progress() is False and context.progress_lines(quiet=True)("not shown") is None


def test_a_device_validation_is_judged_by_the_gate_policy() -> None:
    from dataclasses import replace
    from types import SimpleNamespace

    from edgebuild.accuracy.policy import AccuracyPolicy
    from edgebuild.errors import AccuracyGateError
    from edgebuild.workflows.validate import DeviceValidation, GroupOnDevice

    row = GroupOnDevice("dock", "int8", "mAP50-95", 0.45, 0.9, False, "tensorrt", "", 4, 1.0, None, [], "ssh://x")
    gated = SimpleNamespace(policy=AccuracyPolicy("mAP50-95", 0.95), reference_value=0.5)
    refused = DeviceValidation("ssh://x", gated, 4, [row]).error
    assert isinstance(refused, AccuracyGateError) and "dock keeps 0.900 of the FP32 mAP50-95" in str(refused)
    assert DeviceValidation("ssh://x", gated, 4, [replace(row, retention=0.96)]).error is None
    ungated = SimpleNamespace(policy=AccuracyPolicy("mAP50-95", 0.95, gated=False), reference_value=0.5)
    assert DeviceValidation("ssh://x", ungated, 4, [row]).error is None  # measured, never refused


def test_a_farm_command_without_a_coordinator_is_a_usage_error(tiny_project: Path, monkeypatch) -> None:
    monkeypatch.delenv("LG_COORDINATOR", raising=False)
    for args in (["farm", "status"], ["validate", "--farm"], ["compile", "--farm"]):  # bench: compiled first
        result = CliRunner().invoke(main, [*args, "-p", str(tiny_project)])
        assert result.exit_code == 2, (args, result.output)
        command = " ".join(a for a in args if not a.startswith("-"))
        assert "--farm needs a labgrid coordinator" in result.stderr and f" {command} [OPTIONS]" in result.stderr
