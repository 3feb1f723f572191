"""``edgebuild bench``: a compiled model folder measured here or on a device, or every selected
group's on a board of its profile reserved from the farm (``--farm``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress
from edgebuild.workflows.work import compiled_artifact, compiled_folders, is_compiled, load_work

if TYPE_CHECKING:
    from edgebuild.devices.bench_records import BenchComparison, FleetBenchSummary
    from edgebuild.devices.farm import JobResult
    from edgebuild.errors import EdgebuildError
    from edgebuild.runtime.bench.bench_result import BenchResult, GroupBenchResult

__all__ = ["bench_artifact", "bench_on_farm"]



@dataclass(frozen=True)
class Benched:
    artifact: Path
    result: BenchResult | GroupBenchResult  # schema edgebuild.bench/1, or a group folder's bench-group/1
    comparison: BenchComparison | None = None  # against the baseline, when one was given and comparable
    error: EdgebuildError | None = None  # why the baseline was not compared, raised after the result is shown
    recorded: tuple[Path, ...] = ()  # build/latency/<group>.json: the measurements next to their predictions


def bench_artifact(artifact: Path | None, options: JsonObject, *, project_dir: Path, selector: str,
                   device_url: str | None = None, baseline: Path | None = None, force: bool = False,
                   progress: Progress = lambda _: None) -> Benched:
    """``artifact`` (else the one compiled group ``selector`` selects) benchmarked here in a fresh
    process, or on the device at ``device_url``; compared with ``baseline`` (``force``: even an
    unlike run)."""
    from edgebuild.devices.remote_bench import bench_here, bench_over_ssh, check_remote_url, compare, load_result
    from edgebuild.errors import EdgebuildError
    from edgebuild.runtime.base.group import is_group_folder
    from edgebuild.runtime.base.recipe import Recipe
    from edgebuild.runtime.bench.bench_result import BenchResult

    if artifact is None:
        artifact = compiled_artifact(project_dir, selector)
    group = is_group_folder(artifact)
    if not group:
        Recipe.load(artifact, hint="bench a folder `edgebuild compile` wrote (build/engines/<group>, or a fleet's "
                                   "build/groups/<group>)")
    elif baseline:
        raise EdgebuildError(f"{artifact}: a group folder's bench measures several models; --baseline compares one "
                             "model's result", hint="bench one model's folder (build/models/<name>/engines/<group>) "
                                                    "to compare it with a baseline")
    before = load_result(baseline) if baseline else None  # a broken baseline fails before the long run
    check_durations(options)
    if device_url:
        result = bench_over_ssh(check_remote_url(device_url), artifact, options, progress=progress)
    else:
        result = bench_here(artifact, options)
    from edgebuild.latency.calibration import record_measured

    recorded = tuple(record_measured(project_dir, artifact, result, progress=progress))
    if before is None:
        return Benched(artifact, result, recorded=recorded)
    try:
        if not isinstance(result, BenchResult):  # a group folder's, refused with a baseline above
            raise EdgebuildError(f"{artifact}: a group folder's bench has no one result to compare")
        return Benched(artifact, result, compare(result, before, force=force), recorded=recorded)
    except EdgebuildError as exc:
        return Benched(artifact, result, error=exc, recorded=recorded)


def check_durations(options: JsonObject) -> None:
    """``--duration`` and ``--window`` read as the device will read them, before anything is copied or run."""
    from edgebuild.runtime.bench.sustained import parse_duration

    parse_duration(options.get("duration"))
    parse_duration(options.get("window"), "--window")


@dataclass(frozen=True)
class FleetBench:
    results: Path  # build/bench: <group>.json per group measured
    summary: FleetBenchSummary  # schema edgebuild.bench-fleet/1
    summary_path: Path
    jobs: list[JobResult]

    @property
    def failed_jobs(self) -> list[JobResult]:
        return [j for j in self.jobs if j.error is not None]

    @property
    def error(self) -> EdgebuildError | None:
        return self.failed_jobs[0].error if self.failed_jobs else None


def bench_on_farm(project_dir: Path, selector: str, address: str | None, options: JsonObject, *,
                  jobs: int | None = None, timeout_s: float | None = None, summary_file: Path | None = None,
                  progress: Progress = lambda _: None) -> FleetBench:
    """``bench --farm``: each selected group's model folder benchmarked on a board of its profile, in
    parallel: ``build/bench/<group>.json``, the fleet summary (``summary_file``, else
    ``build/bench/fleet.json``) and the jobs (``build/farm/bench.json``)."""
    import json

    from edgebuild.devices.farm import fan_out_groups, open_farm, write_jobs_file
    from edgebuild.devices.remote_bench import bench_over_ssh, fleet_summary
    from edgebuild.errors import ConfigError
    from edgebuild.project.layout import BuildLayout
    from edgebuild.runtime.base.files import atomic_write_text

    work = load_work(project_dir, selector)
    project = work.project
    check_durations(options)
    folders = compiled_folders(work)
    missing = [name for name, folder in folders.items() if not is_compiled(folder)]
    if missing:
        raise ConfigError(f"not compiled: {', '.join(missing)}", hint="run `edgebuild compile` for them first")
    farm = open_farm(project, address, timeout_s, progress=progress)
    results = fan_out_groups(farm, work.groups, lambda g, board: bench_over_ssh(board.url, folders[g.name], options,
                                                                                progress=progress),
                             max_jobs=jobs or project.farm.jobs)
    layout = BuildLayout.of(project)
    out = layout.bench
    out.mkdir(parents=True, exist_ok=True)
    from edgebuild.latency.calibration import record_measured

    for r in results:
        if r.error is None:
            atomic_write_text(out / f"{r.group}.json", json.dumps(r.result.as_dict(), indent=2))
            record_measured(project_dir, folders[r.group], r.result, source="bench --farm", progress=progress)
    summary = fleet_summary(results)
    summary_path = summary_file or layout.bench_summary
    atomic_write_text(summary_path, json.dumps(summary.as_dict(), indent=2))
    write_jobs_file(layout.farm_jobs("bench"), results)
    return FleetBench(out, summary, summary_path, results)
