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
    a single method is not, and its row is written as ``variant`` and ``value`` only.
    ``tracking_retention``: with ``[accuracy.tracking]``, its tracking metric's retention of FP32's where the
    INT8 choice tracked it (written only then, so a record without the tracking gate reads back key for key)."""

    variant: str
    value: float | None
    sqnr_db: float | None = None
    retention: float | None = None
    ranked: bool = True
    tracking_retention: float | None = None

    def as_dict(self) -> JsonObject:
        tracked = {} if self.tracking_retention is None else {"tracking_retention": self.tracking_retention}
        if not self.ranked:
            return {"variant": self.variant, "value": self.value, **tracked}
        return {"variant": self.variant, "sqnr_db": self.sqnr_db, "value": self.value, "retention": self.retention,
                **tracked}

    @classmethod
    def from_dict(cls, data: JsonObject) -> Int8VariantRow:
        return cls(variant=data["variant"], value=data.get("value"), sqnr_db=data.get("sqnr_db"),
                   retention=data.get("retention"), ranked="sqnr_db" in data,
                   tracking_retention=data.get("tracking_retention"))


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


@dataclass(frozen=True)
class TrackingRow:
    """One candidate's tracks over the tracking set: HOTA, IDF1, MOTA, id switches, and its retention of FP32's
    gate metric (``[accuracy.tracking] metric``)."""

    precision: str
    HOTA: float
    IDF1: float
    MOTA: float
    IDSW: int
    value: float  # the gate's metric (HOTA or IDF1)
    retention: float
    passed: bool
    seconds: float = 0.0
    stored: bool = False  # read from an earlier run's measurement

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> TrackingRow:
        return cls(precision=data["precision"], HOTA=data["HOTA"], IDF1=data["IDF1"], MOTA=data["MOTA"],
                   IDSW=int(data["IDSW"]), value=data["value"], retention=data["retention"], passed=data["passed"],
                   seconds=data.get("seconds", 0.0), stored=bool(data.get("stored", False)))


@dataclass(frozen=True)
class TrackingGate:
    """The tracking gate (``[accuracy.tracking]``, docs/tracking-gate.md): every candidate's tracks scored, and
    each judged on its retention of FP32's ``metric`` at ``min_retention``."""

    metric: str  # HOTA or IDF1
    min_retention: float
    tracker: str
    video_set: str  # what was tracked, in words ("generated, 4 streams x 150 frames, seed 0" or the folder)
    streams: int
    frames: int  # over all streams
    reference: float  # FP32's metric
    rows: tuple[TrackingRow, ...]

    def heading(self) -> str:
        """What was tracked and the rule, in one line (the CLI, the summary and the build report)."""
        return (f"tracking gate: {self.metric}, min retention {self.min_retention} of FP32 {self.reference:.4f}; "
                f"{self.tracker} over {self.video_set} ({self.frames} frames)")

    def columns(self) -> list[str]:
        return ["precision", "HOTA", "IDF1", "MOTA", "IDSW", f"{self.metric} retention", "tracking gate"]

    def table_rows(self) -> list[list[str]]:
        """One row per candidate under ``columns()``, as text."""
        return [[r.precision, f"{r.HOTA:.4f}", f"{r.IDF1:.4f}", f"{r.MOTA:.4f}", str(r.IDSW), f"{r.retention:.3f}",
                 "pass" if r.passed else "FAIL"] for r in self.rows]

    def row(self, precision: str) -> TrackingRow | None:
        return next((r for r in self.rows if r.precision == precision), None)

    def refusal(self, precision: str) -> str:
        """Why the tracking gate refuses this candidate, naming both numbers ("": it does not)."""
        row = self.row(precision)
        if row is None or row.passed:
            return ""
        return (f"tracking {self.metric} {row.value:.4f} keeps {row.retention:.3f} of FP32's {self.reference:.4f}, "
                f"below [accuracy.tracking] min_retention {self.min_retention}")

    def as_dict(self) -> JsonObject:
        return {"metric": self.metric, "min_retention": self.min_retention, "tracker": self.tracker,
                "video_set": self.video_set, "streams": self.streams, "frames": self.frames,
                "reference": self.reference, "rows": [r.as_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, data: JsonObject) -> TrackingGate | None:
        """``{}`` (the tracking gate not asked for) is None."""
        if not data:
            return None
        return cls(metric=data["metric"], min_retention=data["min_retention"], tracker=data["tracker"],
                   video_set=data["video_set"], streams=int(data["streams"]), frames=int(data["frames"]),
                   reference=data["reference"], rows=tuple(TrackingRow.from_dict(r) for r in data["rows"]))
