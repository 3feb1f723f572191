"""tegrastats and jetson_clocks on a Jetson: parsed lines, a sampler that runs beside a bench, and
what a sustained run reads from them per window (clocks, temperatures, throttle events).

- ``parse_tegrastats``: one line, in the JetPack 4, 5 (R35) and 6 (R36) formats and the later one
  that adds each sensor's maximum (``cpu@45.8C/45.8C``) and a third rail figure;
- ``TegrastatsSampler``: ``tegrastats --interval MS`` in the background; every parsed line gets the
  time it was read (``t``, on the clock the bench measures with, injectable), so its samples can be
  cut into the bench's windows;
- ``throttle_events``: where the GPU clock fell while the GPU was busy. tegrastats prints no
  throttle flag; a clock that drops more than ``drop`` below the run's highest while the GPU load is
  at least ``busy_pct`` is what thermal or over-current throttling looks like from outside
  (DVFS lowers the clock of an idle GPU too, so idle samples are not counted);
- ``over_current_events``: Orin's over-current throttle counters
  (``/sys/class/hwmon/hwmon*/oc*_event_cnt``), read before and after a run;
- ``parse_jetson_clocks``: ``jetson_clocks --show``'s GPU line; jetson_clocks is on when the GPU's
  minimum frequency has been raised to its maximum.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from edgebuild.runtime.base.json_object import JsonObject

__all__ = []

_STAMP = re.compile(r"^(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)\s+")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\](?:@(\d+))?")
_GPU = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_TEMP = re.compile(r"\b([A-Za-z][\w-]*)@(-?\d+(?:\.\d+)?)C\b")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)mW/(\d+)mW")
_RAIL_OLD = re.compile(r"\b((?:POM|VDD)_[A-Z0-9_]+) (\d+)/(\d+)\b")  # JetPack 4: "POM_5V_IN 2540/2540"
#: the rail that measures the whole module's input, by the names tegrastats uses across modules
INPUT_RAILS = ("VDD_IN", "VIN_SYS_5V0", "POM_5V_IN")
#: the sensors a sustained run reports per window, hottest-first by what throttles an Orin
KEY_SENSORS = ("tj", "gpu", "cpu", "soc0", "soc1", "soc2")


def parse_tegrastats(line: str) -> JsonObject:
    """One tegrastats line -> RAM/SWAP (MB), CPU loads and MHz, GPU load and MHz, temperatures, rails (mW).

    JetPack 5 (R35): ``RAM 2885/30536MB (lfb ...) ... CPU [0%@729,...] EMC_FREQ 0%@2133 GR3D_FREQ 0%@[0,0]
    ... CPU@44.968C ... VDD_GPU_SOC 2789mW/2789mW ...``; JetPack 6 (R36) starts with a timestamp,
    writes sensors in lower case (``cpu@48.5C``) and a single-GPC frequency (``GR3D_FREQ 0%@[624]``).
    Sensors that read -256C (not fitted) are left out; cores that are ``off`` are None.
    """
    sample = {}  # type: JsonObject
    stamp = _STAMP.match(line)
    if stamp:
        sample["time"] = stamp.group(1)
    for key, pattern in (("ram", _RAM), ("swap", _SWAP)):
        found = pattern.search(line)
        if found:
            sample[key + "_used_mb"], sample[key + "_total_mb"] = int(found.group(1)), int(found.group(2))
    cpu = _CPU.search(line)
    if cpu:
        cores = []  # type: List[Optional[Dict[str, Optional[int]]]]
        for item in cpu.group(1).split(","):
            item = item.strip()
            load = re.match(r"(\d+)%(?:@(\d+))?$", item)
            if load:
                freq = load.group(2) or cpu.group(2)
                cores.append({"load_pct": int(load.group(1)), "freq_mhz": int(freq) if freq else None})
            else:
                cores.append(None)  # "off"
        sample["cpu"] = cores
    gpu = _GPU.search(line)
    if gpu:
        sample["gpu_load_pct"] = int(gpu.group(1))
        if gpu.group(2):
            sample["gpu_freq_mhz"] = max(int(f) for f in gpu.group(2).split(",") if f)
    emc = _EMC.search(line)
    if emc:
        sample["emc_load_pct"] = int(emc.group(1))
        if emc.group(2):
            sample["emc_freq_mhz"] = int(emc.group(2))
    temps = {name.lower(): float(value) for name, value in _TEMP.findall(line) if float(value) > -256}
    if temps:
        sample["temp_c"] = temps
    rails = {name: {"mw": int(now), "avg_mw": int(avg)} for name, now, avg in _RAIL.findall(line)}
    if not rails:
        rails = {name: {"mw": int(now), "avg_mw": int(avg)} for name, now, avg in _RAIL_OLD.findall(line)}
    if rails:
        sample["rails"] = rails
    return sample


def summarize_tegrastats(samples: Sequence[JsonObject]) -> JsonObject:
    """Mean and max of the figures a bench reader compares: RAM, GPU load and clock, each rail."""
    def series(key: str) -> List[float]:
        return [s[key] for s in samples if s.get(key) is not None]

    summary = {"samples": len(samples)}  # type: JsonObject
    for key in ("ram_used_mb", "gpu_load_pct", "gpu_freq_mhz", "emc_freq_mhz"):
        values = series(key)
        if values:
            summary[key] = {"mean": round(float(np.mean(values)), 1), "max": float(max(values))}
    rails = sorted({name for s in samples for name in s.get("rails", {})})
    if rails:
        summary["rails_mw"] = {}
        for name in rails:
            values = [s["rails"][name]["mw"] for s in samples if name in s.get("rails", {})]
            summary["rails_mw"][name] = {"mean": round(float(np.mean(values)), 1), "max": max(values)}
        summary["input_rail"] = next((r for r in INPUT_RAILS if r in rails), None)
    return summary


def throttle_events(samples: Sequence[JsonObject], *, drop: float = 0.10, busy_pct: int = 50,
                    reference_mhz: Optional[float] = None) -> List[JsonObject]:
    """Each time the GPU clock fell more than ``drop`` below ``reference_mhz`` (default: the highest
    clock of ``samples``) while the GPU load was at least ``busy_pct``: one event per fall (the
    samples that stay low after it belong to the same event)."""
    clocks = [s["gpu_freq_mhz"] for s in samples if s.get("gpu_freq_mhz")]
    if not clocks:
        return []
    top = reference_mhz or max(clocks)
    events = []  # type: List[JsonObject]
    low = False
    for s in samples:
        freq, load = s.get("gpu_freq_mhz"), s.get("gpu_load_pct")
        if freq is None or load is None:
            continue
        now_low = load >= busy_pct and freq < top * (1.0 - drop)
        if now_low and not low:
            events.append({"t": s.get("t"), "gpu_freq_mhz": freq, "from_mhz": top, "gpu_load_pct": load,
                           "temp_c": {k: v for k, v in (s.get("temp_c") or {}).items() if k in KEY_SENSORS}})
        low = now_low if load >= busy_pct else low
    return events


def window_tegrastats(samples: Sequence[JsonObject], start: float, end: float,
                      reference_mhz: Optional[float] = None) -> JsonObject:
    """What tegrastats said between ``start`` and ``end`` (the samples' ``t``): GPU clock mean and
    lowest, the hottest reading of each key sensor, the input rail's mean power, throttle events."""
    inside = [s for s in samples if s.get("t") is not None and start <= s["t"] < end]
    out = {"samples": len(inside)}  # type: JsonObject
    clocks = [s["gpu_freq_mhz"] for s in inside if s.get("gpu_freq_mhz") is not None]
    if clocks:
        out["gpu_freq_mhz"] = {"mean": round(float(np.mean(clocks)), 1), "min": min(clocks), "max": max(clocks)}
    temps = {}  # type: Dict[str, float]
    for s in inside:
        for name, value in (s.get("temp_c") or {}).items():
            if name in KEY_SENSORS:
                temps[name] = max(value, temps.get(name, value))
    if temps:
        out["temp_max_c"] = temps
    rails = sorted({name for s in inside for name in s.get("rails", {})})
    rail = next((r for r in INPUT_RAILS if r in rails), None)
    if rail:
        out["input_rail"] = rail
        out["input_mw_mean"] = round(float(np.mean([s["rails"][rail]["mw"] for s in inside
                                                    if rail in s.get("rails", {})])), 1)
    out["throttle_events"] = throttle_events(inside, reference_mhz=reference_mhz)
    return out


class TegrastatsSampler:
    """``tegrastats --interval MS`` in the background for the length of a run; each sample carries
    ``t``, the ``clock`` reading when its line was read."""

    def __init__(self, interval_ms: int = 250, clock: Callable[[], float] = time.perf_counter) -> None:
        self.interval_ms = interval_ms
        self.clock = clock
        self.samples = []  # type: List[JsonObject]
        self.tool = shutil.which("tegrastats")
        self.unavailable = None if self.tool else "tegrastats not found: not a Jetson (or not on PATH)"
        self._process = None  # type: Optional[subprocess.Popen]
        self._reader = None  # type: Optional[threading.Thread]

    def start(self) -> None:
        if self.tool is None:
            return
        try:
            self._process = subprocess.Popen([self.tool, "--interval", str(self.interval_ms)], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, universal_newlines=True)
        except OSError as exc:
            self.unavailable = "tegrastats could not start: {}".format(exc)
            return
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self.add(line)

    def add(self, line: str) -> None:
        """One line of tegrastats' output, stamped with the clock (what the reader thread does per line)."""
        parsed = parse_tegrastats(line)
        if parsed:
            parsed["t"] = self.clock()
            self.samples.append(parsed)

    def stop(self) -> JsonObject:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
            if self._reader is not None:
                self._reader.join(timeout=5)
        if self.unavailable:
            return {"available": False, "reason": self.unavailable}
        return dict(available=True, interval_ms=self.interval_ms, **summarize_tegrastats(self.samples))


def parse_jetson_clocks(text: str) -> JsonObject:
    """``jetson_clocks --show`` -> the GPU's min, max and current frequency (Hz) and whether jetson_clocks
    is on (min raised to max); {} when the output has no GPU line."""
    found = re.search(r"^GPU MinFreq=(\d+) MaxFreq=(\d+) CurrentFreq=(\d+)", text, re.MULTILINE)
    if not found:
        return {}
    low, high, now = (int(v) for v in found.groups())
    return {"gpu_min_hz": low, "gpu_max_hz": high, "gpu_current_hz": now, "jetson_clocks_on": low == high}


def over_current_events(root: Path = Path("/sys/class/hwmon")) -> Optional[Dict[str, int]]:
    """Orin's over-current throttle counters (``hwmon*/oc*_event_cnt``) by file, or None where there are none."""
    counts = {}  # type: Dict[str, int]
    for path in sorted(Path(root).glob("hwmon*/oc*_event_cnt")):
        try:
            counts["{}/{}".format(path.parent.name, path.name)] = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
    return counts or None
