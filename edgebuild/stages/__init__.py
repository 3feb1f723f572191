"""The compile's stages, one module each: what a stage reads (its key), what it does, its record.

Each stage module defines one ``Stage`` (``edgebuild.pipeline.runner``) that calls one domain
module's public entry point and names its record type, which the stages after it read with
``inputs.record(STAGE)`` and the build report loads with ``STAGE.load``. Order matters: a stage
comes after every stage it reads.

    model ─► reference
      └────► export ─► preflight (per group) ─┐
                 └───► gate ──────────────────┴─► engine (+ accept) ─► container ─► package
                                                  (per group from preflight on)
"""

from __future__ import annotations

from typing import Any

from edgebuild.pipeline.runner import CompileReport, Plan, Stage, run_stages
from edgebuild.stages.container import CONTAINER
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.export import EXPORT
from edgebuild.stages.gate import GATE
from edgebuild.stages.model import MODEL
from edgebuild.stages.package import PACKAGE
from edgebuild.stages.preflight import PREFLIGHT
from edgebuild.stages.reference import REFERENCE
from edgebuild.stages.session import CompileSession

__all__ = ["MODEL_STAGES", "STAGES", "compile_plan", "stage", "stage_names"]

STAGES: tuple[Stage, ...] = (MODEL, REFERENCE, EXPORT, PREFLIGHT, GATE, ENGINE, CONTAINER, PACKAGE)
#: what a fleet file's compile runs per model before its groups' memory plans (edgebuild.workflows.fleet)
MODEL_STAGES: tuple[Stage, ...] = (MODEL, REFERENCE, EXPORT, PREFLIGHT, GATE)


def stage_names() -> list[str]:
    return [s.name for s in STAGES]


def stage(name: str) -> Stage:
    """The stage called ``name`` (the one table of stages, their record types and loaders)."""
    return next(s for s in STAGES if s.name == name)


def compile_plan(plan: Plan, **options: Any) -> CompileReport:
    """Run the compile's stages for ``plan`` (``until``, ``options``, ``report``, ``on_stage`` as run_stages)."""
    return run_stages(plan, STAGES, session=CompileSession(), **options)
