"""Where each target's TensorRT engine is built, and the recipe it is built from.

A TensorRT plan is tied to the TensorRT version and the GPU's compute capability and cannot be
cross-built for a Jetson on x86. So every target gets a placement:

- ``local``: this host is a Jetson of the target's module family on the target's L4T release,
  with TensorRT: the engine is built here and is shippable;
- ``host-check``: this host has TensorRT and a GPU but is not the target: the engine is built to
  catch parser and builder failures, and is never packaged for a Jetson;
- ``deferred``: no TensorRT here: the recipe (ONNX + build settings) goes to the device, which
  builds the engine once.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.cache import atomic_output_dir, file_sha256

if TYPE_CHECKING:
    from edgebuild.config import Project
    from edgebuild.gate import GateResult
    from edgebuild.pipeline import BuildUnit
    from edgebuild.profiles import Target

RECIPE_FILE = "recipe.json"
#: TensorRT's build workspace: an eighth of the module's memory, at most 1 GiB (shared CPU/GPU DRAM)
MAX_WORKSPACE_BYTES = 1 << 30


@dataclass(frozen=True)
class HostFacts:
    tensorrt: str | None
    tensorrt_problem: str
    compute_capability: str | None
    l4t: str | None
    compatible: tuple[str, ...]


def parse_nv_tegra_release(text: str) -> str | None:
    """``# R36 (release), REVISION: 4.3, GCID: ...`` -> ``36.4.3``."""
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def probe_host(root: Path = Path("/")) -> HostFacts:
    """What this host offers for engine builds; ``root`` is injectable for tests."""
    release = root / "etc" / "nv_tegra_release"
    l4t = parse_nv_tegra_release(release.read_text(errors="replace")) if release.is_file() else None
    compatible_file = root / "proc" / "device-tree" / "compatible"
    compatible = tuple(s for s in compatible_file.read_bytes().decode(errors="replace").split("\0") if s) \
        if compatible_file.is_file() else ()
    version, problem = _tensorrt_version()
    capability = None
    if version:
        try:
            from edgebuild.backends.tensorrt import default_memory

            capability = default_memory().compute_capability()
        except Exception as exc:  # no GPU, no CUDA binding: the reason is part of the placement
            problem = f"TensorRT {version} is installed but no usable CUDA GPU: {exc}"
    return HostFacts(version, problem, capability, l4t, compatible)


def _tensorrt_version() -> tuple[str | None, str]:
    if importlib.util.find_spec("tensorrt") is None:
        return None, "TensorRT is not installed on this host"
    try:
        return importlib.metadata.version("tensorrt"), ""
    except importlib.metadata.PackageNotFoundError:  # JetPack's apt package has no pip metadata
        import tensorrt

        return str(tensorrt.__version__), ""


def decide_placement(target: Target, host: HostFacts) -> tuple[str, str]:
    """(placement, why) for one target on this host."""
    release, module = target.release, target.module
    if host.tensorrt is None or host.compute_capability is None:
        return "deferred", f"{host.tensorrt_problem}; the engine is to be built on the device from the recipe"
    same_trt = host.tensorrt.split(".")[:3] == release.tensorrt.split(".")[:3]
    same_l4t = host.l4t in (release.l4t, *release.l4t_aliases)
    same_module = any(c in host.compatible for c in module.compatible[:-1])  # the last one is the SoC
    if host.l4t and same_trt and same_l4t and same_module:
        return "local", f"this host is a {module.name} on L4T R{host.l4t} with TensorRT {host.tensorrt}"
    return "host-check", (
        f"this host (TensorRT {host.tensorrt}, sm {host.compute_capability}"
        + (f", L4T R{host.l4t}" if host.l4t else ", not a Jetson")
        + f") is not {target.id} (TensorRT {release.tensorrt}, sm {module.compute_capability}): the engine "
        "checks the build and is never packaged")


def workspace_bytes(target: Target) -> int:
    return min(MAX_WORKSPACE_BYTES, target.module.memory_gb * (1 << 30) // 8)


def write_recipe(project: Project, unit: BuildUnit, gate: GateResult, placement: str, why: str) -> Path:
    """The engine recipe of one fleet group: the selected ONNX and the builder settings."""
    target = unit.group.target
    chosen = gate.candidate(gate.selected)
    precision = "int8" if chosen.precision.startswith("int8") else chosen.precision
    folder = project.build_dir / "engines" / unit.group.name
    with atomic_output_dir(folder) as staging:
        source = gate.folder / chosen.onnx
        shutil.copyfile(source, staging / "model.onnx")
        recipe: dict[str, Any] = {
            "group": unit.group.name,
            "target": target.id,
            "placement": placement,
            "placement_reason": why,
            "shippable_engine": placement == "local",
            "onnx": "model.onnx",
            "onnx_sha256": file_sha256(staging / "model.onnx"),
            "precision": precision,
            "candidate": chosen.precision,
            "kept_fp32": chosen.kept_fp32,
            "retention": chosen.retention,
            "accuracy_backend": chosen.backend,
            "profiles": {s.name: [s.min_shape, s.opt_shape, s.max_shape] for s in project.model.inputs},
            "workspace_bytes": workspace_bytes(target),
            "dla_core": 0 if unit.group.use_dla else None,
            "timing_cache": f"{target.module.id}-trt{target.release.tensorrt}.cache",
            "module": _module_facts(target),
            "jetpack": target.release.jetpack,
            "l4t": target.release.l4t,
            "tensorrt": target.release.tensorrt,
        }
        (staging / RECIPE_FILE).write_text(json.dumps(recipe, indent=2))
    return folder / RECIPE_FILE


def _module_facts(target: Target) -> dict[str, Any]:
    module = target.module
    return {"id": module.id, "name": module.name, "compute_capability": module.compute_capability,
            "compatible": module.compatible}


def build_from_recipe(recipe_path: Path, host: HostFacts, *, trt: Any = None,
                      report: Any = lambda _: None) -> Path:
    """Build the engine of a recipe on this host; writes ``engine.plan`` and ``engine.json``."""
    from edgebuild.backends.tensorrt import BuildSettings, build_engine

    recipe = json.loads(recipe_path.read_text())
    folder = recipe_path.parent
    cache_dir = folder.parent / "timing-caches"
    cache_dir.mkdir(parents=True, exist_ok=True)
    settings = BuildSettings(
        onnx_path=folder / recipe["onnx"], plan_path=folder / "engine.plan", precision=recipe["precision"],
        profiles={name: tuple(tuple(s) for s in shapes) for name, shapes in recipe["profiles"].items()},
        workspace_bytes=recipe["workspace_bytes"], timing_cache_path=cache_dir / recipe["timing_cache"],
        dla_core=recipe["dla_core"], report=report)
    metadata = build_engine(settings, trt=trt)
    engine_json = {
        **metadata,
        "target": recipe["target"], "module": recipe["module"], "jetpack": recipe["jetpack"],
        "l4t": recipe["l4t"], "placement": recipe["placement"], "shippable": recipe["shippable_engine"],
        "compute_capability": host.compute_capability, "built_on_l4t": host.l4t,
        "onnx_sha256": recipe["onnx_sha256"],
    }
    (folder / "engine.json").write_text(json.dumps(engine_json, indent=2, default=str))
    return folder / "engine.json"


def plan_engines(project: Project, units: tuple[BuildUnit, ...], gate: GateResult, *,
                 host: HostFacts | None = None, trt: Any = None, report: Any = lambda _: None) -> list[dict[str, Any]]:
    """Write a recipe per unit, decide where its engine is built, and build it when that is here."""
    host = host or probe_host()
    planned = []
    for unit in units:
        placement, why = decide_placement(unit.group.target, host)
        recipe = write_recipe(project, unit, gate, placement, why)
        entry = {"group": unit.group.name, "target": unit.target_id, "placement": placement,
                 "reason": why, "recipe": str(recipe), "host": asdict(host)}
        if placement != "deferred":
            report(f"engine: building {unit.target_id} ({placement})")
            entry["engine_json"] = str(build_from_recipe(recipe, host, trt=trt, report=report))
        planned.append(entry)
    return planned
