"""The DLA's latency: which layers run on it, what they take there, what falls back to the GPU and what
each boundary between the two costs.

Placement: a fused layer (``edgebuild.latency.graph``) runs on the DLA when every ONNX op in it is one
the DLA runs (``profiles/tensorrt/dla.toml`` through ``edgebuild.targets.dla.dla_table``, the rules
preflight names fallbacks with); the others fall back to the GPU, as TensorRT's GPU fallback does.
One inference on one DLA core at precision ``p`` (FP16 or INT8: the DLA runs nothing else) takes:

- per DLA layer, ``max(compute, bytes / (e_m * bandwidth)) + overhead * 1 GHz / DLA clock``; compute is
  ``flops / (e_p * peak_p)`` for convolutions and fully connected layers (the dense math that takes the
  tensor cores on the GPU), at one core's peak (the module's DLA peak / its DLA cores), and
  ``flops / (other * DLA clock)`` for the rest (pooling, resize, elementwise, depthwise convolutions);
- per fallback layer, its time on the GPU (``edgebuild.latency.model.layer_seconds``, the GPU's own fit);
- per DLA subgraph (a run of DLA layers in the graph's order: TensorRT's GPU fallback splits the network
  into such "foreign nodes"), two hand-overs, in and out, of ``transition`` each; and every tensor that
  crosses between the two (the engine's inputs and outputs too: they live on the GPU's side unless the
  engine is built with DLA formats) reformatted, a read and a write at ``e_m * bandwidth``.

``e_int8``, ``other``, ``e_m``, ``overhead`` and ``transition`` are fitted (``fit_dla``) to the DLA's
published figures (``published_latency.csv`` rows with ``accelerator = dla``); no published figure ran
the DLA in FP16, so FP16 takes INT8's fraction of an FP16 peak, where a module's profile gives one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from edgebuild.errors import TargetError
from edgebuild.latency.graph import GraphCost
from edgebuild.latency.model import DlaFit, FitSample, LatencyModel, _nelder_mead, layer_seconds

if TYPE_CHECKING:
    import numpy as np

    from edgebuild.targets.profiles import ModulePerformance

__all__: list[str] = []  # the fit script imports dla_time, fit_dla, leave_one_out_dla; plan goes through cores.py

DLA_PRECISIONS = ("fp16", "int8")


@lru_cache(maxsize=1)
def dla_ops() -> frozenset[str]:
    """The ONNX ops dla.toml says the DLA runs."""
    from edgebuild.targets.dla import dla_table

    return frozenset(op for op, entry in dla_table().get("onnx_ops", {}).items() if entry.get("dla", False))


def dla_placement(cost: GraphCost) -> tuple[bool, ...]:
    """Per layer, whether it runs on the DLA (every op in it is one the DLA runs)."""
    supported = dla_ops()
    return tuple(bool(layer.ops) and all(op in supported for op in layer.ops.split("+")) for layer in cost.layers)


@dataclass(frozen=True)
class DlaTime:
    """One inference on one DLA core, in parts."""

    dla_s: float  # the DLA layers
    gpu_s: float  # the fallback layers, on the GPU
    boundary_s: float  # the crossings: hand-over and reformat
    fallback_ops: tuple[str, ...]  # the fallback layers' ops ("InstanceNormalization", "GlobalAveragePool"...)
    crossings: int  # hand-overs between the GPU and the DLA: two per DLA subgraph
    dla_bytes: float  # what the DLA layers move to and from DRAM
    gpu_bytes: float  # what the fallback layers move
    boundary_bytes: float  # what the reformats move (a read and a write of each crossing tensor)

    @property
    def seconds(self) -> float:
        return self.dla_s + self.gpu_s + self.boundary_s


def check_dla(perf: ModulePerformance, precision: str) -> None:
    """A TargetError saying why ``perf`` cannot run a DLA engine at ``precision``, if it cannot."""
    if perf.dla_cores <= 0:
        raise TargetError(f"{perf.power_mode}: this module has no DLA core", hint="use the GPU (--accelerator gpu)")
    if precision not in DLA_PRECISIONS:
        raise TargetError(f"the DLA runs FP16 and INT8 only, not {precision.upper()}",
                          hint="predict --precision fp16,int8 on the DLA")
    if perf.dla_mhz is None or perf.dla_int8_tops is None:
        raise TargetError(f"{perf.power_mode}: the module's profile gives no DLA clock and peak for this power mode",
                          hint="add dla_mhz and dla_int8_tops to its [[performance]] entry, with their sources")
    if precision == "fp16" and perf.dla_fp16_tflops is None:
        raise TargetError(f"{perf.power_mode}: no published DLA FP16 peak for this module (Orin's DLA trades FP16 "
                          "for INT8 throughput; NVIDIA gives no figure)",
                          hint="predict the DLA at INT8, or add dla_fp16_tflops with its source")


@dataclass(frozen=True)
class _Parts:
    """What a DLA prediction needs of one graph on one power mode, before the fitted factors."""

    tensor: np.ndarray  # per DLA layer: flops / peak (seconds at full efficiency), 0 for the other layers
    other: np.ndarray  # per DLA layer: flops / DLA clock (cycles), 0 for conv/FC layers
    is_tensor: np.ndarray
    memory: np.ndarray  # per DLA layer: bytes / bandwidth
    cycles: float  # DLA layers x 1000 / DLA MHz
    gpu_s: float
    crossings: int
    boundary_memory: float  # boundary bytes / bandwidth
    fallback_ops: tuple[str, ...]
    dla_bytes: float
    gpu_bytes: float
    boundary_bytes: float


def _parts(cost: GraphCost, perf: ModulePerformance, precision: str, gpu: LatencyModel) -> _Parts:
    import numpy as np

    check_dla(perf, precision)
    placed = dla_placement(cost)
    tops = perf.dla_int8_tops if precision == "int8" else perf.dla_fp16_tflops
    mhz = perf.dla_mhz
    assert tops is not None and mhz is not None, "check_dla let a power mode without DLA peaks through"
    peak, hz = tops * 1e12 / perf.dla_cores, mhz * 1e6
    bandwidth = perf.memory_bandwidth_gbps * 1e9
    on_dla = [layer for layer, here in zip(cost.layers, placed) if here]
    is_tensor = np.array([layer.tensor_cores for layer in on_dla], dtype=bool)
    flops = np.array([layer.flops for layer in on_dla])
    gpu_times = layer_seconds(cost, perf, precision, gpu) if not all(placed) else np.zeros(len(placed))
    fallback = [i for i, here in enumerate(placed) if not here]
    crossing_elements = 0
    for i, layer in enumerate(cost.layers):
        for source, elements in layer.inputs:
            if placed[i] != (placed[source] if source >= 0 else False):
                crossing_elements += elements
        if placed[i]:
            crossing_elements += layer.output_elements
    # a hand-over into and out of each DLA subgraph: a run of DLA layers in the graph's order (TensorRT's
    # ForeignNodes, which its GPU fallback splits the network into)
    crossings = 2 * sum(1 for i, here in enumerate(placed) if here and (i == 0 or not placed[i - 1]))
    size = {"int8": 1, "fp16": 2}[precision]
    boundary_bytes = 2.0 * crossing_elements * size
    return _Parts(
        np.where(is_tensor, flops / peak, 0.0), np.where(is_tensor, 0.0, flops / hz), is_tensor,
        np.array([layer.bytes_moved(precision) for layer in on_dla]) / bandwidth, len(on_dla) * 1000.0 / mhz,
        float(gpu_times[fallback].sum()) * gpu.device_factor(perf), crossings, boundary_bytes / bandwidth,
        tuple(cost.layers[i].ops or cost.layers[i].kind for i in fallback),
        float(sum(layer.bytes_moved(precision) for layer in on_dla)),
        float(sum(cost.layers[i].bytes_moved(precision) for i in fallback)), boundary_bytes,
    )


def _seconds(parts: _Parts, fit: DlaFit, precision: str) -> tuple[float, float]:
    """(DLA layers' seconds, boundary seconds) with ``fit``'s factors."""
    import numpy as np

    compute = np.where(parts.is_tensor, parts.tensor / fit.compute(precision), parts.other / fit.other_per_clock)
    dla = float(np.maximum(compute, parts.memory / fit.memory).sum()) + parts.cycles * fit.layer_overhead_us * 1e-6
    return dla, parts.crossings * fit.transition_us * 1e-6 + parts.boundary_memory / fit.memory


def dla_time(cost: GraphCost, perf: ModulePerformance, precision: str, model: LatencyModel) -> DlaTime:
    """One inference of ``cost`` on one DLA core of ``perf``'s module (a TargetError where it has none, no
    DLA peak in its profile, or ``precision`` is not FP16/INT8)."""
    if model.dla is None:
        raise TargetError("the latency model has no DLA factors", hint="run benchmarks/latency_model_fit.py")
    parts = _parts(cost, perf, precision, model)
    dla, boundary = _seconds(parts, model.dla, precision)
    return DlaTime(dla, parts.gpu_s, boundary, parts.fallback_ops, parts.crossings, parts.dla_bytes,
                   parts.gpu_bytes, parts.boundary_bytes)


# -- the fit ---------------------------------------------------------------------------------

_START = (0.5, 64.0, 0.5, 1.0, 50.0)  # compute_int8, other_per_clock, memory, layer_overhead_us, transition_us


def _fit_from(x: np.ndarray) -> DlaFit:
    import numpy as np

    v = np.exp(x)
    return DlaFit(float(v[0]), float(v[1]), float(v[2]), float(v[3]), float(v[4]))


def fit_dla(samples: list[FitSample], gpu: LatencyModel) -> DlaFit:
    """The DLA factors that best predict ``samples`` (least squares of log predicted - log measured), their
    fallback layers at ``gpu``'s prediction."""
    import numpy as np

    if not samples:
        raise TargetError("no published DLA latency to fit to")
    design = [(_parts(s.cost, s.performance, s.row.precision, gpu), s.row.precision,
               math.log(s.row.latency_ms * 1e-3), s.weight) for s in samples]

    def loss(x: np.ndarray) -> float:
        fit = _fit_from(x)
        total = 0.0
        for parts, precision, measured, weight in design:
            dla, boundary = _seconds(parts, fit, precision)
            total += weight * (math.log(dla + parts.gpu_s + boundary) - measured) ** 2
        return total

    x = np.log(_START)
    best = loss(x)
    for _ in range(10):  # restarted from its own answer until it no longer improves, as the GPU's fit
        x_new = _nelder_mead(loss, x)
        new = loss(x_new)
        x = x_new
        if best - new < 1e-9:
            break
        best = new
    return _fit_from(x)


def leave_one_out_dla(samples: list[FitSample], gpu: LatencyModel,
                      by: Callable[[FitSample], str] | None = None) -> list[tuple[FitSample, float]]:
    """Each DLA sample with its prediction, in ms, by a DLA fit that saw no sample sharing its ``by`` (default:
    its model)."""
    from dataclasses import replace

    by = by or (lambda s: s.key or s.row.model)
    predicted = []
    for key in sorted({by(s) for s in samples}):
        model = replace(gpu, dla=fit_dla([s for s in samples if by(s) != key], gpu))
        predicted += [(s, dla_time(s.cost, s.performance, s.row.precision, model).seconds * 1e3)
                      for s in samples if by(s) == key]
    return predicted
