"""Comparing two bench results: the change in each figure, and refusing runs that are not alike."""

from __future__ import annotations

import json

import pytest

from edgebuild.devices.bench import compare
from edgebuild.errors import ConfigError


def _result(p50: float, ips: float, mode: str | None = "MAXN", engine: str = "aa") -> dict:
    return {"artifact": {"files": {"engine.plan": engine}}, "backend": "tensorrt 10.3.0",
            "jetson": {"power_mode": {"available": mode is not None, "name": mode}},
            "configs": [{"batch": 1, "concurrency": 1, "throughput_ips": ips,
                         "latency": {"p50_ms": p50, "p90_ms": p50, "p99_ms": p50, "mean_ms": p50}}]}


def test_compare_shows_the_change_and_refuses_unlike_runs() -> None:
    rows = {r["figure"]: r for r in compare(_result(9.0, 110.0), _result(10.0, 100.0))["rows"]}
    assert rows["p50_ms"]["change_pct"] == -10.0 and rows["p50_ms"]["better"] is True
    assert rows["throughput_ips"]["change_pct"] == 10.0 and rows["throughput_ips"]["better"] is True
    with pytest.raises(ConfigError, match=r"different power modes \(15W then, MAXN now\)") as caught:
        compare(_result(9.0, 110.0), _result(10.0, 100.0, mode="15W"))
    assert "--force" in caught.value.hint
    with pytest.raises(ConfigError, match=r"different artifacts \(engine.plan differ\)"):
        compare(_result(9.0, 110.0), _result(10.0, 100.0, engine="bb"))
    forced = compare(_result(9.0, 110.0), _result(10.0, 100.0, engine="bb"), force=True)
    assert forced["forced_over"] == ["different artifacts (engine.plan differ)"]
    json.dumps(forced)  # what --json would hold
