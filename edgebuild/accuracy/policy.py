"""The accuracy policy: the one place that says what "keeps its accuracy" means.

A candidate's *retention* is its metric divided by the FP32 reference's, measured on the same
images with the same metric code. It *passes* when retention >= ``accuracy.min_retention``.
With the gate off (``accuracy.gate = false``, ``compile --no-gate``) nothing is judged: every
measurement is recorded, none refuses a candidate, and packaging asks for ``--ship-ungated``.

The policy is built once from the project (:meth:`AccuracyPolicy.of`), carried in the gate's
result, and read from there by the gate's decision, the engine stage's acceptance on a device,
``validate --device``, the compile summary and the build report: the rule is written here only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from edgebuild.jsontypes import JsonObject

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["AccuracyPolicy"]


class _Candidate(Protocol):
    @property
    def precision(self) -> str: ...


C = TypeVar("C", bound=_Candidate)


def fastest_predicted(passing: Sequence[C], predicted: Mapping[str, float] | None) -> C | None:
    """``accuracy.select = "auto"`` where nothing measured on TensorRT: the passing candidate with the lowest
    predicted latency (``edgebuild.latency.budget.predict_candidates``, on the slowest of the groups'
    targets), the earlier of ``passing`` on a tie; None when none of them is predicted (the caller falls back
    to the lowest precision). A candidate a target cannot run at its precision is not predicted, so not chosen
    here."""
    known = [c for c in passing if predicted and c.precision in predicted]
    return min(known, key=lambda c: predicted[c.precision], default=None) if predicted else None


@dataclass(frozen=True)
class AccuracyPolicy:
    metric: str  # e.g. "mAP50-95" or "top1"
    min_retention: float  # accuracy.min_retention
    gated: bool = True  # accuracy.gate: False = a dry run, measured but never judged

    @classmethod
    def of(cls, project: Project) -> AccuracyPolicy:
        return cls(metric=project.metric, min_retention=project.accuracy.min_retention,
                   gated=project.accuracy.gate)

    @staticmethod
    def retention(value: float, reference: float) -> float:
        """``value / reference``; 0 where the reference scores nothing (retention is undefined then)."""
        return value / reference if reference > 0 else 0.0

    def passes(self, retention: float) -> bool:
        """Whether a measured retention keeps the threshold (the verdict, even with the gate off)."""
        return retention >= self.min_retention

    def keeps(self, value: float, reference: float) -> bool:
        return self.passes(self.retention(value, reference))

    def refuses(self, retention: float) -> bool:
        """Whether a measurement stops a candidate: below the threshold with the gate on. A device
        refuses such an engine and the next candidate is tried; with the gate off nothing is refused."""
        return self.gated and not self.passes(retention)

    def describe(self) -> str:
        if not self.gated:
            return f"GATE OFF (min_retention {self.min_retention} of the FP32 {self.metric} not enforced)"
        return f"retention >= {self.min_retention} of the FP32 {self.metric}"

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> AccuracyPolicy:
        return cls(metric=str(data["metric"]), min_retention=float(data["min_retention"]),
                   gated=bool(data.get("gated", True)))
