"""What ``edgebuild bench`` makes of bench results on the build host: the comparison of a run with a
baseline, and the fleet summary of ``bench --farm`` (schema ``edgebuild.bench-fleet/1``,
``build/bench/fleet.json``), each a record that writes the JSON it always wrote, key for key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from edgebuild.jsontypes import JsonObject

__all__ = ["FLEET_SCHEMA", "BenchComparison", "FleetBenchSummary"]

FLEET_SCHEMA = "edgebuild.bench-fleet/1"


@dataclass(frozen=True)
class ComparedFigure:
    """One figure of one (batch, concurrency) configuration, in the baseline and now."""

    batch: int
    concurrency: int
    figure: str  # p50_ms, p90_ms, p99_ms, mean_ms or throughput_ips
    baseline: float
    current: float
    change_pct: float
    better: bool | None  # None: unchanged

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> ComparedFigure:
        return cls(**data)


@dataclass(frozen=True)
class BenchComparison:
    """A run against a baseline: per configuration both have, the change in each figure."""

    #: what made the runs unlike, compared anyway with ``--force`` (empty: alike)
    forced_over: list[str]
    rows: list[ComparedFigure]

    def as_dict(self) -> JsonObject:
        return {"forced_over": list(self.forced_over), "rows": [r.as_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, data: JsonObject) -> BenchComparison:
        return cls(list(data["forced_over"]), [ComparedFigure.from_dict(r) for r in data["rows"]])


@dataclass(frozen=True)
class FleetBenchConfig:
    """One configuration of a group's run, as the fleet summary shows it."""

    batch: int
    concurrency: int
    p50_ms: float
    p99_ms: float
    throughput_ips: float

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> FleetBenchConfig:
        return cls(**data)


#: a measured group's keys, after the job's: absent from a group whose job failed
_MEASURED = ("target", "precision", "backend", "power_mode", "cold_start_s", "configs")


@dataclass(frozen=True)
class FleetBenchGroup:
    """One group's job on the farm: where it ran and, when it did not fail, what its run measured."""

    group: str
    board: str | None
    url: str | None
    retried_from: str | None
    error: str | None  # why the job failed (None: measured)
    target: str | None = None
    precision: str | None = None
    backend: str | None = None
    power_mode: str | None = None
    cold_start_s: float | None = None
    #: None where the job failed (the measured keys are then left out of the JSON)
    configs: list[FleetBenchConfig] | None = None

    def as_dict(self) -> JsonObject:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _MEASURED}
        if self.configs is not None:
            data.update({name: getattr(self, name) for name in _MEASURED[:-1]},
                        configs=[c.as_dict() for c in self.configs])
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> FleetBenchGroup:
        configs = data.get("configs")
        return cls(**{**data, "configs": [FleetBenchConfig.from_dict(c) for c in configs]
                      if configs is not None else None})


@dataclass(frozen=True)
class FleetBenchSummary:
    """``bench --farm``'s fleet table: one row per group (``edgebuild.bench-fleet/1``)."""

    groups: list[FleetBenchGroup]
    schema: str = FLEET_SCHEMA

    def as_dict(self) -> JsonObject:
        return {"schema": self.schema, "groups": [g.as_dict() for g in self.groups]}

    @classmethod
    def from_dict(cls, data: JsonObject) -> FleetBenchSummary:
        return cls([FleetBenchGroup.from_dict(g) for g in data["groups"]], data["schema"])

    @property
    def measured(self) -> list[FleetBenchGroup]:
        """The groups whose job did not fail."""
        return [g for g in self.groups if g.error is None and g.configs is not None]
