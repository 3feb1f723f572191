"""The single-stage build commands: ``export``, ``preflight``, ``container``, ``package``, ``report``.

Each runs its stage and what it reads (:func:`edgebuild.workflows.work.run_until`: what is up to
date is reused) and returns what the command shows. An error of the stage itself is raised
here, except where the command shows its result first (``Preflighted.error``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.stages.container import CONTAINER
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.export import EXPORT
from edgebuild.stages.package import PACKAGE
from edgebuild.stages.preflight import PREFLIGHT
from edgebuild.stages.session import CompileSettings
from edgebuild.text import Progress
from edgebuild.workflows.work import load_work, ran, run_until

if TYPE_CHECKING:
    from edgebuild.errors import PreflightError
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.targets.preflight import TargetPreflight

__all__ = ["Exported", "export_model", "package_fleet", "preflight_targets", "rebuild_report", "write_containers"]



@dataclass(frozen=True)
class Exported:
    record: ExportRecord
    reused: bool  # nothing changed since the last export


def export_model(project_dir: Path, selector: str, *, force: bool = False,
                 progress: Progress = lambda _: None) -> Exported:
    """The model exported to ONNX for every selected target's parser (reused when nothing changed)."""
    outcome = ran(run_until(load_work(project_dir, selector), EXPORT, force=force, say=progress), EXPORT)
    record = outcome.record()
    if outcome.error or record is None:
        raise outcome.error or AssertionError("the export neither ran nor failed")
    return Exported(record, outcome.status == "reused")


@dataclass(frozen=True)
class Preflighted:
    onnx: Path
    results: list[TargetPreflight]  # one per selected group

    @property
    def error(self) -> PreflightError | None:
        """The refusal when a target has a blocking problem (exit 9), raised after the results are shown."""
        from edgebuild.errors import PreflightError

        blocked = [r for r in self.results if r.blocking]
        if not blocked:
            return None
        return PreflightError(
            f"{self.onnx.name}: blocking problems for " + ", ".join(f"{r.group} = {r.target}" for r in blocked),
            hint="each listed node needs the suggested fix, or drop that target",
        )


def preflight_targets(project_dir: Path, selector: str, onnx_path: Path | None = None, *,
                      precision: str | None = None, progress: Progress = lambda _: None) -> Preflighted:
    """The project's export (the preflight stage, run as needed), or ``onnx_path``, checked against
    each selected group's TensorRT parser (as a ``precision`` candidate, where given)."""
    from edgebuild.targets.preflight import preflight

    work = load_work(project_dir, selector)
    if onnx_path is not None:
        from dataclasses import replace

        from edgebuild.latency.dla_cost import dla_cost_findings, image_shape
        from edgebuild.targets.preflight import load_graph

        results = preflight(onnx_path, list(work.groups), precision)
        if any(g.use_dla for g in work.groups):  # priced at the project's opt_shape, as the stage does
            model, (batch, hw) = load_graph(onnx_path), image_shape(list(work.project.model.inputs))
            results = [replace(r, findings=r.findings + tuple(dla_cost_findings(model, g, batch=batch, input_hw=hw)))
                       for r, g in zip(results, work.groups)]
        return Preflighted(onnx_path, results)
    done = run_until(work, PREFLIGHT, say=progress)
    outcome = ran(done, PREFLIGHT)
    failed = next((u.error for u in outcome.units if u.record is None and u.error), None)
    if failed is not None:
        raise failed
    export = done.record(EXPORT)
    assert export is not None, "preflight ran without the export"
    if precision is not None:  # the export as a candidate of that precision (the stage checked what it carries)
        return Preflighted(export.onnx_path, preflight(export.onnx_path, list(work.groups), precision))
    return Preflighted(export.onnx_path, [u.record for u in outcome.units if u.record is not None])


def write_containers(project_dir: Path, selector: str, *, flavor: str = "jetson", base_image: str | None = None,
                     build: bool = False, tool: str | None = None, pull: bool = True,
                     progress: Progress = lambda _: None) -> dict[str, JsonObject]:
    """Each selected group's container build context (the container stage), and with ``build`` its
    image built with podman or docker: the container records by group, ``context`` an absolute path
    and ``built`` the image tag."""
    from edgebuild.shipping.container import build_image, group_container_spec

    work = load_work(project_dir, selector)
    done = run_until(work, CONTAINER, settings=CompileSettings(container_flavor=flavor, base_image=base_image),
                     say=progress)
    outcome = ran(done, CONTAINER)
    if outcome.error:
        raise outcome.error
    build_dir = work.project.build_dir
    records = {u.group: {**u.record.as_dict(), "context": str(build_dir / u.record.context)}
               for u in outcome.units if u.group is not None and u.record is not None}
    if build:
        for group in work.groups:
            engine = done.record(ENGINE, group.name)
            assert engine is not None, "the container stage ran without the engine"
            model_folder = build_dir / engine.folder
            container = group_container_spec(group, model_folder, flavor=flavor, base_image=base_image)
            records[group.name]["built"] = build_image(Path(records[group.name]["context"]), container,
                                                       tool=tool, pull=pull, progress=progress)
    return records


def package_fleet(project_dir: Path, selector: str, *, since: Path | None = None, ship_ungated: bool = False,
                  progress: Progress = lambda _: None) -> JsonObject:
    """Each selected group's OTA artifacts (the package stage) and ``build/packages/fleet.json``,
    which this returns."""
    import json

    from edgebuild.project.fleet_file import is_fleet_file
    from edgebuild.shipping.ota import write_fleet_manifest

    if is_fleet_file(project_dir):  # several models: the fleet's compile packages each group with all of them
        from edgebuild.workflows.fleet_compile import compile_fleet

        done = compile_fleet(project_dir, selector, package_since=since, ship_ungated=ship_ungated, say=progress)
        if done.error:
            raise done.error
        return json.loads(BuildLayout(done.fleet.build_dir).fleet_manifest.read_text())
    work = load_work(project_dir, selector)
    outcome = ran(run_until(work, PACKAGE, settings=CompileSettings(package_since=since, ship_ungated=ship_ungated),
                            say=progress), PACKAGE)
    if outcome.error:
        raise outcome.error
    return write_fleet_manifest(work.project, [u.record for u in outcome.units if u.record is not None])


def rebuild_report(project_dir: Path) -> dict[str, Path]:
    """``build/report/`` written again from the last compile's records; its files by kind."""
    from edgebuild.project.config import load_project
    from edgebuild.report import write_report

    return write_report(load_project(project_dir).build_dir)
