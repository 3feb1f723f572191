"""The refit with a project's own measurements (``plan --calibrate``): the published figures' graphs kept
as data give back the stored fit, and measurements the published fit gets wrong pull the refit their way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgebuild.latency.model import (
    FitSample,
    fit_latency_model,
    load_latency_model,
    predict_ms,
    published_samples,
    write_latency_model,
)
from edgebuild.latency.refit import calibrate
from edgebuild.targets.profiles import load_catalog


def test_the_published_graphs_kept_as_data_give_back_the_stored_fit() -> None:
    published = published_samples()
    stored = load_latency_model()
    assert len(published) == 60
    fitted = fit_latency_model(published)
    for precision, value in stored.compute_efficiency.items():
        assert fitted.compute_efficiency[precision] == pytest.approx(value, rel=1e-4)
    assert fitted.layer_overhead_us == pytest.approx(stored.layer_overhead_us, rel=1e-4)


def _yours(published: list[FitSample], factor: float) -> list[FitSample]:
    """Measurements of YOLO11s/m on an Orin NX 16GB at MAXN_SUPER (a mode no published figure has),
    ``factor`` times slower than the published fit predicts: a device the published fit does not know."""
    reference = load_latency_model()
    perf = next(p for p in load_catalog().modules["orin-nx-16gb"].performance if p.power_mode == "MAXN_SUPER")
    out = []
    for s in published:
        if s.row.model in ("yolo11s", "yolo11m") and s.row.module == "agx-orin-64gb":
            measured = factor * predict_ms(s.cost, perf, s.row.precision, reference)
            row = replace(s.row, module="orin-nx-16gb", power_mode=perf.power_mode, latency_ms=round(measured, 4),
                          source="your measurement", source_url="bench.json")
            out.append(FitSample(row, s.cost, perf))
    return out


@pytest.mark.slow
def test_your_measurements_pull_the_refit_and_the_error_is_shown_before_and_after(tmp_path) -> None:
    published = published_samples()
    yours = _yours(published, 1.6)
    assert len(yours) == 6  # two models at three precisions
    done = calibrate(yours, published=published)
    before = [done.error(s.row.latency_ms, b) for s, b, _ in done.yours]
    after = [done.error(s.row.latency_ms, a) for s, _, a in done.yours]
    assert all(b == pytest.approx(0.375, abs=0.01) for b in before)  # 1 - 1/1.6: the published fit, as built
    assert max(after) < min(before) / 2  # each left out in turn, predicted from the other five and the published
    model = done.model
    assert (model.published, model.measured) == (60, 6)
    assert model.fitted_on[0] == ("60 published figures + 6 of your measurements (each weighted x1; the project's "
                                  "latency_model.toml)")
    # what is particular to this device is its own factor, applied by predict_ms on that module and mode only
    (device,) = model.devices
    assert (device.module, device.power_mode, device.measurements) == ("orin-nx-16gb", "MAXN_SUPER", 6)
    assert 1.3 < device.factor < 1.6  # shrunk toward 1 by 6/7 in the logarithm
    s = yours[0]
    other = next(p for p in load_catalog().modules["orin-nx-16gb"].performance if p.power_mode == "MAXN")
    assert predict_ms(s.cost, s.performance, s.row.precision, model) == pytest.approx(
        device.factor * predict_ms(s.cost, s.performance, s.row.precision, replace(model, devices=())))
    assert predict_ms(s.cost, other, s.row.precision, model) == predict_ms(
        s.cost, other, s.row.precision, replace(model, devices=()))
    # the published figures pay for it: their leave-one-model-out error is reported before and after
    assert done.published_before[0] == pytest.approx(load_latency_model().median_error)
    assert done.published_after[0] >= done.published_before[0]
    path = write_latency_model(model, tmp_path / "latency_model.toml", written_by="edgebuild plan --calibrate")
    again = load_latency_model(path)
    assert (again.published, again.measured) == (60, 6) and again.fitted_on == model.fitted_on
    assert again.devices[0].factor == pytest.approx(device.factor) and again.devices[0].matches(s.performance)
    assert path.read_text().startswith("# Written by edgebuild plan --calibrate")
    # --weight pulls the five factors toward your measurements: the published figures' left-out error grows
    heavy = calibrate(yours, published=published, weight=20)
    assert heavy.published_after[0] > done.published_after[0]
