"""Predicted TensorRT latency of an ONNX graph on a Jetson module, power mode and precision.

A roofline per fused layer (``edgebuild.latency.graph``): a layer takes
``max(flops / (e_p * peak_p), bytes / (e_m * bandwidth)) + overhead * 1 GHz / clock``, where
``peak_p`` is the module's dense peak at that precision and power mode (``profiles/modules/*.toml``,
``[[performance]]``), ``e_p`` the compute efficiency at precision ``p``, ``e_m`` the memory
efficiency and ``overhead`` a fixed number of GPU cycles per layer (its launch, its tail), given as
microseconds at a 1 GHz clock. Those five numbers are fitted, least squares on the logarithm, to
public measured TensorRT latencies (``profiles/reference/published_latency.csv``) by
``benchmarks/latency_model_fit.py``, which writes them, and the error seen when each model (and each
module) is left out of the fit, to ``profiles/reference/latency_model.toml``. The error band of a
prediction is that range of measured / predicted: the published figures of a model, or a module,
the fit never saw fell inside it.

A GPU architecture with figures of its own (Blackwell: AGX Thor) gets its own per-layer overhead,
a factor on the cycles above. FP8 and NVFP4 (Thor) have no published figure: their prediction
takes FP16's fitted efficiency at the FP8/FP4 peak. The DLA's own factors (``DlaFit``) are fitted
apart, on the DLA's figures (``edgebuild.latency.dla``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild._compat import tomllib
from edgebuild.datafiles import data_dir
from edgebuild.errors import ProfileDataError, TargetError
from edgebuild.latency.graph import GraphCost
from edgebuild.targets.profiles import Module, ModulePerformance

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FITTED", "FitSample", "LatencyModel", "PublishedLatency", "fit_latency_model", "leave_one_out",
    "load_published_latencies", "predict_ms", "write_latency_model", "write_published_costs"
]

#: the precisions published figures are fitted at, and a plan's default
PRECISIONS = ("fp32", "fp16", "int8")
#: Blackwell's narrower types (AGX Thor): predicted at their peaks with FP16's efficiency, never fitted
NARROW_PRECISIONS = ("fp8", "nvfp4")
ALL_PRECISIONS = PRECISIONS + NARROW_PRECISIONS
ACCELERATORS = ("gpu", "dla")
#: GPU architectures whose per-layer overhead and memory efficiency are fitted apart (as factors on the
#: others') where figures of them are: Blackwell (AGX Thor) has 8x Orin's L2 cache (32 MiB)
OWN_OVERHEAD_ARCHS = ("Blackwell",)
#: what a published figure must include to be fitted: GPU compute (trtexec), TensorRT timed from a
#: framework with the input already on the GPU, or the time per batch that a published throughput
#: implies (1 / images per second of one core; docs/latency-plan.md)
FITTED = ("gpu_compute", "framework", "throughput")
#: how many published figures one of a project's own measurements counts as in ``calibrate``'s refit
#: of the five factors. 1: what is particular to the project's devices goes into their device factor,
#: and heavier weights made the published figures' left-out error worse without helping the project's
#: own (docs/latency-plan.md, "Calibrating with your measurements")
USER_WEIGHT = 1.0


@dataclass(frozen=True)
class DeviceFactor:
    """What a project's own measurements on one module and power mode say the fit misses there."""

    module: str
    power_mode: str
    gpu_mhz: int
    fp16_tflops: float
    factor: float  # multiplies the fit's prediction on this module and power mode
    measurements: int

    def matches(self, perf: ModulePerformance) -> bool:
        # a power mode of one module: its name, clock and peak (two modules' modes never share all three)
        return (perf.power_mode, perf.gpu_mhz) == (self.power_mode, self.gpu_mhz) and \
            math.isclose(perf.fp16_tflops, self.fp16_tflops, rel_tol=1e-9)


@dataclass(frozen=True)
class DlaFit:
    """The DLA's fitted factors (``edgebuild.latency.dla``): how much of its peaks and of the memory bandwidth
    it reaches, and what each of its layers and each GPU<->DLA boundary costs."""

    compute_int8: float  # fraction of the DLA's INT8 peak reached on convolution / fully connected layers
    other_per_clock: float  # FLOPs per DLA clock of one core on its other layers (pooling, resize, depthwise...)
    memory: float  # fraction of the memory bandwidth reached
    layer_overhead_us: float  # per DLA layer, in microseconds at a 1 GHz DLA clock
    transition_us: float  # per hand-over between the GPU and the DLA (two per DLA subgraph)
    compute_fp16: float | None = None  # not fitted: no published DLA FP16 figure (None: INT8's fraction)
    band_low: float = 1.0  # measured / predicted, lowest seen when a figure's model was left out of the DLA fit
    band_high: float = 1.0

    def compute(self, precision: str) -> float:
        return self.compute_fp16 if precision == "fp16" and self.compute_fp16 is not None else self.compute_int8


@dataclass(frozen=True)
class LatencyModel:
    """The fitted efficiency factors and the leave-one-out error band."""

    compute_efficiency: dict[str, float]  # precision -> fraction of the dense peak reached
    memory_efficiency: float  # fraction of the memory bandwidth reached
    layer_overhead_us: float  # fixed cost per fused layer, in microseconds at a 1 GHz GPU clock
    band_low: float = 1.0  # measured / predicted, lowest seen when a figure's model or module was left out
    band_high: float = 1.0  # measured / predicted, highest seen likewise
    median_error: float | None = None  # leave-one-model-out median relative error
    max_error: float | None = None
    fitted_on: tuple[str, ...] = ()  # what the fit saw: "<n> figures of <models> on <modules>"
    sources: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # the modules of the figures fitted
    published: int = 0  # published figures fitted (0: not recorded, an older latency_model.toml)
    measured: int = 0  # a project's own measurements fitted with them (``edgebuild plan --calibrate``)
    #: per module and power mode a project measured: measured / predicted, shrunk toward 1 (``calibrate``)
    devices: tuple[DeviceFactor, ...] = ()
    #: GPU architecture (OWN_OVERHEAD_ARCHS) -> (factor on ``layer_overhead_us``, factor on ``memory_efficiency``)
    arch_factors: dict[str, tuple[float, float]] = field(default_factory=dict)
    dla: DlaFit | None = None  # the DLA's factors, where the stored fit has them
    #: leave-one-model-out error per accelerator ("gpu", "dla", and "thor" for AGX Thor's GPU figures):
    #: (figures, median relative error, max relative error)
    errors: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    def device_factor(self, perf: ModulePerformance) -> float:
        return next((d.factor for d in self.devices if d.matches(perf)), 1.0)

    def efficiency(self, precision: str) -> float:
        """The fraction of the dense peak reached at ``precision`` (FP8/NVFP4: FP16's, never fitted)."""
        return self.compute_efficiency.get(precision) or self.compute_efficiency["fp16"]

    def overhead_us(self, perf: ModulePerformance) -> float:
        """Per-layer overhead in microseconds at a 1 GHz clock on ``perf``'s GPU architecture."""
        return self.layer_overhead_us * self.arch_factors.get(perf.gpu_arch or "", (1.0, 1.0))[0]

    def memory(self, perf: ModulePerformance) -> float:
        """The fraction of ``perf``'s memory bandwidth reached on its GPU architecture."""
        return self.memory_efficiency * self.arch_factors.get(perf.gpu_arch or "", (1.0, 1.0))[1]

    @classmethod
    def from_vector(cls, vector: np.ndarray, archs: tuple[str, ...] = ()) -> LatencyModel:
        import numpy as np
        v = np.exp(vector)
        return cls({"fp32": float(v[0]), "fp16": float(v[1]), "int8": float(v[2])}, float(v[3]), float(v[4]),
                   arch_factors={arch: (float(v[5 + 2 * i]), float(v[6 + 2 * i])) for i, arch in enumerate(archs)})


@dataclass(frozen=True)
class PublishedLatency:
    """One row of ``published_latency.csv``: one measured figure and where it was published."""

    model: str
    input_hw: tuple[int, int]
    batch: int
    module: str
    power_mode: str
    jetpack: str
    tensorrt: str
    precision: str
    latency_ms: float
    includes: str  # gpu_compute, framework (TensorRT called from a framework, no pre/post), host_latency
    source: str
    source_url: str
    note: str = ""
    accelerator: str = "gpu"  # gpu, or dla: the model ran on one DLA core (its fallback layers on the GPU)


@dataclass(frozen=True)
class FitSample:
    """A published figure with what the model needs to predict it."""

    row: PublishedLatency
    cost: GraphCost
    performance: ModulePerformance
    key: str = field(default="")  # what leave-one-out leaves out together (the model name)
    weight: float = 1.0  # its weight in the least squares (a project's own measurement counts more)


def load_published_latencies(path: Path | None = None) -> list[PublishedLatency]:
    path = path or data_dir("profiles") / "reference" / "published_latency.csv"
    rows = []
    with path.open(newline="", encoding="utf-8") as f:
        for line, raw in enumerate(csv.DictReader(f), start=2):
            try:
                rows.append(PublishedLatency(
                    raw["model"], (int(raw["input_h"]), int(raw["input_w"])), int(raw["batch"]), raw["module"],
                    raw["power_mode"], raw["jetpack"], raw["tensorrt"], raw["precision"], float(raw["latency_ms"]),
                    raw["includes"], raw["source"], raw["source_url"], raw.get("note", ""),
                    raw.get("accelerator") or "gpu",
                ))
            except (KeyError, ValueError) as exc:
                raise ProfileDataError(f"{path}:{line}: {exc}") from None
            if rows[-1].precision not in ALL_PRECISIONS or not rows[-1].source_url \
                    or rows[-1].accelerator not in ACCELERATORS:
                raise ProfileDataError(f"{path}:{line}: a precision in {ALL_PRECISIONS}, an accelerator in "
                                       f"{ACCELERATORS} and a source_url are required")
    return rows


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def performance_modes(module: Module, jetpack: str | None = None) -> list[ModulePerformance]:
    """The module's power modes with a known GPU clock, those the release ``jetpack`` has (all if None)."""
    modes = []
    for perf in module.performance:
        if jetpack is not None:
            if perf.jetpack_min and _version(jetpack) < _version(perf.jetpack_min):
                continue
            if perf.jetpack_max and _version(jetpack) > _version(perf.jetpack_max):
                continue
        modes.append(perf)
    return modes


def _peaks(perf: ModulePerformance, precision: str) -> tuple[float, float]:
    """(tensor-core peak, CUDA-core peak) in FLOP/s at ``precision``."""
    cuda = perf.fp32_tflops * 1e12
    if precision == "fp32":
        return (perf.tf32_tflops or perf.fp32_tflops) * 1e12, cuda
    if precision == "fp16":
        return perf.fp16_tflops * 1e12, 2 * cuda
    peak = {"int8": perf.int8_tops, "fp8": perf.fp8_tflops, "nvfp4": perf.fp4_tflops}.get(precision)
    if precision not in ALL_PRECISIONS:
        raise TargetError(f"unknown precision {precision!r}", hint=f"precisions: {', '.join(ALL_PRECISIONS)}")
    if peak is None:
        raise TargetError(f"{perf.power_mode}: {no_path(perf, precision)}")
    return peak * 1e12, 2 * cuda


def no_path(perf: ModulePerformance, precision: str) -> str:
    """Why ``perf``'s GPU cannot run ``precision`` (its profile gives no peak for it)."""
    if precision in NARROW_PRECISIONS:
        return (f"this GPU ({perf.gpu_arch or 'not Blackwell'}) has no {precision.upper()} tensor cores "
                "(Blackwell's: AGX Thor)")
    return f"this GPU has no {precision.upper()} path TensorRT uses"


def runs(perf: ModulePerformance, precision: str) -> bool:
    """Whether ``perf``'s GPU has a peak at ``precision`` (FP32 and FP16 always)."""
    return precision in ("fp32", "fp16") or \
        {"int8": perf.int8_tops, "fp8": perf.fp8_tflops, "nvfp4": perf.fp4_tflops}.get(precision) is not None


def layer_seconds(cost: GraphCost, perf: ModulePerformance, precision: str, model: LatencyModel) -> np.ndarray:
    """Each fused layer's predicted time, in seconds."""
    import numpy as np
    tensor_peak, cuda_peak = _peaks(perf, precision)
    e = model.efficiency(precision)
    bandwidth = perf.memory_bandwidth_gbps * 1e9 * model.memory(perf)
    overhead = model.overhead_us(perf) * 1e-6 * 1000.0 / perf.gpu_mhz
    times = []
    for layer in cost.layers:
        peak = tensor_peak if layer.tensor_cores else cuda_peak
        compute = layer.flops / (e * peak)
        memory = layer.bytes_moved(precision) / bandwidth
        times.append(max(compute, memory) + overhead)
    return np.array(times)


def predict_ms(cost: GraphCost, perf: ModulePerformance, precision: str, model: LatencyModel) -> float:
    """Predicted GPU compute time of one inference (the whole batch), in milliseconds (times the
    project's own factor for this module and power mode, where it calibrated one)."""
    return float(layer_seconds(cost, perf, precision, model).sum() * 1e3) * model.device_factor(perf)


# -- the fit ---------------------------------------------------------------------------------

#: one sample in the fit: each layer's flops / peak, bytes / bandwidth and 1 GHz / clock; the precision
#: index; log(measured); the sample's weight; the index of its architecture's own overhead factor (-1: none)
if TYPE_CHECKING:
    _DesignRow = tuple[np.ndarray, np.ndarray, np.ndarray, int, float, float, int]


def _own_archs(samples: list[FitSample]) -> tuple[str, ...]:
    """The architectures among ``samples`` whose per-layer overhead is fitted apart."""
    return tuple(a for a in OWN_OVERHEAD_ARCHS if any(s.performance.gpu_arch == a for s in samples))


def _design(samples: list[FitSample], archs: tuple[str, ...] = ()) -> list[_DesignRow]:
    """Per sample: each layer's flops / peak, bytes / bandwidth and 1 GHz / clock; the precision index;
    log(measured); its weight; its architecture's overhead factor's index in ``archs`` (-1: none)."""
    import numpy as np
    rows: list[_DesignRow] = []
    for sample in samples:
        precision = sample.row.precision
        tensor_peak, cuda_peak = _peaks(sample.performance, precision)
        peaks = np.array([tensor_peak if layer.tensor_cores else cuda_peak for layer in sample.cost.layers])
        flops = np.array([layer.flops for layer in sample.cost.layers])
        moved = np.array([layer.bytes_moved(precision) for layer in sample.cost.layers])
        bandwidth = sample.performance.memory_bandwidth_gbps * 1e9
        rows.append((flops / peaks, moved / bandwidth, np.full(len(flops), 1000.0 / sample.performance.gpu_mhz),
                     PRECISIONS.index(precision),
                     math.log(sample.row.latency_ms * 1e-3), sample.weight,
                     archs.index(sample.performance.gpu_arch) if sample.performance.gpu_arch in archs else -1))
    return rows


def _loss(vector: np.ndarray, design: list[_DesignRow]) -> float:
    import numpy as np
    v = np.exp(vector)
    total = 0.0
    for compute, memory, cycles, p, measured, weight, arch in design:
        overhead, bandwidth = (v[4] * v[5 + 2 * arch], v[3] * v[6 + 2 * arch]) if arch >= 0 else (v[4], v[3])
        seconds = (np.maximum(compute / v[p], memory / bandwidth) + cycles * overhead * 1e-6).sum()
        total += weight * (math.log(seconds) - measured) ** 2
    return total


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, iterations: int = 3000,
                 tol: float = 1e-12) -> np.ndarray:
    """Minimise ``f`` from ``x0``: the textbook Nelder-Mead simplex, deterministic."""
    import numpy as np
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if values[0] <= fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        elif fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit_latency_model(samples: list[FitSample]) -> LatencyModel:
    """The five factors that best predict ``samples`` (least squares of log predicted - log measured).

    Precisions with no sample keep the starting value, and the fit is restarted from its own answer
    until it no longer improves (Nelder-Mead stalls on a ridge of the max()).
    """
    import numpy as np
    if not samples:
        raise TargetError("no published latency to fit to")
    if any(s.row.accelerator != "gpu" for s in samples):
        raise TargetError("fit_latency_model fits GPU figures; the DLA's are fitted by edgebuild.latency.dla")
    archs = _own_archs(samples)
    design = _design(samples, archs)
    x = np.log([0.3, 0.3, 0.3, 0.6, 10.0] + [1.0, 1.0] * len(archs))
    best = _loss(x, design)
    for _ in range(10):
        x_new = _nelder_mead(lambda v: _loss(v, design), x)
        new = _loss(x_new, design)
        x = x_new
        if best - new < 1e-9:
            break
        best = new
    return LatencyModel.from_vector(x, archs)


def leave_one_out(samples: list[FitSample],
                  by: Callable[[FitSample], str] | None = None) -> list[tuple[FitSample, float]]:
    """Each sample with its prediction by a fit that saw no sample sharing its ``by`` (default: its model)."""
    by = by or (lambda s: s.key or s.row.model)
    predicted = []
    for key in sorted({by(s) for s in samples}):
        rest = [s for s in samples if by(s) != key]
        model = fit_latency_model(rest)
        predicted += [(s, predict_ms(s.cost, s.performance, s.row.precision, model))
                      for s in samples if by(s) == key]
    return predicted


# -- the stored fit --------------------------------------------------------------------------

def published_model_path() -> Path:
    """The fit to published figures that ships with edgebuild (profiles/reference/latency_model.toml)."""
    return data_dir("profiles") / "reference" / "latency_model.toml"


def load_latency_model(path: Path | None = None) -> LatencyModel:
    path = path or published_model_path()
    if not path.is_file():
        raise ProfileDataError(
            f"{path}: no fitted latency model", hint="run benchmarks/latency_model_fit.py in a source checkout",
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        fit = data["fit"]
        return LatencyModel(
            {p: float(fit[f"compute_{p}"]) for p in PRECISIONS}, float(fit["memory"]), float(fit["layer_overhead_us"]),
            float(data["band"]["low"]), float(data["band"]["high"]), float(data["band"]["median_error"]),
            float(data["band"]["max_error"]), tuple(data.get("fitted_on", ())), tuple(data.get("sources", ())),
            tuple(data.get("modules", ())), int(data.get("published_figures", 0)),
            int(data.get("your_measurements", 0)),
            tuple(DeviceFactor(d["module"], d["power_mode"], int(d["gpu_mhz"]), float(d["fp16_tflops"]),
                               float(d["factor"]), int(d["measurements"])) for d in data.get("device", ())),
            {arch: (float(fit[f"overhead_{arch.lower()}"]), float(fit[f"memory_{arch.lower()}"]))
             for arch in OWN_OVERHEAD_ARCHS if f"overhead_{arch.lower()}" in fit},
            _dla_fit(data.get("dla")),
            {k: (int(v["figures"]), float(v["median_error"]), float(v["max_error"]))
             for k, v in data.get("errors", {}).items()},
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ProfileDataError(f"{path}: {exc}") from None


def _dla_fit(table: dict | None) -> DlaFit | None:
    if not table:
        return None
    return DlaFit(float(table["compute_int8"]), float(table["other_per_clock"]), float(table["memory"]),
                  float(table["layer_overhead_us"]), float(table["transition_us"]),
                  float(table["compute_fp16"]) if "compute_fp16" in table else None,
                  float(table.get("band_low", 1.0)), float(table.get("band_high", 1.0)))


def write_latency_model(model: LatencyModel, path: Path | None = None,
                        written_by: str = "benchmarks/latency_model_fit.py") -> Path:
    path = path or published_model_path()
    fit = {"compute_fp32": model.compute_efficiency["fp32"], "compute_fp16": model.compute_efficiency["fp16"],
           "compute_int8": model.compute_efficiency["int8"], "memory": model.memory_efficiency,
           "layer_overhead_us": model.layer_overhead_us,
           **{f"{kind}_{arch.lower()}": factors[i] for arch, factors in model.arch_factors.items()
              for i, kind in enumerate(("overhead", "memory"))}}
    band = {"low": model.band_low, "high": model.band_high, "median_error": model.median_error or 0.0,
            "max_error": model.max_error or 0.0}
    lines = [f"# Written by {written_by}; do not edit by hand (see docs/latency-plan.md).",
             "fitted_on = [" + ", ".join(_quote(x) for x in model.fitted_on) + "]",
             "sources = [" + ", ".join(_quote(x) for x in model.sources) + "]",
             "modules = [" + ", ".join(_quote(x) for x in model.modules) + "]"]
    if model.published:
        lines += [f"published_figures = {model.published}", f"your_measurements = {model.measured}"]
    lines += ["", "[fit]"]
    lines += [f"{k} = {v:.6g}" for k, v in fit.items()]
    lines += ["", "[band]  # measured/predicted when a model or a module was left out; errors: a model left out"]
    lines += [f"{k} = {v:.6g}" for k, v in band.items()]
    if model.dla:
        lines += ["", "[dla]  # the DLA's factors, fitted on its own figures (edgebuild/latency/dla.py)"]
        lines += [f"{k} = {v:.6g}" for k, v in vars(model.dla).items() if v is not None]
    for key, (figures, median, worst) in model.errors.items():
        lines += ["", f"[errors.{key}]  # leave one model out", f"figures = {figures}",
                  f"median_error = {median:.6g}", f"max_error = {worst:.6g}"]
    for d in model.devices:
        lines += ["", "[[device]]  # your measurements on this module and power mode: measured / predicted, shrunk",
                  f"module = {_quote(d.module)}", f"power_mode = {_quote(d.power_mode)}", f"gpu_mhz = {d.gpu_mhz}",
                  f"fp16_tflops = {d.fp16_tflops!r}", f"factor = {d.factor!r}", f"measurements = {d.measurements}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- the published figures' graphs, kept as data -----------------------------------------------
# ``plan --calibrate`` refits with the published figures and a project's own measurements. The
# published figures' graphs are made from Ultralytics and torchvision in a source checkout
# (benchmarks/latency_model_fit.py), which a user's machine need not have: their per-layer counts
# are kept in profiles/reference/published_costs.json instead.

def _costs_path() -> Path:
    return data_dir("profiles") / "reference" / "published_costs.json"


def _cost_key(model: str, hw: tuple[int, int], batch: int) -> str:
    return f"{model}@{hw[0]}x{hw[1]}@{batch}"


def compact_cost(cost: GraphCost) -> list[list]:
    """A graph's layers as [flops, weight elements, activation elements, tensor cores 0/1, ops, [[producer,
    elements], ...], graph output elements] (what the fits read: the last three place a layer on the DLA or
    the GPU and count what crosses between them)."""
    return [[layer.flops, layer.weight_elements, layer.activation_elements, int(layer.tensor_cores), layer.ops,
             [list(edge) for edge in layer.inputs], layer.output_elements] for layer in cost.layers]


def cost_from_compact(layers: list[list], batch: int, hw: tuple[int, int] | None) -> GraphCost:
    """``compact_cost``'s layers back (an older file's four-number layers have no ops and no inputs)."""
    from edgebuild.latency.graph import LayerCost

    return GraphCost(tuple(LayerCost(f"layer{i}", "", float(entry[0]), int(entry[1]), int(entry[2]), bool(entry[3]),
                                     str(entry[4]) if len(entry) > 4 else "",
                                     tuple((int(a), int(b)) for a, b in entry[5]) if len(entry) > 5 else (),
                                     int(entry[6]) if len(entry) > 6 else 0)
                           for i, entry in enumerate(layers)), batch, hw, 0)


def write_published_costs(samples: list[FitSample], path: Path | None = None) -> Path:
    import json

    costs = {_cost_key(s.row.model, s.row.input_hw, s.row.batch): compact_cost(s.cost) for s in samples}
    path = path or _costs_path()
    path.write_text(json.dumps(dict(sorted(costs.items())), separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def published_samples(path: Path | None = None, accelerator: str = "gpu") -> list[FitSample]:
    """The fitted published figures (``FITTED``) of ``accelerator``, each with its graph's counts from
    published_costs.json."""
    import json

    from edgebuild.targets.profiles import load_catalog

    path = path or _costs_path()
    try:
        costs = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProfileDataError(f"{path}: {exc}", hint="run benchmarks/latency_model_fit.py in a source checkout") \
            from None
    catalog = load_catalog()
    samples = []
    for row in load_published_latencies():
        if row.includes not in FITTED or row.accelerator != accelerator:
            continue
        layers = costs.get(_cost_key(row.model, row.input_hw, row.batch))
        modes = [p for p in catalog.modules[row.module].performance if p.power_mode == row.power_mode] \
            if row.module in catalog.modules else []
        if layers is None or not modes:
            raise ProfileDataError(f"{path}: no graph counts for {row.model} {row.input_hw} batch {row.batch}, or "
                                   f"no {row.module} {row.power_mode} performance entry",
                                   hint="run benchmarks/latency_model_fit.py in a source checkout")
        samples.append(FitSample(row, cost_from_compact(layers, row.batch, row.input_hw), modes[0], row.model))
    return samples
