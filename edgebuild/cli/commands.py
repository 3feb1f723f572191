"""The ``edgebuild`` command line. Each command parses flags, calls one library function, prints.

Heavy modules (torch, onnx, onnxruntime) are imported by the library functions, never here,
so ``edgebuild --help`` stays instant.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from edgebuild import __version__
from edgebuild.cli.options import click_options
from edgebuild.errors import EXIT_CODES, EdgebuildError
from edgebuild.runtime import options as device_options
from edgebuild.text import table as _table

_EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>2}  {text.strip().rstrip('.')}" for code, text in EXIT_CODES.items()
)


class _Group(click.Group):
    """Prints EdgebuildError as one clear message with its exit code; -v adds the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EdgebuildError as exc:
            if ctx.meta.get("edgebuild.verbose"):
                traceback.print_exc()
            click.echo(f"error: {exc.kind}: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))




project_option = click.option(
    "--project", "-p", "project_dir", default=".", show_default=True, envvar="EDGEBUILD_PROJECT",
    type=click.Path(file_okay=True, dir_okay=True, path_type=Path),
    help="Project folder, or its edgebuild.toml (env EDGEBUILD_PROJECT).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
target_option = click.option(
    "--target", "-t", "selector", default="all", show_default=True,
    help="Which fleet groups: a family (orin), a module id, MODULE@JETPACK, a group name, or 'all'; "
         "comma-separated for several.",
)


@click.group(cls=_Group, epilog=_EXIT_CODE_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="edgebuild")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Take a PyTorch vision model to a fleet of NVIDIA Jetson devices.

    edgebuild reads the project's edgebuild.toml and, for every fleet group the target
    selects, exports the model to ONNX, checks its operators against that JetPack's TensorRT,
    gates FP16/INT8 candidates on accuracy retention, builds engines, runtime containers and
    signed OTA artifacts.

    \b
    Start with:
      edgebuild init                       write a commented edgebuild.toml
      edgebuild check                      validate it
      edgebuild compile --target orin      build for every Orin group of the fleet
      edgebuild doctor                     what this host can do
    """
    ctx.meta["edgebuild.verbose"] = verbose


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing edgebuild.toml.")
def init(directory: Path, force: bool) -> None:
    """Write a commented starter edgebuild.toml into DIRECTORY."""
    from edgebuild.project.template import write_starter

    path = write_starter(directory, force=force)
    click.echo(f"wrote {path}: fill in the model, data and fleet, then run `edgebuild check`")


@main.command()
@project_option
@json_option
def check(project_dir: Path, as_json: bool) -> None:
    """Validate the project file, its code and data, and list the fleet groups.

    The entry points are imported, not called (no model is built, data.prepare does not run),
    class folders are checked against task.classes, and a few images of each data folder are
    decoded.
    """
    from edgebuild.datasets.project_data import missing_data
    from edgebuild.pipeline.runner import plan_compile
    from edgebuild.project.config import load_project
    from edgebuild.workflows.check import check_code_and_data, raise_for_problems

    project = load_project(project_dir)
    plan = plan_compile(project, "all")
    findings = check_code_and_data(project)
    raise_for_problems(project, findings)
    units = [g.describe() for g in plan.groups]
    to_prepare = sorted(missing_data(project)) if project.data.prepare else []
    if as_json:
        _emit_json({"project_file": str(project.source), "valid": True, "fleet": units,
                    "data_to_prepare": to_prepare, "checked": [str(f) for f in findings]})
        return
    click.echo(f"{project.source}: valid ({project.task.kind}, {len(project.task.classes)} classes, "
               f"metric {project.metric}, min retention {project.accuracy.min_retention})")
    for finding in findings:
        click.echo(f"  {finding}")
    if to_prepare:
        click.echo(f"data: {', '.join(to_prepare)} not there yet; data.prepare ({project.data.prepare}) makes it "
                   "on the first compile or validate, or now with `edgebuild data prepare`")
    click.echo(_fleet_table(units))


def _fleet_table(units: list[dict]) -> str:
    rows = [[u["group"] + ("" if u["in_fleet"] else " (not in fleet)"), u["target"], u["jetpack"],
             "R" + u["l4t"], u["tensorrt"], u["cuda"], f"sm {u['compute_capability']}",
             str(u["max_onnx_opset"]), u.get("limits", "-")] for u in units]
    return _table(rows, ["group", "target", "JetPack", "L4T", "TensorRT", "CUDA", "GPU", "max opset", "limits"])


@main.group("data")
def data_group() -> None:
    """The project's calibration and validation data."""


@data_group.command("prepare")
@project_option
def data_prepare_command(project_dir: Path) -> None:
    """Run the project's data.prepare when a data path is missing (compile and validate do this too)."""
    from edgebuild.datasets.project_data import prepare_data
    from edgebuild.project.config import load_project

    project = load_project(project_dir)
    ran = prepare_data(project, _report)
    click.echo(f"data: {'prepared by ' + str(project.data.prepare) if ran else 'every data path is there'}")


def _stage_list() -> str:
    from edgebuild.stages import stage_names

    return ", ".join(stage_names())


def _parse_force(value: str | None) -> frozenset[str]:
    from edgebuild.stages import stage_names

    if value is None:
        return frozenset()
    names = frozenset(v.strip() for v in value.split(",") if v.strip()) or frozenset({"all"})
    unknown = sorted(names - set(stage_names()) - {"all"})
    if unknown:
        raise click.BadParameter(f"unknown stage {', '.join(unknown)}; stages: {_stage_list()}",
                                 param_hint="--force")
    return names


def farm_options(command: Any) -> Any:
    """--farm [ADDRESS], --jobs, --farm-timeout: run the device jobs on boards reserved from a labgrid farm."""
    command = click.option("--farm-timeout", type=float, default=None, metavar="S",
                           help="How long a job waits for a busy board (default [farm] timeout_s, 600).")(command)
    command = click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
                           help="At most N boards at once (default [farm] jobs, else every matching board).")(command)
    return click.option(
        "--farm", "farm_address", is_flag=False, flag_value="", default=None, metavar="[HOST:PORT]",
        help="Run on boards of a labgrid farm: each group reserves a place tagged module=<module id> "
             "jetpack=<release> (and power_mode= if the group names one), waits while they are busy, and always "
             "releases it. Bare --farm: [farm] coordinator, else $LG_COORDINATOR.")(command)


_STAGE_NAMES_HELP = "model, reference, export, preflight, gate, engine, container, package"


@main.command("compile")
@project_option
@target_option
@click.option("--force", "force", is_flag=False, flag_value="all", default=None, metavar="[STAGE]",
              help="Run STAGE (comma-separated for several) again even if its inputs did not change, and every "
                   f"stage after it that reads it; bare --force: every stage. Stages: {_STAGE_NAMES_HELP}.")
@click.option("--build-on", metavar="ssh://USER@HOST[:PORT]", default=None,
              help="Build every selected group's engine on this Jetson over SSH (overrides the groups' build_on). "
                   "It must be the group's module on its JetPack's L4T release.")
@farm_options
@click.option("--no-gate", is_flag=True,
              help="Dry run of an untrained model: select a candidate without checking its accuracy (as "
                   "accuracy.gate = false), said in the summary; package refuses it unless --ship-ungated.")
@click.option("--ship-ungated", is_flag=True, help="Package even a candidate selected with the gate off.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@json_option
def compile_command(project_dir: Path, selector: str, force: str | None, build_on: str | None,
                    farm_address: str | None, jobs: int | None, farm_timeout: float | None, no_gate: bool,
                    ship_ungated: bool, no_progress: bool, as_json: bool) -> None:
    """Run the pipeline for every fleet group the target selects.

    \b
    Stages, in order (per group: preflight, engine, container, package):
      model, reference, export, preflight, gate, engine, container, package
    The engine stage measures an engine built on a device (local, ssh://) on that device
    over the validation set (accept); one below accuracy.min_retention is not packaged:
    the next passing candidate of the gate (INT8 with more layers in float, FP16, FP32) is
    built and measured instead, and when none passes the group stops (exit 11). A deferred
    INT8 recipe carries the FP16 candidate, which the device serves if its first-boot
    engine fails the acceptance set (accuracy.first_boot_fallback).
    A stage whose inputs (file contents, the settings it reads, edgebuild's version) did not
    change since its last run is reused, and the summary says so. The gate's measurements are
    stored apart from its decision: changing only accuracy.min_retention, accuracy.select or
    quantize.precisions re-decides without measuring again. An engine built on a device is
    kept while its ONNX, builder settings, module, L4T and TensorRT are unchanged. One
    compile per project at a time (the build folder is locked).
    With --farm (or [farm] coordinator), every group without a build device builds and is
    accepted on a board of its profile reserved from the labgrid farm, groups in parallel
    (--jobs), each board released afterwards; a group whose engine is current reserves none.
    """
    from edgebuild.pipeline.runner import Options, plan_compile
    from edgebuild.project.config import load_project
    from edgebuild.stages import compile_plan

    forced = _parse_force(force)
    project = load_project(project_dir)
    if no_gate:
        project = project.model_copy(update={"accuracy": project.accuracy.model_copy(update={"gate": False})})
    plan = plan_compile(project, selector)
    if build_on:
        from edgebuild.project.addresses import parse_ssh_url

        try:
            parse_ssh_url(build_on)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--build-on") from None
    if not as_json:
        click.echo(f"edgebuild compile: {project.project.name} ({project.source})")
        click.echo(f"target {selector!r}: {len(plan.groups)} of {len(project.fleet)} fleet group(s)\n")
        click.echo(_fleet_table([g.describe() for g in plan.groups]) + "\nstages:")

    def show(outcome: Any) -> None:
        if not as_json:
            click.echo(f"  {outcome.stage.name:<10} {outcome.status:<8} {outcome.detail}")

    farm = None
    if farm_address is not None or (project.farm.coordinator and not build_on):
        if build_on:
            raise click.UsageError("give --build-on or --farm, not both")
        farm = _open_farm(project, farm_address, farm_timeout)
    options = Options(force=forced, build_on=build_on, progress=not no_progress and not as_json and sys.stderr.isatty(),
                      farm=farm, jobs=(jobs or project.farm.jobs or len(plan.groups)) if farm else 1,
                      ship_ungated=ship_ungated)
    if farm is not None:
        from edgebuild.devices.farm import release_on_exit

        try:
            with release_on_exit(farm):
                report = compile_plan(plan, options=options, report=_report if not as_json else (lambda _: None),
                                      on_stage=show)
        finally:
            farm.disconnect()
    else:
        report = compile_plan(plan, options=options, report=_report if not as_json else (lambda _: None),
                              on_stage=show)
    from edgebuild.pipeline.runner import write_last_compile
    from edgebuild.report import write_report

    write_last_compile(report)
    written = write_report(project.build_dir)  # a failed compile gets its report too
    if as_json:
        _emit_json(report.as_dict())
    else:
        click.echo(_compile_summary(report))
        click.echo(f"report: {written['html']} (and {written['markdown'].name}, {written['junit'].name})")
    if not report.ok:
        raise report.error


def _compile_summary(report: Any) -> str:
    lines = []
    if not report.plan.project.accuracy.gate:
        lines.append("\n*** GATE OFF (--no-gate / accuracy.gate = false): a dry run; no candidate's accuracy was "
                     "checked, and package refuses it unless --ship-ungated ***")
    engine = report.outcome("engine")
    if engine is not None:
        lines.append("\nengines:")
        for unit in engine.units:
            record = unit.record
            if record is None:
                shown = "FAILED" if unit.status == "failed" else unit.status
                lines.append(f"  {unit.group:<12} {shown}: {unit.detail}")
                continue
            outcome = ("deferred" if not record.built else "kept" if record.kept else "built")
            lines.append(f"  {record.group:<12} {record.target:<22} {record.placement:<12} {outcome} "
                         f"{record.candidate}" + (f" (first-boot fallback {record.fallback})" if record.fallback
                                                  else ""))
            lines.append(f"  {'':<12} {record.reason}")
            if record.board:
                lines.append(f"  {'':<12} built and accepted on farm board {record.board} ({record.placement})")
            for tried in record.refused:
                lines.append(f"  {'':<12} REFUSED {tried['candidate']} on {tried['where']}: {tried['metric']} "
                             f"{tried['value']:.4f}, retention {tried['retention']:.3f} [{tried['backend']}]")
            if record.accepted:
                a = record.accepted
                lines.append(f"  {'':<12} accepted {a['candidate']} on {a['where']}: {a['metric']} {a['value']:.4f} "
                             f"on {a['images']} images, retention {a['retention']:.3f} [{a['backend']}]")
            elif unit.status == "failed":
                lines.append(f"  {'':<12} FAILED: {unit.detail}")
    lines.append("")
    for status, label in (("ran", "ran"), ("reused", "reused (up to date)"), ("failed", "failed"),
                          ("not run", "not run")):
        names = [o.stage.name for o in report.stages if o.status == status]
        if names:
            lines.append(f"{label}: {', '.join(names)}")
    return "\n".join(lines)


def _report(message: str) -> None:
    click.echo(message, err=True)


def _plan(project_dir: Path, selector: str) -> Any:
    from edgebuild.pipeline.runner import plan_compile
    from edgebuild.project.config import load_project

    return plan_compile(load_project(project_dir), selector)


def _run_until(plan: Any, stage: str, *, force: bool = False, progress: bool = False, **options: Any) -> Any:
    """Run ``stage`` and what it reads (reusing what is up to date); raises what failed before ``stage``.

    The single-stage commands are this: the pipeline decides what is up to date, never the command.
    """
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_plan

    report = compile_plan(plan, until=stage, options=Options(force=frozenset({stage} if force else ()),
                                                            progress=progress, **options), report=_report)
    earlier = next((o.error for o in report.stages if o.stage.name != stage and o.error), None)
    if earlier is not None:
        raise earlier
    return report


@main.command("export")
@project_option
@target_option
@click.option("--force", is_flag=True, help="Export again even if nothing changed.")
@json_option
def export_command(project_dir: Path, selector: str, force: bool, as_json: bool) -> None:
    """Export the model to ONNX and check it against PyTorch.

    The opset is the highest that every selected target's TensorRT parser takes (or
    export.opset if it is not above that; the summary says which target limits it). The
    dynamo exporter is tried first, the TorchScript exporter is the fallback: each result is
    checked (the opset it wrote, onnx.checker, shape inference, ONNX Runtime at the min, opt
    and max shapes, parity with PyTorch) and any failure falls back to the next, the record
    saying why each attempt failed. When the model needs an opset above what some targets
    take, the error names them and what to do. Nothing changed since the last export: it is
    reused.
    """
    report = _run_until(_plan(project_dir, selector), "export", force=force)
    outcome = report.outcome("export")
    if outcome.error:
        raise outcome.error
    record = outcome.record()
    if as_json:
        _emit_json({**record.as_dict(), "reused": outcome.status == "reused"})
        return
    click.echo(f"{record.onnx_path} ({'reused, nothing changed' if outcome.status == 'reused' else 'exported'})")
    click.echo(f"  opset {record.opset}: {record.opset_reason}")
    click.echo(f"  exporter: {record.exporter_note}")
    click.echo(f"  simplify: {record.simplify_note}")
    click.echo(f"  dynamic axes: {record.dynamic_axes}")
    click.echo(f"  sha256 {record.sha256}" + ("  (weights in external data)" if record.external_data else ""))
    rows = [[p.shape, " ".join(f"{n}{s}" for n, s in p.input_shapes.items()), p.output, f"{p.max_abs:.3g}",
             f"{p.max_rel:.3g}", "ok" if p.ok else "MISMATCH"] for p in record.parity]
    click.echo(f"\nparity vs PyTorch [onnxruntime-cpu] (atol {record.atol}, rtol {record.rtol}):")
    click.echo(_table(rows, ["shape", "inputs", "output", "max abs err", "max rel err", ""]))


@main.command("preflight")
@project_option
@target_option
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Check this ONNX file instead of the project's export.")
@json_option
def preflight_command(project_dir: Path, selector: str, onnx_path: Path | None, as_json: bool) -> None:
    """Check every ONNX operator against each selected target's TensorRT parser.

    Reports, per target, each node the parser cannot take (unsupported operator, opset out
    of range, a known restriction such as Resize antialias or ScatterND reduction), INT64
    tensors TensorRT 8.x casts down, and, for groups with use_dla, the layers the DLA
    cannot run. Exits with code 9 when any target has a blocking problem.
    """
    from edgebuild.errors import PreflightError
    from edgebuild.targets.preflight import preflight, preflight_text

    plan = _plan(project_dir, selector)
    if onnx_path is None:
        report = _run_until(plan, "preflight")
        outcome = report.outcome("preflight")
        onnx_path = report.record("export").onnx_path
        results = [u.record for u in outcome.units if u.record is not None]
        failed = next((u.error for u in outcome.units if u.record is None and u.error), None)
        if failed is not None:
            raise failed
    else:
        results = preflight(onnx_path, list(plan.groups))
    if as_json:
        _emit_json({"onnx": str(onnx_path), "targets": [r.as_dict() for r in results]})
    else:
        click.echo(preflight_text(onnx_path, results))
    blocked = [r for r in results if r.blocking]
    if blocked:
        raise PreflightError(
            f"{onnx_path.name}: blocking problems for " + ", ".join(f"{r.group} = {r.target}" for r in blocked),
            hint="each listed node needs the suggested fix, or drop that target",
        )


@main.command("validate")
@project_option
@target_option
@click.option("--force", is_flag=True, help="Measure every candidate again even if nothing changed.")
@click.option("--backend", type=click.Choice(["onnxruntime", "tensorrt"]), default=None,
              help="What measures the candidates (default: accuracy.backend, else onnxruntime). tensorrt builds a "
                   "host-check engine per candidate with this host's TensorRT and GPU.")
@click.option("--device", "device_url", metavar="ssh://USER@HOST[:PORT]", default=None,
              help="Measure each selected group's compiled model folder (build/engines/<group>) on this device "
                   "instead: its backend (TensorRT engine, else what serve would use) over the validation set, "
                   "scored here with the gate's code, retention against the gate's FP32 reference.")
@farm_options
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@json_option
def validate_command(project_dir: Path, selector: str, force: bool, backend: str | None, device_url: str | None,
                     farm_address: str | None, jobs: int | None, farm_timeout: float | None, no_progress: bool,
                     as_json: bool) -> None:
    """Measure FP32, FP16 and INT8 candidates against the accuracy gate.

    Each candidate's metric on the validation set is divided by the FP32 model's
    (retention); a candidate passes at retention >= accuracy.min_retention. When plain INT8
    fails, the most sensitive layers are kept in floating point until it passes or
    quantize.max_kept_layers is reached. Measurements are stored apart from the decision, so
    changing only the threshold, accuracy.select or quantize.precisions re-decides at once.
    Exits with code 11 when nothing selectable passes.
    """
    from dataclasses import replace

    plan = _plan(project_dir, selector)
    if device_url and farm_address is not None:
        raise click.UsageError("give --device or --farm, not both")
    if device_url:
        _validate_on_device(plan, device_url, as_json)
        return
    if farm_address is not None:
        _validate_on_farm(plan, farm_address, jobs, farm_timeout, as_json)
        return
    if backend:
        plan = replace(plan, project=plan.project.with_accuracy_backend(backend))
    report = _run_until(plan, "gate", force=force, progress=not no_progress and not as_json and sys.stderr.isatty())
    outcome = report.outcome("gate")
    result = outcome.record()
    if result is None:
        raise outcome.error
    if as_json:
        _emit_json({**result.as_dict(), "reused": outcome.status == "reused",
                    "targets": [g.describe() for g in plan.groups]})
    else:
        click.echo(_gate_text(result, [g.name for g in plan.groups], reused=outcome.units[0].status == "reused"))
    if outcome.error:
        raise outcome.error


def _evaluate_group(project: Any, gate: Any, group: Any, engine: Any, url: str, data: Any) -> dict[str, Any]:
    """One group's model folder measured on the device at ``url``: the row ``validate --device`` shows."""
    from edgebuild.devices.evaluation import evaluate_on_device
    from edgebuild.runtime.recipe import Recipe

    folder = project.build_dir / engine.folder
    recipe = Recipe.load(folder)
    evaluation, answer = evaluate_on_device(project, folder, url, data=data, report=_report)
    retention = evaluation.value / gate.reference_value
    return {"group": group.name, "candidate": recipe.candidate, "metric": evaluation.metric,
            "value": evaluation.value, "retention": retention,
            "passed": retention >= project.accuracy.min_retention, "backend": evaluation.backend,
            "backend_reason": answer["backend_reason"], "images": evaluation.images,
            "inference_s": answer["inference_s"], "device": answer["device"], "sent": answer["sent"], "url": url}


def _validate_on_device(plan: Any, url: str, as_json: bool) -> None:
    """``validate --device``: each group's model folder measured on the device, against the gate's FP32."""
    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.devices.bench import check_remote_url

    url = check_remote_url(url)
    report = _run_until(plan, "engine")
    gate, project = report.record("gate"), plan.project
    data = ValidationSet(project)
    records = [_evaluate_group(project, gate, g, report.record("engine", g.name), url, data) for g in plan.groups]
    if as_json:
        _emit_json({"device": url, "reference_value": gate.reference_value, "groups": records})
    else:
        facts = records[0]["device"] if records else {}
        click.echo(f"on {url} ({facts.get('compatible', ['?'])[0] if facts.get('compatible') else 'no device tree'}, "
                   f"L4T {facts.get('l4t') or '-'}, TensorRT {facts.get('tensorrt') or 'none'}): {gate.metric} of each "
                   f"group's model folder, min retention {project.accuracy.min_retention} of FP32 "
                   f"{gate.reference_value:.4f} [{gate.backend}], {len(data)} validation images")
        click.echo(_evaluation_table(records, gate))
    _refuse_failed(records)


def _evaluation_table(records: list[dict[str, Any]], gate: Any, boards: bool = False) -> str:
    rows = [([r["group"]] + ([r.get("board", "")] if boards else []) +
             [r["candidate"], f"{r['value']:.4f}", f"{r['retention']:.3f}", "pass" if r["passed"] else "FAIL",
              r["backend"], f"{r['inference_s']:.2f}"]) for r in records]
    lines = [_table(rows, ["group"] + (["board"] if boards else []) +
                    ["candidate", gate.metric, "retention", "gate", "backend", "inference s"])]
    lines += [f"{r['group']}: {r['backend_reason']}" for r in records if not r["backend"].startswith("tensorrt")]
    return "\n".join(lines)


def _refuse_failed(records: list[dict[str, Any]]) -> None:
    from edgebuild.errors import AccuracyGateError

    failed = [r for r in records if not r["passed"]]
    if failed:
        raise AccuracyGateError("; ".join(
            f"{r['group']} keeps {r['retention']:.3f} of the FP32 {r['metric']} on {r['url']} [{r['backend']}]"
            for r in failed),
            hint="the engine loses more on the device than the gate allowed: try fp16 for that group")


def _open_farm(project: Any, address: str | None, timeout_s: float | None) -> Any:
    from edgebuild.devices.farm import Farm, coordinator_address

    found = coordinator_address(project, address or None)
    if not found:
        raise click.UsageError("--farm needs a labgrid coordinator: --farm HOST:PORT, [farm] coordinator in "
                               "edgebuild.toml, or $LG_COORDINATOR")
    return Farm(found, timeout_s=timeout_s or project.farm.timeout_s, report=_report)


def _farm_jobs_file(project: Any, command: str, results: list[Any], extra: dict[str, Any]) -> Path:
    """build/farm/<command>.json: every job's board, start and end, error, and the command's records."""
    import json

    from edgebuild.runtime.files import atomic_write_text

    path = project.build_dir / "farm" / f"{command}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"jobs": [r.as_dict() for r in results], **extra}, indent=2, default=str))
    return path


def _validate_on_farm(plan: Any, address: str | None, jobs: int | None, timeout_s: float | None,
                      as_json: bool) -> None:
    """``validate --farm``: each group's model folder measured on a board of its profile, in parallel."""
    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.devices.farm import fan_out, target_tags

    farm = _open_farm(plan.project, address, timeout_s)
    report = _run_until(plan, "engine")
    gate, project = report.record("gate"), plan.project
    data = ValidationSet(project)
    for _ in data.batches():  # preprocessed once, before the jobs share it
        pass
    work = [(g.name, target_tags(g), lambda board, g=g: _evaluate_group(project, gate, g, report.record(
        "engine", g.name), board.url, data)) for g in plan.groups]
    try:
        results = fan_out(farm, work, max_jobs=jobs or project.farm.jobs)
    finally:
        farm.disconnect()
    records = [{**r.result, "board": r.board, "retried_from": r.retried_from} for r in results if r.error is None]
    path = _farm_jobs_file(project, "validate", results, {"reference_value": gate.reference_value,
                                                          "groups": records})
    if as_json:
        _emit_json({"farm": farm.coordinator, "reference_value": gate.reference_value, "groups": records,
                    "jobs": [r.as_dict() for r in results]})
    else:
        click.echo(f"on the farm at {farm.coordinator}: {gate.metric} of each group's model folder on a board of its "
                   f"profile, min retention {project.accuracy.min_retention} of FP32 {gate.reference_value:.4f} "
                   f"[{gate.backend}], {len(data)} validation images (jobs: {path})")
        click.echo(_evaluation_table(records, gate, boards=True))
        for r in results:
            if r.retried_from:
                click.echo(f"{r.group}: {r.retried_from} stopped answering; ran on {r.board or 'no board'}")
    errors = [r.error for r in results if r.error is not None]
    if errors:
        if len(errors) > 1:
            for r in results:
                if r.error is not None:
                    click.echo(f"{r.group}: FAILED: {r.error}", err=True)
        raise errors[0]
    _refuse_failed(records)


def _gate_text(result: Any, groups: list[str], reused: bool) -> str:
    stored = f"; {result.measured} measurement(s) taken, {result.stored} stored"
    lines = [f"accuracy gate for {', '.join(groups)}: {result.metric}, min retention {result.threshold} "
             f"of FP32 {result.reference_value:.4f}, {result.images} validation images"
             + (" (reused, nothing changed)" if reused else stored)]
    rows = [[c.precision, f"{c.value:.4f}", f"{c.retention:.3f}",
             ("pass" if c.passed else "FAIL") + ("" if c.selectable else " (rejected)" if c.rejected_by
                                                  else " (not allowed)"),
             f"{c.latency_ms:.2f}", c.backend, ", ".join(c.kept_fp32) or c.note] for c in result.candidates]
    lines.append(_table(rows, ["precision", result.metric, "retention", "gate", "latency ms", "backend",
                               "notes"]))
    for c in result.candidates:
        for rejection in c.rejected_by:
            lines.append(f"{c.precision}: TensorRT would reject it: {rejection}")
    lines += result.notes
    if result.sensitivity:
        worst = ", ".join(f"{s['layer']} ({s['sqnr_db']:.1f} dB)" for s in result.sensitivity[:5])
        lines.append(f"layers whose INT8 inputs lose most (per-channel SQNR, worst first): {worst}")
    if result.selected:
        lines.append(f"selected: {result.selected} ({result.selection_rule})")
    else:
        lines.append("selected: nothing passes. Try:")
        lines += [f"  - {step}" for step in result.next_steps]
    return "\n".join(lines)


@main.group()
def profiles() -> None:
    """JetPack releases, Jetson modules and the targets they make."""


@profiles.command("list")
@json_option
def profiles_list(as_json: bool) -> None:
    """List JetPack releases and modules, and which pairs are valid targets."""
    from edgebuild.targets.profiles import load_catalog

    catalog = load_catalog()
    if as_json:
        _emit_json({
            "jetpack": [r.model_dump() for r in catalog.releases.values()],
            "modules": [m.model_dump() for m in catalog.modules.values()],
        })
        return
    rows = [[r.jetpack, "R" + r.l4t, r.ubuntu, r.cuda, r.tensorrt, r.python, r.cgroup,
             str(r.max_onnx_opset), ", ".join(r.modules)] for r in catalog.releases.values()]
    click.echo(_table(rows, ["JetPack", "L4T", "Ubuntu", "CUDA", "TensorRT", "Python", "cgroup",
                             "opset", "modules"]))
    click.echo()
    rows = [[m.id, m.name, m.family, f"sm {m.compute_capability}", str(m.dla_cores), f"{m.memory_gb} GB",
             ", ".join(m.jetpack)] for m in catalog.modules.values()]
    click.echo(_table(rows, ["module", "name", "family", "GPU", "DLA", "memory", "JetPack"]))
    click.echo("\na target is MODULE@JETPACK, e.g. orin-nano-8gb@6.2; "
               "`edgebuild profiles show TARGET` for details")


@profiles.command("show")
@click.argument("target")
@json_option
def profiles_show(target: str, as_json: bool) -> None:
    """Show one target (MODULE@JETPACK), module, or JetPack release, with sources."""
    from edgebuild.errors import TargetError
    from edgebuild.targets.profiles import load_catalog

    catalog = load_catalog()
    if "@" in target:
        resolved = catalog.parse_target(target)
        records = {"target": resolved.id, "module": resolved.module.model_dump(),
                   "jetpack": resolved.release.model_dump()}
    elif target in catalog.modules:
        records = {"module": catalog.modules[target].model_dump()}
    elif target in catalog.releases:
        records = {"jetpack": catalog.releases[target].model_dump()}
    else:
        raise TargetError(
            f"unknown target, module or JetPack release {target!r}",
            hint=f"modules: {', '.join(catalog.modules)}; JetPack: {', '.join(catalog.releases)}",
        )
    if as_json:
        _emit_json(records)
        return
    for kind in ("module", "jetpack"):
        if kind in records:
            click.echo(_describe_record(kind, records[kind]))


def _describe_record(kind: str, record: dict) -> str:
    title = record["name"] if kind == "module" else f"JetPack {record['jetpack']}"
    unconfirmed = set(record.get("unconfirmed", []))
    lines = [title]
    for key, value in record.items():
        if key in ("sources", "unconfirmed", "notes", "name"):
            continue
        if key == "power_modes":
            value = ", ".join(f"{m['id']} {m['name']}" if m["id"] is not None else m["name"] for m in value)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        flag = "  (unconfirmed)" if key in unconfirmed else ""
        lines.append(f"  {key:<22} {value}{flag}")
    for key, text in record.get("notes", {}).items():
        lines.append(f"  note on {key}: {text}")
    lines.append("  sources:")
    lines += [f"    - {s}" for s in record["sources"]]
    return "\n".join(lines) + "\n"


@main.command()
@json_option
def doctor(as_json: bool) -> None:
    """Report what this host can do and what each missing piece would enable."""
    from edgebuild.workflows.doctor import run_checks

    checks = run_checks()
    if as_json:
        _emit_json([c.as_dict() for c in checks])
        return
    for c in checks:
        mark = "ok " if c.ok else "-- "
        click.echo(f"{mark} {c.name:<16} {c.found}")
        if not c.ok:
            click.echo(f"    {'':<16} missing: {c.enables}")


@main.command("container")
@project_option
@target_option
@click.option("--flavor", type=click.Choice(["jetson", "cpu"]), default="jetson", show_default=True,
              help="jetson: FROM the JetPack profile's NVIDIA TensorRT image; cpu: a Debian Python image with "
                   "ONNX Runtime, to try the runtime on a build host.")
@click.option("--base-image", default=None, metavar="IMAGE",
              help="Build FROM this image instead (jetson: an image of that JetPack with TensorRT's Python bindings).")
@click.option("--build", "build_images", is_flag=True,
              help="Also build each image with podman or docker (jetson images need an arm64 host or qemu binfmt).")
@click.option("--engine", type=click.Choice(["podman", "docker"]), default=None,
              help="Container engine for --build (default: podman, else docker).")
@click.option("--no-pull", is_flag=True, help="With --build: use only local images (the base must be there).")
@json_option
def container_command(project_dir: Path, selector: str, flavor: str, base_image: str | None, build_images: bool,
                      engine: str | None, no_pull: bool, as_json: bool) -> None:
    """Write a runtime container build context and run specs per fleet group.

    \b
    From build/engines/<group> (written by `edgebuild compile`) into build/containers/<group>:
      Dockerfile       FROM the profile's base image, non-root user, engine-cache volume,
                       HEALTHCHECK on /v2/health/ready, entry point `edgebuild-device.pyz serve`
      model/           recipe, ONNX, and the engine where it was built for the device
      run.sh           docker run with --runtime nvidia and the preset's --memory, --memory-swap,
                       --cpus, --cpuset-cpus, --pids-limit, --read-only
      compose.yaml     the same as a compose service
      edgebuild-<group>.service   systemd unit (MemoryMax, CPUQuota, AllowedCPUs, TasksMax) that
                       runs the server without a container, on cgroup-v2 releases (JetPack 6+)
      container.json   what was written, from what, with which limits
    The limits come from the group's preset in cgroups/ (see `edgebuild run --limits`), as the
    engine stage wrote it into the recipe. Earlier stages that are not up to date run first.
    """
    from edgebuild.shipping.container import build_image, group_container_plan

    plan = _plan(project_dir, selector)
    outcome = _run_until(plan, "container", container_flavor=flavor, base_image=base_image).outcome("container")
    if outcome.error:
        raise outcome.error
    records = {u.group: {**u.record.as_dict(), "context": str(plan.project.build_dir / u.record.context)}
               for u in outcome.units}
    if build_images:
        for group in plan.groups:
            container = group_container_plan(plan.project, group, flavor=flavor, base_image=base_image)
            records[group.name]["built"] = build_image(Path(records[group.name]["context"]), container,
                                                       engine=engine, pull=not no_pull, report=_report)
    if as_json:
        _emit_json({"containers": list(records.values())})
        return
    rows = [[r["group"], r["target"], r["base_image"], r["limits"]["name"], "engine" if r["ships_engine"] else "recipe",
             r["context"] + (f" -> {r['built']}" if r.get("built") else "")] for r in records.values()]
    click.echo(_table(rows, ["group", "target", "FROM", "limits", "ships", "context"]))
    for r in records.values():
        for note in r["notes"]:
            click.echo(f"{r['group']}: {note}")


@main.command("bench")
@click.argument("artifact", required=False, type=click.Path(file_okay=False, path_type=Path))
@project_option
@target_option
@click.option("--device", "device_url", default=None, metavar="ssh://USER@HOST[:PORT]",
              help="Run on this device over SSH (the artifact is copied there); default: this host.")
@click_options(device_options.BENCH, skip=("artifact",))
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the versioned result (schema edgebuild.bench/1) here.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG: latency distribution per configuration, throughput against batch size.")
@click.option("--compare", "baseline", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A previous --json result: show the change per figure.")
@click.option("--force", is_flag=True,
              help="With --compare: compare even runs of different artifacts, power modes or backends.")
@farm_options
def bench_command(artifact: Path | None, project_dir: Path, selector: str, device_url: str | None,
                  json_file: Path | None, plot_file: Path | None, baseline: Path | None, force: bool,
                  farm_address: str | None, jobs: int | None, farm_timeout: float | None, **options: Any) -> None:
    """Measure a compiled model folder: cold start, latency percentiles, throughput, memory, power.

    \b
    ARTIFACT is a folder `edgebuild compile` wrote (build/engines/<group>); without it, the one
    compiled group --target selects in the project. The runs happen on this host in a fresh
    process, or with --device on a Jetson over SSH (edgebuild's device-side runner, Python 3.8,
    with the same options as `edgebuild-device.pyz bench`; --engine-cache is a path there).
    Every result records the artifact's hashes, the backend and library versions, the power mode
    and the shapes; on a Jetson also nvpmodel, jetson_clocks and tegrastats during the run (on
    other machines these are reported as not available). --compare refuses runs of different
    artifacts, power modes or backends unless --force.
    With --farm, every group --target selects is benchmarked on a board of its own profile
    reserved from the labgrid farm, in parallel across boards: build/bench/<group>.json per
    group, and a fleet-wide table, build/bench/fleet.json (or --json) and a plot (--plot).
    """
    from edgebuild.devices.bench import (
        bench_here,
        bench_over_ssh,
        check_remote_url,
        compare,
        comparison_table,
        load_result,
        parse_int_list,
        plot,
        table,
    )
    from edgebuild.runtime.recipe import Recipe

    if options["iterations"] is not None and options["duration"] is not None:
        raise click.UsageError("give --iterations or --duration, not both")
    options.update(batch=parse_int_list(options["batch"], "--batch"),
                   concurrency=parse_int_list(options["concurrency"], "--concurrency") or [1],
                   shape=list(options["shape"]))
    if farm_address is not None:
        if artifact is not None or device_url or baseline:
            raise click.UsageError("--farm benchmarks the groups --target selects: no ARTIFACT, --device or --compare")
        _bench_on_farm(project_dir, selector, farm_address, jobs, farm_timeout, options, json_file, plot_file)
        return
    if artifact is None:
        artifact = _compiled_artifact(project_dir, selector)
    Recipe.load(artifact, hint="bench a folder `edgebuild compile` wrote (build/engines/<group>)")
    before = load_result(baseline) if baseline else None  # a broken baseline fails before the long run
    if device_url:
        result = bench_over_ssh(check_remote_url(device_url), artifact, options, report=_report)
    else:
        result = bench_here(artifact, options)
    click.echo(table(result))
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(result, indent=2))
        click.echo(f"result: {json_file}")
    if plot_file:
        click.echo(f"plot: {plot(result, plot_file)}")
    if before is not None:
        click.echo("")
        click.echo(comparison_table(compare(result, before, force=force)))


def _bench_on_farm(project_dir: Path, selector: str, address: str | None, jobs: int | None,
                   timeout_s: float | None, options: dict[str, Any], json_file: Path | None,
                   plot_file: Path | None) -> None:
    """``bench --farm``: each selected group's model folder benchmarked on a board of its profile."""
    from edgebuild.devices.bench import bench_over_ssh, fleet_plot, fleet_summary, fleet_table
    from edgebuild.devices.farm import fan_out, target_tags
    from edgebuild.errors import ConfigError
    from edgebuild.runtime.files import atomic_write_text
    from edgebuild.runtime.recipe import RECIPE_FILE

    plan = _plan(project_dir, selector)
    project = plan.project
    folders = {g.name: project.build_dir / "engines" / g.name for g in plan.groups}
    missing = [name for name, folder in folders.items() if not (folder / RECIPE_FILE).is_file()]
    if missing:
        raise ConfigError(f"not compiled: {', '.join(missing)}", hint="run `edgebuild compile` for them first")
    farm = _open_farm(project, address, timeout_s)
    work = [(g.name, target_tags(g), lambda board, g=g: bench_over_ssh(board.url, folders[g.name], options,
                                                                       report=_report)) for g in plan.groups]
    try:
        results = fan_out(farm, work, max_jobs=jobs or project.farm.jobs)
    finally:
        farm.disconnect()
    out = project.build_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.error is None:
            atomic_write_text(out / f"{r.group}.json", json.dumps(r.result, indent=2))
    summary = fleet_summary(results)
    summary_path = json_file or out / "fleet.json"
    atomic_write_text(summary_path, json.dumps(summary, indent=2))
    _farm_jobs_file(project, "bench", results, {})
    click.echo(fleet_table(summary))
    click.echo(f"results: {out}/<group>.json; fleet summary: {summary_path}")
    if plot_file and summary["groups"]:
        click.echo(f"plot: {fleet_plot(summary, plot_file)}")
    errors = [r.error for r in results if r.error is not None]
    for r in results:
        if r.error is not None:
            click.echo(f"{r.group}: FAILED on {r.board or 'no board'}: {r.error}", err=True)
    if errors:
        raise errors[0]


def _compiled_artifact(project_dir: Path, selector: str) -> Path:
    from edgebuild.errors import ConfigError
    from edgebuild.runtime.recipe import RECIPE_FILE

    plan = _plan(project_dir, selector)
    found = [plan.project.build_dir / "engines" / g.name for g in plan.groups]
    compiled = [f for f in found if (f / RECIPE_FILE).is_file()]
    if len(compiled) != 1:
        names = ", ".join(f.name for f in compiled) or "none"
        raise ConfigError(f"--target {selector} selects {len(compiled)} compiled group(s) ({names}); bench needs one",
                          hint="pass ARTIFACT (build/engines/<group>) or --target GROUP")
    return compiled[0]


@main.command("report")
@project_option
def report_command(project_dir: Path) -> None:
    """Rebuild build/report/ from the last compile's records.

    \b
    index.html   self-contained page (no network): the fleet, each stage's outcome and time,
                 the gate's candidates with retention bars and the threshold, kept layers,
                 preflight findings per target, placement and acceptance per group, bench results
    summary.md   the same as Markdown, for a CI job summary or a merge request comment
    junit.xml    a test case per target for preflight and the gate, and per stage run, failing
                 where the compile failed, so CI shows pass/fail per target
    `edgebuild compile` writes it after every run, failed ones included.
    """
    from edgebuild.project.config import load_project
    from edgebuild.report import write_report

    written = write_report(load_project(project_dir).build_dir)
    for kind, path in written.items():
        click.echo(f"{kind}: {path}")


@main.group("farm")
def farm() -> None:
    """The device farm: Jetsons reserved through a labgrid coordinator (pip edgebuild[farm])."""


@farm.command("status")
@project_option
@click.option("--farm", "farm_address", default=None, metavar="HOST:PORT",
              help="The labgrid coordinator (default [farm] coordinator, else $LG_COORDINATOR).")
@json_option
def farm_status_command(project_dir: Path, farm_address: str | None, as_json: bool) -> None:
    """List the farm's places: their tags, the project's fleet groups each can serve, who holds it.

    A group's board must be tagged module=<module id> jetpack=<release> (and power_mode=<mode>
    when the group names one), e.g. `labgrid-client -p orin-1 set-tags module=orin-nano-8gb
    jetpack=6.2`. Groups no place can serve are listed too.
    """
    from edgebuild.devices.farm import target_tags
    from edgebuild.pipeline.runner import plan_compile
    from edgebuild.project.config import load_project

    project = load_project(project_dir)
    farm = _open_farm(project, farm_address, None)
    groups = plan_compile(project, "all").groups
    try:
        places = farm.places()
    finally:
        farm.disconnect()
    rows, records = [], []
    for place in places:
        serves = [g.name for g in groups if place.has_tags(target_tags(g))]
        records.append({"place": place.name, "tags": place.tags, "serves": serves, "held_by": place.acquired,
                        "reservation": place.reservation})
        rows.append([place.name, " ".join(f"{k}={v}" for k, v in sorted(place.tags.items())) or "-",
                     ", ".join(serves) or "-", place.acquired or "free"])
    unserved = [g.name for g in groups if not any(g.name in r["serves"] for r in records)]
    if as_json:
        _emit_json({"coordinator": farm.coordinator, "places": records, "unserved_groups": unserved})
        return
    click.echo(f"farm at {farm.coordinator}: {len(places)} place(s)")
    click.echo(_table(rows, ["place", "tags", "fleet groups", "held by"]))
    for name in unserved:
        group = next(g for g in groups if g.name == name)
        click.echo(f"{name}: no place tagged {' '.join(f'{k}={v}' for k, v in target_tags(group).items())}")


@main.command("package")
@project_option
@target_option
@click.option("--since", type=click.Path(exists=True, path_type=Path), default=None,
              help="A previous bundle (or a previous build/packages folder): write deltas that carry only the "
                   "files whose hashes changed, installable only over that exact version.")
@click.option("--ship-ungated", is_flag=True,
              help="Package even a candidate selected with the gate off (accuracy.gate = false).")
@json_option
def package_command(project_dir: Path, selector: str, since: Path | None, ship_ungated: bool, as_json: bool) -> None:
    """Write the fleet's OTA artifacts: a signed bundle and a Mender artifact per group.

    \b
    Into build/packages/<group>/ from build/engines/<group> and build/containers/<group>:
      <name>-<version>-<group>.edgebundle   native bundle: manifest.json (every file's path,
          size, sha256; module and L4T compatibility; version) signed with [ota] signing_key
          (Ed25519, ECDSA P-256 or RSA), the model folder, a health-check reference, the run specs
      <name>-<version>-<group>.mender       Mender artifact (format 3, payload type
          edgebuild-model) carrying that bundle; depends on the module's device type and L4T;
          signed when the key is ECDSA P-256 or RSA
    and build/packages/fleet.json (which artifact each group gets) and edgebuild-model, the
    Mender update module that hands the bundle to `edgebuild-device.pyz ota-install`. Earlier
    stages that are not up to date run first.
    """
    from edgebuild.shipping.ota import write_fleet_manifest

    plan = _plan(project_dir, selector)
    outcome = _run_until(plan, "package", package_since=since, ship_ungated=ship_ungated).outcome("package")
    if outcome.error:
        raise outcome.error
    fleet = write_fleet_manifest(plan.project, [u.record for u in outcome.units])
    if as_json:
        _emit_json(fleet)
        return
    rows = [[g, d["target"], d["bundle"]["path"], str(d["bundle"]["size"]), "yes" if d["signed"] else "NO",
             d["delta_over"] or "-"] for g, d in fleet["groups"].items()]
    click.echo(_table(rows, ["group", "target", "bundle", "bytes", "signed", "delta over"]))
    for note in fleet["notes"]:
        click.echo(f"note: {note}")


@main.group()
def ota() -> None:
    """Verify and install OTA bundles (what a device runs; the same code as edgebuild-device.pyz)."""


def _public_key(path: Path | None) -> Any:
    from edgebuild.runtime.bundle import load_public_key

    return load_public_key(path) if path else None


# the device takes --root before the command instead (`edgebuild-device.pyz --root DIR ota-verify ...`)
_ota_root_option = click.option("--device-root", type=click.Path(file_okay=False, path_type=Path), default=None,
                                help="Read /etc/nv_tegra_release and /proc/device-tree under this folder.")


@ota.command("verify")
@click_options(device_options.OTA_VERIFY)
@_ota_root_option
def ota_verify_command(bundle: Path, public_key: Path | None, allow_unsigned: bool, any_device: bool,
                       device_root: Path | None) -> None:
    """Check a bundle's signature, compatibility and every file, without installing (exit 15 if refused)."""
    from edgebuild.runtime.bundle import verify

    manifest = verify(bundle, _public_key(public_key), require_signature=not allow_unsigned, root=device_root,
                      check_device=not any_device)
    signed = "signature" if manifest["_signed"] else "UNSIGNED (allowed by --allow-unsigned)"
    click.echo(f"{bundle}: {manifest['model']} {manifest['version']} for {manifest.get('target')}: {signed}, "
               f"{'device, ' if not any_device else ''}{len(manifest['files'])} file(s) verified")


@ota.command("install")
@click_options(device_options.OTA_INSTALL)
@_ota_root_option
def ota_install_command(bundle: Path, install_root: Path, public_key: Path | None, allow_unsigned: bool, keep: int,
                        allow_downgrade: bool, device_root: Path | None) -> None:
    """Verify, install into a new slot, switch atomically, health-check, and roll back if it fails.

    A bundle that is not newer than the newest installed (semantic version, then the signed
    manifest's sequence) is refused unless --allow-downgrade. One installer at a time per
    install root.
    """
    from edgebuild.runtime.ota import install

    done = install(bundle, install_root, _public_key(public_key), require_signature=not allow_unsigned,
                   root=device_root, keep=keep, allow_downgrade=allow_downgrade)
    click.echo(f"installed {done['installed']} (was {done['previous'] or 'none'}); health check on "
               f"{done['health']['backend']}: sanity inference {done['health']['inference_ms']} ms, max |diff| "
               f"{done['health']['max_abs_diff']}")


@main.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--limits", "preset_name", required=True, metavar="PRESET",
              help="A preset in cgroups/ (a module id such as orin-nano-8gb) or the path of a preset file.")
@click.option("--memory", default=None, metavar="SIZE", help="Override the preset's memory limit (e.g. 256M).")
@click.option("--cpus", type=float, default=None, help="Override the preset's CPU quota (cores).")
@click.option("--cpuset", default=None, metavar="LIST", help="Override the cores it may run on (e.g. 0-1).")
@click.option("--pids", type=int, default=None, help="Override the preset's task limit.")
@click.option("--report", "report_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write what happened (limits read back, peak memory, OOM kill) as JSON here.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def run_command(preset_name: str, memory: str | None, cpus: float | None, cpuset: str | None, pids: int | None,
                report_file: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND on this host inside a real cgroup with a preset's limits.

    \b
    Tries a module's limits without a container engine, e.g.
      edgebuild run --limits orin-nano-8gb -- python3 my_server.py
    The cgroup (v2 where the host has it, else v1) is created for the run, the limits are read
    back from its files and printed, and it is removed afterwards. A command killed by the
    kernel's OOM killer exits with code 13; otherwise the command's own exit code is returned.
    Cores and quotas the host does not have are fitted to it, with a warning. Needs root.
    """
    from edgebuild.targets.limits import load_preset, run_limited

    preset = load_preset(preset_name, Path.cwd()).with_overrides(memory=memory, cpus=cpus, cpuset=cpuset, pids=pids)
    result = run_limited(preset, list(command), report=_report, report_file=report_file)
    sys.exit(result.exit_code if result.exit_code is not None else 128 + _signal_number(result.signal))


def _signal_number(name: str | None) -> int:
    import signal

    return int(signal.Signals[name]) if name else 0


@main.command("serve")
@click_options(device_options.SERVE)
def serve_command(artifact: Path, **options: Any) -> None:
    """Serve a compiled model folder (build/engines/<group>) over HTTP, after warm-up.

    \b
    KServe/Triton v2 protocol: /v2/health/live, /v2/health/ready (503 until warm-up is done),
    /v2/models/NAME (backend, shapes, warm-up numbers), POST /v2/models/NAME/infer (JSON tensors),
    and Prometheus /metrics. Warm-up runs the min, opt and max shapes until the opt shape's
    latency settles or the budget ends. With --max-batch-size N > 1, requests that arrive within
    --max-queue-delay-ms and share their non-batch dimensions run as one batch. The same server runs on a device as
    `python3 edgebuild-device.pyz serve ARTIFACT`; under limits: `edgebuild run --limits PRESET
    -- edgebuild serve ARTIFACT`.
    """
    from edgebuild.runtime.server import serve

    serve(artifact, **options)  # host, port, backend, warm-up, engine cache, batching: device_options.SERVE
