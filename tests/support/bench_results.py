"""Bench results (``edgebuild.bench/1``) as the runner writes them, key for key, for the tests that read one.

``result_dict`` is a run on a build host (ONNX Runtime, no Jetson tools), as ``run_bench`` wrote it;
``jetson_result_dict`` one on an Orin Nano, its Jetson parts made by the runner's own parsers from
captured tool output (tests/data/tegrastats): power mode, clocks, tegrastats over the run and per
window of a sustained run, TensorRT's copy/compute split, the per-request stages.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from edgebuild.runtime.bench.bench import parse_nvpmodel
from edgebuild.runtime.bench.sustained import drift_of, windows_of
from edgebuild.runtime.bench.tegrastats import parse_jetson_clocks, parse_tegrastats, summarize_tegrastats

DATA = Path(__file__).resolve().parents[1] / "data" / "tegrastats"
NOT_A_JETSON = "{} not found: not a Jetson (or not on PATH)"


def config_dict(batch: int = 1, concurrency: int = 1, p50_ms: float = 2.0, throughput_ips: float = 450.0, *,
                stages: dict | None = None, sustained: dict | None = None) -> dict:
    """One configuration: latency around ``p50_ms``, stopped by a fixed number of iterations."""
    out = {"batch": batch, "concurrency": concurrency, "shapes": {"images": [batch, 3, 16, 16]}, "iterations": 200,
           "latency": {"min_ms": round(p50_ms * 0.9, 4), "mean_ms": round(p50_ms * 1.02, 4), "p50_ms": p50_ms,
                       "p90_ms": round(p50_ms * 1.1, 4), "p95_ms": round(p50_ms * 1.15, 4),
                       "p99_ms": round(p50_ms * 1.3, 4), "max_ms": round(p50_ms * 2, 4)},
           "throughput_ips": throughput_ips, "stages": stages, "wall_s": 0.444, "stopped_by": "iterations",
           "p50_ci_ms": [round(p50_ms * 0.99, 4), round(p50_ms * 1.01, 4)], "p50_ci_width_pct": 2.0,
           "histogram_ms": {"edges": [round(p50_ms * 0.9, 4), p50_ms, round(p50_ms * 1.3, 4)], "counts": [120, 80]}}
    if sustained is not None:
        out["sustained"] = sustained
    return out


def result_dict(configs: list[dict] | None = None, *, backend: str = "onnxruntime-cpu 1.32.0",
                files: dict[str, str] | None = None, **top: Any) -> dict:
    """A run on this host as ``run_bench`` writes it; ``top`` replaces top-level parts (``ran_on`` is added last)."""
    result = {
        "schema": "edgebuild.bench/1", "created": "2026-12-07T16:32:03Z",
        "artifact": {"group": "yard", "target": "orin-nano-8gb@6.2", "model": "tiny", "version": "0.3.0",
                     "precision": "fp32", "module": "orin-nano-8gb", "jetpack": "6.2", "tensorrt": "10.3.0.30",
                     "onnx": "model.onnx", "onnx_sha256": "33",
                     "files": files if files is not None else {"model.onnx": "33", "recipe.json": "6e"}},
        "backend": backend,
        "backend_reason": "ONNX Runtime on the CPU, NOT TensorRT: TensorRT is not installed here",
        "versions": {"python": "3.11.7", "numpy": "2.4.6", "edgebuild": "0.1.0", "backend": backend},
        "device": {"tensorrt": None, "tensorrt_problem": "import tensorrt failed: No module named 'tensorrt'",
                   "compute_capability": None, "l4t": None, "compatible": [], "python": "3.11.7", "machine": "x86_64",
                   "hostname": "vm"},
        "jetson": {"power_mode": {"available": False, "reason": NOT_A_JETSON.format("nvpmodel")},
                   "clocks": {"available": False, "reason": NOT_A_JETSON.format("jetson_clocks")},
                   "over_current_events": {"available": False, "reason": "no /sys/class/hwmon/hwmon*/oc*_event_cnt "
                                                                         "here (an Orin has them)"}},
        "settings": {"batches": [1], "concurrency": [1], "iterations": 200, "duration_s": None, "warmup": 20,
                     "ci_pct": 1.0, "budget_s": 30.0, "min_iterations": 50, "shapes": None, "window_s": None,
                     "drift_warn_pct": None},
        "cold_start": {"process_to_first_result_s": 1.23, "process_age_at_bench_start_s": 1.1,
                       "backend_load_s": 0.0012, "first_inference_ms": 0.066},
        "configs": configs if configs is not None else [config_dict()],
        "request": {"measured": False, "reason": "the recipe has no task (written before edgebuild recorded it): "
                                                 "rebuild the folder to time preprocessing and post-processing"},
        "memory": {"peak_rss_bytes": 107347968, "cgroup": {"limited": False}},
        "tegrastats": {"available": False, "reason": NOT_A_JETSON.format("tegrastats")},
    }
    ran_on = top.pop("ran_on", None)
    result.update(top)
    if ran_on is not None:
        result["ran_on"] = ran_on
    return copy.deepcopy(result)


def _samples() -> list[dict]:
    """tegrastats lines over 30 s of a busy Orin Nano whose GPU clock falls from 1020 to 816 MHz after 20 s."""
    busy = (DATA / "orin_nano_r36_busy.txt").read_text().strip()
    samples = []
    for t, mhz in ((1.0, 1020), (5.0, 1020), (12.0, 1020), (21.0, 816), (25.0, 816)):
        sample = parse_tegrastats(busy.replace("@[1020]", f"@[{mhz}]"))
        sample["t"] = t
        samples.append(sample)
    return samples


def jetson_result_dict(request: dict | None = None) -> dict:
    """A 30 s sustained run with TensorRT on an Orin Nano (windows of 10 s, one throttle event), ran over SSH."""
    samples = _samples()
    ends = [i * 0.01 for i in range(1, 3001)]
    windows = windows_of(ends, [10.0 + (i // 1000) for i in range(3000)], began=0.0, wall_s=30.0, window_s=10.0,
                         batch=1, tegrastats=samples)
    sustained = {"window_s": 10.0, "windows": windows, "drift": drift_of(windows, 5.0), "tegrastats_unavailable": None}
    clocks = (DATA / "jetson_clocks_show_orin_nano_25w.txt").read_text()
    split = {"h2d_ms": 0.2, "compute_ms": 9.1, "d2h_ms": 0.1}
    measured = request if request is not None else {
        "measured": True, "batch": 1, "runs": 100, "input": "images", "input_shape": [1, 3, 640, 640],
        "outputs": "raw_head", "postprocess_step": "decode_outputs (raw head: decode and class-aware NMS on the host)",
        "image": {"source": "synthetic 1280x720 frame", "jpeg_bytes": 202000, "decoder": "PIL 11.0.0"},
        "preprocess_unmeasured": None, "detections_p50": 12.0,
        "preprocess": {"p50_ms": 9.5, "p99_ms": 12.0, "mean_ms": 9.8},
        "inference": {"p50_ms": 10.2, "p99_ms": 11.0, "mean_ms": 10.3},
        "postprocess": {"p50_ms": 1.1, "p99_ms": 1.9, "mean_ms": 1.2},
        "end_to_end": {"p50_ms": 21.0, "p99_ms": 24.0, "mean_ms": 21.3}}
    return result_dict(
        [config_dict(1, 1, 10.4, 96.0, stages=split, sustained=sustained),
         config_dict(1, 2, 18.0, 110.0, stages=split)], backend="tensorrt 10.3.0.30",
        device={"tensorrt": "10.3.0.30", "tensorrt_problem": "", "compute_capability": "8.7", "l4t": "36.4.3",
                "compatible": ["nvidia,p3768-0000+p3767-0005-super", "nvidia,tegra234"], "python": "3.10.12",
                "machine": "aarch64", "hostname": "orin-nano-1"},
        jetson={"power_mode": dict(available=True, **parse_nvpmodel("NV Power Mode: MAXN_SUPER\n2\n")),
                "clocks": dict(available=True, lines=clocks.strip().splitlines()[:60], **parse_jetson_clocks(clocks)),
                "over_current_events": {"available": True, "during_run": {"hwmon3/oc1_event_cnt": 0}}},
        request=measured,
        memory={"peak_rss_bytes": 512 << 20,
                "cgroup": {"limited": True, "limit_bytes": 2 << 30, "peak_bytes": None, "cgroup": "/sys/fs/cgroup/x"}},
        tegrastats=dict(available=True, interval_ms=250, **summarize_tegrastats(samples)),
        ran_on="ssh://nvidia@orin-nano-1")


def group_result_dict() -> dict:
    """A group folder's bench (``edgebuild.bench-group/1``): two models alone, then at once (one got no run in)."""
    alone = {"detector": result_dict([config_dict(1, 1, 4.0)]), "classifier": result_dict([config_dict(1, 1, 1.0)])}
    latency = config_dict(1, 1, 6.0)["latency"]
    return {"schema": "edgebuild.bench-group/1", "created": "2026-12-07T16:40:00Z", "group": "yard-cams",
            "target": "orin-nano-8gb@6.2", "fleet": "yard", "version": "1.2.0", "alone": alone,
            "together": {"duration_s": 10.0, "wall_s": 10.002, "batch": 1, "models": {
                "detector": {"backend": "onnxruntime-cpu 1.32.0", "iterations": 1600, "latency": latency,
                             "throughput_ips": 160.0, "alone_p50_ms": 4.0, "slowdown": 1.5},
                "classifier": {"backend": "onnxruntime-cpu 1.32.0", "iterations": 0, "latency": None,
                               "throughput_ips": 0.0, "alone_p50_ms": 1.0, "slowdown": None}},
                "memory": {"peak_rss_bytes": 300 << 20, "cgroup": {"limited": False}},
                "tegrastats": {"available": False, "reason": NOT_A_JETSON.format("tegrastats")}},
            "ran_on": "this host"}
