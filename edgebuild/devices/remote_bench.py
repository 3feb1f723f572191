"""``edgebuild bench``: run the device-side bench runner here or over SSH, then report and compare.

The measuring happens in ``edgebuild/runtime/bench/bench.py`` (Python 3.8, on the device); this module
starts it (a fresh process here, so the cold start is real; or ``edgebuild-device.pyz bench`` on
an SSH device after copying the artifact there), and turns its versioned JSON into a table, a PNG
plot and a comparison against a baseline run.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgebuild.devices.bench_records import (
    BenchComparison,
    ComparedFigure,
    FleetBenchConfig,
    FleetBenchGroup,
    FleetBenchSummary,
)
from edgebuild.errors import ConfigError, EdgebuildError, RemoteError
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime import options as device_options
from edgebuild.runtime.base.files import sha256_bytes
from edgebuild.runtime.base.recipe import RECIPE_FILE, Recipe
from edgebuild.runtime.bench.bench_result import (
    BenchConfig,
    BenchResult,
    Clocks,
    Drift,
    GroupBenchResult,
    Memory,
    OverCurrent,
    RequestBreakdown,
    RequestUnmeasured,
    TegrastatsSummary,
    read_bench_result,
)
from edgebuild.runtime.bench.schema import SCHEMA
from edgebuild.text import Progress

__all__ = ["bench_here", "bench_over_ssh", "check_remote_url", "compare", "comparison_table", "fleet_plot",
           "fleet_summary", "fleet_table", "load_result", "parse_int_list", "plot", "table"]

#: figures --compare shows, with the direction that is better
COMPARED = (("p50_ms", "lower"), ("p90_ms", "lower"), ("p99_ms", "lower"), ("mean_ms", "lower"),
            ("throughput_ips", "higher"))


def device_args(options: JsonObject) -> list[str]:
    """The bench options (by parameter name) as ``edgebuild-device bench`` arguments."""
    return device_options.as_argv(device_options.BENCH, options)


#: a model folder's result or a group folder's
AnyBenchResult = BenchResult | GroupBenchResult


def bench_here(artifact: Path, options: JsonObject, *, timeout_s: float | None = None) -> AnyBenchResult:
    """Run the bench in a fresh Python process on this machine (progress passes through to stderr)."""
    command = [sys.executable, "-m", "edgebuild.runtime", "bench", str(artifact), *device_args(options)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout_s)
    return _answer(done.stdout, done.returncode, "this host")


def bench_over_ssh(url: str, artifact: Path, options: JsonObject, *, progress: Progress = print,
                   timeout_s: float | None = None) -> AnyBenchResult:
    """Copy the artifact to the device (once per content) and run the device-side bench there."""
    from edgebuild.devices.ssh import SshDevice

    recipe = Recipe.load(artifact)
    files = recipe.model_files(artifact)
    digest = sha256_bytes(json.dumps(recipe.file_hashes(artifact), sort_keys=True).encode())
    remote_dir = f"bench/{recipe.group}-{digest[:12]}"
    target = SshDevice(url)
    if target.put_once(files, remote_dir, RECIPE_FILE):
        progress(f"copied {artifact} to {url}:{remote_dir} ({len(files)} files)")
    progress(f"running the bench on {url} (progress comes back when it ends)")
    answer = target.device_tool(["bench", remote_dir, *device_args(options)], timeout_s=timeout_s)
    for line in answer.get("log", "").splitlines():
        progress(f"  device: {line}")
    return read_bench_result(dict(answer["bench"], ran_on=url))


def _answer(stdout: str, code: int, where: str) -> AnyBenchResult:
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise EdgebuildError(f"the bench runner on {where} gave no answer (exit {code})") from None
    if not answer.get("ok"):
        from edgebuild.devices.ssh import _error_class

        cls = _error_class(answer.get("error", ""), int(answer.get("exit_code", 1)))
        raise cls(answer.get("message", "bench failed"), hint=answer.get("hint"))
    return read_bench_result(dict(answer["bench"], ran_on=where))


# -- reading results ------------------------------------------------------------------------------

def load_result(path: Path) -> BenchResult:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a bench result ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: not a bench result of this edgebuild (schema {data.get('schema')!r}, "
                          f"expected {SCHEMA!r})" if isinstance(data, dict) else f"{path}: not a bench result")
    try:
        return BenchResult.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a whole bench result ({type(exc).__name__}: {exc})") from None


def power_mode(result: BenchResult) -> str:
    return result.power_mode()


def table(result: AnyBenchResult) -> str:
    """The run as text: where and what, cold start, one row per configuration, memory and power
    (a group folder's: each model's run alone, then the models at once)."""

    if isinstance(result, GroupBenchResult):
        return group_table(result)

    art = result.artifact
    cold = result.cold_start
    lines = [f"bench of {art.model} {art.version} ({art.group}, {art.target}, {art.precision}) on "
             f"{result.ran_on or '?'} [{result.backend}]",
             f"  backend: {result.backend_reason}",
             f"  power mode: {power_mode(result)}",
             f"  cold start: process start to first result {cold.process_to_first_result_s} s (backend load "
             f"{cold.backend_load_s} s, first inference {cold.first_inference_ms} ms)", ""]
    headers = ["batch", "conc", "runs", "min", "mean", "p50", "p90", "p95", "p99", "max", "img/s", "p50 CI",
               "stopped by"]
    rows = []
    for c in result.configs:
        lat = c.latency
        rows.append([str(c.batch), str(c.concurrency), str(c.iterations)]
                    + [f"{v:.3f}" for v in (lat.min_ms, lat.mean_ms, lat.p50_ms, lat.p90_ms, lat.p95_ms, lat.p99_ms,
                                            lat.max_ms)]
                    + [f"{c.throughput_ips:.1f}", f"±{c.p50_ci_width_pct / 2:.2f}%", c.stopped_by])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(headers, widths)) + "   (latency in ms)")
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    split = False
    for c in result.configs:
        if c.stages:
            s, split = c.stages, True
            lines.append(f"  batch {c.batch}: host-to-device {s.h2d_ms:.3f} ms, compute {s.compute_ms:.3f} ms, "
                         f"device-to-host {s.d2h_ms:.3f} ms")
    if not split:
        lines.append(f"  copy/compute split: not available on {result.backend} (TensorRT only)")
    for c in result.configs:
        lines += sustained_lines(c, result)
    lines += request_lines(result.request)
    lines.append(_memory_line("peak memory", result.memory))
    tegra = result.tegrastats
    if isinstance(tegra, TegrastatsSummary):
        power = tegra.input_power()
        lines.append(f"  tegrastats: {tegra.samples} samples; GPU load mean "
                     f"{tegra.gpu_load_pct.mean if tegra.gpu_load_pct else '?'}%, RAM max "
                     f"{tegra.ram_used_mb.max if tegra.ram_used_mb else '?'} MB"
                     + (f", {tegra.input_rail} mean {power.mean} mW (max {power.max})" if power else ""))
    else:
        lines.append(f"  tegrastats: {tegra.reason or 'not sampled'}")
    return "\n".join(lines)


def sustained_lines(config: BenchConfig, result: BenchResult) -> list[str]:
    """A --duration run of one configuration: one row per window, the last against the first, and what
    tegrastats said (or why it could not)."""
    sustained = config.sustained
    if not sustained:
        return []
    clocks = result.jetson.clocks
    if isinstance(clocks, Clocks) and clocks.jetson_clocks_on is not None:
        jetson_clocks = "jetson_clocks on" if clocks.jetson_clocks_on else "jetson_clocks off"
    else:
        jetson_clocks = f"jetson_clocks: {getattr(clocks, 'reason', '') or 'no GPU line in --show'}"
    lines = ["", f"  sustained, batch {config.batch}, concurrency {config.concurrency}: "
                 f"{len(sustained.windows)} windows of {sustained.window_s:g} s; power mode "
                 f"{power_mode(result)}, {jetson_clocks}"]
    headers = ["window", "from s", "runs", "p50 ms", "p99 ms", "img/s", "GPU MHz", "tj max C", "throttle"]
    rows = []
    for w in sustained.windows:
        tegra = w.tegrastats
        gpu = tegra.gpu_freq_mhz if tegra else None
        hottest = tegra.hottest_c() if tegra else None
        rows.append([str(w.index + 1), f"{w.start_s:.0f}", str(w.runs),
                     f"{w.p50_ms:.3f}" if w.p50_ms is not None else "-",
                     f"{w.p99_ms:.3f}" if w.p99_ms is not None else "-",
                     f"{w.throughput_ips:.1f}" if w.throughput_ips is not None else "-",
                     f"{gpu.mean:.0f} (min {gpu.min})" if gpu else "-",
                     f"{hottest:.1f}" if hottest is not None else "-",
                     str(len(tegra.throttle_events)) if tegra else "-"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines.append("    " + "  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    lines += ["    " + "  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    drift = sustained.drift
    if isinstance(drift, Drift):
        lines.append(f"    last window against the first: p50 {drift.p50_change_pct:+.1f}%, throughput "
                     f"{drift.throughput_change_pct:+.1f}% (warns past +{drift.warn_pct:g}%)")
        if drift.warning:
            lines.append(f"    WARNING: {drift.warning}")
    else:
        lines.append(f"    {drift.reason}")
    if sustained.tegrastats_unavailable:
        lines.append(f"    no clocks, temperatures or throttle events: {sustained.tegrastats_unavailable}")
    over = result.jetson.over_current_events
    if isinstance(over, OverCurrent):
        lines.append(f"    over-current throttle events during the run: {sum(over.during_run.values())}")
    return lines


def group_table(result: GroupBenchResult) -> str:
    """A group's bench: every model alone (its own table), then every model at once."""

    lines = [f"bench of group {result.group} ({result.target}, fleet {result.fleet} {result.version}) on "
             f"{result.ran_on or '?'}: {len(result.alone)} models alone, then at once", ""]
    for name, alone in result.alone.items():
        lines += [f"-- {name} alone", table(dataclasses.replace(alone, ran_on=result.ran_on or "?")), ""]
    together = result.together
    lines.append(f"-- every model at once: batch 1 at each profile's opt shape, {together.duration_s:g} s, one "
                 "thread per model in one process (as the group's server runs them)")
    headers = ["model", "runs", "p50", "p90", "p99", "img/s", "p50 alone", "slowdown"]
    rows = []
    for name, row in together.models.items():
        lat = row.latency
        rows.append([name, str(row.iterations)]
                    + [f"{v:.3f}" for v in ((lat.p50_ms, lat.p90_ms, lat.p99_ms) if lat else (0, 0, 0))]
                    + [f"{row.throughput_ips:.1f}", f"{row.alone_p50_ms:.3f}" if row.alone_p50_ms else "-",
                       f"{row.slowdown:.2f}x" if row.slowdown else "-"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(headers, widths)) + "   (latency in ms)")
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append(_memory_line("peak memory of the set", together.memory))
    tegra = together.tegrastats
    lines.append(f"  tegrastats: RAM max {tegra.ram_used_mb.max if tegra.ram_used_mb else '?'} MB"
                 if isinstance(tegra, TegrastatsSummary) else f"  tegrastats: {tegra.reason or 'not sampled'}")
    return "\n".join(lines)


def _memory_line(label: str, memory: Memory) -> str:
    """The process's peak RSS, and its cgroup's peak and limit where it runs in a memory-limited one."""
    from edgebuild.targets.presets import human_size

    cgroup = memory.cgroup
    return f"  {label}: RSS {human_size(memory.peak_rss_bytes)}" + (
        f", cgroup peak {human_size(cgroup.peak_bytes)} of {human_size(cgroup.limit_bytes or 0)}"
        if cgroup.limited and cgroup.peak_bytes else ", not in a memory-limited cgroup")


#: the per-request stages in the order a request passes them: (JSON key, row label)
REQUEST_STAGES = (("preprocess", "preprocess"), ("inference", "inference"), ("postprocess", "post-processing"),
                  ("end_to_end", "end to end"))


def request_lines(request: RequestBreakdown | RequestUnmeasured | None) -> list[str]:
    """The per-request breakdown: one row per stage with p50 and p99, and what each stage was."""
    if not request:
        return ["  per request: not measured (a result from an edgebuild before the per-stage breakdown)"]
    if isinstance(request, RequestUnmeasured):
        return [f"  per request: not measured: {request.reason}"]
    image = request.image
    source = (f"JPEG of a {image.source} ({image.jpeg_bytes / 1024:.0f} KiB) decoded with {image.decoder}"
              if image else f"NOT MEASURED: {request.preprocess_unmeasured}")
    what = {"preprocess": f"decode + vision.preprocess; {source}",
            "inference": f"input {request.input} {request.input_shape}",
            "postprocess": request.postprocess_step,
            "end_to_end": "all three" if image else "inference + post-processing only (no preprocessing)"}
    lines = [f"  per request (batch 1, {request.runs} runs, outputs: {request.outputs}"
             + (f", {request.detections_p50:g} detections" if request.detections_p50 is not None else "")
             + "):", f"    {'stage':<16}{'p50 ms':>10}{'p99 ms':>10}"]
    for key, label in REQUEST_STAGES:
        stats = request.stage(key)
        figures = f"{stats.p50_ms:>10.3f}{stats.p99_ms:>10.3f}" if stats else f"{'-':>10}{'-':>10}"
        lines.append(f"    {label:<16}{figures}   {what[key]}")
    return lines


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display on a build host or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path


def plot(result: AnyBenchResult, path: Path) -> Path:
    """A PNG: the latency distribution per configuration, and throughput against batch size."""
    if isinstance(result, GroupBenchResult):  # several models: each model's own run is plotted
        from edgebuild.errors import ConfigError

        raise ConfigError("--plot draws one model's run; a group's result holds several",
                          hint="bench one model's folder (build/models/<name>/engines/<group>) to plot it")
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for c in result.configs:
        hist = c.histogram_ms
        centers = [(a + b) / 2 for a, b in zip(hist.edges[:-1], hist.edges[1:])]
        left.step(centers, hist.counts, where="mid", label=f"batch {c.batch}, conc {c.concurrency} "
                                                          f"(p50 {c.latency.p50_ms:.2f} ms)")
        left.axvline(c.latency.p50_ms, linestyle=":", linewidth=0.8, color=left.lines[-1].get_color())
    left.set(xlabel="latency (ms)", ylabel="runs", title="latency distribution (0.5th-99.5th percentile)")
    left.legend(fontsize=8)
    for threads in sorted({c.concurrency for c in result.configs}):
        points = sorted((c.batch, c.throughput_ips) for c in result.configs if c.concurrency == threads)
        right.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"concurrency {threads}")
    right.set(xlabel="batch size", ylabel="images / s", title="throughput")
    right.legend(fontsize=8)
    art = result.artifact
    figure.suptitle(f"{art.model} {art.version} {art.group} [{result.backend}] on "
                    f"{result.ran_on or '?'}, power mode {power_mode(result)}", fontsize=10)
    return _save(figure, path)


# -- the fleet (bench --farm) ---------------------------------------------------------------------

def fleet_summary(results: list[Any]) -> FleetBenchSummary:
    """One row per group from the farm's job results: board, backend, cold start, each configuration."""
    groups = []
    for r in results:
        job = FleetBenchGroup(r.group, r.board, r.url, r.retried_from, str(r.error) if r.error else None)
        if r.error is None:
            result: BenchResult = r.result
            job = FleetBenchGroup(
                job.group, job.board, job.url, job.retried_from, None, target=result.artifact.target,
                precision=result.artifact.precision, backend=result.backend, power_mode=power_mode(result),
                cold_start_s=result.cold_start.process_to_first_result_s,
                configs=[FleetBenchConfig(c.batch, c.concurrency, c.latency.p50_ms, c.latency.p99_ms,
                                          c.throughput_ips) for c in result.configs])
        groups.append(job)
    return FleetBenchSummary(groups)


def fleet_table(summary: FleetBenchSummary) -> str:
    headers = ["group", "board", "target", "precision", "backend", "power mode", "cold s", "batch", "conc",
               "p50 ms", "p99 ms", "img/s"]
    rows = []
    for g in summary.groups:
        if g.error or g.configs is None:
            rows.append([g.group, g.board or "-", "FAILED", "", "", "", "", "", "", "", "", ""])
            continue
        for c in g.configs:
            rows.append([g.group, str(g.board), str(g.target), str(g.precision), str(g.backend), str(g.power_mode),
                         f"{g.cold_start_s}", str(c.batch), str(c.concurrency), f"{c.p50_ms:.3f}",
                         f"{c.p99_ms:.3f}", f"{c.throughput_ips:.1f}"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def fleet_plot(summary: FleetBenchSummary, path: Path) -> Path:
    """A PNG: p50 and p99 latency per group (batch 1 where measured, else the first configuration)."""
    plt = _pyplot()
    measured = [g for g in summary.measured if g.configs]
    picked = [next((c for c in g.configs or () if c.batch == 1), (g.configs or [])[0]) for g in measured]
    labels = [f"{g.group}\n{g.board}\n{str(g.backend).split()[0]}" for g in measured]
    figure, axis = plt.subplots(figsize=(max(6, 1.6 * len(measured)), 4.5))
    positions = range(len(measured))
    axis.bar([p - 0.2 for p in positions], [c.p50_ms for c in picked], width=0.4, label="p50")
    axis.bar([p + 0.2 for p in positions], [c.p99_ms for c in picked], width=0.4, label="p99")
    axis.set_xticks(list(positions), labels, fontsize=8)
    axis.set(ylabel="latency (ms)", title="latency per fleet group on its own board")
    axis.legend()
    return _save(figure, path)


# -- comparing ------------------------------------------------------------------------------------

def compare(current: BenchResult, baseline: BenchResult, *, force: bool = False) -> BenchComparison:
    """Per configuration both runs have, the change in each figure; refuses unlike runs unless forced."""
    problems = []
    now_files, then_files = current.artifact.files, baseline.artifact.files
    if now_files != then_files:
        changed = sorted(k for k in set(now_files) | set(then_files) if now_files.get(k) != then_files.get(k))
        problems.append(f"different artifacts ({', '.join(changed)} differ)")
    if power_mode(current) != power_mode(baseline):
        problems.append(f"different power modes ({power_mode(baseline)} then, {power_mode(current)} now)")
    if current.backend != baseline.backend:
        problems.append(f"different backends ({baseline.backend} then, {current.backend} now)")
    if problems and not force:
        raise ConfigError("will not compare runs taken with " + "; ".join(problems),
                          hint="pass --force to compare them anyway")
    rows = []
    for c in current.configs:
        before = baseline.config(c.batch, c.concurrency)
        if before is None:
            continue
        for figure, better in COMPARED:
            now = _figure(c, figure)
            then = _figure(before, figure)
            change = (now - then) / then * 100 if then else float("inf")
            improved = change < 0 if better == "lower" else change > 0
            rows.append(ComparedFigure(c.batch, c.concurrency, figure, then, now, round(change, 2),
                                       improved if change else None))
    if not rows:
        raise ConfigError("the runs share no (batch, concurrency) configuration to compare",
                          hint="rerun with the baseline's --batch and --concurrency")
    return BenchComparison(problems, rows)


def _figure(config: BenchConfig, figure: str) -> float:
    """One of COMPARED's figures of a configuration: its throughput or one of its latency statistics."""
    return config.throughput_ips if figure == "throughput_ips" else float(getattr(config.latency, figure))


def comparison_table(comparison: BenchComparison) -> str:
    lines = []
    if comparison.forced_over:
        lines.append("compared with --force over: " + "; ".join(comparison.forced_over))
    lines.append(f"{'batch':>5} {'conc':>4} {'figure':<15} {'baseline':>10} {'now':>10} {'change':>8}")
    for r in comparison.rows:
        mark = "" if r.better is None else (" better" if r.better else " worse")
        lines.append(f"{r.batch:>5} {r.concurrency:>4} {r.figure:<15} {r.baseline:>10.3f} "
                     f"{r.current:>10.3f} {r.change_pct:>+7.1f}%{mark}")
    return "\n".join(lines)


def parse_int_list(text: str | None, option: str) -> list[int]:
    if not text:
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option} {text!r}: give whole numbers separated by commas, like 1,4,8") from None
    if any(v < 1 for v in values):
        raise ConfigError(f"{option} {text!r}: every value must be at least 1")
    return values


def check_remote_url(url: str) -> str:
    from edgebuild.project.addresses import parse_ssh_url

    try:
        parse_ssh_url(url)
    except ValueError as exc:
        raise RemoteError(str(exc), hint="write --device ssh://user@host[:port]") from None
    return url
