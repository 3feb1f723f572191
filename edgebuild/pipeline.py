"""``edgebuild compile``: plan one build unit per selected fleet group and run the stages.

A stage is a function ``(context) -> StageOutcome``. Stages that are not built yet are listed
with ``run=None`` so the summary says plainly what did not happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgebuild.config import Project
from edgebuild.errors import EdgebuildError, PreflightError
from edgebuild.profiles import Catalog, SelectedGroup, load_catalog, select_groups


@dataclass(frozen=True)
class BuildUnit:
    """One fleet group built for its target."""

    group: SelectedGroup

    @property
    def target_id(self) -> str:
        return self.group.target.id

    def describe(self) -> dict:
        module, release = self.group.target.module, self.group.target.release
        return {
            "group": self.group.name,
            "in_fleet": self.group.in_fleet,
            "target": self.target_id,
            "module": module.name,
            "compute_capability": module.compute_capability,
            "jetpack": release.jetpack,
            "l4t": release.l4t,
            "tensorrt": release.tensorrt,
            "cuda": release.cuda,
            "max_onnx_opset": release.max_onnx_opset,
            "use_dla": self.group.use_dla,
        }


@dataclass(frozen=True)
class Plan:
    project: Project
    selector: str
    units: tuple[BuildUnit, ...]

    @property
    def releases(self) -> list:
        """The JetPack release of every unit (what the export's opset must fit)."""
        return [u.group.target.release for u in self.units]


@dataclass
class StageOutcome:
    status: str  # "ran", "skipped" (up to date), "deferred", "not available", "failed", "not run"
    detail: str
    data: dict = field(default_factory=dict)
    error: EdgebuildError | None = None  # why a failed stage failed, raised by the CLI at the end


@dataclass
class CompileContext:
    plan: Plan
    progress: bool = True
    force: bool = False
    build_on: str | None = None  # --build-on: an ssh:// build device for every selected group
    report: Callable[[str], None] = lambda _: None
    torch_runner: Any = None  # the loaded PyTorch model, shared by the stages that need it
    export: Any = None  # the ExportRecord, once the export stage ran
    gate: Any = None  # the GateResult


@dataclass(frozen=True)
class Stage:
    name: str
    summary: str
    run: Callable[[CompileContext], StageOutcome] | None


def plan_compile(project: Project, selector: str, catalog: Catalog | None = None) -> Plan:
    catalog = catalog or load_catalog()
    groups = select_groups(selector, project.fleet, catalog)
    return Plan(project, selector, tuple(BuildUnit(g) for g in groups))


# -- stages ------------------------------------------------------------------------------

def _model_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.model import TorchRunner, example_inputs

    project = ctx.plan.project
    started = time.perf_counter()
    runner = TorchRunner(project)
    shapes = {}
    for which in ("min_shape", "opt_shape", "max_shape"):
        outputs = runner.run(example_inputs(project, which))
        shapes[which] = {name: list(array.shape) for name, array in outputs.items()}
    params = sum(p.numel() for p in runner.model.parameters())
    ctx.torch_runner = runner
    return StageOutcome(
        "ran",
        f"{project.model.entry_point} ({params:,} parameters), forward at min/opt/max shapes "
        f"in {time.perf_counter() - started:.1f} s",
        {"parameters": params, "output_shapes": shapes},
    )


def _reference_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.evaluate import evaluate

    result = evaluate(ctx.plan.project, ctx.torch_runner, progress=ctx.progress)
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
    return StageOutcome(
        "ran",
        f"FP32 {metrics} on {result.images} validation images [backend {result.backend}]",
        result.as_dict(),
    )


def _export_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.export import export_for_targets

    project = ctx.plan.project
    record = export_for_targets(project, ctx.plan.releases, force=ctx.force, report=ctx.report,
                                torch_runner=ctx.torch_runner)
    ctx.export = record
    worst = max(record.parity, key=lambda p: p.max_abs)
    verb = "reused (didn't change)" if record.reused else f"exported in {record.seconds:.1f} s"
    return StageOutcome(
        "skipped" if record.reused else "ran",
        f"{verb}: opset {record.opset}, {record.exporter} exporter, parity ok at "
        f"{len({p.shape for p in record.parity})} shapes (max abs error {worst.max_abs:.2g}) -> "
        f"{_relative(record.onnx_path, project.root)}",
        record.as_dict(),
    )


def _preflight_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.preflight import preflight

    results = preflight(ctx.export.onnx_path, [u.group for u in ctx.plan.units])
    blocked = [r for r in results if r.blocking]
    warnings = sum(len(r.findings) - len(r.blocking) for r in results)
    data = {"onnx": str(ctx.export.onnx_path), "targets": [r.as_dict() for r in results]}
    if blocked:
        names = ", ".join(f"{r.group} ({len(r.blocking)})" for r in blocked)
        detail = f"blocking operator problems for {names}; see `edgebuild preflight`"
        return StageOutcome("failed", detail, data, PreflightError(f"{ctx.export.onnx_path.name}: {detail}"))
    return StageOutcome("ran", f"{len(results)} target(s) clean, {warnings} warning(s)", data)


def _gate_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.gate import run_gate, verdict

    result = run_gate(ctx.plan.project, ctx.export, force=ctx.force, progress=ctx.progress, report=ctx.report)
    ctx.gate = result
    summary = ", ".join(f"{c.precision} {c.retention:.3f}{'' if c.passed else ' FAIL'}" for c in result.candidates)
    verb = "reused" if result.reused else "measured"
    refusal = verdict(ctx.plan.project, result)
    if refusal is not None:
        return StageOutcome("failed", f"{verb}: no candidate passes retention >= {result.threshold} "
                                      f"({summary}) [{result.backend}]; see `edgebuild validate`",
                            result.as_dict(), refusal)
    chosen = result.candidate(result.selected)
    return StageOutcome(
        "skipped" if result.reused else "ran",
        f"{verb}: FP32 {result.metric} {result.reference_value:.4f}; retention {summary}; selected "
        f"{chosen.precision} ({chosen.metric} {chosen.value:.4f}) for all {len(ctx.plan.units)} target(s) "
        f"[{result.backend}]",
        result.as_dict(),
    )


def _engine_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.engine import plan_engines

    planned = plan_engines(ctx.plan.project, ctx.plan.units, ctx.gate, build_on=ctx.build_on, report=ctx.report)
    failed = [p for p in planned if "error" in p]
    records = [{**{k: v for k, v in p.items() if k != "error"}, **({"error": str(p["error"])} if "error" in p else {})}
               for p in planned]
    parts = [f"{p['group']} {p['placement']}" + (" FAILED" if "error" in p else "") for p in planned]
    reasons = sorted({p["reason"] for p in planned if "error" not in p})
    if failed:
        first = failed[0]["error"]
        kinds = "; ".join(f"{p['group']}: {p['error'].kind}" for p in failed)
        error = type(first)(f"engine for {failed[0]['group']}: {first.message}", hint=first.hint)
        return StageOutcome("failed", f"{', '.join(parts)} ({kinds}; see engines below)", {"engines": records}, error)
    built = [p for p in planned if "engine_json" in p]
    status = "ran" if built else "deferred"
    return StageOutcome(status, f"{', '.join(parts)}: {'; '.join(reasons)}", {"engines": records})


def _container_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.container import write_project_containers

    project = ctx.plan.project
    records = [record for _, record in write_project_containers(project, ctx.plan.units, report=ctx.report)]
    parts = [f"{r['group']} FROM {r['base_image']} ({'engine' if r['ships_engine'] else 'recipe'}, "
             f"limits {r['limits']['name']}{', systemd unit' if r['systemd_unit'] else ''})" for r in records]
    return StageOutcome("ran", f"wrote {_relative(project.build_dir / 'containers', project.root)}/<group>: "
                               f"{'; '.join(parts)}; images are arm64: build them on a device or an arm64 "
                               "builder (`edgebuild container --build` there)", {"containers": records})


def _package_stage(ctx: CompileContext) -> StageOutcome:
    from edgebuild.ota import package_project

    project = ctx.plan.project
    fleet = package_project(project, ctx.plan.units, report=ctx.report)
    parts = [f"{g} {d['bundle']['size']} bytes{'' if d['signed'] else ' UNSIGNED'}" for g, d in fleet["groups"].items()]
    notes = f"; {'; '.join(fleet['notes'])}" if fleet["notes"] else ""
    return StageOutcome("ran", f"wrote {_relative(project.build_dir / 'packages', project.root)}: "
                               f"{', '.join(parts)} (bundle + Mender artifact each){notes}", fleet)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


STAGES: tuple[Stage, ...] = (
    Stage("model", "load the entry point and weights, run forward at the min/opt/max shapes", _model_stage),
    Stage("reference", "FP32 accuracy of the PyTorch model on the validation set", _reference_stage),
    Stage("export", "ONNX export with dynamic axes and a parity check against PyTorch", _export_stage),
    Stage("preflight", "every ONNX operator checked against each target's TensorRT parser", _preflight_stage),
    Stage("gate", "FP16 and calibrated INT8 (Q/DQ) candidates, accuracy retention against FP32, "
                  "INT8 fallback, selection", _gate_stage),
    Stage("engine", "TensorRT engine per JetPack profile: built here (local, host-check), on a build device "
                    "over SSH, or deferred to the device with its recipe", _engine_stage),
    Stage("container", "runtime container build context and cgroup-limited run specs (docker run, compose, "
                       "systemd) per target", _container_stage),
    Stage("package", "signed OTA bundle and Mender artifact per fleet group, fleet manifest", _package_stage),
)


@dataclass(frozen=True)
class CompileReport:
    plan: Plan
    stages: tuple[tuple[Stage, StageOutcome], ...]

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error(self) -> EdgebuildError | None:
        """The error of the stage that failed, if one did."""
        return next((o.error for _, o in self.stages if o.status == "failed"), None)

    def as_dict(self) -> dict:
        project = self.plan.project
        return {
            "project": project.project.name,
            "project_file": str(project.source),
            "selector": self.plan.selector,
            "units": [u.describe() for u in self.plan.units],
            "stages": [
                {"name": s.name, "status": o.status, "detail": o.detail,
                 **({"data": o.data} if o.data else {})}
                for s, o in self.stages
            ],
        }


def run_compile(plan: Plan, *, progress: bool = True, force: bool = False, build_on: str | None = None,
                report: Callable[[str], None] = lambda _: None,
                on_stage: Callable[[Stage, StageOutcome], None] | None = None) -> CompileReport:
    """Run every stage in order; stages after a failure do not run."""
    ctx = CompileContext(plan, progress, force=force, build_on=build_on, report=report)
    done: list[tuple[Stage, StageOutcome]] = []
    failed = False
    for stage in STAGES:
        if stage.run is None:
            outcome = StageOutcome("not available", "not implemented in this version of edgebuild")
        elif failed:
            outcome = StageOutcome("not run", "an earlier stage failed")
        else:
            try:
                outcome = stage.run(ctx)
            except EdgebuildError as exc:
                outcome = StageOutcome("failed", str(exc.message).splitlines()[0], error=exc)
            failed = outcome.status == "failed"
        done.append((stage, outcome))
        if on_stage:
            on_stage(stage, outcome)
    return CompileReport(plan, tuple(done))
