"""The record of one evaluation: the project's metric (and the others computed with it) on the
validation set, the backend that ran the model, how many images and how long.

Split from ``edgebuild.accuracy.evaluate`` (which re-exports it) so that the reference stage,
whose record this is, imports no numpy when a compile only reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Evaluation"]


@dataclass(frozen=True)
class Evaluation:
    """A model's score on the validation set (the project's metric and the others computed with it)."""

    metric: str
    value: float
    metrics: dict[str, float]
    backend: str
    images: int
    seconds: float
    #: with ``evaluate(per_image=True)``: each image's own score, in the set's order (see ``per_image_scores``)
    per_image: tuple[float, ...] = ()

    def as_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "metrics": self.metrics,
                "backend": self.backend, "images": self.images, "seconds": round(self.seconds, 3)}
