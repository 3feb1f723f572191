"""Where each target's TensorRT engine is built, and the recipe it is built from.

A TensorRT plan is tied to the TensorRT version and the GPU's compute capability and cannot be
cross-built for a Jetson on x86. So every target gets a placement:

- ``local``: this host is a Jetson of the target's module on the target's L4T release, with
  TensorRT: the engine is built here and is shippable;
- ``ssh://user@host``: the fleet group names a build device (``build_on``); edgebuild checks over
  SSH that it is the target's module and L4T, copies the recipe there, runs its device-side
  builder, fetches the plan, ``engine.json`` and timing cache and checks their hashes; shippable;
- ``host-check``: this host has TensorRT and a GPU but is not the target: the engine is built to
  catch parser and builder failures, and is never packaged for a Jetson;
- ``deferred``: no suitable builder: the recipe (ONNX + build settings) goes to the device, which
  builds the engine once at first start with the same builder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.cache import atomic_output_dir, file_sha256
from edgebuild.errors import EdgebuildError, LimitError, RemoteError
from edgebuild.limits import LimitPreset, check_against_module, human_size, preset_for_group
from edgebuild.runtime.device import (
    ENGINE_FILE,
    ENGINE_JSON,
    RECIPE_FILE,
    DeviceFacts,
    build_from_recipe,
    module_matches,
    probe,
    require_match,
)

if TYPE_CHECKING:
    from edgebuild.config import Project
    from edgebuild.gate import GateResult
    from edgebuild.pipeline import BuildUnit
    from edgebuild.profiles import Target


def decide_placement(target: Target, host: DeviceFacts, build_on: str | None = None) -> tuple[str, str]:
    """(placement, why) for one target on this host; ``build_on`` is the group's ssh:// build device."""
    release, module = target.release, target.module
    if build_on:
        return build_on, f"built on {build_on} after checking over SSH that it is a {module.name} on L4T R{release.l4t}"
    if host.tensorrt is not None:
        same_trt = host.tensorrt.split(".")[:3] == release.tensorrt.split(".")[:3]
        same_l4t = host.l4t in (release.l4t, *release.l4t_aliases)
        if host.l4t and same_trt and same_l4t and module_matches(host, module.compatible):
            return "local", f"this host is a {module.name} on L4T R{host.l4t} with TensorRT {host.tensorrt}"
    if host.tensorrt is None or host.compute_capability is None:
        problem = host.tensorrt_problem if host.tensorrt else \
            f"TensorRT is not installed on this host ({host.tensorrt_problem})"
        return "deferred", (f"{problem}; the device builds the engine from the recipe at first start "
                            "(or name a build device with `build_on = \"ssh://user@host\"` in the fleet group)")
    return "host-check", (
        f"this host (TensorRT {host.tensorrt}, sm {host.compute_capability}"
        + (f", L4T R{host.l4t}" if host.l4t else ", not a Jetson")
        + f") is not {target.id} (TensorRT {release.tensorrt}, sm {module.compute_capability}): the engine "
        "checks the build and is never packaged")


def write_recipe(project: Project, unit: BuildUnit, gate: GateResult, placement: str, why: str,
                 limits: LimitPreset) -> Path:
    """The engine recipe of one fleet group: the selected ONNX, the builder settings and its limits."""
    target = unit.group.target
    chosen = gate.candidate(gate.selected)
    precision = "int8" if chosen.precision.startswith("int8") else chosen.precision
    folder = project.build_dir / "engines" / unit.group.name
    with atomic_output_dir(folder) as staging:
        source = gate.folder / chosen.onnx
        shutil.copyfile(source, staging / "model.onnx")
        recipe: dict[str, Any] = {
            "group": unit.group.name,
            "model_name": project.project.name,
            "model_version": project.ota.version,
            "runtime": project.runtime.model_dump(include={"warmup_budget_s", "port", "max_batch_size",
                                                           "max_queue_delay_ms"}),
            "target": target.id,
            "placement": placement,
            "placement_reason": why,
            "shippable_engine": placement == "local" or placement.startswith("ssh://"),
            "onnx": "model.onnx",
            "onnx_sha256": file_sha256(staging / "model.onnx"),
            "precision": precision,
            "candidate": chosen.precision,
            "kept_fp32": chosen.kept_fp32,
            "retention": chosen.retention,
            "accuracy_backend": chosen.backend,
            "profiles": {s.name: [s.min_shape, s.opt_shape, s.max_shape] for s in project.model.inputs},
            "workspace_bytes": limits.tensorrt_workspace,  # the preset's TensorRT memory-pool limit
            "limits": limits.as_dict(),
            "dla_core": 0 if unit.group.use_dla else None,
            "timing_cache": f"{target.module.id}-trt{target.release.tensorrt}.cache",
            "module": _module_facts(target),
            "jetpack": target.release.jetpack,
            "l4t": target.release.l4t,
            "l4t_accepted": [target.release.l4t, *target.release.l4t_aliases],
            "tensorrt": target.release.tensorrt,
        }
        (staging / RECIPE_FILE).write_text(json.dumps(recipe, indent=2))
    return folder / RECIPE_FILE


def group_limits(project: Project, unit: BuildUnit) -> LimitPreset:
    """The group's runtime limit preset, checked against its module."""
    preset = preset_for_group(project, unit.group)
    check_against_module(preset, unit.group.target.module)
    return preset


def check_engine_memory(engine_json: Path, limits: LimitPreset) -> None:
    """Refuse an engine whose activations need more device memory than the group's preset allows.

    CUDA memory on a Jetson is probably not charged to the container's cgroup, so this check, and
    the memory-pool limit the engine was built with, are what bound it.
    """
    size = json.loads(engine_json.read_text()).get("device_memory_size")
    if size is not None and int(size) > limits.engine_device_memory_max:
        raise LimitError(
            f"{engine_json.parent / ENGINE_FILE}: the engine needs {human_size(int(size))} of device memory, more "
            f"than the {human_size(limits.engine_device_memory_max)} preset {limits.name} allows "
            "(gpu.engine_device_memory_max)",
            hint="lower the max shape of the optimization profile, or use a preset with a larger engine budget")


def _module_facts(target: Target) -> dict[str, Any]:
    module = target.module
    return {"id": module.id, "name": module.name, "compute_capability": module.compute_capability,
            "compatible": module.compatible}


def build_over_ssh(recipe_path: Path, url: str, *, report: Any = lambda _: None,
                   timeout_s: float = 3 * 3600) -> Path:
    """Build a recipe's engine on the Jetson at ``url``; returns the local ``engine.json``.

    Nothing is copied before the device has shown (over SSH) that it is the recipe's module on its
    L4T release; every fetched file is checked against the hash the device computed.
    """
    from edgebuild.remote import SshDevice

    recipe = json.loads(recipe_path.read_text())
    folder = recipe_path.parent
    device = SshDevice(url)
    facts = DeviceFacts.from_dict(device.device_tool(["probe"], timeout_s=120)["device"])
    require_match(facts, recipe, where=url)
    report(f"engine: {url} is {facts.describe()}")
    remote = f"builds/{recipe['group']}-{recipe['onnx_sha256'][:12]}"
    cache_name = f"timing-caches/{recipe['timing_cache']}"
    local_cache = folder.parent / cache_name
    files: dict[str, Path] = {f"{remote}/{RECIPE_FILE}": recipe_path,
                              f"{remote}/{recipe['onnx']}": folder / recipe["onnx"]}
    if local_cache.is_file():
        files[cache_name] = local_cache
    device.put(files, ".")
    report(f"engine: building {recipe['target']} on {url} (this can take minutes)")
    answer = device.device_tool(["build-engine", f"{remote}/{RECIPE_FILE}", "--timing-cache-dir", "timing-caches"],
                                timeout_s=timeout_s)
    expected = {f"{remote}/{name}": digest for name, digest in answer["files"].items()}
    if answer.get("timing_cache_sha256"):
        expected[cache_name] = answer["timing_cache_sha256"]
    fetched = device.fetch(expected)
    for name, data in fetched.items():
        if hashlib.sha256(data).hexdigest() != expected[name]:
            raise RemoteError(f"{url}: {name} arrived with another sha256 than the device computed; "
                              "the transfer was corrupted or the file changed", hint="run the compile again")
    engine_json = json.loads(fetched[f"{remote}/{ENGINE_JSON}"])
    plan = fetched[f"{remote}/{ENGINE_FILE}"]
    if hashlib.sha256(plan).hexdigest() != engine_json.get("plan_sha256"):
        raise RemoteError(f"{url}: the fetched engine.plan does not match the plan_sha256 of its engine.json")
    _write_atomically(folder / ENGINE_FILE, plan)
    _write_atomically(folder / ENGINE_JSON, fetched[f"{remote}/{ENGINE_JSON}"])
    if cache_name in fetched:
        _write_atomically(local_cache, fetched[cache_name])
    report(f"engine: fetched {ENGINE_FILE} ({len(plan)} bytes) and {ENGINE_JSON} from {url}, hashes checked")
    return folder / ENGINE_JSON


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)


def plan_engines(project: Project, units: tuple[BuildUnit, ...], gate: GateResult, *,
                 host: DeviceFacts | None = None, build_on: str | None = None, trt: Any = None,
                 report: Any = lambda _: None) -> list[dict[str, Any]]:
    """Write a recipe per unit, decide where its engine is built, and build it unless deferred.

    ``build_on`` (from ``--build-on``) overrides the groups' own build devices. A failed build is
    recorded in its entry (``error``) and the other units still build.
    """
    host = host or probe()
    planned = []
    for unit in units:
        placement, why = decide_placement(unit.group.target, host, build_on or unit.group.build_on)
        limits = group_limits(project, unit)
        recipe = write_recipe(project, unit, gate, placement, why, limits)
        entry: dict[str, Any] = {"group": unit.group.name, "target": unit.target_id, "placement": placement,
                                 "reason": why, "recipe": str(recipe), "host": host.as_dict()}
        try:
            if placement.startswith("ssh://"):
                entry["engine_json"] = str(build_over_ssh(recipe, placement, report=report))
            elif placement != "deferred":
                report(f"engine: building {unit.target_id} ({placement})")
                entry["engine_json"] = str(build_from_recipe(recipe, host, verify_device=placement == "local",
                                                             trt=trt, report=report))
            if "engine_json" in entry:
                check_engine_memory(Path(entry["engine_json"]), limits)
        except EdgebuildError as exc:
            entry["error"] = exc
        planned.append(entry)
    return planned
