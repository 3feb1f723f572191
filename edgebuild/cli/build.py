"""The build commands: ``compile``, ``export``, ``preflight``, ``validate``, ``report``, ``container``, ``package``.

Each parses its options, calls one function of ``edgebuild.workflows`` and renders its result;
an error the result carries is raised after it is shown (``_Group`` prints it with its exit code).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

import edgebuild.cli.render as render
from edgebuild.cli.context import CliContext, farm_usage, pass_cli
from edgebuild.cli.options import farm_options, json_option, project_option, target_option

if TYPE_CHECKING:
    from edgebuild.latency.plan import ModuleChoice, PlanRequest
    from edgebuild.pipeline.runner import StageOutcome
    from edgebuild.workflows.validate import DeviceValidation
    from edgebuild.workflows.work import CompileWork

__all__ = []

#: the stages, for --help without importing them (tests/unit/cli/test_cli.py checks it against edgebuild.stages)
_STAGE_NAMES_HELP = "model, reference, export, preflight, gate, budget, engine, container, package"


def _parse_force(value: str | None) -> frozenset[str]:
    from edgebuild.stages import stage_names

    if value is None:
        return frozenset()
    names = frozenset(v.strip() for v in value.split(",") if v.strip()) or frozenset({"all"})
    unknown = sorted(names - set(stage_names()) - {"all"})
    if unknown:
        raise click.BadParameter(f"unknown stage {', '.join(unknown)}; stages: {', '.join(stage_names())}",
                                 param_hint="--force")
    return names


def _check_ssh_url(value: str | None, option: str) -> None:
    from edgebuild.project.addresses import parse_ssh_url

    if value:
        try:
            parse_ssh_url(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None


@click.command("compile")
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
@pass_cli
def compile_command(cli: CliContext, project_dir: Path, selector: str, force: str | None, build_on: str | None,
                    farm_address: str | None, jobs: int | None, farm_timeout: float | None, no_gate: bool,
                    ship_ungated: bool, no_progress: bool, as_json: bool) -> None:
    """Run the pipeline for every fleet group the target selects.

    \b
    Stages, in order (per group: preflight, budget, engine, container, package):
      model, reference, export, preflight, gate, budget, engine, container, package
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
    The summary shows each group's predicted latency per candidate precision (a latency
    model, not a measurement); a group whose [[fleet]] latency_budget_ms / min_fps every
    candidate misses even at the low end of the error band is refused by the budget stage,
    before its engine is built (exit 17); inside the band it is a warning.
    With --farm (or [farm] coordinator), every group without a build device builds and is
    accepted on a board of its profile reserved from the labgrid farm, groups in parallel
    (--jobs), each board released afterwards; a group whose engine is current reserves none.
    A fleet file (an edgebuild.toml whose [models] names model projects) compiles every model
    once (model to gate, then the engine of each group that runs it, in build/models/<name>/)
    and every group with all of its models: a memory plan checked before any engine is built,
    then build/groups/<group>/ with every model, one container and one bundle per group, and
    build/fleet.json (docs/fleets.md).
    """
    from edgebuild.project.fleet_file import is_fleet_file
    from edgebuild.workflows.compile import CompileFeedback, CompileFlags, compile_project

    forced = _parse_force(force)
    _check_ssh_url(build_on, "--build-on")
    if build_on and farm_address is not None:
        raise click.UsageError("give --build-on or --farm, not both")
    if is_fleet_file(project_dir):
        if build_on or farm_address is not None:
            raise click.UsageError("a fleet file builds with each group's build_on; --build-on and --farm take a "
                                   "model project")
        _compile_fleet(cli, project_dir, selector, forced, no_gate, ship_ungated, no_progress, as_json)
        return

    def show_work(work: CompileWork) -> None:
        if not as_json:
            click.echo(render.compile_header(work))

    def show_stage(outcome: StageOutcome) -> None:
        if not as_json:
            click.echo(render.stage_line(outcome))

    with farm_usage():
        done = compile_project(
            project_dir, selector,
            CompileFlags(force=forced, build_on=build_on, farm_address=farm_address, farm_timeout=farm_timeout,
                         jobs=jobs, gate=not no_gate, ship_ungated=ship_ungated),
            CompileFeedback(bars=cli.progress(no_progress=no_progress, as_json=as_json),
                            say=cli.progress_lines(quiet=as_json), farm_say=cli.say, on_work=show_work,
                            on_stage=show_stage))
    if as_json:
        click.echo(render.as_json({**done.report.as_dict(),
                                   "predicted_latency": done.latency.as_dict() if done.latency else None}))
    else:
        click.echo(render.compile_summary(done.report, done.latency))
        click.echo(render.report_line(done.written))
    if done.error:
        raise done.error


def _compile_fleet(cli: CliContext, project_dir: Path, selector: str, forced: frozenset[str], no_gate: bool,
                   ship_ungated: bool, no_progress: bool, as_json: bool) -> None:
    import json

    from edgebuild.workflows.fleet_compile import compile_fleet

    def show_stage(outcome: StageOutcome) -> None:
        if not as_json:
            click.echo(render.stage_line(outcome))

    done = compile_fleet(project_dir, selector, force=forced, gate=not no_gate, ship_ungated=ship_ungated,
                         progress=cli.progress(no_progress=no_progress, as_json=as_json),
                         say=cli.progress_lines(quiet=as_json), on_stage=show_stage)
    if as_json:
        click.echo(render.as_json({"fleet": json.loads(done.record.read_text()),
                                   "models": {name: r.as_dict() for name, r in done.models.items()}}))
    else:
        click.echo(render.fleet_compile_text(done))
    if done.error:
        raise done.error


@click.command("export")
@project_option
@target_option
@click.option("--force", is_flag=True, help="Export again even if nothing changed.")
@json_option
@pass_cli
def export_command(cli: CliContext, project_dir: Path, selector: str, force: bool, as_json: bool) -> None:
    """Export the model to ONNX and check it against PyTorch.

    The opset is the highest that every selected target's TensorRT parser takes (or
    export.opset if it is not above that; the summary says which target limits it). The
    TorchScript exporter is tried first (the faster), the dynamo exporter is the fallback;
    export.exporter = "dynamo" or "torchscript" tries only that one. Each result is checked
    (the opset it wrote, onnx.checker, shape inference, ONNX Runtime at the min, opt and max
    shapes, parity with PyTorch) and any failure falls back to the next, the record saying
    why each attempt failed. When the model needs an opset above what some targets take, the
    error names them and what to do. Nothing changed since the last export: it is reused.
    """
    from edgebuild.workflows.build import export_model

    exported = export_model(project_dir, selector, force=force, progress=cli.say)
    if as_json:
        click.echo(render.as_json({**exported.record.as_dict(), "reused": exported.reused}))
    else:
        click.echo(render.export_text(exported))


@click.command("preflight")
@project_option
@target_option
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Check this ONNX file instead of the project's export.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "int8", "fp8", "nvfp4"]), default=None,
              help="The precision the ONNX is to be built at (a gate candidate's, with --onnx): a layout the "
                   "target's TensorRT would build in a wider type, or a precision its GPU lacks (FP8/NVFP4 off "
                   "Thor), blocks. Default: the lowest precision the graph carries.")
@json_option
@pass_cli
def preflight_command(cli: CliContext, project_dir: Path, selector: str, onnx_path: Path | None,
                      precision: str | None, as_json: bool) -> None:
    """Check every ONNX operator against each selected target's TensorRT parser.

    Reports, per target, each node the parser cannot take (unsupported operator, opset out
    of range, a known restriction such as Resize antialias or ScatterND reduction), INT64
    tensors TensorRT 8.x casts down, and, for groups placed on a DLA core (accelerator),
    each layer that falls back to the GPU under that TensorRT's DLA rules, their share of
    the FLOPs and bytes, the GPU<->DLA transitions, and whether the DLA would help at all;
    and every layout that target's TensorRT would build in a wider type than the precision
    (profiles/tensorrt/silent-fallbacks.toml: FP8/FP4 without their Q/DQ, FP4 on a
    convolution, one-sided FP8 Q/DQ, ...). Exits with code 9 when any target has a blocking problem.
    """
    from edgebuild.targets.preflight import preflight_text
    from edgebuild.workflows.build import preflight_targets

    checked = preflight_targets(project_dir, selector, onnx_path, precision=precision, progress=cli.say)
    if as_json:
        click.echo(render.as_json({"onnx": str(checked.onnx), "targets": [r.as_dict() for r in checked.results]}))
    else:
        click.echo(preflight_text(checked.onnx, checked.results))
    if checked.error:
        raise checked.error


@click.command("validate")
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
@pass_cli
def validate_command(cli: CliContext, project_dir: Path, selector: str, force: bool, backend: str | None,
                     device_url: str | None, farm_address: str | None, jobs: int | None, farm_timeout: float | None,
                     no_progress: bool, as_json: bool) -> None:
    """Measure FP32, FP16 and INT8 candidates against the accuracy gate.

    Each candidate's metric on the validation set is divided by the FP32 model's
    (retention); a candidate passes at retention >= accuracy.min_retention. When plain INT8
    fails, the most sensitive layers are kept in floating point until it passes or
    quantize.max_kept_layers is reached. Measurements are stored apart from the decision, so
    changing only the threshold, accuracy.select or quantize.precisions re-decides at once.
    With an [accuracy.tracking] table, each candidate also tracks a video set and must keep
    its min_retention of FP32's HOTA (or IDF1); HOTA, IDF1 and MOTA are shown per candidate.
    Exits with code 11 when nothing selectable passes.
    """
    from edgebuild.workflows import validate

    if device_url and farm_address is not None:
        raise click.UsageError("give --device or --farm, not both")
    if device_url or farm_address is not None:
        with farm_usage():
            done = (validate.validate_on_device(project_dir, selector, device_url, progress=cli.say) if device_url
                    else validate.validate_on_farm(project_dir, selector, farm_address, jobs=jobs,
                                                   timeout_s=farm_timeout, progress=cli.say))
        _show_device_validation(done, farm=not device_url, as_json=as_json)
        return
    gate = validate.validate_here(project_dir, selector, force=force, backend=backend, say=cli.say,
                                  progress=cli.progress(no_progress=no_progress, as_json=as_json))
    if as_json:
        click.echo(render.as_json({**gate.result.as_dict(), "reused": gate.reused,
                                   "targets": [g.describe().as_dict() for g in gate.work.groups]}))
    else:
        click.echo(render.gate_text(gate.result, [g.name for g in gate.work.groups], reused=gate.reused))
    if gate.error:
        raise gate.error


def _show_device_validation(done: DeviceValidation, *, farm: bool, as_json: bool) -> None:
    if as_json:
        click.echo(render.as_json(
            {"farm": done.where, "reference_value": done.gate.reference_value,
             "groups": [r.as_dict() for r in done.records],
             "jobs": [j.as_dict() for j in done.jobs]} if farm else
            {"device": done.where, "reference_value": done.gate.reference_value,
             "groups": [r.as_dict() for r in done.records]}))
    else:
        click.echo(render.device_validation_text(done, farm=farm))
    if len(done.failed_jobs) > 1:
        click.echo(render.failed_jobs_text(done.failed_jobs), err=True)
    if done.error:
        raise done.error


@click.command("report")
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
    from edgebuild.workflows.build import rebuild_report

    click.echo(render.written_text(rebuild_report(project_dir)))


@click.command("container")
@project_option
@target_option
@click.option("--flavor", type=click.Choice(["jetson", "cpu"]), default="jetson", show_default=True,
              help="jetson: FROM the JetPack profile's NVIDIA TensorRT image; cpu: a Debian Python image with "
                   "ONNX Runtime, to try the runtime on a build host.")
@click.option("--base-image", default=None, metavar="IMAGE",
              help="Build FROM this image instead (jetson: an image of that JetPack with TensorRT's Python bindings).")
@click.option("--build", "build_images", is_flag=True,
              help="Also build each image with podman or docker (jetson images need an arm64 host or qemu binfmt).")
@click.option("--engine", "tool", type=click.Choice(["podman", "docker"]), default=None,
              help="Container runtime for --build (default: podman, else docker).")
@click.option("--no-pull", is_flag=True, help="With --build: use only local images (the base must be there).")
@json_option
@pass_cli
def container_command(cli: CliContext, project_dir: Path, selector: str, flavor: str, base_image: str | None,
                      build_images: bool, tool: str | None, no_pull: bool, as_json: bool) -> None:
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
    from edgebuild.workflows.build import write_containers

    records = write_containers(project_dir, selector, flavor=flavor, base_image=base_image, build=build_images,
                               tool=tool, pull=not no_pull, progress=cli.say)
    if as_json:
        click.echo(render.as_json({"containers": list(records.values())}))
    else:
        click.echo(render.container_text(records))


@click.command("package")
@project_option
@target_option
@click.option("--since", type=click.Path(exists=True, path_type=Path), default=None,
              help="A previous bundle (or a previous build/packages folder): write deltas that carry only the "
                   "files whose hashes changed, installable only over that exact version.")
@click.option("--ship-ungated", is_flag=True,
              help="Package even a candidate selected with the gate off (accuracy.gate = false).")
@json_option
@pass_cli
def package_command(cli: CliContext, project_dir: Path, selector: str, since: Path | None, ship_ungated: bool,
                    as_json: bool) -> None:
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
    from edgebuild.workflows.build import package_fleet

    fleet = package_fleet(project_dir, selector, since=since, ship_ungated=ship_ungated, progress=cli.say)
    click.echo(render.as_json(fleet) if as_json else render.package_text(fleet))


def _input_size(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    from edgebuild.workflows.init.project_file import parse_input_size

    try:
        return None if value is None else parse_input_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _precisions(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    chosen = tuple(p.strip().lower() for p in value.split(",") if p.strip())
    bad = [p for p in chosen if p not in ("fp32", "fp16", "int8", "fp8", "nvfp4")]
    if bad or not chosen:
        raise click.BadParameter(f"{value!r}: give fp32, fp16, int8, fp8 and/or nvfp4, separated by commas")
    return chosen


def _plan_request(command: Callable[..., None]) -> Callable[..., None]:
    """--precision, --batch, --budget-ms and --min-fps, handed to ``command`` as one ``PlanRequest``: what any
    plan is asked for, with --model or in a project."""

    @functools.wraps(command)
    def with_request(*args: object, precisions: tuple[str, ...] | None, batch: int | None, budget_ms: float | None,
                     min_fps: float | None, accelerator: str, **kwargs: object) -> None:
        from edgebuild.latency.plan import PlanRequest

        command(*args, request=PlanRequest(precisions, batch, budget_ms, min_fps, accelerator), **kwargs)

    options = (
        click.option("--precision", "precisions", default=None, callback=_precisions, metavar="fp32,fp16,int8",
                     help="Precisions to predict, separated by commas: fp32, fp16, int8, and fp8, nvfp4 where the GPU "
                          "has them (AGX Thor) (default: all three with --model, and fp8/nvfp4 where the GPU has "
                          "them, int8 on the DLA; in a project the gate's candidates, quantize.precisions)."),
        click.option("--accelerator", "accelerator", type=click.Choice(["gpu", "dla"]), default="gpu",
                     show_default=True,
                     help="Predict on the GPU, or on one DLA core (modules with DLA cores: AGX Orin, Orin NX): the "
                          "layers the DLA cannot run (profiles/tensorrt/dla.toml) fall back to the GPU, and each "
                          "GPU<->DLA boundary costs a hand-over and a reformat."),
        click.option("--batch", "batch", type=click.IntRange(min=1), default=None,
                     help="Images per inference (default: 1 with --model; in a project 1 and the profile's largest)."),
        click.option("--budget-ms", "budget_ms", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Latency budget per inference: says the cheapest module and power mode meeting it, per "
                          "precision."),
        click.option("--min-fps", "min_fps", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Throughput needed, images per second: a budget of batch*1000/min-fps ms."),
    )
    for option in reversed(options):
        with_request = option(with_request)
    return with_request


def _module_choice(command: Callable[..., None]) -> Callable[..., None]:
    """--module, --power-mode and --jetpack (with --model), handed to ``command`` as one ``ModuleChoice``."""

    @functools.wraps(command)
    def with_modules(*args: object, module: str, power_mode: str | None, jetpack: str | None,
                     **kwargs: object) -> None:
        from edgebuild.latency.plan import ModuleChoice

        command(*args, modules=ModuleChoice(module, power_mode, jetpack), **kwargs)

    options = (
        click.option("--module", "module", default="all", show_default=True, metavar="NAME[,NAME]|all",
                     help="With --model: module ids (edgebuild profiles list), or all."),
        click.option("--power-mode", "power_mode", default=None,
                     help="With --model: only this power mode (default: every one with a known GPU clock)."),
        click.option("--jetpack", "jetpack", default=None,
                     help="With --model: only modules and power modes this JetPack release has."),
    )
    for option in reversed(options):
        with_modules = option(with_modules)
    return with_modules


@click.command("plan")
@click.option("--model", "model", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The ONNX file to plan for (default: the project's export, per fleet group).")
@project_option
@target_option
@click.option("--input-size", "input_size", default=None, metavar="N|H,W", callback=_input_size,
              help="With --model: the image size to predict at (default: the model's fixed input size).")
@_module_choice
@_plan_request
@click.option("--calibrate", "calibrate", is_flag=True,
              help="Refit the efficiency factors with BENCH.json files (`edgebuild bench --json` results of TensorRT "
                   "on a Jetson) plus the published figures; the project keeps the fit (latency_model.toml) and "
                   "plan uses it from then on. It plans nothing: give no --model or plan options with it.")
@click.option("--weight", "weight", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --calibrate: how many published figures each of your measurements counts as in the "
                   "refit of the efficiency factors (default 1).")
@click.argument("bench_files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@pass_cli
def plan_command(cli: CliContext, model: Path | None, project_dir: Path, selector: str, input_size: list[int] | None,
                 modules: ModuleChoice, request: PlanRequest, calibrate: bool, weight: float | None,
                 bench_files: tuple[Path, ...], as_json: bool) -> None:
    """Predict TensorRT latency per Jetson module, power mode and precision, before any device.

    No device and no engine: the graph's FLOPs and bytes per fused layer against the module's
    peaks at the power mode's GPU clock, with efficiency factors fitted to published TensorRT
    figures (profiles/reference/published_latency.csv). latency_ms is the predicted p50 GPU
    compute time of one inference; low_ms..high_ms is the band that held every published figure
    when its model or module was left out of the fit. With --model, for the modules asked for;
    without it, one row per selected fleet group of the project (its module, JetPack and power
    mode, else the module's fastest) and gate candidate precision, on the project's export (run
    as needed), with end_to_end_ms: + input upload, output download and the runtime's
    preprocessing (an estimate from the memory bandwidth), and the engine memory the fleet's
    memory plan estimates for that precision; the budget is the group's own
    latency_budget_ms / min_fps unless --budget-ms / --min-fps. With --accelerator dla, on one
    DLA core of each module that has one (its unsupported layers on the GPU); rows carry their
    accelerator. In a fleet file (-p a folder whose edgebuild.toml has [models]), per group its
    device plan: each model on the GPU, DLA0 or DLA1 at one of its precisions, chosen to meet
    the group's budget with the most headroom (else the most frames per second), the cores
    sharing the module's memory bandwidth, and why a model is not on a DLA core. With
    --calibrate, no plan: the project's fit is refitted with your bench results. See
    docs/latency-plan.md.

    \b
    Examples:
      edgebuild plan --model yolo11n.onnx
      edgebuild plan --model yolo11n.onnx --module all --min-fps 60 --precision fp16,int8
      edgebuild plan --model yolo11n.onnx --module agx-orin-64gb --accelerator dla
      edgebuild plan -p myproject --min-fps 30
      edgebuild plan -p examples/camera-box
      edgebuild plan -p myproject --calibrate bench-b1.json bench-b8.json
    """
    if bench_files and not calibrate:
        raise click.UsageError("BENCH.json files go with --calibrate")
    if weight and not calibrate:
        raise click.UsageError("--weight goes with --calibrate")
    model_flags = [flag for flag, value in (("--input-size", input_size), ("--module", modules.module != "all"),
                                            ("--power-mode", modules.power_mode), ("--jetpack", modules.jetpack))
                   if value]
    if calibrate:
        planned = [flag for flag, value in (("--model", model), ("--precision", request.precisions),
                                            ("--batch", request.batch), ("--budget-ms", request.budget_ms),
                                            ("--min-fps", request.min_fps),
                                            ("--accelerator", request.accelerator != "gpu")) if value]
        if planned + model_flags:
            raise click.UsageError(f"--calibrate refits the latency model and plans nothing: "
                                   f"{', '.join(planned + model_flags)} go without it")
        _calibrate(cli, project_dir, bench_files, weight, as_json)
    elif model is not None:
        _plan_model(model, project_dir, input_size, modules, request, as_json)
    else:
        if model_flags:
            raise click.UsageError(f"{', '.join(model_flags)} go with --model; in a project the fleet groups say them")
        _plan_project(cli, project_dir, selector, request, as_json)


def _plan_model(model: Path, project_dir: Path, input_size: list[int] | None, modules: ModuleChoice,
                request: PlanRequest, as_json: bool) -> None:
    """``plan --model FILE.onnx``: the modules asked for, with the project's own fit where it has one."""
    from edgebuild.latency.calibration import project_fit
    from edgebuild.latency.plan import plan_latency

    plan = plan_latency(model, request, modules, input_size=input_size, fit=project_fit(project_dir))
    click.echo(render.as_json(plan.as_dict()) if as_json else render.latency_plan_text(plan))


def _plan_project(cli: CliContext, project_dir: Path, selector: str, request: PlanRequest, as_json: bool) -> None:
    """``plan`` in a project: each selected fleet group on the project's export; in a fleet file, each group's
    device plan (which core runs which model)."""
    from edgebuild.project.fleet_file import is_fleet_file
    from edgebuild.workflows.plan import plan_fleet, plan_project

    if is_fleet_file(project_dir):
        if request.accelerator != "gpu" or request.batch:
            raise click.UsageError("a fleet file's plan places each model on the GPU or a DLA core itself, at batch "
                                   "1: --accelerator and --batch go with --model or a model project")
        plans = plan_fleet(project_dir, selector, request, progress=cli.say)
        click.echo(render.as_json({"groups": [p.as_dict() for p in plans]}) if as_json
                   else render.device_plans_text(plans))
        if any(p.error for p in plans):
            raise SystemExit(1)
        return

    plan = plan_project(project_dir, selector, request, progress=cli.say)
    click.echo(render.as_json(plan.as_dict()) if as_json else render.latency_plan_text(plan))


def _calibrate(cli: CliContext, project_dir: Path, bench_files: tuple[Path, ...], weight: float | None,
               as_json: bool) -> None:
    """``plan --calibrate BENCH.json...``: the refit, its error before and after, and where it was written."""
    from edgebuild.latency.calibration import calibrate_project

    if not bench_files:
        raise click.UsageError("--calibrate needs BENCH.json files (what `edgebuild bench --json` writes)")
    done = calibrate_project(project_dir, list(bench_files), progress=cli.say,
                             **({"weight": weight} if weight else {}))
    click.echo(render.as_json(render.calibration_dict(done)) if as_json else render.calibration_text(done))


COMMANDS = (compile_command, export_command, preflight_command, validate_command, report_command,
            container_command, package_command, plan_command)
