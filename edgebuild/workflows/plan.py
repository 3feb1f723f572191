"""The plan and the partial compile every command beside ``compile`` starts from.

``load_plan`` is a project and the fleet groups a ``--target`` selects; ``run_until`` runs one
stage and what it reads, reusing what is up to date: a single-stage command (``export``,
``validate``, ``container``, ...) is this, so the pipeline decides what is up to date, never the
command. ``compiled_artifact`` is the one model folder ``bench`` measures when given none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgebuild.pipeline.runner import CompileReport, Plan

__all__ = ["compiled_artifact", "compiled_folders", "is_compiled", "load_plan", "run_until"]

Report = Callable[[str], None]


def load_plan(project_dir: Path, selector: str) -> Plan:
    """The project at ``project_dir`` and the fleet groups ``selector`` selects."""
    from edgebuild.pipeline.runner import plan_compile
    from edgebuild.project.config import load_project

    return plan_compile(load_project(project_dir), selector)


def run_until(plan: Plan, stage: str, *, report: Report, force: bool = False, progress: bool = False,
              **options: Any) -> CompileReport:
    """Run ``stage`` and what it reads (reusing what is up to date); raises what failed before ``stage``.

    ``force`` runs ``stage`` again (and nothing before it); ``options`` are further
    ``pipeline.runner.Options`` (container flavor, package_since, ...).
    """
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_plan

    done = compile_plan(plan, until=stage, options=Options(force=frozenset({stage} if force else ()),
                                                          progress=progress, **options), report=report)
    earlier = next((o.error for o in done.stages if o.stage.name != stage and o.error), None)
    if earlier is not None:
        raise earlier
    return done


def compiled_folders(plan: Plan) -> dict[str, Path]:
    """Each selected group's model folder (``build/engines/<group>``), compiled or not."""
    from edgebuild.project.layout import BuildLayout

    layout = BuildLayout.of(plan.project)
    return {g.name: layout.engine(g.name) for g in plan.groups}


def is_compiled(folder: Path) -> bool:
    from edgebuild.runtime.recipe import RECIPE_FILE

    return (folder / RECIPE_FILE).is_file()


def compiled_artifact(project_dir: Path, selector: str) -> Path:
    """The one compiled model folder ``selector`` selects; ConfigError when it selects none or several."""
    from edgebuild.errors import ConfigError

    compiled = [f for f in compiled_folders(load_plan(project_dir, selector)).values() if is_compiled(f)]
    if len(compiled) != 1:
        names = ", ".join(f.name for f in compiled) or "none"
        raise ConfigError(f"--target {selector} selects {len(compiled)} compiled group(s) ({names}); bench needs one",
                          hint="pass ARTIFACT (build/engines/<group>) or --target GROUP")
    return compiled[0]
