"""Predicted against measured: what a device measured for an engine, kept next to the latency plan's
prediction for that engine, and the relative error where the two can be compared.

Whenever ``edgebuild bench`` (on this host, over SSH, or ``--farm``) measures a model folder of the
project's build, each configuration at concurrency 1 becomes one entry of
``build/latency/<group>.json`` (``BuildLayout.latency_check``): the measurement (module, power mode,
JetPack, TensorRT, precision, batch, p50, what it includes, backend, when) and the prediction of
``edgebuild.latency.model`` for the same ONNX, batch, input size, module and power mode.

What a p50 includes: on TensorRT the bench also times the GPU compute alone (its copy/compute
split), which is what the plan predicts, so that is the figure compared (``gpu_compute``);
without the split the p50 of a run with its host copies is kept (``host_latency``) and compared
with that said. A measurement on ONNX Runtime, or on anything that is not a Jetson, is never
compared with a Jetson prediction: the entry says "measured on <backend>, not comparable".

The engine stage's acceptance measures accuracy on the device, not latency, so it adds nothing here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from edgebuild.jsontypes import JsonObject
from edgebuild.latency.model import LatencyModel, predict_ms
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.runtime.bench.bench_result import BenchResult, PowerMode

__all__ = ["CHECK_HEADERS", "LatencyCheck", "check_rows", "latency_checks"]

SCHEMA = "edgebuild.latency-check/1"
#: entries kept per group file (the newest)
KEEP = 200


@dataclass(frozen=True)
class LatencyCheck:
    """One device measurement and the prediction for the same engine and settings."""

    group: str
    module: str
    power_mode: str | None  # None: not a Jetson (nvpmodel not there)
    jetpack: str
    tensorrt: str | None  # the TensorRT of the device that measured (None where there is none)
    precision: str
    batch: int
    measured_ms: float
    includes: str  # gpu_compute | host_latency
    backend: str
    when: str
    ran_on: str
    source: str  # bench | bench --farm
    comparable: bool
    why_not: str | None = None  # when not comparable
    predicted_ms: float | None = None
    low_ms: float | None = None
    high_ms: float | None = None
    fit: str = ""  # what the prediction's fit rests on
    onnx_sha256: str = ""
    input_hw: tuple[int, int] | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured where both exist and are comparable."""
        if not self.comparable or self.predicted_ms is None:
            return None
        return (self.predicted_ms - self.measured_ms) / self.measured_ms

    def as_dict(self) -> JsonObject:
        return dict(asdict(self), error=self.error)

    @classmethod
    def from_dict(cls, data: JsonObject) -> LatencyCheck:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if fields.get("input_hw"):
            fields["input_hw"] = tuple(fields["input_hw"])
        return cls(**fields)


def measurements_of(result: BenchResult, source: str = "bench") -> list[LatencyCheck]:
    """The concurrency-1 configurations of one ``edgebuild.bench/1`` result, not yet predicted."""
    art = result.artifact
    mode = result.jetson.power_mode
    power_mode = (mode.name or (f"mode {mode.id}" if mode.id is not None else None)) \
        if isinstance(mode, PowerMode) else None
    backend = result.backend
    jetson = bool(result.device.l4t) and power_mode is not None
    on_tensorrt = backend.startswith("tensorrt")
    why = None if jetson and on_tensorrt else f"measured on {backend}" + ("" if jetson else " off a Jetson") + \
        ", not comparable"
    checks = []
    for config in result.configs:
        if config.concurrency != 1:
            continue  # several callers share the GPU: not what the plan predicts
        compute = config.stages.compute_ms if config.stages else None
        shape = next(iter(config.shapes.values()), None)
        checks.append(LatencyCheck(
            group=art.group, module=art.module or art.target.split("@")[0],
            power_mode=power_mode, jetpack=art.jetpack or "",
            tensorrt=result.device.tensorrt, precision=art.precision,  # what ran, not what the recipe targets
            batch=int(config.batch), measured_ms=float(compute if compute else config.latency.p50_ms),
            includes="gpu_compute" if compute else "host_latency", backend=backend, when=result.created,
            ran_on=result.ran_on or "?", source=source, comparable=why is None, why_not=why,
            onnx_sha256=art.onnx_sha256 or "",
            input_hw=(int(shape[2]), int(shape[3])) if shape and len(shape) == 4 else None))
    return checks


def _predicted(check: LatencyCheck, folder: Path, fit: LatencyModel) -> LatencyCheck:
    """``check`` with the plan's prediction for the folder's ONNX at its batch, input size, module and power mode."""
    from dataclasses import replace

    from edgebuild.latency.graph import graph_cost_from_file
    from edgebuild.runtime.base.recipe import Recipe
    from edgebuild.targets.profiles import load_catalog

    recipe = Recipe.load(folder)
    module = load_catalog().modules.get(recipe.module.id)
    modes = [p for p in (module.performance if module else ()) if check.power_mode in (None, p.power_mode)]
    if not modes:
        return replace(check, fit=f"no prediction: no {recipe.module.id} power mode {check.power_mode} with a known "
                                  "GPU clock (profiles/modules)")
    perf = modes[0] if check.power_mode else max(modes, key=lambda p: p.gpu_mhz)
    if check.precision == "int8" and perf.int8_tops is None:
        return replace(check, fit="no prediction: this GPU has no INT8 path TensorRT uses")
    cost = graph_cost_from_file(folder / recipe.onnx, batch=check.batch, input_hw=check.input_hw)
    ms = predict_ms(cost, perf, check.precision, fit)
    what = "; ".join(fit.fitted_on[:1]) + ("" if check.power_mode else f" (at {perf.power_mode}, the fastest mode)")
    return replace(check, predicted_ms=round(ms, 4), low_ms=round(ms * fit.band_low, 4),
                   high_ms=round(ms * fit.band_high, 4), fit=what, module=recipe.module.id,
                   onnx_sha256=check.onnx_sha256 or recipe.onnx_sha256)


def record_bench(layout: BuildLayout, folder: Path, result: BenchResult, fit: LatencyModel,
                 source: str = "bench") -> Path | None:
    """Add the result's measurements, each with its prediction, to ``build/latency/<group>.json``."""
    checks = [_predicted(c, folder, fit) for c in measurements_of(result, source)]
    if not checks:
        return None
    path = layout.latency_check(checks[0].group)
    kept = _read(path)
    kept += [c.as_dict() for c in checks]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"schema": SCHEMA, "group": checks[0].group, "entries": kept[-KEEP:]},
                                       indent=2))
    return path


def _read(path: Path) -> list[JsonObject]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return list(data.get("entries", [])) if isinstance(data, dict) and data.get("schema") == SCHEMA else []


def latency_checks(build_dir: Path) -> list[LatencyCheck]:
    """Every stored measurement with its prediction, by group, newest last (what the report shows)."""
    folder = BuildLayout(Path(build_dir)).latency_check("x").parent
    checks = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        checks += [LatencyCheck.from_dict(e) for e in _read(path)]
    return checks


CHECK_HEADERS = ["group", "module", "power mode", "precision", "batch", "measured ms", "includes", "predicted ms",
                 "band ms", "error", "backend", "when"]


def check_rows(checks: list[LatencyCheck]) -> list[list[str]]:
    """The newest measurement per group, module, power mode, precision, batch and backend, as report rows:
    predicted, measured and the relative error where both exist and are comparable."""
    newest: dict[tuple, LatencyCheck] = {}
    for c in checks:
        newest[(c.group, c.module, c.power_mode, c.precision, c.batch, c.backend)] = c
    rows = []
    for c in newest.values():
        if not c.comparable:
            error = c.why_not or "not comparable"
        elif c.error is None:
            error = c.fit or "no prediction"
        else:
            error = f"{c.error:+.0%}" + ("" if c.low_ms is None or c.low_ms <= c.measured_ms <= (c.high_ms or 0)
                                         else " (outside the band)")
        rows.append([c.group, c.module, c.power_mode or "none (not a Jetson)", c.precision, str(c.batch),
                     f"{c.measured_ms:.3f}", c.includes, f"{c.predicted_ms:.3f}" if c.predicted_ms else "-",
                     f"{c.low_ms:.2f}-{c.high_ms:.2f}" if c.low_ms and c.high_ms else "-", error, c.backend, c.when])
    return rows

