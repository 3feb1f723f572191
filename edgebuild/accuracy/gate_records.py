"""What the gate found besides its candidates, typed: the layer ranking, the INT8 choice, NMS parity.

Each is written into ``gate.json`` (and the measurement store's files) with ``as_dict`` and read
back with ``from_dict``, in the JSON form these records always had, so stored records still read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgebuild.jsontypes import JsonObject

__all__ = []


@dataclass(frozen=True)
class LayerSensitivity:
    """One layer of the INT8 candidate by the quantization error of its inputs (per-channel SQNR, dB)."""

    layer: str
    sqnr_db: float

    def as_dict(self) -> JsonObject:
        return {"layer": self.layer, "sqnr_db": self.sqnr_db}

    @classmethod
    def from_dict(cls, data: JsonObject) -> LayerSensitivity:
        return cls(layer=data["layer"], sqnr_db=data["sqnr_db"])


@dataclass(frozen=True)
class Int8VariantRow:
    """One INT8 variant the gate looked at: its output SQNR, and its metric and retention where measured.

    ``ranked``: whether the variant was ranked by the signal; the one variant of a project that names
    a single method is not, and its row is written as ``variant`` and ``value`` only."""

    variant: str
    value: float | None
    sqnr_db: float | None = None
    retention: float | None = None
    ranked: bool = True

    def as_dict(self) -> JsonObject:
        if not self.ranked:
            return {"variant": self.variant, "value": self.value}
        return {"variant": self.variant, "sqnr_db": self.sqnr_db, "value": self.value, "retention": self.retention}

    @classmethod
    def from_dict(cls, data: JsonObject) -> Int8VariantRow:
        return cls(variant=data["variant"], value=data.get("value"), sqnr_db=data.get("sqnr_db"),
                   retention=data.get("retention"), ranked="sqnr_db" in data)


@dataclass(frozen=True)
class Int8Choice:
    """How the INT8 candidate was made: its variant, why, and every variant looked at."""

    variant: str
    why: str
    variants: tuple[Int8VariantRow, ...]

    def as_dict(self) -> JsonObject:
        return {"variant": self.variant, "why": self.why, "variants": [v.as_dict() for v in self.variants]}

    @classmethod
    def from_dict(cls, data: JsonObject) -> Int8Choice | None:
        """``{}`` (no INT8 candidate) is None."""
        if not data:
            return None
        return cls(variant=data["variant"], why=data["why"],
                   variants=tuple(Int8VariantRow.from_dict(v) for v in data.get("variants", [])))


@dataclass(frozen=True)
class NmsParity:
    """NMS inside the model against the host's decode of its raw head, on every validation image
    (``edgebuild.accuracy.evaluate.nms_parity``)."""

    metric: str
    host_decode: float
    in_model: float
    difference: float
    images: int
    same_detections: int
    largest_difference: float
    nms_free: bool = False  # an NMS-free head: nothing was appended, both are its top-k

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> NmsParity | None:
        """``{}`` (no NMS inside the model) is None."""
        if not data:
            return None
        return cls(metric=data["metric"], host_decode=data["host_decode"], in_model=data["in_model"],
                   difference=data["difference"], images=data["images"], same_detections=data["same_detections"],
                   largest_difference=data["largest_difference"], nms_free=bool(data.get("nms_free", False)))

    def line(self) -> str:
        """What the gate says of it (its notes, the summary, the CLI)."""
        if self.nms_free:  # YOLOv10/YOLO26: the one-to-one top-k ships as it is (sources/ultralytics/adapter.py)
            return (f"NMS-free (one-to-one) head: no NMS added; {self.metric} {self.in_model:.6f} from its "
                    f"top-k detections on {self.images} images")
        return (f"NMS inside the model: {self.metric} {self.in_model:.6f} against the host's decode of the "
                f"FP32 head {self.host_decode:.6f}; the same detections on {self.same_detections} of "
                f"{self.images} images")
