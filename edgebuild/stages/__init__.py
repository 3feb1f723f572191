"""The compile's stages, one module each: what a stage reads (its key), what it does, its record.

Each stage module defines one ``Stage`` (``edgebuild.pipeline.runner``) that calls one domain
module's public entry point and names its record type, which the stages after it read with
``inputs.record(STAGE)`` and the build report loads with ``STAGE.load``. Order matters: a stage
comes after every stage it reads.

    model ─► reference
      └────► export ─► preflight (per group) ─┐
                 ├───► gate ──────────────────┼─► engine (+ accept) ─► container ─► package
                 └───► budget (per group) ────┘
                                                  (per group from preflight on, but the gate)
"""

from __future__ import annotations

from collections.abc import Callable

from edgebuild.pipeline.runner import CompileReport, Options, Stage, StageOutcome, Work, run_stages
from edgebuild.project.layout import BuildLayout
from edgebuild.stages.budget import BUDGET
from edgebuild.stages.container import CONTAINER
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.export import EXPORT
from edgebuild.stages.gate import GATE
from edgebuild.stages.model import MODEL
from edgebuild.stages.package import PACKAGE
from edgebuild.stages.preflight import PREFLIGHT
from edgebuild.stages.reference import REFERENCE
from edgebuild.stages.session import CompileSession, CompileSettings
from edgebuild.targets.profiles import SelectedGroup
from edgebuild.text import Progress

__all__ = ["MODEL_STAGES", "STAGES", "compile_work", "stage_names"]

STAGES: tuple[Stage, ...] = (MODEL, REFERENCE, EXPORT, PREFLIGHT, GATE, BUDGET, ENGINE, CONTAINER, PACKAGE)
#: what a fleet file's compile runs per model before its groups' memory plans (edgebuild.workflows.fleet_compile)
MODEL_STAGES: tuple[Stage, ...] = (MODEL, REFERENCE, EXPORT, PREFLIGHT, GATE)
#: the stages that read the validation data: the project's ``data.prepare`` runs once before the first of them
READS_DATA = frozenset({REFERENCE.name, GATE.name, ENGINE.name})


def stage_names() -> list[str]:
    return [s.name for s in STAGES]


def stage(name: str) -> Stage:
    """The stage called ``name`` (the one table of stages, their record types and loaders)."""
    return next(s for s in STAGES if s.name == name)


def compile_work(work: Work[SelectedGroup], *, stages: tuple[Stage, ...] = STAGES, until: str | None = None,
                 options: Options = Options(), settings: CompileSettings = CompileSettings(),
                 session: CompileSession | None = None, progress: Progress = lambda _: None,
                 on_stage: Callable[[StageOutcome], None] | None = None) -> CompileReport:
    """Run the compile's ``stages`` for ``work`` (``until``, ``options``, ``progress``, ``on_stage`` as run_stages).

    ``settings`` are the command's flags the stages read; ``session`` what several runs for one
    model share (a fleet's model: its gate, then its engines); the project's data is prepared
    first when a stage that runs reads it. Files are hashed and images sized through the build
    folder's file cache (``edgebuild.statcache``), so a second compile reads only what changed.
    """
    from edgebuild.datasets.project_data import prepare_data
    from edgebuild.statcache import use

    def prepare(running: tuple[Stage, ...]) -> None:
        if any(s.name in READS_DATA for s in running):
            prepare_data(work.project, progress)

    with use(BuildLayout.of(work.project).file_cache):  # the stages' keys hash files and size images through it
        return run_stages(work, stages, until=until, options=options, progress=progress, on_stage=on_stage,
                          session=session or CompileSession(settings), prepare=prepare)
