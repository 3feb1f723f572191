"""The INT8 candidate's variants (a range method, bias correction or not) and the range methods a
project's ``quantize.calibration_method`` stands for.

Split from ``edgebuild.accuracy.calibration`` so that what only names a variant (the gate's
records, the measurement keys a no-op compile reads) imports no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = []

#: the percentile levels ``calibration_method = "auto"`` tries
AUTO_PERCENTILES = (99.99, 99.999)


@dataclass(frozen=True)
class Int8Variant:
    """One way to make the INT8 candidate: a range method and whether biases are corrected."""

    method: str  # minmax | percentile-<P> | entropy | mse
    bias_correction: bool

    @property
    def name(self) -> str:
        return self.method + ("+bias" if self.bias_correction else "")

    def describe(self) -> str:
        return f"{self.method} ranges{', bias-corrected' if self.bias_correction else ''}"


def method_names(calibration_method: str, percentile: float) -> tuple[str, ...]:
    """The range methods a project's ``quantize.calibration_method`` stands for."""
    if calibration_method == "auto":
        return ("minmax", *(f"percentile-{p:g}" for p in AUTO_PERCENTILES), "entropy", "mse")
    if calibration_method == "percentile":
        return (f"percentile-{percentile:g}",)
    return (calibration_method,)
