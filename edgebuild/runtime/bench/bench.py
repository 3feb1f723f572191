"""The device-side bench runner: ``edgebuild-device.pyz bench ARTIFACT_DIR`` (and ``edgebuild bench``).

Measures one compiled model folder on the machine it runs on, with the backend the server would
use (the TensorRT engine where it fits, else ONNX Runtime, said in the result):

- cold start: process start to the first result, split into the backend's load (engine
  deserialization or a deferred build, an ONNX Runtime session) and the first inference;
- warm latency per (batch size, concurrency): min, mean, p50, p90, p95, p99, max, and throughput
  in images per second; on TensorRT, host-to-device copy, compute and device-to-host separately
  (a second, synchronised pass, so the main figures keep the pipelined path);
- one request, stage by stage (batch 1): preprocessing from a JPEG (decode and
  ``vision.preprocess``), inference, and post-processing by the recipe's output form (the host
  decode and NMS for a raw head, the split of a model with NMS inside, top-k of a classifier's
  logits), each with p50/p99, and end to end;
- peak memory: the process's RSS, and the cgroup's peak where the run is limited;
- on a Jetson: the power mode (``nvpmodel -q``), the clocks (``jetson_clocks --show``: whether
  jetson_clocks is on), Orin's over-current throttle counters before and after, and tegrastats
  samples during the run (RAM, GPU load and frequency, temperatures, power rails; parsed in
  ``edgebuild.runtime.bench.tegrastats``).

Stopping: a fixed ``iterations`` or ``duration_s`` per configuration, or else rounds until the 95%
confidence interval of the p50 (distribution-free, from order statistics) is within ``ci_pct``
percent of it, or the configuration's time budget ends; the result says which. A run with a
duration is also cut into windows (``edgebuild.runtime.bench.sustained``): p50/p99 and throughput per
window, tegrastats per window, and the last window against the first.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from edgebuild import __version__
from edgebuild.errors import ConfigError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.bench.bench_request import measure_request
from edgebuild.runtime.bench.schema import SCHEMA
from edgebuild.runtime.bench.sustained import DEFAULT_WINDOW, drift_of, parse_duration, windows_of
from edgebuild.runtime.bench.tegrastats import (  # noqa: F401 (parse_tegrastats, summarize_tegrastats: read from here too)
    TegrastatsSampler,
    over_current_events,
    parse_jetson_clocks,
    parse_tegrastats,
    summarize_tegrastats,
)
from edgebuild.runtime.engines import device
from edgebuild.runtime.engines.backends import Runner
from edgebuild.runtime.engines.backends.select import load_backend

__all__ = ["input_shapes", "run_bench"]

Z_95 = 1.96


def _log(message: str) -> None:
    print("bench: " + message, file=sys.stderr, flush=True)


# -- statistics ----------------------------------------------------------------------------

def latency_stats(samples_ms: Sequence[float]) -> Dict[str, float]:
    values = np.asarray(samples_ms, dtype=np.float64)
    points = np.percentile(values, [50, 90, 95, 99])
    return {"min_ms": round(float(values.min()), 4), "mean_ms": round(float(values.mean()), 4),
            "p50_ms": round(float(points[0]), 4), "p90_ms": round(float(points[1]), 4),
            "p95_ms": round(float(points[2]), 4), "p99_ms": round(float(points[3]), 4),
            "max_ms": round(float(values.max()), 4)}


def median_ci(samples: Sequence[float], z: float = Z_95) -> Tuple[float, float]:
    """A distribution-free confidence interval of the median: order statistics n/2 -+ z*sqrt(n)/2."""
    ordered = sorted(samples)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    low = max(0, int(math.floor(n / 2 - half)))
    high = min(n - 1, int(math.ceil(n / 2 + half)))
    return ordered[low], ordered[high]


def ci_width_pct(samples: Sequence[float]) -> float:
    low, high = median_ci(samples)
    middle = float(np.median(samples))
    return 100.0 * (high - low) / middle if middle > 0 else float("inf")


# -- nvpmodel, jetson_clocks ---------------------------------------------------------------

def parse_nvpmodel(text: str) -> JsonObject:
    """``nvpmodel -q`` -> {"name": "MAXN", "id": 0} (``NV Power Mode: MAXN`` then the mode's number)."""
    name = re.search(r"NV Power Mode:\s*(\S+)", text)
    number = re.search(r"^\s*(\d+)\s*$", text, re.MULTILINE)
    return {"name": name.group(1) if name else None, "id": int(number.group(1)) if number else None}


def _tool_output(command: List[str]) -> Tuple[Optional[str], Optional[str]]:
    """(stdout, None), or (None, why it is not there)."""
    path = shutil.which(command[0])
    if path is None:
        return None, "{} not found: not a Jetson (or not on PATH)".format(command[0])
    try:
        done = subprocess.run([path] + command[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "{} failed: {}".format(command[0], exc)
    if done.returncode != 0:
        return None, "{} exited {}: {}".format(command[0], done.returncode, done.stderr.strip()[-300:])
    return done.stdout, None


def jetson_state() -> JsonObject:
    """The power mode and clocks, or why they cannot be read (which is a fact, not an error)."""
    state = {}  # type: JsonObject
    text, why = _tool_output(["nvpmodel", "-q"])
    state["power_mode"] = dict(available=True, **parse_nvpmodel(text)) if text is not None else {
        "available": False, "reason": why}
    text, why = _tool_output(["jetson_clocks", "--show"])
    state["clocks"] = dict(available=True, lines=text.strip().splitlines()[:60], **parse_jetson_clocks(text)) \
        if text is not None else {"available": False, "reason": why}
    return state


# -- memory ---------------------------------------------------------------------------------

def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def cgroup_memory(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> JsonObject:
    """This process's cgroup memory limit and peak, where a limit is set (v2 or v1)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return {"limited": False}
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            folder = root / path.lstrip("/")
            limit, peak = _read(folder / "memory.max"), _read(folder / "memory.peak")
        elif "memory" in controllers.split(","):
            folder = root / "memory" / path.lstrip("/")
            limit, peak = _read(folder / "memory.limit_in_bytes"), _read(folder / "memory.max_usage_in_bytes")
        else:
            continue
        if limit is None or limit == "max" or int(limit) >= 1 << 60:
            continue
        return {"limited": True, "limit_bytes": int(limit), "peak_bytes": int(peak) if peak else None,
                "cgroup": str(folder)}
    return {"limited": False}


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def process_age_s() -> Optional[float]:
    """Seconds since this process started (from /proc: start time in clock ticks after boot)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - started, 0.0)


# -- the runs -------------------------------------------------------------------------------

def input_shapes(profiles: Dict[str, List[List[int]]], batch: int, overrides: Optional[Dict[str, List[int]]] = None
                 ) -> Dict[str, List[int]]:
    """Each input's shape at this batch size: the opt shape, or an override of its non-batch dims.

    ``profiles`` is the recipe's: input name -> [min_shape, opt_shape, max_shape].
    """
    shapes = {}
    for name, (low, opt, high) in profiles.items():
        rest = list((overrides or {}).get(name) or opt[1:])
        shape = [batch] + rest
        if len(shape) != len(low) or any(d < lo or d > hi for d, lo, hi in zip(shape, low, high)):
            raise ConfigError("input {!r} at batch {} would be {}, outside the profile from {} to {}".format(
                name, batch, shape, low, high), hint="choose --batch and --shape within min_shape..max_shape")
        shapes[name] = shape
    unknown = sorted(set(overrides or {}) - set(profiles))
    if unknown:
        raise ConfigError("--shape names inputs {} the model does not have (inputs: {})".format(
            unknown, sorted(profiles)))
    return shapes


def measure_latency(runners: List[Runner], inputs: Dict[str, np.ndarray], *, iterations: Optional[int],
                    duration_s: Optional[float], ci_pct: float, budget_s: float, min_iterations: int,
                    progress: Progress, clock: Callable[[], float] = time.perf_counter) -> JsonObject:
    """Latency samples from len(runners) threads, each calling its runner in a loop.

    Every duration (a run, a round, the budget) is read from ``clock`` (seconds), so the stopping
    rule depends on the samples alone: a test drives it with a clock its runner advances.
    """
    samples = []  # type: List[float]
    ends = []  # type: List[float]  # when each sample ended, on ``clock``: what a sustained run's windows cut
    lock = threading.Lock()
    concurrency = len(runners)
    began_at = [clock()]

    def loop(runner: Runner, count: Optional[int], until: float, out: List[Tuple[float, float]]) -> None:
        done = 0
        while (count is not None and done < count) or (count is None and clock() < until):
            started = clock()
            runner.run(inputs)
            ended = clock()
            out.append(((ended - started) * 1000.0, ended))
            done += 1

    def round_of(count: Optional[int], seconds: Optional[float]) -> float:
        outs = [[] for _ in runners]  # type: List[List[Tuple[float, float]]]
        per_thread = None if count is None else max(1, int(math.ceil(count / concurrency)))
        began = clock()
        until = began + (seconds or 0.0)
        threads = [threading.Thread(target=loop, args=(r, per_thread, until, outs[i])) for i, r in enumerate(runners)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with lock:
            for out in outs:
                samples.extend(ms for ms, _ in out)
                ends.extend(end for _, end in out)
        return clock() - began

    if duration_s is not None:
        began_at[0] = clock()

    if iterations is not None:
        wall, stop = round_of(iterations, None), "iterations"
    elif duration_s is not None:
        wall, stop = round_of(None, duration_s), "duration"
    else:
        wall, stop = 0.0, "budget"
        while wall < budget_s:
            wall += round_of(min_iterations, None)
            width = ci_width_pct(samples)
            progress("  {} runs, p50 {:.3f} ms, 95% CI width {:.2f}% (target {:g}%)".format(
                len(samples), float(np.median(samples)), width, ci_pct))
            if len(samples) >= min_iterations and width <= ci_pct:
                stop = "ci"
                break
    low, high = median_ci(samples)
    return {"samples": samples, "ends": ends, "began": began_at[0], "wall_s": wall, "stopped_by": stop,
            "p50_ci_ms": [round(low, 4), round(high, 4)],
            "p50_ci_width_pct": round(ci_width_pct(samples), 3)}


def _stage_breakdown(runner: Runner, inputs: Dict[str, np.ndarray], runs: int) -> Optional[JsonObject]:
    """Host-to-device, compute and device-to-host times where the backend can split them (TensorRT)."""
    if not hasattr(runner, "run_timed"):
        return None
    stages = {"h2d_ms": [], "compute_ms": [], "d2h_ms": []}  # type: Dict[str, List[float]]
    for _ in range(runs):
        timings = runner.run_timed(inputs)
        for key in stages:
            stages[key].append(timings[key])
    return {key: round(float(np.median(values)), 4) for key, values in stages.items()}


def run_bench(folder: Path, *, backend: str = "auto", batches: Sequence[int] = (), concurrency: Sequence[int] = (1,),
              shapes: Optional[Dict[str, List[int]]] = None, iterations: Optional[int] = None,
              duration_s: Union[float, str, None] = None, warmup: int = 20, ci_pct: float = 1.0,
              budget_s: float = 30.0, min_iterations: int = 50, engine_cache: Optional[Path] = None,
              window: Union[float, str, None] = None, drift_warn_pct: Optional[float] = None,
              progress: Progress = _log) -> JsonObject:
    """Measure an artifact folder on this machine; returns the versioned result (``SCHEMA``).

    ``duration_s`` (seconds, or text such as ``"30m"``) runs each configuration that long and cuts
    it into windows of ``window`` (default one minute), the last compared with the first
    (``drift_warn_pct``, default 10: the warning's threshold).
    """
    folder = Path(folder)
    recipe = Recipe.load(folder, hint="bench a folder `edgebuild compile` wrote (build/engines/<group>/)")
    if iterations is not None and duration_s is not None:
        raise ConfigError("give --iterations or --duration, not both")
    duration_s = parse_duration(duration_s)
    window_s = parse_duration(window if window is not None else DEFAULT_WINDOW, "--window")
    drift_warn = 10.0 if drift_warn_pct is None else float(drift_warn_pct)
    if not batches:
        opt_batch = next(iter(recipe.profiles.values()))[1][0]
        batches = sorted({1, int(opt_batch)})
    # refuse bad shapes before loading
    per_batch = [(int(b), input_shapes(recipe.profiles, int(b), shapes)) for b in batches]
    age_at_start = process_age_s()
    sampler = TegrastatsSampler()
    state = jetson_state()
    over_current_before = over_current_events()
    sampler.start()
    load_started = time.perf_counter()
    runner, why = load_backend(folder, backend, engine_cache, progress=progress, recipe=recipe)
    load_s = time.perf_counter() - load_started
    rng = np.random.default_rng(0)
    first_inputs = {n: rng.random(s, dtype=np.float32) for n, s in per_batch[0][1].items()}
    first_started = time.perf_counter()
    runner.run(first_inputs)
    first_ms = (time.perf_counter() - first_started) * 1000.0
    age_at_first = process_age_s()
    progress("backend {} ({}); loaded in {:.3f} s, first result {:.2f} ms".format(
        runner.backend, why, load_s, first_ms))
    per_thread_runner = runner.backend.startswith("tensorrt")  # an execution context serves one thread
    configs = []
    for batch, batch_shapes in per_batch:
        inputs = {n: rng.random(s, dtype=np.float32) for n, s in batch_shapes.items()}
        for threads in concurrency:
            runners = [runner] + ([load_backend(folder, backend, engine_cache, progress=lambda _: None,
                                                recipe=recipe)[0]
                                   for _ in range(threads - 1)] if per_thread_runner else [runner] * (threads - 1))
            progress("batch {}, concurrency {}: {} warm-up runs".format(batch, threads, warmup))
            for _ in range(warmup):
                runner.run(inputs)
            measured = measure_latency(runners, inputs, iterations=iterations, duration_s=duration_s,
                                       ci_pct=ci_pct, budget_s=budget_s, min_iterations=min_iterations,
                                       progress=progress)
            samples, ends, began = measured.pop("samples"), measured.pop("ends"), measured.pop("began")
            config = {"batch": batch, "concurrency": threads, "shapes": batch_shapes, "iterations": len(samples),
                      "latency": latency_stats(samples),
                      "throughput_ips": round(batch * len(samples) / measured["wall_s"], 2),
                      "stages": _stage_breakdown(runner, inputs, min(50, max(5, len(samples) // 10)))}
            config.update(measured)
            config["wall_s"] = round(config["wall_s"], 3)
            config["histogram_ms"] = _histogram(samples)
            if duration_s is not None:
                config["sustained"] = _sustained(samples, ends, began, measured["wall_s"], window_s, batch,
                                                 list(sampler.samples), drift_warn, sampler.unavailable, progress)
            configs.append(config)
            lat = config["latency"]
            progress("batch {}, concurrency {}: p50 {:.3f} ms, p99 {:.3f} ms, {:.1f} images/s ({} runs, stopped by "
                     "{})".format(batch, threads, lat["p50_ms"], lat["p99_ms"], config["throughput_ips"],
                                  len(samples), config["stopped_by"]))
    runs = iterations if iterations is not None else max(min_iterations, 100)
    progress("one request, stage by stage: {} runs at batch 1".format(runs))
    request = measure_request(runner, recipe, runs)
    if request["measured"]:
        progress("per request: preprocess {}, inference {:.3f} ms, post-processing {:.3f} ms, end to end {:.3f} ms "
                 "(p50)".format("{:.3f} ms".format(request["preprocess"]["p50_ms"]) if request["preprocess"] else
                                "not measured", request["inference"]["p50_ms"], request["postprocess"]["p50_ms"],
                                request["end_to_end"]["p50_ms"]))
    tegrastats = sampler.stop()
    state["over_current_events"] = _over_current(over_current_before, over_current_events())
    versions = {"python": platform.python_version(), "numpy": np.__version__, "edgebuild": __version__}
    versions["backend"] = runner.backend
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "artifact": {"group": recipe.group, "target": recipe.target, "model": recipe.model_name,
                     "version": recipe.model_version, "precision": recipe.precision,
                     "module": recipe.module.id, "jetpack": recipe.jetpack, "tensorrt": recipe.tensorrt,
                     "onnx": recipe.onnx, "onnx_sha256": recipe.onnx_sha256, "files": recipe.file_hashes(folder)},
        "backend": runner.backend, "backend_reason": why, "versions": versions,
        "device": dict(device.probe().as_dict(), hostname=platform.node()),
        "jetson": state,
        "settings": {"batches": [b for b, _ in per_batch], "concurrency": list(concurrency), "iterations": iterations,
                     "duration_s": duration_s, "warmup": warmup, "ci_pct": ci_pct, "budget_s": budget_s,
                     "min_iterations": min_iterations, "shapes": shapes,
                     "window_s": window_s if duration_s is not None else None,
                     "drift_warn_pct": drift_warn if duration_s is not None else None},
        "cold_start": {"process_to_first_result_s": round(age_at_first, 3) if age_at_first is not None else None,
                       "process_age_at_bench_start_s": round(age_at_start, 3) if age_at_start is not None else None,
                       "backend_load_s": round(load_s, 4), "first_inference_ms": round(first_ms, 3)},
        "configs": configs,
        "request": request,
        "memory": {"peak_rss_bytes": peak_rss_bytes(), "cgroup": cgroup_memory()},
        "tegrastats": tegrastats,
    }


def _histogram(samples: Sequence[float], bins: int = 40) -> Dict[str, List[float]]:
    """Counts over evenly spaced bins from the 0.5th to the 99.5th percentile (what the plot draws)."""
    low, high = np.percentile(samples, [0.5, 99.5])
    if high <= low:
        high = low + 1e-6
    counts, edges = np.histogram(np.clip(samples, low, high), bins=bins, range=(low, high))
    return {"edges": [round(float(e), 4) for e in edges], "counts": [int(c) for c in counts]}


def _sustained(samples: Sequence[float], ends: Sequence[float], began: float, wall_s: float, window_s: float,
               batch: int, tegra: List[JsonObject], drift_warn: float, no_tegrastats: Optional[str],
               progress: Progress) -> JsonObject:
    """The configuration's run in windows, the last against the first, and what tegrastats said per window."""
    windows = windows_of(ends, samples, began=began, wall_s=wall_s, window_s=window_s, batch=batch, tegrastats=tegra)
    drift = drift_of(windows, drift_warn)
    for w in windows:
        progress("  window {} ({:.0f}-{:.0f} s): {} runs, p50 {} ms, p99 {} ms, {} images/s".format(
            w["index"] + 1, w["start_s"], w["start_s"] + w["seconds"], w["runs"], w.get("p50_ms", "-"),
            w.get("p99_ms", "-"), w.get("throughput_ips", "-")))
    if drift.get("warning"):
        progress("WARNING: " + drift["warning"])
    return {"window_s": window_s, "windows": windows, "drift": drift,
            "tegrastats_unavailable": no_tegrastats}


def _over_current(before: Optional[Dict[str, int]], after: Optional[Dict[str, int]]) -> JsonObject:
    """Orin's over-current throttle events during the run (counters after minus before)."""
    if before is None or after is None:
        return {"available": False, "reason": "no /sys/class/hwmon/hwmon*/oc*_event_cnt here (an Orin has them)"}
    return {"available": True, "during_run": {k: after[k] - before.get(k, 0) for k in after}}

