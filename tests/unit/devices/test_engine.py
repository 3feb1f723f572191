"""Engine placement and recipes; builds go through the TensorRT test double (tests/fakes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.devices.engines import place_and_build_engine
from edgebuild.devices.placement import decide_placement
from edgebuild.errors import LimitError
from edgebuild.project.config import load_project
from edgebuild.runtime.engines.device import DeviceFacts
from edgebuild.targets.profiles import load_catalog
from edgebuild.workflows.work import select_work
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
    from edgebuild.accuracy.gate import GateResult, gate_dir

    return project, GateResult.load(gate_dir(project))


def _builds(trt) -> int:
    return trt.call_names().count("Builder.build_serialized_network")


def test_host_check_build_writes_engine_json_that_is_not_shippable(example_copy) -> None:
    project, gate = _gated(example_copy("digits-classifier"))
    group = select_work(project, "sorters").groups[0]
    record = place_and_build_engine(project, group, gate, host=HOST_CHECK, trt=make_tensorrt("10.3.0"))
    assert record.placement == "host-check" and record.built and not record.kept
    engine = json.loads((project.build_dir / record.folder / "engine.json").read_text())
    assert engine["shippable"] is False and engine["compute_capability"] == "8.9"
    assert engine["target"] == "orin-nano-4gb@6.2" and engine["precision"] == "int8"


def test_a_built_engine_is_kept_while_what_it_depends_on_is_unchanged(example_copy) -> None:
    project, gate = _gated(example_copy("digits-classifier"))
    group = select_work(project, "sorters").groups[0]
    trt = make_tensorrt("10.3.0")
    first = place_and_build_engine(project, group, gate, host=HOST_CHECK, trt=trt)
    engine_file = project.build_dir / first.folder / "engine.plan"
    built = engine_file.stat().st_mtime_ns
    messages: list[str] = []
    again = place_and_build_engine(project, group, gate, host=HOST_CHECK, trt=trt, progress=messages.append)
    assert again.kept and _builds(trt) == 1 and engine_file.stat().st_mtime_ns == built
    assert "kept the int8 engine built host-check" in messages[0]

    newer = project.model_copy(update={"ota": project.ota.model_copy(update={"version": "9.9.9"})})
    # the recipe changes, not the build
    kept = place_and_build_engine(newer, group, gate, host=HOST_CHECK, trt=trt)
    assert kept.kept and _builds(trt) == 1
    assert json.loads((project.build_dir / first.folder / "recipe.json").read_text())["model_version"] == "9.9.9"

    forced = place_and_build_engine(project, group, gate, host=HOST_CHECK, force=True, trt=trt)
    assert not forced.kept and _builds(trt) == 2

    bigger = replace(group, limits=replace(group.limits, tensorrt_workspace=group.limits.tensorrt_workspace * 2))
    rebuilt = place_and_build_engine(project, bigger, gate, host=HOST_CHECK, trt=trt)
    assert not rebuilt.kept and rebuilt.build_key != forced.build_key and _builds(trt) == 3

    tight = replace(bigger, limits=replace(bigger.limits, engine_device_memory_max=1 << 20))
    with pytest.raises(LimitError, match="more than the 1.0 MiB"):  # a kept engine meets the new budget too
        place_and_build_engine(project, tight, gate, host=HOST_CHECK, trt=trt)
    assert _builds(trt) == 3

    engine_file.write_bytes(b"damaged")
    repaired = place_and_build_engine(project, bigger, gate, host=HOST_CHECK, trt=trt)
    assert not repaired.kept and _builds(trt) == 4  # the engine file no longer matches engine.json's plan_sha256


def test_an_engine_over_the_presets_device_memory_budget_is_refused(example_copy) -> None:
    root = example_copy("digits-classifier")
    (root / "small.toml").write_text('module = "orin-nano-4gb"\n[limits]\nmemory = "512M"\ncpus = 2\n'
                                     '[gpu]\ntensorrt_workspace = "1M"\nengine_device_memory_max = "8M"\n')
    text = (root / "edgebuild.toml").read_text()
    own_preset = 'name = "sorters"\ncgroup_preset = "small.toml"\n'
    (root / "edgebuild.toml").write_text(text.replace('name = "sorters"\n', own_preset))
    project, gate = _gated(root)
    group = select_work(project, "sorters").groups[0]
    # the double's engine reports 12345678 bytes (11.8 MiB) of device memory
    with pytest.raises(LimitError, match="more than the 8.0 MiB preset small allows"):
        place_and_build_engine(project, group, gate, host=HOST_CHECK, trt=make_tensorrt("10.3.0"))
    recipe = json.loads((project.build_dir / "engines" / "sorters" / "recipe.json").read_text())
    assert recipe["workspace_bytes"] == 1 << 20 and recipe["limits"]["name"] == "small"


def _recorded_device(reference: float, retention: dict[str, float], calls: list[str]):
    """A device evaluation that gives each candidate a recorded retention (the plumbing test is test_ssh_build)."""
    from edgebuild.accuracy.evaluate import Evaluation
    from edgebuild.runtime.base.recipe import Recipe

    def evaluate(project, folder, url, data=None, backend="auto", progress=None):
        assert backend == "tensorrt"
        candidate = Recipe.load(folder).candidate
        calls.append(candidate)
        value = reference * retention[candidate]
        return Evaluation("top-1", value, {"top-1": value}, "tensorrt 10.3.0 (recorded)", 359, 0.5), {}

    return evaluate


def _built_there(monkeypatch: pytest.MonkeyPatch, trt) -> None:
    """Builds "on the device" go to the TensorRT double here (test_ssh_build runs the real SSH path)."""
    import edgebuild.devices.engines as engine
    from edgebuild.runtime.engines.device import build_from_recipe

    monkeypatch.setattr(engine, "build_over_ssh", lambda recipe_path, url, progress=None: build_from_recipe(
        recipe_path, HOST_CHECK, verify_device=False, trt=trt))


def test_an_engine_refused_on_its_device_is_replaced_by_the_next_passing_candidate(
        example_copy, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgebuild.devices.acceptance import build_and_accept
    from edgebuild.devices.placement import candidate_order
    from edgebuild.runtime.base.recipe import Recipe
    from edgebuild.stages.engine import refusal

    project, gate = _gated(example_copy("digits-classifier"))
    group = replace(select_work(project, "sorters").groups[0], build_on="ssh://nvidia@orin-01")
    trt = make_tensorrt("10.3.0")
    _built_there(monkeypatch, trt)
    assert candidate_order(gate) == ["int8", "fp16", "fp32"]
    calls: list[str] = []
    device = _recorded_device(gate.reference_value, {"int8": 0.80, "fp16": 0.99, "fp32": 1.0}, calls)
    messages: list[str] = []
    record = build_and_accept(project, group, gate, host=HOST_CHECK, evaluate_remote=device, progress=messages.append)
    assert record.candidate == "fp16" and record.built and calls == ["int8", "fp16"] and _builds(trt) == 2
    assert [r.candidate for r in record.refused] == ["int8"] and record.refused[0].retention == pytest.approx(0.8)
    assert record.accepted.candidate == "fp16" and record.accepted.retention == pytest.approx(0.99)
    assert any("REFUSED the int8 engine: retention 0.800 < 0.92" in m for m in messages)
    folder = project.build_dir / record.folder
    recipe = Recipe.load(folder)
    assert recipe.candidate == "fp16" and recipe.precision == "fp16"
    assert recipe.accepted is not None and recipe.accepted.retention == 0.99
    assert json.loads((folder / "engine.json").read_text())["accepted"]["where"] == "ssh://nvidia@orin-01"
    recipe.verify_files(folder)  # engine.json was rewritten, its engine file was not
    assert refusal(record, gate) is None

    # a second run measures nothing and builds nothing: the refusal and the acceptance are stored
    again = build_and_accept(project, group, gate, host=HOST_CHECK,
                             evaluate_remote=lambda *a, **k: pytest.fail("measured again"))
    assert again.kept and again.candidate == "fp16" and _builds(trt) == 2 and again.refused == record.refused

    # a stricter threshold (the gate's policy: what a new min_retention gives) re-decides from the
    # stored measurements, then measures fp32
    strict = replace(gate, policy=replace(gate.policy, min_retention=0.995))
    calls.clear()
    stricter = build_and_accept(project, group, strict, host=HOST_CHECK, evaluate_remote=device)
    assert stricter.candidate == "fp32" and calls == ["fp32"] and stricter.accepted.retention == 1.0
    assert [r.candidate for r in stricter.refused] == ["int8", "fp16"]

    # nothing passes: the group stops with exit 11 and every number
    impossible = _recorded_device(gate.reference_value, {"int8": 0.5, "fp16": 0.6, "fp32": 0.7}, [])
    failed = build_and_accept(project, group, gate, host=HOST_CHECK, force=True, evaluate_remote=impossible)
    assert failed.accepted is None and [r.candidate for r in failed.refused] == ["int8", "fp16", "fp32"]
    error = refusal(failed, gate)
    assert error is not None and error.exit_code == 11
    assert "int8: top-1" in error.message and "retention 0.700" in error.message
    assert "nothing is packaged" in error.message


def test_only_engines_that_ship_are_measured(example_copy) -> None:
    from edgebuild.devices.acceptance import build_and_accept
    from edgebuild.stages.engine import refusal

    project, gate = _gated(example_copy("digits-classifier"))
    group = select_work(project, "sorters").groups[0]
    never = lambda *a, **k: pytest.fail("not measured")  # noqa: E731
    deferred = build_and_accept(project, group, gate, host=DeviceFacts(None, "no tensorrt", None, None, ()),
                                evaluate_remote=never, evaluate_local=never)
    assert not deferred.built and deferred.accepted is None and deferred.fallback == "fp16"
    assert refusal(deferred, gate) is None
    host_check = build_and_accept(project, group, gate, host=HOST_CHECK, trt=make_tensorrt("10.3.0"),
                                  evaluate_remote=never, evaluate_local=never)
    assert host_check.built and not host_check.needs_acceptance and host_check.fallback is None
    assert refusal(host_check, gate) is None


def test_a_first_boot_int8_recipe_carries_the_fp16_fallback(example_copy) -> None:
    from edgebuild.runtime.base.recipe import Recipe

    project, gate = _gated(example_copy("digits-classifier"))
    group = select_work(project, "sorters").groups[0]
    place_and_build_engine(project, group, gate, host=DeviceFacts(None, "no tensorrt", None, None, ()))
    folder = project.build_dir / "engines" / "sorters"
    recipe = Recipe.load(folder)
    assert recipe.candidate == "int8" and recipe.fallback == "fallback"
    fallback = Recipe.load(folder / "fallback")
    assert fallback.candidate == "fp16" and fallback.fallback is None and fallback.acceptance == "acceptance.npz"
    assert "fallback/model.onnx" in recipe.file_hashes(folder)
    (folder / "fallback" / "recipe.json").write_text((folder / "fallback" / "recipe.json").read_text() + " ")
    with pytest.raises(Exception, match="fallback/recipe.json is missing or does not match"):
        recipe.verify_files(folder)

    off = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"first_boot_fallback": False})})
    place_and_build_engine(off, group, gate, host=DeviceFacts(None, "no tensorrt", None, None, ()))
    assert Recipe.load(folder).fallback is None and not (folder / "fallback").exists()
