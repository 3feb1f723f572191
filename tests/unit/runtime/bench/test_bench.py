"""The device-side bench runner's parts: tegrastats/nvpmodel parsing, the stopping rule's statistics, memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from edgebuild.devices.remote_bench import power_mode
from edgebuild.errors import ConfigError
from edgebuild.runtime.bench.bench import (
    TegrastatsSampler,
    cgroup_memory,
    ci_width_pct,
    input_shapes,
    jetson_state,
    measure_latency,
    median_ci,
    parse_nvpmodel,
    parse_tegrastats,
    summarize_tegrastats,
)
from edgebuild.runtime.bench.bench_result import BenchResult, Clocks, PowerMode, TegrastatsSummary
from tests.support.bench_results import result_dict

# Lines in the two formats, as tegrastats prints them (NVIDIA's "Reported Statistics" table: CPU
# [X%@Z,...], GR3D_FREQ X%@[Y,Y] aggregated over GPCs, rails as current/average mW). We have no
# Jetson, so these were written out in those formats, not captured by us on a device.
JETPACK5_AGX_ORIN = (
    "RAM 2885/30536MB (lfb 6084x4MB) SWAP 0/15268MB (cached 0MB) CPU [0%@729,1%@729,0%@729,0%@729,off,off,off,off] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 12%@[305,305] VIC_FREQ 729 APE 174 CV0@-256C CPU@44.968C Tboard@35C SOC2@41.531C "
    "Tdiode@36.5C SOC0@41.656C CV1@-256C GPU@40.5C tj@44.968C SOC1@41.375C CV2@-256C VDD_GPU_SOC 2789mW/2789mW "
    "VDD_CPU_CV 398mW/398mW VIN_SYS_5V0 2923mW/2923mW NC 0mW/0mW VDDQ_VDD2_1V8AO 503mW/503mW")
JETPACK6_ORIN_NANO = (
    "12-03-2026 09:10:11 RAM 2152/7620MB (lfb 3x4MB) SWAP 0/3810MB (cached 0MB) "
    "CPU [2%@1510,1%@1510,0%@1510,0%@1510,0%@1510,0%@1510] EMC_FREQ 0%@2133 GR3D_FREQ 37%@[624] NVENC off "
    "NVDEC off NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@48.5C soc2@47.093C soc0@48.031C gpu@47.656C "
    "tj@48.5C soc1@47.593C VDD_IN 5040mW/4980mW VDD_CPU_GPU_CV 594mW/590mW VDD_SOC 1486mW/1480mW")
JETPACK4_NANO = ("RAM 1664/3964MB (lfb 95x4MB) SWAP 0/1982MB (cached 0MB) CPU [12%@1479,5%@1479,3%@1479,4%@1479] "
                 "EMC_FREQ 4%@1600 GR3D_FREQ 0%@921 APE 25 PLL@31C CPU@33.5C PMIC@100C GPU@31.5C AO@40C "
                 "thermal@32.25C POM_5V_IN 2540/2540 POM_5V_GPU 40/40 POM_5V_CPU 402/402")


def test_tegrastats_jetpack5_format() -> None:
    s = parse_tegrastats(JETPACK5_AGX_ORIN)
    assert (s["ram_used_mb"], s["ram_total_mb"], s["swap_total_mb"]) == (2885, 30536, 15268)
    assert s["cpu"][:2] == [{"load_pct": 0, "freq_mhz": 729}, {"load_pct": 1, "freq_mhz": 729}]
    assert s["cpu"][4:] == [None] * 4  # cores that are off
    assert (s["gpu_load_pct"], s["gpu_freq_mhz"]) == (12, 305)
    assert (s["emc_load_pct"], s["emc_freq_mhz"]) == (0, 2133)
    assert s["temp_c"]["cpu"] == 44.968 and s["temp_c"]["tj"] == 44.968
    assert "cv0" not in s["temp_c"]  # -256C: no sensor
    assert s["rails"]["VIN_SYS_5V0"] == {"mw": 2923, "avg_mw": 2923} and s["rails"]["NC"]["mw"] == 0
    assert "time" not in s


def test_tegrastats_jetpack6_format() -> None:
    s = parse_tegrastats(JETPACK6_ORIN_NANO)
    assert s["time"] == "12-03-2026 09:10:11"
    assert (s["ram_used_mb"], s["ram_total_mb"]) == (2152, 7620) and len(s["cpu"]) == 6
    assert (s["gpu_load_pct"], s["gpu_freq_mhz"]) == (37, 624)
    assert s["temp_c"] == {"cpu": 48.5, "soc2": 47.093, "soc0": 48.031, "gpu": 47.656, "tj": 48.5, "soc1": 47.593}
    assert s["rails"] == {"VDD_IN": {"mw": 5040, "avg_mw": 4980}, "VDD_CPU_GPU_CV": {"mw": 594, "avg_mw": 590},
                          "VDD_SOC": {"mw": 1486, "avg_mw": 1480}}


def test_tegrastats_jetpack4_rails_and_summary() -> None:
    old = parse_tegrastats(JETPACK4_NANO)
    assert old["rails"]["POM_5V_IN"] == {"mw": 2540, "avg_mw": 2540} and old["gpu_freq_mhz"] == 921
    summary = summarize_tegrastats([parse_tegrastats(JETPACK6_ORIN_NANO),
                                    parse_tegrastats(JETPACK6_ORIN_NANO.replace("VDD_IN 5040", "VDD_IN 6040"))])
    assert summary["samples"] == 2 and summary["input_rail"] == "VDD_IN"
    assert summary["rails_mw"]["VDD_IN"] == {"mean": 5540.0, "max": 6040}
    assert summary["gpu_load_pct"] == {"mean": 37.0, "max": 37.0}
    assert summarize_tegrastats([parse_tegrastats(JETPACK5_AGX_ORIN)])["input_rail"] == "VIN_SYS_5V0"
    assert parse_tegrastats("garbage") == {}


def _script(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_missing_jetson_tools_are_reported_as_not_a_jetson(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    state = jetson_state()
    assert state["power_mode"] == {"available": False,
                                   "reason": "nvpmodel not found: not a Jetson (or not on PATH)"}
    assert state["clocks"]["available"] is False and "jetson_clocks not found" in state["clocks"]["reason"]
    sampler = TegrastatsSampler()
    sampler.start()
    assert sampler.stop() == {"available": False, "reason": "tegrastats not found: not a Jetson (or not on PATH)"}
    assert power_mode(BenchResult.from_dict(result_dict(jetson=state))) == "none (not a Jetson)"


def test_jetson_tools_when_present(monkeypatch, tmp_path: Path) -> None:
    """Stand-in executables that print what the real tools print; the parsing is what is under test."""
    _script(tmp_path, "nvpmodel", "echo 'NV Power Mode: MAXN_SUPER'\necho 2\n")
    _script(tmp_path, "jetson_clocks", "echo 'SOC family:tegra234  Machine:NVIDIA Jetson Orin Nano'\n")
    _script(tmp_path, "tegrastats", f"while true; do echo '{JETPACK6_ORIN_NANO}'; sleep 0.05; done\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    state = jetson_state()
    assert state["power_mode"] == {"available": True, "name": "MAXN_SUPER", "id": 2}
    assert state["clocks"]["lines"][0].startswith("SOC family:tegra234")
    sampler = TegrastatsSampler(interval_ms=50)
    sampler.start()
    import time

    time.sleep(0.5)
    summary = sampler.stop()
    assert summary["available"] and summary["samples"] >= 3 and summary["input_rail"] == "VDD_IN"
    typed = BenchResult.from_dict(result_dict(jetson=state, tegrastats=summary))  # as the build side reads them
    assert isinstance(typed.jetson.power_mode, PowerMode) and isinstance(typed.jetson.clocks, Clocks)
    assert isinstance(typed.tegrastats, TegrastatsSummary) and typed.tegrastats.input_power() is not None
    assert typed.as_dict()["jetson"] == state and typed.as_dict()["tegrastats"] == summary
    assert parse_nvpmodel("NV Power Mode: 15W\n0\n") == {"name": "15W", "id": 0}


def test_median_ci_brackets_the_median_and_narrows_with_more_runs() -> None:
    rng = np.random.default_rng(1)
    few, many = rng.normal(10, 1, 100), rng.normal(10, 1, 10000)
    for samples in (few, many):
        low, high = median_ci(samples)
        assert low <= float(np.median(samples)) <= high
    assert ci_width_pct(many) < ci_width_pct(few) / 5
    # coverage: the interval holds the true median (10) in about 95% of repeated experiments
    covered = 0
    for _ in range(400):
        low, high = median_ci(rng.normal(10, 1, 200))
        covered += low <= 10 <= high
    assert 0.91 <= covered / 400 <= 0.99


def test_cgroup_memory_v1_and_v2(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/edgebuild.service\n")
    v2 = tmp_path / "v2" / "system.slice" / "edgebuild.service"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("2147483648\n")
    (v2 / "memory.peak").write_text("123456789\n")
    assert cgroup_memory(proc, tmp_path / "v2") == {"limited": True, "limit_bytes": 2147483648,
                                                    "peak_bytes": 123456789, "cgroup": str(v2)}
    (v2 / "memory.max").write_text("max\n")
    assert cgroup_memory(proc, tmp_path / "v2") == {"limited": False}
    proc.write_text("12:pids:/x\n7:memory:/docker/abc\n0::/\n")
    v1 = tmp_path / "v1" / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("1073741824\n")
    (v1 / "memory.max_usage_in_bytes").write_text("5000\n")
    assert cgroup_memory(proc, tmp_path / "v1")["peak_bytes"] == 5000


def test_shapes_outside_the_profile_are_refused() -> None:
    profiles = {"images": [[1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32]]}
    assert input_shapes(profiles, 3) == {"images": [3, 3, 16, 16]}
    assert input_shapes(profiles, 1, {"images": [3, 32, 8]}) == {"images": [1, 3, 32, 8]}
    with pytest.raises(ConfigError, match=r"at batch 8 would be \[8, 3, 16, 16\], outside the profile"):
        input_shapes(profiles, 8)
    with pytest.raises(ConfigError, match="names inputs \\['pixels'\\]"):
        input_shapes(profiles, 1, {"pixels": [3, 8, 8]})


class _ClockedRunner:
    """A runner whose every run takes the next of ``durations_ms`` on a clock it owns: the stopping rule then
    depends on the samples alone, not on how busy the machine is."""

    def __init__(self, durations_ms: list[float]) -> None:
        self.now, self.durations, self.runs = 0.0, durations_ms, 0

    def clock(self) -> float:
        return self.now

    def run(self, _inputs: object) -> None:
        self.now += self.durations[self.runs % len(self.durations)] / 1000.0
        self.runs += 1


def _measured(durations_ms: list[float], **settings: object) -> dict:
    runner = _ClockedRunner(durations_ms)
    rule = {"iterations": None, "duration_s": None, "ci_pct": 1.0, "budget_s": 30.0, "min_iterations": 20, **settings}
    return measure_latency([runner], {}, progress=lambda _: None, clock=runner.clock, **rule)  # type: ignore[arg-type]


def test_the_stopping_rule_stops_when_the_p50_interval_is_narrow_enough() -> None:
    steady = _measured([10.0, 10.02, 9.98, 10.01], ci_pct=1.0, min_iterations=20)
    assert steady["stopped_by"] == "ci" and steady["p50_ci_width_pct"] <= 1.0
    assert len(steady["samples"]) == 20 and steady["wall_s"] == pytest.approx(0.2, rel=1e-3)


def test_the_stopping_rule_stops_at_the_budget_when_the_interval_stays_wide() -> None:
    noisy = _measured([5.0, 15.0, 10.0, 20.0, 1.0], ci_pct=0.001, budget_s=0.5, min_iterations=20)
    assert noisy["stopped_by"] == "budget" and noisy["p50_ci_width_pct"] > 0.001
    assert 0.5 <= noisy["wall_s"] < 0.5 + 20 * 0.02  # the round that crossed the budget finishes


def test_a_duration_or_a_count_stops_by_itself() -> None:
    timed = _measured([10.0], duration_s=0.3)
    assert timed["stopped_by"] == "duration" and len(timed["samples"]) == 30
    counted = _measured([10.0], iterations=7)
    assert counted["stopped_by"] == "iterations" and len(counted["samples"]) == 7
