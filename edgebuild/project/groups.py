"""A file's device groups against the profile catalog: a model project's and a fleet file's alike.

``[[fleet]]`` (unique names, known modules and JetPack releases, DLA where the module has it),
``[ota] device_types`` (module ids) and ``[runtime] cgroup_preset`` (a preset's name) are checked
the same way in both kinds of ``edgebuild.toml``, so they are checked here, once.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgebuild.project.schema import NAME_PATTERN, FleetGroup, OtaSection, RuntimeSection
from edgebuild.targets.profiles import Catalog

__all__ = []


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
        if group.use_dla and module.dla_cores == 0:
            problems.append(f"{key}.use_dla: {module.name} has no DLA cores; set use_dla = false")
    for module_id in ota.device_types:
        if module_id not in catalog.modules:
            problems.append(f"ota.device_types: {module_id!r} is not a module id "
                            f"(allowed: {', '.join(sorted(catalog.modules))})")
    preset = runtime.cgroup_preset
    if preset is not None and not NAME_PATTERN.match(preset):
        problems.append(f"runtime.cgroup_preset: not a preset name, found {preset!r}")
    return problems
