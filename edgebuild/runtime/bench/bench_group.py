"""``edgebuild bench`` of a group folder: each model alone, then every model of the group at once.

A device that runs a detector and a classifier runs them together: they share the GPU, the CPU
cores and the memory. So a group folder (``edgebuild.runtime.base.group``) is measured twice:

- each model alone, as ``run_bench`` measures a model folder (its configurations, cold start,
  per-request stages);
- all of them at once, in one process as the group's server runs them: one thread per model (each
  on the core its recipe places it: GPU, DLA0, DLA1), each calling its own backend in a loop at
  batch 1 and its profile's opt shape for the same ``duration_s``, started together; per model
  its latency percentiles, throughput and the slowdown of its p50 against its p50 alone, and for
  the set the peak memory (RSS, the cgroup's peak where the process is in one, tegrastats on a Jetson).

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np

from edgebuild.runtime.base.group import GroupManifest, model_folders
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.bench.bench import (
    _log,
    cgroup_memory,
    input_shapes,
    latency_stats,
    peak_rss_bytes,
    run_bench,
)
from edgebuild.runtime.bench.bench_result import BENCH_GROUP_SCHEMA as GROUP_SCHEMA
from edgebuild.runtime.bench.sustained import parse_duration
from edgebuild.runtime.bench.tegrastats import TegrastatsSampler
from edgebuild.runtime.engines.backends.select import load_backend

__all__ = []

#: seconds every model runs at once when no duration is given
TOGETHER_S = 10.0


def run_group_bench(folder: Path, *, backend: str = "auto", duration_s: Union[float, str, None] = None,
                    warmup: int = 20, engine_cache: Optional[Path] = None,
                    progress: Progress = _log, **alone: Any) -> JsonObject:
    """Every model of the group folder alone (``run_bench`` with ``alone``'s settings), then all at once."""
    folder = Path(folder)
    duration_s = parse_duration(duration_s)  # "30m" from the command line
    manifest = GroupManifest.load(folder)
    folders = model_folders(folder)
    results = {}
    for name, path in folders.items():
        progress("== {} alone".format(name))
        results[name] = run_bench(path, backend=backend, duration_s=duration_s, warmup=warmup,
                                  engine_cache=engine_cache, progress=progress, **alone)
    progress("== every model at once ({})".format(", ".join(folders)))
    together = _together(folders, backend, engine_cache, duration_s or TOGETHER_S, warmup, progress)
    for name, row in together["models"].items():
        alone_p50 = next((c["latency"]["p50_ms"] for c in results[name]["configs"]
                          if c["batch"] == 1 and c["concurrency"] == 1), None)
        row["alone_p50_ms"] = alone_p50
        row["slowdown"] = round(row["latency"]["p50_ms"] / alone_p50, 3) if alone_p50 else None
    return {"schema": GROUP_SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "group": manifest.group, "target": manifest.target, "fleet": manifest.fleet, "version": manifest.version,
            "alone": results, "together": together}


def _together(folders: Dict[str, Path], backend: str, engine_cache: Optional[Path], seconds: float, warmup: int,
              progress: Progress) -> JsonObject:
    rng = np.random.default_rng(0)
    loaded = {}
    for name, path in folders.items():
        recipe = Recipe.load(path)
        runner, _ = load_backend(path, backend, engine_cache, progress=lambda _: None, recipe=recipe)
        inputs = {n: rng.random(s, dtype=np.float32) for n, s in input_shapes(recipe.profiles, 1).items()}
        for _ in range(warmup):
            runner.run(inputs)
        loaded[name] = (runner, inputs, recipe.runs_on)
    samples: Dict[str, List[float]] = {name: [] for name in folders}
    start = threading.Event()
    sampler = TegrastatsSampler()
    sampler.start()

    def loop(name: str) -> None:
        runner, inputs, _ = loaded[name]
        out, clock = samples[name], time.perf_counter
        start.wait()
        until = clock() + seconds
        while clock() < until:
            began = clock()
            runner.run(inputs)
            out.append((clock() - began) * 1000.0)

    threads = [threading.Thread(target=loop, args=(name,), name="bench-" + name) for name in folders]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    rows = {}
    for name, values in samples.items():
        rows[name] = {"backend": loaded[name][0].backend, "accelerator": loaded[name][2], "iterations": len(values),
                      "latency": latency_stats(values) if values else None,
                      "throughput_ips": round(len(values) / wall, 2)}
        if values:
            stats = rows[name]["latency"]
            progress("{} ({}) with the others: p50 {:.3f} ms, p99 {:.3f} ms, {:.1f} images/s".format(
                name, loaded[name][2], stats["p50_ms"], stats["p99_ms"], rows[name]["throughput_ips"]))
    return {"duration_s": seconds, "wall_s": round(wall, 3), "batch": 1, "models": rows,
            "memory": {"peak_rss_bytes": peak_rss_bytes(), "cgroup": cgroup_memory()}, "tegrastats": sampler.stop()}
