"""tegrastats and jetson_clocks as a sustained bench reads them: recorded lines (tests/data/tegrastats,
sources in its README), windows and throttle events driven by the samples' own time stamps."""

from __future__ import annotations

from pathlib import Path

from edgebuild.runtime.bench.tegrastats import (
    TegrastatsSampler,
    over_current_events,
    parse_jetson_clocks,
    parse_tegrastats,
    throttle_events,
    window_tegrastats,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "tegrastats"


def _line(name: str) -> str:
    return (DATA / name).read_text().strip().splitlines()[0]


def test_a_recorded_agx_orin_line() -> None:
    s = parse_tegrastats(_line("agx_orin_r35.txt"))
    assert s["time"] == "04-11-2025 10:36:27"
    assert (s["ram_used_mb"], s["ram_total_mb"]) == (4321, 62801)
    assert len(s["cpu"]) == 12 and s["cpu"][0] == {"load_pct": 0, "freq_mhz": 729}
    assert s["gpu_load_pct"] == 0 and s["gpu_freq_mhz"] == 0  # two GPCs, both idle at 0
    assert s["emc_freq_mhz"] == 2133
    # sensors reading -256C (not fitted: CV0-2, and GPU on this board) are left out
    assert s["temp_c"] == {"cpu": 44.562, "tboard": 32.0, "soc2": 40.093, "tdiode": 33.0, "soc0": 41.093,
                           "tj": 44.343, "soc1": 41.25}
    assert s["rails"]["VIN_SYS_5V0"] == {"mw": 4025, "avg_mw": 4025}


def test_the_jetpack6_format_under_load() -> None:
    s = parse_tegrastats(_line("orin_nano_r36_busy.txt"))
    assert (s["gpu_load_pct"], s["gpu_freq_mhz"]) == (98, 1020)
    assert s["temp_c"]["tj"] == 63.656 and s["rails"]["VDD_IN"]["mw"] == 14040


def _busy(mhz: int, load: int = 98, tj: float = 63.6, t: float = 0.0) -> dict:
    line = _line("orin_nano_r36_busy.txt").replace("GR3D_FREQ 98%@[1020]", f"GR3D_FREQ {load}%@[{mhz}]")
    sample = parse_tegrastats(line.replace("tj@63.656C", f"tj@{tj}C"))
    sample["t"] = t
    return sample


def test_a_clock_that_falls_under_load_is_one_throttle_event_per_fall() -> None:
    clocks = [1020, 1020, 1020, 816, 816, 1020, 1020, 714, 1020]
    samples = [_busy(mhz, t=i) for i, mhz in enumerate(clocks)]
    events = throttle_events(samples)
    assert [(e["t"], e["gpu_freq_mhz"], e["from_mhz"]) for e in events] == [(3, 816, 1020), (7, 714, 1020)]
    assert events[0]["temp_c"]["tj"] == 63.6


def test_an_idle_gpu_at_a_low_clock_is_not_throttling() -> None:
    """DVFS lowers an idle GPU's clock: not an event."""
    samples = [_busy(1020, t=0), _busy(306, load=3, t=1), _busy(1020, t=2)]
    assert throttle_events(samples) == []


def test_a_window_gets_its_samples_clock_temperatures_power_and_events() -> None:
    samples = [_busy(1020, tj=60.0, t=0.5), _busy(1020, tj=61.0, t=1.0), _busy(816, tj=71.5, t=61.0),
               _busy(816, tj=72.0, t=62.0)]
    first = window_tegrastats(samples, 0.0, 60.0, reference_mhz=1020)
    last = window_tegrastats(samples, 60.0, 120.0, reference_mhz=1020)
    assert first["samples"] == 2 and first["gpu_freq_mhz"] == {"mean": 1020.0, "min": 1020, "max": 1020}
    assert first["temp_max_c"]["tj"] == 61.0 and first["throttle_events"] == []
    assert first["input_rail"] == "VDD_IN" and first["input_mw_mean"] == 14040.0
    assert last["gpu_freq_mhz"]["min"] == 816 and last["temp_max_c"]["tj"] == 72.0
    assert len(last["throttle_events"]) == 1  # against the run's top clock, not the window's own


def test_the_sampler_stamps_each_line_with_its_clock() -> None:
    ticks = iter([10.0, 10.25])
    sampler = TegrastatsSampler(clock=lambda: next(ticks))
    sampler.add(_line("agx_orin_r35.txt"))
    sampler.add("not a tegrastats line")
    sampler.add(_line("orin_nano_r36_busy.txt"))
    assert [s["t"] for s in sampler.samples] == [10.0, 10.25]


def test_jetson_clocks_on_or_off() -> None:
    off = parse_jetson_clocks((DATA / "jetson_clocks_show_orin_nano_25w.txt").read_text())
    assert off == {"gpu_min_hz": 306000000, "gpu_max_hz": 918000000, "gpu_current_hz": 306000000,
                   "jetson_clocks_on": False}
    on = parse_jetson_clocks("GPU MinFreq=918000000 MaxFreq=918000000 CurrentFreq=918000000\n")
    assert on["jetson_clocks_on"] is True
    assert parse_jetson_clocks("SOC family:tegra234\n") == {}


def test_over_current_counters(tmp_path: Path) -> None:
    assert over_current_events(tmp_path) is None  # not an Orin (or no hwmon)
    (tmp_path / "hwmon1").mkdir()
    (tmp_path / "hwmon1" / "oc1_event_cnt").write_text("3\n")
    (tmp_path / "hwmon1" / "oc2_event_cnt").write_text("0\n")
    assert over_current_events(tmp_path) == {"hwmon1/oc1_event_cnt": 3, "hwmon1/oc2_event_cnt": 0}
