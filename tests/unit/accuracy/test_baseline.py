"""The FP32 baseline judged: against chance (k/classes x 1.5; a detection floor) and what the source records."""

from __future__ import annotations

import pytest

from edgebuild.accuracy.baseline import (
    CHANCE_FACTOR,
    DETECTION_FLOORS,
    RECORDED_FRACTION,
    BaselineCheck,
    RecordedMetric,
    chance_level,
    judge_baseline,
)

CAUSES = ["normalization: task.preprocess.mean = [0.0], std = [1.0]", "class order: task.classes"]


def _judge(value: float, metric: str = "top-1", classes: int = 10, **kwargs) -> BaselineCheck:
    return judge_baseline(value, metric=metric, classes=classes, backend="onnxruntime-cpu", images=200,
                          dataset="data/split (split 'val')", causes=CAUSES, **kwargs)


def test_chance_level_is_k_over_classes() -> None:
    assert chance_level("top-1", 10) == pytest.approx(0.1)
    assert chance_level("top-5", 10) == pytest.approx(0.5)
    assert chance_level("top-5", 3) == 1.0
    assert chance_level("mAP50-95", 80) == 0.0


@pytest.mark.parametrize(("value", "verdict"), [(0.100, "chance"), (0.15, "chance"), (0.1501, "ok"), (0.9, "ok")])
def test_a_classifier_at_most_one_and_a_half_times_chance_is_at_chance(value: float, verdict: str) -> None:
    check = _judge(value)
    assert check.verdict == verdict
    assert check.floor == pytest.approx(CHANCE_FACTOR * 0.1)
    if verdict == "chance":
        assert check.refuses and check.causes == CAUSES
        assert "0.100" in check.finding and "10 classes" in check.finding and "data/split" in check.finding
        message = check.message("edgebuild.toml")
        assert "1. normalization: task.preprocess.mean" in message and "2. class order" in message
    else:
        assert check.ok and check.causes == [] and not check.refuses


def test_top5_is_judged_against_five_over_classes_and_not_at_all_where_it_is_always_one() -> None:
    assert _judge(0.74, "top-5", classes=10).verdict == "chance"  # 1.5 x 0.5
    assert _judge(0.76, "top-5", classes=10).verdict == "ok"
    assert _judge(1.0, "top-5", classes=4).verdict == "ok"  # top-5 of 4 classes: always 1


@pytest.mark.parametrize("metric", sorted(DETECTION_FLOORS))
def test_a_detector_below_the_floor_is_at_chance(metric: str) -> None:
    floor = DETECTION_FLOORS[metric]
    low, fine = _judge(floor * 0.9, metric, classes=80), _judge(floor, metric, classes=80)
    assert low.verdict == "chance" and "floor" in low.finding and low.chance == 0.0
    assert fine.verdict == "ok"


def test_far_below_the_recorded_metric_is_refused_naming_both() -> None:
    recorded = RecordedMetric("mAP50-95", 0.612, "best.pt train_metrics['metrics/mAP50-95(B)']")
    below = _judge(0.2, "mAP50-95", classes=3, recorded=recorded)
    assert below.verdict == "below-recorded" and below.refuses
    assert "0.2000" in below.finding and "0.6120" in below.finding and "best.pt train_metrics" in below.finding
    assert "data/split" in below.finding
    near = _judge(RECORDED_FRACTION * 0.612 + 0.001, "mAP50-95", classes=3, recorded=recorded)
    assert near.verdict == "ok" and near.recorded == pytest.approx(0.612)
    other = _judge(0.2, "mAP50", classes=3, recorded=recorded)  # another metric: not compared, not shown
    assert other.verdict == "ok" and other.recorded is None


def test_accept_and_gate_off_keep_the_finding_but_do_not_refuse() -> None:
    accepted = _judge(0.1, accept=True)
    assert accepted.verdict == "accepted" and accepted.ok and not accepted.refuses and accepted.finding
    assert "ACCEPTED" in accepted.line()
    off = _judge(0.1, enforced=False)
    assert off.verdict == "chance" and not off.refuses and "not enforced" in off.line()


def test_the_record_round_trips() -> None:
    check = _judge(0.1, recorded=RecordedMetric("top-1", 0.97, "digits.onnx metadata_props['val_metric.top-1']"))
    assert BaselineCheck.from_dict(check.as_dict()) == check
    assert "AT CHANCE" in check.line() and "0.9700" in check.line()
