"""A sustained bench (``edgebuild bench --duration 30m``): the run cut into windows, first against last.

A Jetson that runs flat out heats up, and its clocks come down: the p50 of minute 1 is not the
p50 of minute 30. So a run with a ``--duration`` is cut into windows of ``--window`` (default one
minute) by when each inference ended; per window: runs, p50 and p99 latency, throughput, and on a
Jetson what tegrastats said in it (GPU clock, hottest sensors, input power, throttle events). The
last window is compared with the first, and a p50 slower by more than ``--drift-warn`` percent
(default 10) is a warning in the result.

Durations are written ``90s``, ``30m``, ``2h``, ``1h30m`` or as plain seconds (``45``).

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import re
from typing import List, Optional, Sequence, Union, overload

import numpy as np

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.bench.tegrastats import window_tegrastats

__all__ = ["parse_duration"]

DEFAULT_WINDOW = "1m"
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")


@overload
def parse_duration(text: None, option: str = ...) -> None: ...
@overload
def parse_duration(text: Union[str, float, int], option: str = ...) -> float: ...
@overload
def parse_duration(text: Union[str, float, int, None], option: str = ...) -> Optional[float]: ...


def parse_duration(text: Union[str, float, int, None], option: str = "--duration") -> Optional[float]:
    """``"30m"`` -> 1800.0; ``"1h30m"``, ``"90s"``, ``"2h"``, ``"45"`` (seconds) likewise; None stays None."""
    if text is None or isinstance(text, (int, float)):
        return None if text is None else float(text)
    cleaned = text.strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _PART.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ConfigError("{} {!r}: write a duration like 90s, 30m, 2h or 1h30m (or seconds)".format(
                option, text)) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError("{} {!r}: a duration must be longer than zero".format(option, text))
    return seconds


def windows_of(ends: Sequence[float], samples_ms: Sequence[float], *, began: float, wall_s: float,
               window_s: float, batch: int, tegrastats: Sequence[JsonObject] = ()) -> List[JsonObject]:
    """Per window of ``window_s`` from ``began`` (``ends``: when each of ``samples_ms`` ended, same clock):
    its runs, latency p50/p99, throughput, and tegrastats' view of it. A last window shorter than
    half a window joins the one before (its few runs would make a noisy p50)."""
    edges = [began + i * window_s for i in range(int(wall_s // window_s) + 1)]
    if not edges or edges[-1] < began + wall_s:
        edges.append(began + wall_s)
    if len(edges) > 2 and edges[-1] - edges[-2] < window_s / 2:
        del edges[-2]
    ends_arr, values = np.asarray(ends, dtype=np.float64), np.asarray(samples_ms, dtype=np.float64)
    top = max((s["gpu_freq_mhz"] for s in tegrastats if s.get("gpu_freq_mhz")), default=None)
    windows = []
    for index, (start, end) in enumerate(zip(edges[:-1], edges[1:])):
        last = index == len(edges) - 2
        inside = values[(ends_arr >= start) & ((ends_arr <= end) if last else (ends_arr < end))]
        row = {"index": index, "start_s": round(start - began, 3), "seconds": round(end - start, 3),
               "runs": int(inside.size)}  # type: JsonObject
        if inside.size:
            p50, p99 = np.percentile(inside, [50, 99])
            row.update(p50_ms=round(float(p50), 4), p99_ms=round(float(p99), 4),
                       throughput_ips=round(batch * inside.size / (end - start), 2))
        if tegrastats:
            row["tegrastats"] = window_tegrastats(tegrastats, start, end + (1e-9 if last else 0.0), top)
        windows.append(row)
    return windows


def drift_of(windows: Sequence[JsonObject], warn_pct: float) -> JsonObject:
    """The last window against the first: the change of p50 and throughput, and a warning past ``warn_pct``."""
    measured = [w for w in windows if w.get("p50_ms")]
    if len(measured) < 2:
        return {"compared": False, "reason": "one window only: the run is shorter than two windows (give a longer "
                                             "--duration or a shorter --window)"}
    first, last = measured[0], measured[-1]
    p50_pct = (last["p50_ms"] - first["p50_ms"]) / first["p50_ms"] * 100.0
    ips_pct = (last["throughput_ips"] - first["throughput_ips"]) / first["throughput_ips"] * 100.0
    drift = {"compared": True, "first": first["index"], "last": last["index"], "p50_change_pct": round(p50_pct, 2),
             "throughput_change_pct": round(ips_pct, 2), "warn_pct": warn_pct,
             "warning": None}  # type: JsonObject
    if p50_pct > warn_pct:
        drift["warning"] = ("the last window's p50 ({:.3f} ms) is {:.1f}% slower than the first's ({:.3f} ms), more "
                            "than --drift-warn {:g}%: the device slows down under sustained load (clocks, "
                            "temperature: see the windows)").format(last["p50_ms"], p50_pct, first["p50_ms"], warn_pct)
    return drift
