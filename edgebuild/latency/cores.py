"""One model on one core of a module: what a device planner asks of the latency model.

``predict_core(cost, perf, core, precision)`` predicts one inference of a graph (its ``GraphCost``,
``edgebuild.latency.graph``) on one core of a module's power mode (a ``[[performance]]`` entry):

- ``core="gpu"``: the GPU (``edgebuild.latency.model``);
- ``core="dla"``: one DLA core, the layers the DLA cannot run falling back to the GPU
  (``edgebuild.latency.dla``). The module's DLA cores are alike: DLA0 and DLA1 predict the same.

Beside the latency it says what a planner sharing a module between several models needs: the bytes
one inference moves to and from DRAM (the GPU and the DLA cores share the module's bandwidth), and
how long it keeps the GPU and the DLA core busy (a DLA model's fallback layers and reformats take
the GPU too). A core or precision the module cannot run raises a ``TargetError`` saying why: no DLA
core (Orin Nano, Thor), no DLA peak in the module's profile, FP32 on the DLA, FP8/NVFP4 before
Blackwell.

    from edgebuild.latency.cores import predict_core
    from edgebuild.latency.graph import fixed_graph_cost
    cost = fixed_graph_cost(Path("yolo11n.onnx"))
    perf = load_catalog().modules["agx-orin-64gb"].performance[0]
    gpu, dla = predict_core(cost, perf, "gpu", "int8"), predict_core(cost, perf, "dla", "int8")
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from edgebuild.errors import TargetError
from edgebuild.latency.model import ALL_PRECISIONS, LatencyModel, load_latency_model, no_path, predict_ms, runs

if TYPE_CHECKING:
    from edgebuild.latency.graph import GraphCost
    from edgebuild.targets.profiles import ModulePerformance

#: the device planner's interface (docs/latency-plan.md, "One model on one core"); kept out of __all__
#: until a layer outside ``edgebuild.latency`` imports it
__all__: list[str] = []

CORES = ("gpu", "dla")


@dataclass(frozen=True)
class CorePrediction:
    """One inference (the whole batch) of one graph on one core, at one precision."""

    core: str  # "gpu" or "dla"
    precision: str
    latency_ms: float  # the predicted p50 (GPU compute time; on the DLA, its layers + fallback + hand-overs)
    low_ms: float  # the band: what held every published figure of that core when its model was left out
    high_ms: float
    dram_bytes: float  # moved to and from DRAM by one inference (weights, activations, reformats)
    gpu_busy_ms: float  # of latency_ms, the time the GPU works: all of it on the GPU, fallback + reformats on the DLA
    dla_busy_ms: float  # the time the DLA core works (0 on the GPU)
    fallback_ops: tuple[str, ...] = ()  # the ops of the layers that fall back to the GPU (DLA only)
    handovers: int = 0  # GPU<->DLA hand-overs per inference: two per DLA subgraph (DLA only)

    @property
    def dram_gbps(self) -> float:
        """The DRAM bandwidth it takes, on average, while it runs back to back."""
        return self.dram_bytes / (self.latency_ms * 1e-3) / 1e9

    def as_dict(self) -> dict:
        return {**asdict(self), "fallback_ops": list(self.fallback_ops), "dram_gbps": self.dram_gbps}


def predict_core(cost: GraphCost, perf: ModulePerformance, core: str, precision: str,
                 fit: LatencyModel | None = None) -> CorePrediction:
    """``cost`` on ``core`` ("gpu" or "dla") of ``perf``'s module and power mode at ``precision`` (the stored fit
    unless ``fit``); a TargetError naming why where that core cannot run it."""
    fit = fit or load_latency_model()
    if core not in CORES:
        raise TargetError(f"unknown core {core!r}", hint=f"cores: {', '.join(CORES)}")
    if precision not in ALL_PRECISIONS:
        raise TargetError(f"unknown precision {precision!r}", hint=f"precisions: {', '.join(ALL_PRECISIONS)}")
    if core == "gpu":
        if not runs(perf, precision):
            raise TargetError(f"{perf.power_mode}: {no_path(perf, precision)}")
        ms = predict_ms(cost, perf, precision, fit)
        return CorePrediction("gpu", precision, ms, ms * fit.band_low, ms * fit.band_high,
                              cost.bytes_moved(precision), ms, 0.0)
    from edgebuild.latency.dla import dla_time

    time = dla_time(cost, perf, precision, fit)
    ms = time.seconds * 1e3
    assert fit.dla is not None, "dla_time answered without DLA factors"
    return CorePrediction("dla", precision, ms, ms * fit.dla.band_low, ms * fit.dla.band_high,
                          time.dla_bytes + time.gpu_bytes + time.boundary_bytes,
                          (time.gpu_s + time.boundary_s) * 1e3, time.dla_s * 1e3, time.fallback_ops, time.crossings)
