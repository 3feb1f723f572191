"""The tracking summary's per-frame latency: from the start of a frame's read to its result, p50/p99/max."""

from __future__ import annotations

from edgebuild.runtime.streams.pipeline import StageTimes


def test_latency_percentiles_are_frames_that_happened() -> None:
    times = StageTimes()
    times.latencies.extend([0.001 * ms for ms in range(1, 101)])  # 1..100 ms
    assert times.latency_ms() == {"p50": 51.0, "p99": 100.0, "max": 100.0}


def test_no_frame_no_latency() -> None:
    assert StageTimes().latency_ms() == {"p50": 0.0, "p99": 0.0, "max": 0.0}
