"""The INT8 choice with [accuracy.tracking]: the variant the mAP prefers loses it when it tracks below the
tracking gate's min_retention and another keeps both (the tracking measurement stubbed: docs/tracking-gate.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from edgebuild.accuracy.gate import _track_int8
from edgebuild.accuracy.gate_records import Int8Choice, Int8VariantRow
from edgebuild.accuracy.measurements import Measurement
from edgebuild.accuracy.policy import AccuracyPolicy
from edgebuild.accuracy.tracking.gate import TRACKED_INT8_VARIANTS
from edgebuild.cli.render import gate_text

POLICY = AccuracyPolicy(metric="mAP50-95", min_retention=0.99)


def _measured(variant: str, value: float) -> Measurement:
    return Measurement(precision="int8" if variant else "fp32", onnx=f"measured/{variant or 'fp32'}/model.onnx",
                       metric="mAP50-95", value=value, images=200, backend="onnxruntime-cpu", latency_ms=1.0,
                       kept_fp32=[], note="", graph=variant, seconds=1.0, variant=variant)


class _Tracker:
    """TrackingRun's face the choice uses: each variant's tracking retention, and which were asked for."""

    def __init__(self, retentions: dict[str, float]) -> None:
        self.section = SimpleNamespace(metric="HOTA", min_retention=0.99)
        self.retentions, self.asked = retentions, []

    def retention(self, precision: str, onnx: Path, fp32: Path) -> float:
        self.asked.append(onnx.parent.name)
        return self.retentions[onnx.parent.name]


FP32 = _measured("", 0.80)
# the metric's preference: the highest mAP first; "mse" does not keep mAP retention (0.78 / 0.80 < 0.99)
PREFERRED = [_measured("percentile-99.999", 0.800), _measured("entropy", 0.799), _measured("minmax", 0.797),
             _measured("percentile-99.99", 0.796), _measured("mse", 0.78)]
CHOICE = Int8Choice("percentile-99.999", "highest mAP50-95", tuple(
    Int8VariantRow(m.variant, m.value, sqnr_db=40.0, retention=m.value / 0.8) for m in PREFERRED))


def _choose(retentions: dict[str, float]) -> tuple[Measurement, Int8Choice, list[str]]:
    tracker = _Tracker(retentions)
    chosen, choice = _track_int8(POLICY, tracker, Path("/gate"), FP32, PREFERRED, CHOICE)  # type: ignore[arg-type]
    return chosen, choice, tracker.asked


def test_a_variant_that_keeps_both_wins_over_the_one_the_metric_prefers() -> None:
    chosen, choice, asked = _choose({"percentile-99.999": 0.989, "entropy": 0.981, "minmax": 0.999})
    assert chosen.variant == choice.variant == "minmax"
    assert asked == ["percentile-99.999", "entropy", "minmax"]
    assert choice.why.startswith("the best by mAP50-95 that also keeps [accuracy.tracking] min_retention 0.99 of "
                                 "FP32's HOTA")
    assert "HOTA retention: percentile-99.999 0.989, entropy 0.981, minmax 0.999" in choice.why
    assert choice.why.endswith("by mAP50-95 alone: highest mAP50-95")
    rows = {r.variant: r for r in choice.variants}
    assert rows["minmax"].tracking_retention == 0.999 and rows["percentile-99.999"].tracking_retention == 0.989
    assert rows["percentile-99.99"].tracking_retention is None  # not tracked: a passing one came first
    assert Int8Choice.from_dict(choice.as_dict()) == choice  # the record round-trips


def test_the_metric_choice_stands_when_it_tracks_well_and_nothing_else_is_tracked() -> None:
    chosen, choice, asked = _choose({"percentile-99.999": 0.995})
    assert chosen.variant == "percentile-99.999" and asked == ["percentile-99.999"]
    assert "tracked, best mAP50-95 first, 1 of the 4 variants keeping min_retention" in choice.why


def test_at_most_the_top_n_that_keep_the_metric_are_tracked_and_none_passing_keeps_the_metric_choice() -> None:
    chosen, choice, asked = _choose(dict.fromkeys(["percentile-99.999", "entropy", "minmax", "percentile-99.99",
                                                   "mse"], 0.95))
    assert asked == [m.variant for m in PREFERRED[:TRACKED_INT8_VARIANTS]] and "mse" not in asked
    assert chosen.variant == "percentile-99.999"
    assert choice.why.startswith("none kept [accuracy.tracking] min_retention 0.99 of FP32's HOTA")


def test_validate_shows_the_tracked_variants(tmp_path: Path) -> None:
    from edgebuild.accuracy.gate import CandidateResult, GateResult

    _, choice, _ = _choose({"percentile-99.999": 0.989, "entropy": 0.981, "minmax": 0.999})
    candidate = CandidateResult("int8", "measured/minmax/model.onnx", "mAP50-95", 0.797, 0.996, True, True,
                                "onnxruntime-cpu", 1.0, [], "", [])
    result = GateResult(tmp_path, POLICY, 0.8, "onnxruntime-cpu", 200, [candidate], "int8", "lowest", [], [], [],
                        0, 5, 1.0, int8_choice=choice)
    assert "int8: minmax, the best by mAP50-95 that also keeps [accuracy.tracking]" in gate_text(result, ["g"], True)
    assert "HOTA retention: percentile-99.999 0.989, entropy 0.981, minmax 0.999" in gate_text(result, ["g"], True)
