"""``[accuracy.tracking]``: the tracking gate's settings (docs/tracking-gate.md).

Where it is enabled, the gate also tracks a video set with FP32 and with every candidate, and refuses a
candidate whose HOTA (or IDF1) keeps less than ``min_retention`` of FP32's. The set is generated
(``edgebuild.datasets.mot_video``: ``streams`` x ``frames`` of moving shapes from ``seed``) unless
``sequences`` names the user's own MOTChallenge folder. Only a detector is tracked: ``config.py`` refuses the
table for any other task.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__: list[str] = []

#: the generated set's keys, which a ``sequences`` folder replaces
GENERATED_KEYS = ("streams", "frames", "seed")


class TrackingGateSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    metric: Literal["HOTA", "IDF1"] = "HOTA"
    # of FP32's metric; above 1 refuses every candidate (a check that the gate can refuse)
    min_retention: float = Field(0.99, gt=0)
    tracker: Literal["bytetrack", "ocsort"] = "bytetrack"
    # the generated set (edgebuild.datasets.mot_video): streams x frames, drawn from seed
    streams: int = Field(4, ge=1, le=64)
    frames: int = Field(150, ge=2, le=10_000)
    seed: int = Field(0, ge=0)
    # the user's own MOTChallenge folder instead (each sequence: img1/ frames and gt/gt.txt), from the project
    sequences: str | None = None
    # a detection below this score is not given to the tracker (``edgebuild track --min-score``)
    min_score: float = Field(0.1, ge=0, le=1)

    @field_validator("min_retention", mode="before")
    @classmethod
    def _retention_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"must be a number above 0, such as 0.99; found the boolean {str(value).lower()}")
        return value

    @model_validator(mode="after")
    def _one_set(self) -> TrackingGateSection:
        given = [k for k in GENERATED_KEYS if k in self.model_fields_set]
        if self.sequences is not None and given:
            raise ValueError(f"sequences names the set, so {', '.join(given)} (of the generated set) cannot be "
                             "given too")
        return self
