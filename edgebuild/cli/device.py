"""The device commands: ``bench``, ``serve``, ``track``, ``run``, ``ota verify|install``, ``farm status``,
``inspect``.

``serve``, ``bench``, ``track`` and the OTA commands take the device CLI's options (``edgebuild/runtime/options.py``),
so ``edgebuild-device.pyz`` on a Jetson and ``edgebuild`` here accept the same flags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

import edgebuild.cli.render as render
from edgebuild.cli.context import CliContext, farm_usage, pass_cli
from edgebuild.cli.options import click_options, farm_options, json_option, project_option, target_option
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime import options as device_options

__all__ = []


@click.command("bench")
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
@pass_cli
def bench_command(cli: CliContext, artifact: Path | None, project_dir: Path, selector: str, device_url: str | None,
                  json_file: Path | None, plot_file: Path | None, baseline: Path | None, force: bool,
                  farm_address: str | None, jobs: int | None, farm_timeout: float | None, **options: Any) -> None:
    """Measure a compiled model folder: cold start, latency percentiles, throughput, where a request's
    time goes (preprocessing from a JPEG, inference, post-processing, end to end), memory, power.

    \b
    ARTIFACT is a folder `edgebuild compile` wrote (build/engines/<group>); without it, the one
    compiled group --target selects in the project. The runs happen on this host in a fresh
    process, or with --device on a Jetson over SSH (edgebuild's device-side runner, Python 3.8,
    with the same options as `edgebuild-device.pyz bench`; --engine-cache is a path there).
    Every result records the artifact's hashes, the backend and library versions, the power mode
    and the shapes; on a Jetson also nvpmodel, jetson_clocks and tegrastats during the run (on
    other machines these are reported as not available). The per-request stages follow the
    recipe's output form: the host's decode and NMS for a raw head, the split of a model with NMS
    inside, top-k of a classifier's logits. --compare refuses runs of different
    artifacts, power modes or backends unless --force.
    With --farm, every group --target selects is benchmarked on a board of its own profile
    reserved from the labgrid farm, in parallel across boards: build/bench/<group>.json per
    group, and a fleet-wide table, build/bench/fleet.json (or --json) and a plot (--plot).
    """
    from edgebuild.devices.remote_bench import parse_int_list

    if options["iterations"] is not None and options["duration"] is not None:
        raise click.UsageError("give --iterations or --duration, not both")
    options.update(batch=parse_int_list(options["batch"], "--batch"),
                   concurrency=parse_int_list(options["concurrency"], "--concurrency") or [1],
                   shape=list(options["shape"]))
    if farm_address is not None:
        if artifact is not None or device_url or baseline:
            raise click.UsageError("--farm benchmarks the groups --target selects: no ARTIFACT, --device or --compare")
        _bench_on_farm(cli, project_dir, selector, farm_address, jobs, farm_timeout, options, json_file, plot_file)
        return
    from edgebuild.devices.remote_bench import comparison_table, plot, table
    from edgebuild.workflows.bench import bench_artifact

    done = bench_artifact(artifact, options, project_dir=project_dir, selector=selector, device_url=device_url,
                          baseline=baseline, force=force, progress=cli.say)
    click.echo(table(done.result))
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(done.result.as_dict(), indent=2))
        click.echo(f"result: {json_file}")
    if plot_file:
        click.echo(f"plot: {plot(done.result, plot_file)}")
    if baseline is not None:
        click.echo("")
        if done.error:  # the runs are not comparable: said after the result is shown and written
            raise done.error
        assert done.comparison is not None, "a baseline given and no error: bench_artifact compared the runs"
        click.echo(comparison_table(done.comparison))


def _bench_on_farm(cli: CliContext, project_dir: Path, selector: str, address: str, jobs: int | None,
                   timeout_s: float | None, options: JsonObject, json_file: Path | None,
                   plot_file: Path | None) -> None:
    """``bench --farm``: each selected group's model folder benchmarked on a board of its profile."""
    from edgebuild.devices.remote_bench import fleet_plot, fleet_table
    from edgebuild.workflows.bench import bench_on_farm

    with farm_usage():
        done = bench_on_farm(project_dir, selector, address, options, jobs=jobs, timeout_s=timeout_s,
                             summary_file=json_file, progress=cli.say)
    click.echo(fleet_table(done.summary))
    click.echo(f"results: {done.results}/<group>.json; fleet summary: {done.summary_path}")
    if plot_file and done.summary.groups:
        click.echo(f"plot: {fleet_plot(done.summary, plot_file)}")
    for job in done.failed_jobs:
        click.echo(f"{job.group}: FAILED on {job.board or 'no board'}: {job.error}", err=True)
    if done.error:
        raise done.error


@click.command("serve")
@click_options(device_options.SERVE)
def serve_command(artifact: Path, **options: Any) -> None:
    """Serve a compiled model folder (build/engines/<group>) over HTTP and gRPC, after warm-up.

    \b
    KServe/Triton v2 protocol: /v2/health/live, /v2/health/ready (503 until warm-up is done),
    /v2/models/NAME (backend, shapes, warm-up numbers), POST /v2/models/NAME/infer (JSON tensors),
    and Prometheus /metrics; the same over gRPC (Triton's GRPCInferenceService) on --grpc-port
    (8001; 0: HTTP only), and Triton's system shared memory on both. Warm-up runs the min, opt
    and max shapes until the opt shape's latency settles or the budget ends. With --max-batch-size
    N > 1, requests that arrive within --max-queue-delay-ms and share their non-batch dimensions
    run as one batch. The same server runs on a device as
    `python3 edgebuild-device.pyz serve ARTIFACT`; under limits: `edgebuild run --limits PRESET
    -- edgebuild serve ARTIFACT`.
    """
    from edgebuild.runtime.serving.server import serve

    serve(artifact, **options)  # host, port, backend, warm-up, engine cache, batching: device_options.SERVE


@click.command("track")
@click_options(device_options.TRACK)
@pass_cli
def track_command(cli: CliContext, artifact: Path, jsonl: Path, **options: Any) -> None:
    """Track objects in video files and cameras with a compiled detector; one JSON line per stream and frame.

    \b
    ARTIFACT is a folder `edgebuild compile` wrote (build/engines/<group>, or a fleet group's
    build/groups/<group> with --model). Each --source is read in a thread of its own: a camera or
    RTSP stream hands on its newest frame (those the model had no time for are dropped and
    counted) and is reconnected with a growing pause when it drops; a video file is read whole.
    The newest frames of all streams run as one batch within the engine's profile (min..max batch,
    padded up to min), preprocessed as the recipe says; the detections go to a tracker per stream
    (ByteTrack, or --tracker ocsort) and each frame's tracks, boxes in the source's pixels, to
    --jsonl:

    \b
      {"stream": 0, "frame": 12, "tracks": [{"id": 3, "box": [x1, y1, x2, y2],
       "class": 1, "score": 0.91}], "time": 1765132800.123}

    \b
    Progress goes to stderr and a summary to stdout at the end: frames per stream, dropped,
    reconnects, failures, ms per frame for each stage (video decode, preprocess, inference,
    output decode, tracking, publish) and fps. On a Jetson the same command is
    `python3 edgebuild-device.pyz track ARTIFACT --source ...` (docs/streams.md).
    """
    from edgebuild.runtime.streams.pipeline import render_summary, run_tracking

    options.update(source=list(options["source"]))
    click.echo(render_summary(run_tracking(artifact, options, jsonl, progress=cli.say)))


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--limits", "preset_name", required=True, metavar="PRESET",
              help="A preset in cgroups/ (a module id such as orin-nano-8gb) or the path of a preset file.")
@click.option("--memory", default=None, metavar="SIZE", help="Override the preset's memory limit (e.g. 256M).")
@click.option("--cpus", type=float, default=None, help="Override the preset's CPU quota (cores).")
@click.option("--cpuset", default=None, metavar="LIST", help="Override the cores it may run on (e.g. 0-1).")
@click.option("--pids", type=int, default=None, help="Override the preset's task limit.")
@click.option("--report", "report_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write what happened (limits read back, peak memory, OOM kill) as JSON here.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@pass_cli
def run_command(cli: CliContext, preset_name: str, memory: str | None, cpus: float | None, cpuset: str | None,
                pids: int | None, report_file: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND on this host inside a real cgroup with a preset's limits.

    \b
    Tries a module's limits without a container runtime, e.g.
      edgebuild run --limits orin-nano-8gb -- python3 my_server.py
    The cgroup (v2 where the host has it, else v1) is created for the run, the limits are read
    back from its files and printed, and it is removed afterwards. A command killed by the
    kernel's OOM killer exits with code 13; otherwise the command's own exit code is returned.
    Cores and quotas the host does not have are fitted to it, with a warning. Needs root.
    """
    from edgebuild.workflows.limits import run_with_limits

    sys.exit(run_with_limits(preset_name, command, memory=memory, cpus=cpus, cpuset=cpuset, pids=pids,
                             report_file=report_file, progress=cli.say))


@click.group()
def ota() -> None:
    """Verify and install OTA bundles (what a device runs; the same code as edgebuild-device.pyz)."""


def _public_key(path: Path | None) -> Any:
    from edgebuild.runtime.ota.bundle import load_public_key

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
    from edgebuild.runtime.ota.bundle import verify

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
    from edgebuild.runtime.ota.ota import install

    done = install(bundle, install_root, _public_key(public_key), require_signature=not allow_unsigned,
                   root=device_root, keep=keep, allow_downgrade=allow_downgrade)
    click.echo(f"installed {done['installed']} (was {done['previous'] or 'none'}); health check on "
               f"{done['health']['backend']}: sanity inference {done['health']['inference_ms']} ms, max |diff| "
               f"{done['health']['max_abs_diff']}")


@click.group("farm")
def farm() -> None:
    """The device farm: Jetsons reserved through a labgrid coordinator (pip edgebuild[farm])."""


@farm.command("status")
@project_option
@click.option("--farm", "farm_address", default=None, metavar="HOST:PORT",
              help="The labgrid coordinator (default [farm] coordinator, else $LG_COORDINATOR).")
@json_option
@pass_cli
def farm_status_command(cli: CliContext, project_dir: Path, farm_address: str | None, as_json: bool) -> None:
    """List the farm's places: their tags, the project's fleet groups each can serve, who holds it.

    A group's board must be tagged module=<module id> jetpack=<release> (and power_mode=<mode>
    when the group names one), e.g. `labgrid-client -p orin-1 set-tags module=orin-nano-8gb
    jetpack=6.2`. Groups no place can serve are listed too.
    """
    from edgebuild.workflows.farm import farm_status

    with farm_usage():
        status = farm_status(project_dir, farm_address, progress=cli.say)
    if as_json:
        click.echo(render.as_json({"coordinator": status.coordinator, "places": [p.as_dict() for p in status.places],
                                   "unserved_groups": list(status.unserved)}))
    else:
        click.echo(render.farm_status_text(status))


@click.command("inspect")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@json_option
def inspect_command(path: Path, as_json: bool) -> None:
    """Show where each TensorRT engine under PATH comes from (or will), and whether it is intact.

    \b
    PATH is a fleet group folder (build/groups/<group>), a model folder (build/engines/<group>),
    a folder of them (build/engines), an engine.json or an engine file (engine.plan). For each engine: its
    provenance from engine.json (TensorRT version, compute capability, module, JetPack/L4T,
    precision, builder flags, workspace, optimization level, profile shapes, timing cache,
    hardware/version compatibility, where and when it was built, edgebuild's version; what an
    older engine.json lacks reads "unknown"), whether the engine's sha256 is the one engine.json
    records, and what the engine's own header says (TensorRT has no API for it; the header gives
    the TensorRT version at most, never the GPU). A model folder without an engine (deferred:
    no TensorRT on this host) shows what its recipe.json will build instead: where (the device
    at first start, or a build device), TensorRT, JetPack/L4T, module and compute capability,
    precision and candidate, profile shapes, the ONNX and its sha256, and whether the ONNX,
    acceptance set and FP16 fallback in the folder still match the recipe (--json: "deferred").
    On a device: `python3 edgebuild-device.pyz inspect PATH`.
    """
    from edgebuild.runtime.engines.engine_info import engines_json, inspect_path, render_engines

    engines = inspect_path(path)
    click.echo(render.as_json(engines_json(engines)) if as_json else render_engines(engines))


COMMANDS = (bench_command, serve_command, track_command, run_command, ota, farm, inspect_command)
