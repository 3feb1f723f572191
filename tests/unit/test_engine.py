"""Engine placement and recipes; builds go through the TensorRT test double (tests/fakes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.config import load_project
from edgebuild.engine import decide_placement, plan_engine
from edgebuild.errors import LimitError
from edgebuild.pipeline import plan_compile
from edgebuild.profiles import load_catalog
from edgebuild.runtime.device import DeviceFacts
from tests.fakes.tensorrt_double import make_tensorrt


def test_placement_local_host_check_and_deferred() -> None:
    target = load_catalog().parse_target("orin-nano-8gb@6.2")
    jetson = DeviceFacts("10.3.0.30", "", "8.7", "36.4.3", ("nvidia,p3767-0005", "nvidia,tegra234"))
    assert decide_placement(target, jetson)[0] == "local"
    other_jetson = DeviceFacts("8.5.2.2", "", "8.7", "35.4.1", ("nvidia,p3701-0005", "nvidia,tegra234"))
    placement, why = decide_placement(target, other_jetson)
    assert placement == "host-check" and "never packaged" in why
    x86 = DeviceFacts("10.3.0", "", "8.9", None, ())
    assert decide_placement(target, x86)[0] == "host-check"
    bare = DeviceFacts(None, "import tensorrt failed: No module named 'tensorrt'", None, None, ())
    placement, why = decide_placement(target, bare)
    assert placement == "deferred" and "TensorRT is not installed" in why


def test_compile_on_a_cpu_host_defers_engines_with_recipes(example_copy) -> None:
    root = example_copy("digits-classifier")
    result = CliRunner().invoke(main, ["compile", "-p", str(root), "--json"])
    assert result.exit_code == 0, result.output
    stages = {s["name"]: s for s in json.loads(result.stdout)["stages"]}
    engines = {run["group"]: run["record"] for run in stages["engine"]["runs"]}
    assert {g: e["placement"] for g, e in engines.items()} == {"sorters": "deferred", "line-cams": "deferred"}
    assert not any(e["built"] for e in engines.values())
    recipe = json.loads((root / "build" / engines["sorters"]["folder"] / "recipe.json").read_text())
    assert recipe["precision"] == "int8" and recipe["shippable_engine"] is False
    assert recipe["profiles"]["images"] == [[1, 1, 8, 8], [8, 1, 16, 16], [32, 1, 32, 32]]
    assert recipe["workspace_bytes"] == 256 * 1024 * 1024  # cgroups/orin-nano-4gb.toml's TensorRT workspace
    assert recipe["limits"]["name"] == "orin-nano-4gb" and recipe["limits"]["memory"] == 1 << 30
    assert recipe["tensorrt"] == "10.3.0.30" and recipe["timing_cache"] == "orin-nano-4gb-trt10.3.0.30.cache"


HOST_CHECK = DeviceFacts("10.3.0", "", "8.9", None, ())


def _gated(root: Path):
    CliRunner().invoke(main, ["validate", "-p", str(root)])
    project = load_project(root)
    from edgebuild.gate import GateResult, gate_dir

    return project, GateResult.load(gate_dir(project))


def _builds(trt) -> int:
    return trt.call_names().count("Builder.build_serialized_network")


def test_host_check_build_writes_engine_json_that_is_not_shippable(example_copy) -> None:
    project, gate = _gated(example_copy("digits-classifier"))
    group = plan_compile(project, "sorters").groups[0]
    record = plan_engine(project, group, gate, host=HOST_CHECK, trt=make_tensorrt("10.3.0"))
    assert record.placement == "host-check" and record.built and not record.kept
    engine = json.loads((project.build_dir / record.folder / "engine.json").read_text())
    assert engine["shippable"] is False and engine["compute_capability"] == "8.9"
    assert engine["target"] == "orin-nano-4gb@6.2" and engine["precision"] == "int8"


def test_a_built_engine_is_kept_while_what_it_depends_on_is_unchanged(example_copy) -> None:
    project, gate = _gated(example_copy("digits-classifier"))
    group = plan_compile(project, "sorters").groups[0]
    trt = make_tensorrt("10.3.0")
    first = plan_engine(project, group, gate, host=HOST_CHECK, trt=trt)
    plan_file = project.build_dir / first.folder / "engine.plan"
    built = plan_file.stat().st_mtime_ns
    messages: list[str] = []
    again = plan_engine(project, group, gate, host=HOST_CHECK, previous=first, trt=trt, report=messages.append)
    assert again.kept and _builds(trt) == 1 and plan_file.stat().st_mtime_ns == built
    assert "kept the engine built host-check" in messages[0]

    newer = project.model_copy(update={"ota": project.ota.model_copy(update={"version": "9.9.9"})})
    # the recipe changes, not the build
    kept = plan_engine(newer, group, gate, host=HOST_CHECK, previous=again, trt=trt)
    assert kept.kept and _builds(trt) == 1
    assert json.loads((project.build_dir / first.folder / "recipe.json").read_text())["model_version"] == "9.9.9"

    forced = plan_engine(project, group, gate, host=HOST_CHECK, previous=kept, force=True, trt=trt)
    assert not forced.kept and _builds(trt) == 2

    bigger = replace(group, limits=replace(group.limits, tensorrt_workspace=group.limits.tensorrt_workspace * 2))
    rebuilt = plan_engine(project, bigger, gate, host=HOST_CHECK, previous=forced, trt=trt)
    assert not rebuilt.kept and rebuilt.build_key != forced.build_key and _builds(trt) == 3

    tight = replace(bigger, limits=replace(bigger.limits, engine_device_memory_max=1 << 20))
    with pytest.raises(LimitError, match="more than the 1.0 MiB"):  # a kept engine meets the new budget too
        plan_engine(project, tight, gate, host=HOST_CHECK, previous=rebuilt, trt=trt)
    assert _builds(trt) == 3

    plan_file.write_bytes(b"damaged")
    repaired = plan_engine(project, bigger, gate, host=HOST_CHECK, previous=rebuilt, trt=trt)
    assert not repaired.kept and _builds(trt) == 4  # the plan no longer matches engine.json's plan_sha256


def test_an_engine_over_the_presets_device_memory_budget_is_refused(example_copy) -> None:
    root = example_copy("digits-classifier")
    (root / "small.toml").write_text('module = "orin-nano-4gb"\n[limits]\nmemory = "512M"\ncpus = 2\n'
                                     '[gpu]\ntensorrt_workspace = "1M"\nengine_device_memory_max = "8M"\n')
    text = (root / "edgebuild.toml").read_text()
    own_preset = 'name = "sorters"\ncgroup_preset = "small.toml"\n'
    (root / "edgebuild.toml").write_text(text.replace('name = "sorters"\n', own_preset))
    project, gate = _gated(root)
    group = plan_compile(project, "sorters").groups[0]
    # the double's engine reports 12345678 bytes (11.8 MiB) of device memory
    with pytest.raises(LimitError, match="more than the 8.0 MiB preset small allows"):
        plan_engine(project, group, gate, host=HOST_CHECK, trt=make_tensorrt("10.3.0"))
    recipe = json.loads((project.build_dir / "engines" / "sorters" / "recipe.json").read_text())
    assert recipe["workspace_bytes"] == 1 << 20 and recipe["limits"]["name"] == "small"


def _device_result(value: float):
    from edgebuild.evaluate import Evaluation

    return lambda project, folder, url, report=None: (
        Evaluation("top-1", value, {"top-1": value}, "tensorrt 10.3.0 (recorded)", 359, 0.5), {})


def test_accept_measures_only_shipping_engines_and_refuses_one_below_the_threshold(example_copy) -> None:
    from edgebuild.engine import EngineRecord, accept_engine
    from edgebuild.stages import _accept_verdict

    project, gate = _gated(example_copy("digits-classifier"))
    shipped = EngineRecord(group="sorters", target="orin-nano-4gb@6.2", placement="ssh://nvidia@orin-01",
                           reason="built there", folder="engines/sorters", build_key="k", built=True, kept=False,
                           host={})
    good = accept_engine(project, shipped, gate, evaluate_remote=_device_result(gate.reference_value * 0.97))
    assert good.applicable and good.retention == pytest.approx(0.97)
    bad = accept_engine(project, shipped, gate, evaluate_remote=_device_result(gate.reference_value * 0.80))
    assert bad.applicable and bad.retention == pytest.approx(0.80)

    class Inputs:  # what the stage's verdict reads
        records = {"gate": gate}

    Inputs.project = project
    error = _accept_verdict(Inputs, bad)
    assert error is not None and error.exit_code == 11
    assert "keeps 0.800 of the FP32 top-1" in error.message and "not packaged" in error.message
    assert _accept_verdict(Inputs, good) is None

    deferred = replace(shipped, placement="deferred", built=False)
    skipped = accept_engine(project, deferred, gate, evaluate_remote=lambda *a, **k: pytest.fail("not measured"))
    assert not skipped.applicable and "deferred" in skipped.reason and _accept_verdict(Inputs, skipped) is None
    host_check = replace(shipped, placement="host-check")
    assert not accept_engine(project, host_check, gate).applicable
