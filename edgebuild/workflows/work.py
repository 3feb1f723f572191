"""The work and the partial compile every command beside ``compile`` starts from.

``select_work`` is what the compile works on, decided above the stage runner (which knows
nothing of targets): the fleet groups a ``--target`` selector selects, parsed once
(:class:`Selection`), each with its limit preset resolved and checked against its module.
``load_work`` is that for the project in a folder; ``run_until`` runs one
stage and what it reads, reusing what is up to date: a single-stage command (``export``,
``validate``, ``container``, ...) is this, so the pipeline decides what is up to date, never the
command. ``compiled_artifact`` is the one model folder ``bench`` measures when given none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from edgebuild.pipeline.runner import Work
from edgebuild.stages.session import CompileSettings
from edgebuild.targets.profiles import SelectedGroup
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.pipeline.runner import CompileReport, Stage, StageOutcome
    from edgebuild.project.config import Project
    from edgebuild.project.schema import FleetGroup
    from edgebuild.targets.profiles import Catalog

__all__ = ["CompileWork", "select_work"]

R = TypeVar("R")
#: what a compile works on: the project and its selected fleet groups (limit presets resolved)
CompileWork = Work[SelectedGroup]


@dataclass(frozen=True)
class Selection:
    """A ``--target`` selector parsed once: the text as written and the fleet groups it names."""

    text: str
    names: tuple[str, ...]  # in fleet order


def select(selector: str, fleet: list[FleetGroup], catalog: Catalog | None = None) -> Selection:
    """Parse ``selector`` against ``fleet`` (the project's, or a fleet file's, groups)."""
    from edgebuild.targets.profiles import load_catalog, select_groups

    return Selection(selector, tuple(g.name for g in select_groups(selector, fleet, catalog or load_catalog())))


def select_work(project: Project, selector: str | Selection, catalog: Catalog | None = None) -> CompileWork:
    """Select the groups and resolve each one's limit preset once (checked against its module).

    ``selector`` is a ``--target`` as written, or a :class:`Selection` already parsed (a fleet
    file's, of which this model's project runs some groups).
    """
    from edgebuild.targets.limits import check_against_module, preset_for_group
    from edgebuild.targets.profiles import load_catalog, select_groups

    catalog = catalog or load_catalog()
    if isinstance(selector, Selection):
        text, chosen = selector.text, [g for g in select_groups("all", project.fleet, catalog)
                                       if g.name in selector.names]
    else:
        text, chosen = selector, select_groups(selector, project.fleet, catalog)
    groups = []
    for group in chosen:
        preset = preset_for_group(group, project.runtime.cgroup_preset, project.root)
        check_against_module(preset, group.target.module)
        groups.append(replace(group, limits=preset))
    return Work(project, text, tuple(groups))


def load_work(project_dir: Path, selector: str) -> CompileWork:
    """The project at ``project_dir`` and the fleet groups ``selector`` selects."""
    from edgebuild.project.config import load_project

    return select_work(load_project(project_dir), selector)


def run_until(work: CompileWork, stage: Stage[R], *, say: Progress, force: bool = False, progress: bool = False,
              settings: CompileSettings = CompileSettings()) -> CompileReport:
    """Run ``stage`` and what it reads (reusing what is up to date); raises what failed before ``stage``.

    ``force`` runs ``stage`` again (and nothing before it); ``settings`` are the command's flags
    the stages read (container flavor, package_since, ...).
    """
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_work

    done = compile_work(work, until=stage.name, options=Options(force=frozenset({stage.name} if force else ()),
                                                               progress=progress), settings=settings, progress=say)
    earlier = next((o.error for o in done.stages if o.stage.name != stage.name and o.error), None)
    if earlier is not None:
        raise earlier
    return done


def ran(done: CompileReport, stage: Stage[R]) -> StageOutcome[R]:
    """What ``stage`` did in ``done`` (which ran it: a bug otherwise)."""
    outcome = done.outcome(stage)
    assert outcome is not None, f"{stage.name} was not run"
    return outcome


def compiled_folders(work: CompileWork) -> dict[str, Path]:
    """Each selected group's model folder (``build/engines/<group>``), compiled or not."""
    from edgebuild.project.layout import BuildLayout

    layout = BuildLayout.of(work.project)
    return {g.name: layout.engine(g.name) for g in work.groups}


def is_compiled(folder: Path) -> bool:
    from edgebuild.runtime.base.recipe import RECIPE_FILE

    return (folder / RECIPE_FILE).is_file()


def compiled_artifact(project_dir: Path, selector: str) -> Path:
    """The one compiled model folder ``selector`` selects; ConfigError when it selects none or several."""
    from edgebuild.errors import ConfigError

    compiled = [f for f in compiled_folders(load_work(project_dir, selector)).values() if is_compiled(f)]
    if len(compiled) != 1:
        names = ", ".join(f.name for f in compiled) or "none"
        raise ConfigError(f"--target {selector} selects {len(compiled)} compiled group(s) ({names}); bench needs one",
                          hint="pass ARTIFACT (build/engines/<group>) or --target GROUP")
    return compiled[0]
