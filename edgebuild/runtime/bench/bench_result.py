"""A bench result as records: what ``bench.py`` (schema ``edgebuild.bench/1``) and ``bench_group.py``
(``edgebuild.bench-group/1``) write, typed for the build side that reads it (tables, plots, comparisons,
the latency records, the build report).

The runner builds the result as JSON (it is what the device prints); a reader parses it once with
``BenchResult.from_dict`` / ``GroupBenchResult.from_dict`` (``read_bench_result`` picks by schema) and
reads attributes. ``as_dict`` writes the same JSON back, key for key and in the runner's order: a
key the runner leaves out in some runs (a window without runs has no p50, a run without
``--duration`` no ``sustained``) is a field marked ``sparse`` and stays out when it is None.

Where a part is one of two shapes, the JSON says which by a flag, and so does the record's type:
``Unavailable`` (``available: false`` and why) or the figures, ``RequestUnmeasured`` or
``RequestBreakdown`` (``measured``), ``NotCompared`` or ``Drift`` (``compared``).

Device side: Python 3.8, the standard library only (no numpy: the build side reads results without it).
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union, get_type_hints

from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.bench.schema import SCHEMA

__all__ = ["BENCH_GROUP_SCHEMA", "BenchConfig", "BenchResult", "Clocks", "Drift", "GroupBenchResult", "Memory",
           "OverCurrent", "PowerMode", "RequestBreakdown", "RequestUnmeasured", "TegrastatsSummary",
           "read_bench_result"]

BENCH_GROUP_SCHEMA = "edgebuild.bench-group/1"

R = TypeVar("R", bound="_Record")

#: a field whose key the runner leaves out when there is nothing to say (None here)
SPARSE = {"sparse": True}


def _sparse(with_field: Optional[str] = None) -> Any:
    """A field left out of the JSON when None, or (``with_field``) written exactly when that field is."""
    return field(default=None, metadata={"with": with_field} if with_field else SPARSE)


class _Record:
    """``from_dict`` by the fields' types, ``as_dict`` in the fields' order (the runner's key order)."""

    #: (key, value) that tells this shape apart from the other of a Union (``available``, ``measured``...)
    WHEN: ClassVar[Optional[Tuple[str, object]]] = None

    @classmethod
    def from_dict(cls: Type[R], data: Mapping[str, Any]) -> R:
        hints = _HINTS.get(cls) or _HINTS.setdefault(cls, get_type_hints(cls))
        # a key the JSON lacks reads as None where the field may be None (a result written before it was added)
        values = {f.name: _read(hints[f.name], data[f.name]) if f.name in data else None
                  for f in fields(cls) if f.name in data or _may_be_none(hints[f.name])}  # type: ignore[arg-type]
        return cls(**values)

    def as_dict(self) -> JsonObject:
        out = {}  # type: JsonObject
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("sparse") and value is None:
                continue
            if "with" in f.metadata and getattr(self, f.metadata["with"]) is None:
                continue
            out[f.name] = _write(value)
        return out


_HINTS = {}  # type: Dict[type, Dict[str, Any]]


def _may_be_none(hint: Any) -> bool:
    return getattr(hint, "__origin__", None) is Union and type(None) in hint.__args__


def _read(hint: Any, value: Any) -> Any:
    """A JSON value as ``hint`` types it: records by their ``from_dict``, a Union's record by its ``WHEN``."""
    origin = getattr(hint, "__origin__", None)
    args = getattr(hint, "__args__", ())  # type: Tuple[Any, ...]
    if value is None:
        return None
    if origin is Union:
        shapes = [a for a in args if a is not type(None)]
        if len(shapes) == 1:
            return _read(shapes[0], value)
        for shape in shapes:
            key, flag = shape.WHEN
            if value.get(key) == flag:
                return shape.from_dict(value)
        raise ValueError("{} matches none of {}".format(value, [s.__name__ for s in shapes]))
    if origin is list:
        return [_read(args[0], v) for v in value]
    if origin is dict:
        return {k: _read(args[1], v) for k, v in value.items()}
    if isinstance(hint, type) and is_dataclass(hint):
        return hint.from_dict(value)  # type: ignore[attr-defined]
    return value


def _write(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.as_dict()
    if isinstance(value, list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Unavailable(_Record):
    """What could not be read on this machine (tegrastats, nvpmodel, jetson_clocks off a Jetson) and why: a fact."""

    available: bool = False
    reason: str = ""
    WHEN = ("available", False)


# -- latency ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LatencyStats(_Record):
    min_ms: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class CopyComputeSplit(_Record):
    """TensorRT's host-to-device copy, compute and device-to-host copy (medians of a synchronised pass)."""

    h2d_ms: float
    compute_ms: float
    d2h_ms: float


@dataclass(frozen=True)
class Histogram(_Record):
    """Counts over evenly spaced bins from the 0.5th to the 99.5th percentile (``len(edges) == len(counts) + 1``)."""

    edges: List[float]
    counts: List[int]


# -- tegrastats ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MeanMax(_Record):
    mean: float
    max: float


@dataclass(frozen=True)
class MeanMinMax(_Record):
    mean: float
    min: float
    max: float


@dataclass(frozen=True)
class TegrastatsSummary(_Record):
    """tegrastats over the whole run: mean and max of RAM, GPU load and clock, memory clock and each rail."""

    available: bool
    interval_ms: int
    samples: int
    ram_used_mb: Optional[MeanMax] = _sparse()
    gpu_load_pct: Optional[MeanMax] = _sparse()
    gpu_freq_mhz: Optional[MeanMax] = _sparse()
    emc_freq_mhz: Optional[MeanMax] = _sparse()
    rails_mw: Optional[Dict[str, MeanMax]] = _sparse()
    input_rail: Optional[str] = _sparse("rails_mw")  # the module's input rail among them, None if none is
    WHEN = ("available", True)

    def input_power(self) -> Optional[MeanMax]:
        return (self.rails_mw or {}).get(self.input_rail) if self.input_rail else None


@dataclass(frozen=True)
class ThrottleEvent(_Record):
    """The GPU clock fell below the run's top while the GPU was busy."""

    t: Optional[float]
    gpu_freq_mhz: float
    from_mhz: float
    gpu_load_pct: float
    temp_c: Dict[str, float]


@dataclass(frozen=True)
class WindowTegrastats(_Record):
    """tegrastats in one window of a sustained run."""

    samples: int
    gpu_freq_mhz: Optional[MeanMinMax] = _sparse()
    temp_max_c: Optional[Dict[str, float]] = _sparse()
    input_rail: Optional[str] = _sparse()
    input_mw_mean: Optional[float] = _sparse()
    throttle_events: List[ThrottleEvent] = field(default_factory=list)

    def hottest_c(self) -> Optional[float]:
        """The junction's hottest reading, else the hottest sensor's."""
        temps = self.temp_max_c or {}
        return temps.get("tj", max(temps.values()) if temps else None)


# -- a sustained run -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window(_Record):
    """One window of a ``--duration`` run; a window without runs has no latency or throughput."""

    index: int
    start_s: float
    seconds: float
    runs: int
    p50_ms: Optional[float] = _sparse()
    p99_ms: Optional[float] = _sparse()
    throughput_ips: Optional[float] = _sparse()
    tegrastats: Optional[WindowTegrastats] = _sparse()


@dataclass(frozen=True)
class Drift(_Record):
    """The last window against the first."""

    compared: bool
    first: int
    last: int
    p50_change_pct: float
    throughput_change_pct: float
    warn_pct: float
    warning: Optional[str]
    WHEN = ("compared", True)


@dataclass(frozen=True)
class NotCompared(_Record):
    compared: bool = False
    reason: str = ""
    WHEN = ("compared", False)


@dataclass(frozen=True)
class Sustained(_Record):
    window_s: float
    windows: List[Window]
    drift: Union[Drift, NotCompared]
    tegrastats_unavailable: Optional[str]


# -- one configuration ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchConfig(_Record):
    """One (batch size, concurrency): its latency, throughput, stopping rule and distribution."""

    batch: int
    concurrency: int
    shapes: Dict[str, List[int]]
    iterations: int
    latency: LatencyStats
    throughput_ips: float
    stages: Optional[CopyComputeSplit]  # TensorRT only
    wall_s: float
    stopped_by: str  # iterations, duration, ci or budget
    p50_ci_ms: List[float]
    p50_ci_width_pct: float
    histogram_ms: Histogram
    sustained: Optional[Sustained] = _sparse()  # a --duration run


# -- one request, stage by stage ---------------------------------------------------------------------

@dataclass(frozen=True)
class StageStats(_Record):
    p50_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True)
class RequestImage(_Record):
    source: str
    jpeg_bytes: int
    decoder: str


@dataclass(frozen=True)
class RequestBreakdown(_Record):
    """One image per request through preprocessing, inference and post-processing (``bench_request.py``)."""

    measured: bool
    batch: int
    runs: int
    input: str
    input_shape: List[int]
    outputs: str
    postprocess_step: str
    image: Optional[RequestImage]  # None: no JPEG decoder here (preprocess_unmeasured says so)
    preprocess_unmeasured: Optional[str]
    detections_p50: Optional[float]
    preprocess: Optional[StageStats]
    inference: Optional[StageStats]
    postprocess: Optional[StageStats]
    end_to_end: Optional[StageStats]
    WHEN = ("measured", True)

    def stage(self, key: str) -> Optional[StageStats]:
        """``preprocess``, ``inference``, ``postprocess`` or ``end_to_end``."""
        return {"preprocess": self.preprocess, "inference": self.inference, "postprocess": self.postprocess,
                "end_to_end": self.end_to_end}[key]


@dataclass(frozen=True)
class RequestUnmeasured(_Record):
    measured: bool = False
    reason: str = ""
    WHEN = ("measured", False)


# -- the machine ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PowerMode(_Record):
    """``nvpmodel -q``."""

    available: bool
    name: Optional[str]
    id: Optional[int]
    WHEN = ("available", True)

    def label(self) -> str:
        return self.name or "mode {}".format(self.id)


@dataclass(frozen=True)
class Clocks(_Record):
    """``jetson_clocks --show``: its lines and, where it has a GPU line, the GPU's frequencies."""

    available: bool
    lines: List[str]
    gpu_min_hz: Optional[int] = _sparse()
    gpu_max_hz: Optional[int] = _sparse()
    gpu_current_hz: Optional[int] = _sparse()
    jetson_clocks_on: Optional[bool] = _sparse()
    WHEN = ("available", True)


@dataclass(frozen=True)
class OverCurrent(_Record):
    """Orin's over-current throttle events during the run, by counter file."""

    available: bool
    during_run: Dict[str, int]
    WHEN = ("available", True)


@dataclass(frozen=True)
class JetsonState(_Record):
    power_mode: Union[PowerMode, Unavailable]
    clocks: Union[Clocks, Unavailable]
    over_current_events: Optional[Union[OverCurrent, Unavailable]] = _sparse()  # added after the runs


@dataclass(frozen=True)
class CgroupMemory(_Record):
    limited: bool
    limit_bytes: Optional[int] = _sparse()
    peak_bytes: Optional[int] = _sparse("limit_bytes")
    cgroup: Optional[str] = _sparse()


@dataclass(frozen=True)
class Memory(_Record):
    peak_rss_bytes: int
    cgroup: CgroupMemory


@dataclass(frozen=True)
class BenchDevice(_Record):
    """``runtime.engines.device.probe()`` and the host name."""

    tensorrt: Optional[str]
    tensorrt_problem: str
    compute_capability: Optional[str]
    l4t: Optional[str]
    compatible: List[str]
    python: str
    machine: str
    hostname: str


# -- the result ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchArtifact(_Record):
    """The model folder measured: what the recipe says and its files' hashes."""

    group: str
    target: str
    model: str
    version: str
    precision: str
    module: Optional[str] = None
    jetpack: Optional[str] = None
    tensorrt: Optional[str] = None
    onnx: Optional[str] = None
    onnx_sha256: Optional[str] = None
    files: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchSettings(_Record):
    batches: List[int]
    concurrency: List[int]
    iterations: Optional[int]
    duration_s: Optional[float]
    warmup: int
    ci_pct: float
    budget_s: float
    min_iterations: int
    shapes: Optional[Dict[str, List[int]]]
    window_s: Optional[float]
    drift_warn_pct: Optional[float]


@dataclass(frozen=True)
class ColdStart(_Record):
    process_to_first_result_s: Optional[float]
    process_age_at_bench_start_s: Optional[float]
    backend_load_s: float
    first_inference_ms: float


@dataclass(frozen=True)
class BenchResult(_Record):
    """One model folder measured (``edgebuild.bench/1``); ``ran_on`` is added by the build side that ran it."""

    schema: str
    created: str
    artifact: BenchArtifact
    backend: str
    backend_reason: str
    versions: Dict[str, str]
    device: BenchDevice
    jetson: JetsonState
    settings: BenchSettings
    cold_start: ColdStart
    configs: List[BenchConfig]
    request: Optional[Union[RequestBreakdown, RequestUnmeasured]]  # None: a result from before the breakdown
    memory: Memory
    tegrastats: Union[TegrastatsSummary, Unavailable]
    ran_on: Optional[str] = _sparse()

    def power_mode(self) -> str:
        mode = self.jetson.power_mode
        return mode.label() if isinstance(mode, PowerMode) else "none (not a Jetson)"

    def config(self, batch: int, concurrency: int) -> Optional[BenchConfig]:
        return next((c for c in self.configs if c.batch == batch and c.concurrency == concurrency), None)


@dataclass(frozen=True)
class TogetherModel(_Record):
    """One model of a group while every model runs at once, against its p50 alone."""

    backend: str
    iterations: int
    latency: Optional[LatencyStats]  # None: it got no run in
    throughput_ips: float
    alone_p50_ms: Optional[float] = None
    slowdown: Optional[float] = None
    accelerator: Optional[str] = _sparse()  # gpu, dla0, dla1 or dla: where its recipe places it (written since 47)


@dataclass(frozen=True)
class Together(_Record):
    duration_s: float
    wall_s: float
    batch: int
    models: Dict[str, TogetherModel]
    memory: Memory
    tegrastats: Union[TegrastatsSummary, Unavailable]


@dataclass(frozen=True)
class GroupBenchResult(_Record):
    """A group folder measured (``edgebuild.bench-group/1``): each model alone, then every model at once."""

    schema: str
    created: str
    group: str
    target: str
    fleet: str
    version: str
    alone: Dict[str, BenchResult]
    together: Together
    ran_on: Optional[str] = _sparse()


def read_bench_result(data: Mapping[str, Any]) -> Union[BenchResult, GroupBenchResult]:
    """A model folder's result or a group folder's, by its schema."""
    if data.get("schema") == BENCH_GROUP_SCHEMA:
        return GroupBenchResult.from_dict(data)
    if data.get("schema") != SCHEMA:
        raise ValueError("schema {!r} is neither {!r} nor {!r}".format(data.get("schema"), SCHEMA, BENCH_GROUP_SCHEMA))
    return BenchResult.from_dict(data)
