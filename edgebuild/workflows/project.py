"""The project commands' work: ``check``, ``data prepare`` and ``profiles show``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import GroupFacts, SelectedGroup
    from edgebuild.workflows.check import Finding

__all__ = ["Checked", "check_project", "prepare_project_data", "profile_catalog", "profile_records"]



@dataclass(frozen=True)
class Checked:
    project: Project
    fleet: list[GroupFacts]  # every fleet group described (SelectedGroup.describe)
    findings: list[Finding]  # notes only: a problem is raised
    to_prepare: list[str]  # data paths data.prepare will make


def check_project(project_dir: Path) -> Checked:
    """The project file, its entry points and data checked (raises the first problem) and its fleet grouped.

    An entry point's model is built and run at the profile's shapes; data.prepare is imported, not run.
    """
    from edgebuild.datasets.project_data import missing_data
    from edgebuild.project.config import load_project
    from edgebuild.workflows.check import Finding, check_code_and_data, raise_for_problems
    from edgebuild.workflows.work import select_work

    project = load_project(project_dir)
    work = select_work(project, "all")
    findings = model_file_findings(project, work.groups) + check_code_and_data(project)
    findings += [Finding(f"fleet[{i}].use_dla", "deprecated: the old spelling of accelerator = \"dla0\" (still read); "
                         "write accelerator = \"dla0\" (or dla1, or dla: either core)")
                 for i, g in enumerate(project.fleet) if g.accelerator_key == "use_dla"]
    raise_for_problems(project, findings)
    to_prepare = sorted(missing_data(project)) if project.data.prepare else []
    return Checked(project, [g.describe() for g in work.groups], findings, to_prepare)


def model_file_findings(project: Project, groups: Sequence[SelectedGroup] | None = None) -> list[Finding]:
    """``[model] source`` checked as validate's model stage checks it, without exporting
    (``edgebuild.sources.model_file_checks``): its problems and what was checked, as ``model.source`` findings.
    ``groups``: the fleet groups whose TensorRT the opset must fit (default: every group)."""
    from edgebuild.sources.model_file_checks import check_model_file
    from edgebuild.workflows.check import Finding

    if groups is None:
        from edgebuild.workflows.work import select_work

        groups = select_work(project, "all").groups
    checked = check_model_file(project, groups)
    key = "model.source"
    return [Finding(key, _without_prefix(project, key, e.message), type(e), e.hint) for e in checked.problems] + \
        [Finding(key, note) for note in checked.notes]


def _without_prefix(project: Project, key: str, message: str) -> str:
    """A message as a finding holds it: raise_for_problems names the project file, the finding its key."""
    return message.removeprefix(f"{project.source}: ").removeprefix(f"{key}: ").removeprefix(f"{key} ")


def prepare_project_data(project_dir: Path, *, progress: Progress = lambda _: None) -> str | None:
    """Run the project's data.prepare when a data path is missing: what ran, or None when nothing had to."""
    from edgebuild.datasets.project_data import prepare_data
    from edgebuild.project.config import load_project

    project = load_project(project_dir)
    return str(project.data.prepare) if prepare_data(project, progress) else None


def profile_records(name: str) -> JsonObject:
    """A target (MODULE@JETPACK), module or JetPack release from the catalog: ``target``, ``module``
    and ``jetpack`` records as they apply; TargetError for anything else."""
    from edgebuild.errors import TargetError
    from edgebuild.targets.profiles import load_catalog

    catalog = load_catalog()
    if "@" in name:
        resolved = catalog.parse_target(name)
        return {"target": resolved.id, "module": resolved.module.model_dump(),
                "jetpack": resolved.release.model_dump()}
    if name in catalog.modules:
        return {"module": catalog.modules[name].model_dump()}
    if name in catalog.releases:
        return {"jetpack": catalog.releases[name].model_dump()}
    raise TargetError(
        f"unknown target, module or JetPack release {name!r}",
        hint=f"modules: {', '.join(catalog.modules)}; JetPack: {', '.join(catalog.releases)}",
    )


def profile_catalog() -> dict[str, list[JsonObject]]:
    """Every JetPack release and module of the catalog, as records."""
    from edgebuild.targets.profiles import load_catalog

    catalog = load_catalog()
    return {"jetpack": [r.model_dump() for r in catalog.releases.values()],
            "modules": [m.model_dump() for m in catalog.modules.values()]}
