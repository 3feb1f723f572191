"""A file's device groups against the profile catalog: a model project's and a fleet file's alike.

``[[fleet]]`` (unique names, known modules and JetPack releases, a DLA placement only where the module has
the core and the JetPack's TensorRT runs the DLA),
``[ota] device_types`` (module ids) and ``[runtime] cgroup_preset`` (a preset's name) are checked
the same way in both kinds of ``edgebuild.toml``, so they are checked here, once.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgebuild.project.schema import NAME_PATTERN, FleetGroup, InputSpec, OtaSection, RuntimeSection
from edgebuild.targets.dla import accelerator_problem
from edgebuild.targets.profiles import Catalog, Target

__all__ = []

#: what a refusal of fp8/nvfp4 for a group suggests
_SPLIT_HINT = ("the gate selects one candidate per model for all its groups, so compile the Thor groups from a "
               "project of their own (or drop it from quantize.precisions)")


def check_groups(fleet: Sequence[FleetGroup], ota: OtaSection, runtime: RuntimeSection, catalog: Catalog) -> list[str]:
    """Every problem of the groups, the device types and the preset name, each as ``key: what``."""
    problems: list[str] = []
    first_seen: dict[str, int] = {}
    for i, group in enumerate(fleet):
        key = f"fleet[{i}]"
        if group.name in first_seen:
            problems.append(
                f"{key}.name: duplicate group name {group.name!r} (also fleet[{first_seen[group.name]}])"
            )
        first_seen.setdefault(group.name, i)
        module = catalog.modules.get(group.module)
        if module is None:
            problems.append(
                f"{key}.module: unknown module {group.module!r} (allowed: {', '.join(sorted(catalog.modules))})"
            )
            continue
        release = catalog.releases.get(group.jetpack)
        if release is None:
            problems.append(
                f"{key}.jetpack: unknown JetPack release {group.jetpack!r} "
                f"(allowed for {module.id}: {', '.join(module.jetpack)})"
            )
            continue
        if module.id not in release.modules:
            problems.append(
                f"{key}: {module.name} is not supported by JetPack {release.jetpack} "
                f"(JetPack releases for {module.id}: {', '.join(module.jetpack)})"
            )
        problem = accelerator_problem(group.accelerator, module, release)
        if problem is not None:
            deprecated = " (use_dla = true is the deprecated spelling of accelerator = \"dla0\")" \
                if group.accelerator_key == "use_dla" else ""
            problems.append(f"{key}.{group.accelerator_key}: {problem}{deprecated}")
        for model, accelerator in (group.placement or {}).items():
            problem = accelerator_problem(accelerator, module, release)
            if problem is not None:
                problems.append(f"{key}.placement.{model}: {problem}")
    for module_id in ota.device_types:
        if module_id not in catalog.modules:
            problems.append(f"ota.device_types: {module_id!r} is not a module id "
                            f"(allowed: {', '.join(sorted(catalog.modules))})")
    preset = runtime.cgroup_preset
    if preset is not None and not NAME_PATTERN.match(preset):
        problems.append(f"runtime.cgroup_preset: not a preset name, found {preset!r}")
    return problems


def static_shape_problems(key: str, inputs: Sequence[InputSpec], runtime: RuntimeSection) -> list[str]:
    """A model placed on a DLA core runs one shape: the DLA has no dynamic shapes, so its engine is built at
    min = opt = max = each input's opt_shape, and the server must send exactly that (single images, unbatched)."""
    problems = []
    if runtime.max_batch_size > 1:
        problems.append(f"{key}: a DLA placement runs one static shape (min = opt = max = opt_shape; the DLA has no "
                        f"dynamic shapes), but runtime.max_batch_size = {runtime.max_batch_size} batches 1 to "
                        f"{runtime.max_batch_size} requests at a time; set runtime.max_batch_size = 1, or place it on "
                        "the GPU (accelerator = \"gpu\")")
    for spec in inputs:
        if spec.opt_shape[0] != 1:
            problems.append(f"{key}: a DLA placement runs one static shape, the opt_shape, but input {spec.name!r} "
                            f"has opt_shape {spec.opt_shape} (batch {spec.opt_shape[0]}) and the server sends single "
                            "images; set its opt_shape[0] = 1, or place it on the GPU (accelerator = \"gpu\")")
    return problems


def check_precisions(precisions: Sequence[str], fleet: Sequence[FleetGroup], catalog: Catalog,
                     key: str = "quantize.precisions") -> list[str]:
    """FP8 and NVFP4 asked for a group whose module or TensorRT cannot run them (Orin, Xavier, Nano: no FP8/FP4
    tensor cores), each as ``key: what``: refused, not skipped, since the one candidate the gate selects for
    all of a model's groups must build on each of them (docs/accuracy.md, "FP8 and NVFP4")."""
    problems = []
    for precision in dict.fromkeys(precisions):
        for group in fleet:
            module, release = catalog.modules.get(group.module), catalog.releases.get(group.jetpack)
            if module is None or release is None:
                continue  # check_groups names those
            why = Target(module, release).precision_refusal(precision)
            if why:
                problems.append(f"{key}: {precision!r} for fleet group {group.name!r}: {why}; {_SPLIT_HINT}")
    return problems
