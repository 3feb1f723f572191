"""A sustained bench (--duration 30m): durations, windows, first against last, driven by injected
clocks and samples (no real long runs, no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.devices.remote_bench import table
from edgebuild.errors import ConfigError
from edgebuild.runtime.bench.bench import measure_latency, run_bench
from edgebuild.runtime.bench.bench_result import BenchResult
from edgebuild.runtime.bench.sustained import drift_of, parse_duration, windows_of
from edgebuild.runtime.bench.tegrastats import parse_tegrastats
from tests.support.runtime_artifacts import write_artifact

BUSY = (Path(__file__).resolve().parents[3] / "data" / "tegrastats" / "orin_nano_r36_busy.txt").read_text().strip()


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800.0), ("90s", 90.0), ("2h", 7200.0), ("1h30m", 5400.0),
                                               ("45", 45.0), (" 1.5m ", 90.0), (12.0, 12.0), (None, None)])
def test_durations(text: object, seconds: float | None) -> None:
    assert parse_duration(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["30x", "m", "10m5", "0s", "-5"])
def test_bad_durations_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigError, match="--duration"):
        parse_duration(text)


class _SlowingRunner:
    """Each run takes ``ms`` on a clock it owns, 1% longer every ``every`` runs: a device heating up."""

    def __init__(self, ms: float, every: int = 100) -> None:
        self.now, self.ms, self.every, self.runs = 0.0, ms, every, 0

    def clock(self) -> float:
        return self.now

    def run(self, _inputs: object) -> None:
        self.now += self.ms * (1.01 ** (self.runs // self.every)) / 1000.0
        self.runs += 1


def _sustained(runner: _SlowingRunner, seconds: float, window: float, tegra: list | None = None) -> tuple:
    measured = measure_latency([runner], {}, iterations=None, duration_s=seconds, ci_pct=1.0, budget_s=30.0,
                               min_iterations=20, progress=lambda _: None, clock=runner.clock)
    windows = windows_of(measured["ends"], measured["samples"], began=measured["began"], wall_s=measured["wall_s"],
                         window_s=window, batch=1, tegrastats=tegra or [])
    return measured, windows


def test_a_device_that_slows_down_is_warned_about() -> None:
    """60 s at 10 ms a run, 1% slower every 100 runs: six windows of 10 s, the last ~30% slower than the first."""
    _, windows = _sustained(_SlowingRunner(10.0), 60.0, 10.0)
    assert [w["index"] for w in windows] == [0, 1, 2, 3, 4, 5]
    assert all(w["seconds"] == pytest.approx(10.0, abs=0.1) for w in windows)
    assert windows[0]["p50_ms"] == pytest.approx(10.4, rel=0.05)
    assert windows[-1]["p50_ms"] > windows[0]["p50_ms"] * 1.2
    assert windows[0]["throughput_ips"] > windows[-1]["throughput_ips"]
    drift = drift_of(windows, 10.0)
    assert drift["compared"] and drift["p50_change_pct"] > 20 and drift["throughput_change_pct"] < -15
    assert "slower than the first" in drift["warning"] and "--drift-warn 10%" in drift["warning"]
    assert drift_of(windows, 50.0)["warning"] is None


def test_a_steady_device_is_not_warned_about_and_a_short_run_has_one_window() -> None:
    _, windows = _sustained(_SlowingRunner(10.0, every=10**9), 30.0, 10.0)
    assert len(windows) == 3 and drift_of(windows, 10.0)["p50_change_pct"] == pytest.approx(0.0, abs=0.01)
    _, one = _sustained(_SlowingRunner(10.0), 5.0, 10.0)
    assert len(one) == 1 and "one window only" in drift_of(one, 10.0)["reason"]


def test_a_short_last_window_joins_the_one_before() -> None:
    _, windows = _sustained(_SlowingRunner(10.0, every=10**9), 24.0, 10.0)  # 10 + 14 s, not 10 + 10 + 4
    assert [round(w["seconds"]) for w in windows] == [10, 14]
    assert sum(w["runs"] for w in windows) == 2400


def test_tegrastats_samples_land_in_their_windows() -> None:
    tegra = []
    for t, mhz in ((1.0, 1020), (5.0, 1020), (12.0, 1020), (21.0, 816), (25.0, 816)):
        sample = parse_tegrastats(BUSY.replace("@[1020]", f"@[{mhz}]"))
        sample["t"] = t
        tegra.append(sample)
    _, windows = _sustained(_SlowingRunner(10.0, every=10**9), 30.0, 10.0, tegra)
    assert [w["tegrastats"]["samples"] for w in windows] == [2, 1, 2]
    assert windows[2]["tegrastats"]["gpu_freq_mhz"]["min"] == 816
    assert len(windows[2]["tegrastats"]["throttle_events"]) == 1 and windows[0]["tegrastats"]["throttle_events"] == []


def test_a_sustained_run_here_says_tegrastats_is_missing_and_still_windows(tmp_path: Path) -> None:
    """A real (short) run on ONNX Runtime: the structure, not the timing."""
    folder = write_artifact(tmp_path / "yard")
    result = run_bench(folder, batches=[1], duration_s="0.3s", window="0.1s", warmup=2, progress=lambda _: None)
    sustained = result["configs"][0]["sustained"]
    assert sustained["window_s"] == 0.1 and len(sustained["windows"]) >= 2
    assert sum(w["runs"] for w in sustained["windows"]) == result["configs"][0]["iterations"]
    assert "tegrastats not found" in sustained["tegrastats_unavailable"]
    assert result["settings"]["window_s"] == 0.1 and result["settings"]["drift_warn_pct"] == 10.0
    text = table(BenchResult.from_dict(dict(result, ran_on="this host")))
    assert "sustained, batch 1, concurrency 1:" in text
    assert "no clocks, temperatures or throttle events: tegrastats not found" in text
