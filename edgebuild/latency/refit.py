"""The refit of the published fit with a project's own measurements (``edgebuild plan --calibrate``;
``edgebuild.latency.calibration`` finds the measurements and keeps the result): the factors refitted with
them, a device factor per module and power mode they were measured on, and how well each fit predicts
what it did not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from edgebuild.errors import TargetError
from edgebuild.latency.model import (
    USER_WEIGHT,
    DeviceFactor,
    FitSample,
    LatencyModel,
    fit_latency_model,
    load_latency_model,
    predict_ms,
    published_samples,
)

__all__: list[str] = []  # used within the latency layer (calibration.py)


@dataclass(frozen=True)
class Calibration:
    """A refit with a project's measurements, and how well each fit predicts what it did not see."""

    model: LatencyModel
    weight: float
    #: each of your measurements: (sample, predicted by the published fit, predicted by a fit of the
    #: published figures and your other measurements)
    yours: tuple[tuple[FitSample, float, float], ...]
    published_before: tuple[float, float]  # leave-one-model-out median and max error, published fit
    published_after: tuple[float, float]  # the same with your measurements in every fit

    @staticmethod
    def error(measured: float, predicted: float) -> float:
        return abs(predicted - measured) / measured


def calibrate(yours: list[FitSample], *, weight: float = USER_WEIGHT, published: list[FitSample] | None = None,
              reference: LatencyModel | None = None) -> Calibration:
    """Refit the five factors to the published figures plus ``yours``, each of yours counting ``weight``
    published figures in the least squares.

    Before/after, honestly out of sample: each of your measurements is predicted by the published
    fit (which never saw it) and by a fit of the published figures and your *other* measurements
    (leave-one-measurement-out); the published figures' leave-one-model-out error is given for the
    published fit (as stored) and again with your measurements in every fit. The band widens to
    hold your measurements' left-out ratios.
    """
    import numpy as np
    if not yours:
        raise TargetError("no measurement to calibrate with")
    published = published if published is not None else published_samples()
    reference = reference or load_latency_model()
    yours = [FitSample(s.row, s.cost, s.performance, f"yours:{i}", weight) for i, s in enumerate(yours)]
    full = fit_latency_model(published + yours)
    full = replace(full, devices=_device_factors(yours, full))
    rows = []
    for i, sample in enumerate(yours):
        rest = yours[:i] + yours[i + 1:]
        others = fit_latency_model(published + rest)
        others = replace(others, devices=_device_factors(rest, others))
        rows.append((sample, predict_ms(sample.cost, sample.performance, sample.row.precision, reference),
                     predict_ms(sample.cost, sample.performance, sample.row.precision, others)))
    after = []
    for key in sorted({s.row.model for s in published}):
        model = fit_latency_model([s for s in published if s.row.model != key] + yours)
        after += [Calibration.error(s.row.latency_ms, predict_ms(s.cost, s.performance, s.row.precision, model))
                  for s in published if s.row.model == key]
    ratios = [s.row.latency_ms / out for s, _, out in rows]
    models = sorted({s.row.model for s in published})
    modules = sorted({s.row.module for s in published + yours})
    fitted = LatencyModel(
        full.compute_efficiency, full.memory_efficiency, full.layer_overhead_us,
        min([reference.band_low, *ratios]), max([reference.band_high, *ratios]),
        float(np.median(after)), max(after),
        (f"{len(published)} published figures + {len(yours)} of your measurements (each weighted x{weight:g}; the "
         "project's latency_model.toml)",
         "published models: " + ", ".join(models), "your models: " + ", ".join(sorted({s.row.model for s in yours})),
         "modules: " + ", ".join(modules)),
        tuple(sorted(set(reference.sources) | {s.row.source_url for s in yours})), tuple(modules),
        len(published), len(yours), full.devices, full.arch_factors,
        reference.dla,  # the DLA's factors are not refitted: your measurements are of the GPU
        reference.errors,
    )
    return Calibration(fitted, weight, tuple(rows), (reference.median_error or 0.0, reference.max_error or 0.0),
                       (float(np.median(after)), max(after)))


def _device_factors(yours: list[FitSample], fit: LatencyModel) -> tuple[DeviceFactor, ...]:
    """Per module and power mode you measured on: the geometric mean of measured / ``fit``'s prediction,
    shrunk toward 1 by n / (n + 1) in the logarithm (one measurement moves the factor half way)."""
    groups: dict[tuple[str, str], list[FitSample]] = {}
    for s in yours:
        groups.setdefault((s.row.module, s.row.power_mode), []).append(s)
    factors = []
    for (module, mode), samples in sorted(groups.items()):
        logs = [math.log(s.row.latency_ms / predict_ms(s.cost, s.performance, s.row.precision, fit)) for s in samples]
        n = len(logs)
        perf = samples[0].performance
        factors.append(DeviceFactor(module, mode, perf.gpu_mhz, perf.fp16_tflops,
                                    round(math.exp(n / (n + 1) * sum(logs) / n), 6), n))
    return tuple(factors)

