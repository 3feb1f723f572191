"""A device plan for several models: each model's core (GPU, DLA0, DLA1) and precision on one module.

A group of a fleet file runs several models on one Jetson (docs/fleets.md). AGX Orin and Orin NX 16GB
have a GPU and two DLA cores; :func:`plan_device` tries every placement of the group's models on the
module's cores and every precision each may ship, and keeps the one that meets the group's budget with
the most headroom (without a budget: the most frames per second).

How several models on one module are modelled (each model's own time is ``predict_core``'s,
``edgebuild.latency.cores``; the sharing below is an assumption no published figure has been fitted to,
and the device bench measures it: ``edgebuild bench`` runs each model alone and all together):

- **every model runs once per frame**, each on its core; frames are pipelined across the cores, so
  the group's frame rate is bounded by its busiest resource: a core's time per frame is the sum of
  what its models keep it busy (a DLA model's fallback layers and reformats count on the GPU), and
  DRAM's is the bytes every model moves per frame over ``DRAM_EFFICIENCY`` of the module's bandwidth;
- **a model's latency together** is its own, plus one inference of each other model on its core (it
  may have to wait for them; a DLA model with GPU fallback also waits for the GPU's models), times the
  DRAM slowdown: when the cores together ask for more bandwidth than ``DRAM_EFFICIENCY`` of the bus
  (each core at the average rate of its models), every inference stretches by that ratio.

Each model not placed on a DLA core where the module has one gets a note saying why: the DLA cannot
run its precisions, its layers fall back to the GPU (which and how many hand-overs), it is slower there
than on the GPU, or the plan with it on the DLA is worse for the group (bandwidth).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from edgebuild.errors import TargetError
from edgebuild.latency.cores import CorePrediction, predict_core

if TYPE_CHECKING:
    from edgebuild.latency.graph import GraphCost
    from edgebuild.latency.model import LatencyModel
    from edgebuild.targets.profiles import ModulePerformance

__all__ = ["DevicePlan", "PlannedModel", "plan_device"]

#: the share of the module's DRAM bandwidth the cores reach together (an assumption: LPDDR5 under
#: mixed GPU and DLA traffic; not fitted, see the module docstring)
DRAM_EFFICIENCY = 0.7
#: a search this large or more is done greedily (model by model, the most expensive first)
MAX_EXHAUSTIVE = 20000


@dataclass(frozen=True)
class PlannedModel:
    """One model of the group, as the planner sees it."""

    name: str
    cost: GraphCost
    precisions: tuple[str, ...]  # what it may ship (the gate's candidates)
    pinned: str | None = None  # the user's placement: gpu, dla0, dla1 or dla (either core); None: the planner's


@dataclass(frozen=True)
class Placement:
    """Where one model runs, and its predicted latency alone and with the group's other models running."""

    model: str
    core: str  # gpu, dla0 or dla1
    precision: str
    alone: CorePrediction
    together_ms: float

    def as_dict(self) -> dict:
        return {"model": self.model, "core": self.core, "precision": self.precision,
                "alone_ms": round(self.alone.latency_ms, 4), "together_ms": round(self.together_ms, 4),
                "dram_gbps": round(self.alone.dram_gbps, 2), "fallback_ops": list(self.alone.fallback_ops),
                "handovers": self.alone.handovers}


@dataclass(frozen=True)
class DevicePlan:
    """The chosen placement of a group's models, what it predicts, and why a model is not on a DLA core."""

    module: str
    power_mode: str
    placements: tuple[Placement, ...]
    frame_ms: float  # one frame through every model, the cores pipelined: the busiest resource's time per frame
    busiest: str  # gpu, dla0, dla1 or dram
    busy_ms: dict[str, float]  # per resource, its time per frame (dram: the bytes over its usable bandwidth)
    slowdown: float  # the DRAM slowdown every inference sees when all run at once (1: none)
    budget_ms: float | None  # every model's latency together within this
    min_fps: float | None  # the group's frame rate at least this
    gpu_only_fps: float  # the best plan with every model on the GPU, for comparison
    considered: int  # placements tried
    notes: tuple[str, ...] = field(default=())

    @property
    def fps(self) -> float:
        return 1000.0 / self.frame_ms

    @property
    def headroom(self) -> float | None:
        """How far the plan is inside its budget: the smallest of budget / latency together and fps / min_fps
        (1.0 is just meeting it); None without a budget."""
        return _headroom(self.placements, self.fps, self.budget_ms, self.min_fps)

    @property
    def meets(self) -> bool | None:
        headroom = self.headroom
        return None if headroom is None else headroom >= 1.0

    def as_dict(self) -> dict:
        return {"module": self.module, "power_mode": self.power_mode,
                "placements": [p.as_dict() for p in self.placements], "fps": round(self.fps, 2),
                "frame_ms": round(self.frame_ms, 4), "busiest": self.busiest,
                "busy_ms": {k: round(v, 4) for k, v in self.busy_ms.items()}, "dram_slowdown": round(self.slowdown, 4),
                "budget_ms": self.budget_ms, "min_fps": self.min_fps,
                "headroom": None if self.headroom is None else round(self.headroom, 4), "meets": self.meets,
                "gpu_only_fps": round(self.gpu_only_fps, 2), "considered": self.considered,
                "notes": list(self.notes), "source": "predicted (edgebuild.latency.device_plan; no device measured)"}

    def table(self) -> str:
        head = f"{'model':<16} {'core':<5} {'precision':<9} {'alone ms':>9} {'together ms':>12} {'GB/s':>6}"
        lines = [head + "  fallback"]
        for p in self.placements:
            fallback = f"{len(p.alone.fallback_ops)} ops, {p.alone.handovers} hand-overs" if p.core != "gpu" else ""
            lines.append(f"{p.model:<16} {p.core:<5} {p.precision:<9} {p.alone.latency_ms:>9.3f} "
                         f"{p.together_ms:>12.3f} {p.alone.dram_gbps:>6.1f}  {fallback}")
        busy = ", ".join(f"{k} {v:.3f} ms" for k, v in self.busy_ms.items())
        lines.append(f"group: {self.fps:.1f} frames/s (every model once per frame; bound by {self.busiest}; per frame: "
                     f"{busy}); all on the GPU: {self.gpu_only_fps:.1f} frames/s")
        return "\n".join(lines)


def plan_device(models: list[PlannedModel], perf: ModulePerformance, module: str, *, budget_ms: float | None = None,
                min_fps: float | None = None, fit: LatencyModel | None = None, no_dla: str | None = None) -> DevicePlan:
    """The best placement of ``models`` on ``perf``'s module and power mode (see the module docstring); a
    TargetError when some model can run on no core it may use at any precision it may ship. ``no_dla``: why the
    target's TensorRT runs no DLA (``edgebuild.targets.dla.accelerator_problem``): the GPU only."""
    cores = ["gpu"] + ([] if no_dla else [f"dla{i}" for i in range(min(perf.dla_cores, 2))])
    options: list[list[tuple[str, str, CorePrediction]]] = []
    why_not: dict[str, list[str]] = {}
    for model in models:
        choices, refused = _choices(model, perf, cores, fit)
        if not choices:
            raise TargetError(f"{module} {perf.power_mode}: model {model.name} can run on none of "
                              f"{_allowed(model.pinned, cores)} at {', '.join(model.precisions) or 'no precision'}: "
                              + "; ".join(refused), hint="place it on the GPU or let it ship another precision")
        options.append(choices)
        why_not[model.name] = refused
    combos = _combinations(options)
    best, considered = None, 0
    best_gpu: _Scored | None = None
    for combo in combos:
        considered += 1
        scored = _score(combo, models, perf, budget_ms, min_fps)
        if best is None or scored.key > best.key:
            best = scored
        if all(core == "gpu" for core, _, _ in combo) and (best_gpu is None or scored.fps > best_gpu.fps):
            best_gpu = scored
    assert best is not None, "every model has at least one choice"
    gpu_only = best_gpu.fps if best_gpu else _gpu_only_fps(models, perf, fit, budget_ms, min_fps)
    if no_dla and perf.dla_cores:
        notes = [f"no DLA core considered: {no_dla}"]
    else:
        notes = _notes(models, best, why_not, perf, budget_ms, min_fps, options) if perf.dla_cores else []
    placed = [p for p in best.placements if p.core != "gpu"]
    if placed:
        notes.append("to build this plan, the fleet group says: placement = { " + ", ".join(
            f'{p.model} = "{p.core}"' for p in best.placements) + " }")
    if any(p.precision == "int8" for p in placed):
        notes.append("INT8 on a DLA core ships only where its own layout (every DLA tensor at INT8, by its "
                     "calibrated range) passes the gate, else FP16, which the latency model does not predict on the "
                     "DLA (no published figure): docs/targets.md, 'INT8 on the DLA'")
    return DevicePlan(module, perf.power_mode, best.placements, best.frame_ms, best.busiest, best.busy,
                      best.slowdown, budget_ms, min_fps, gpu_only, considered, tuple(notes))


# -- the search ------------------------------------------------------------------------------------


def _allowed(pinned: str | None, cores: list[str]) -> list[str]:
    if pinned is None:
        return cores
    if pinned == "dla":
        return [c for c in cores if c.startswith("dla")]
    return [c for c in cores if c == pinned]


def _choices(model: PlannedModel, perf: ModulePerformance, cores: list[str],
             fit: LatencyModel | None) -> tuple[list[tuple[str, str, CorePrediction]], list[str]]:
    """(core, precision, prediction) for every core the model may use and precision that core runs; and why the
    DLA refused what it refused (once per precision: the two cores predict alike)."""
    found: list[tuple[str, str, CorePrediction]] = []
    refused: list[str] = []
    cache: dict[tuple[str, str], CorePrediction | str] = {}
    for core in _allowed(model.pinned, cores):
        kind = "gpu" if core == "gpu" else "dla"
        for precision in model.precisions:
            if (kind, precision) not in cache:
                try:
                    cache[kind, precision] = predict_core(model.cost, perf, kind, precision, fit)
                except TargetError as exc:
                    cache[kind, precision] = f"{kind.upper()} at {precision}: {exc.message}"
                    refused.append(cache[kind, precision])  # type: ignore[arg-type]
            got = cache[kind, precision]
            if isinstance(got, CorePrediction):
                found.append((core, precision, got))
    return found, refused


def _combinations(options: list[list[tuple[str, str, CorePrediction]]]) -> list[tuple[tuple[str, str, CorePrediction],
                                                                                      ...]]:
    """Every combination, or where that is too many, each model's choices with the others at their fastest
    alone (the DLA cores are alike, so only the first of equal DLA placements is kept)."""
    total = 1
    for choices in options:
        total *= len(choices)
    if total < MAX_EXHAUSTIVE:
        return [c for c in itertools.product(*options) if _canonical(c)]
    fastest = [min(choices, key=lambda c: c[2].latency_ms) for choices in options]
    combos = [tuple(fastest)]
    for index, choices in enumerate(options):
        for choice in choices:
            combos.append(tuple(fastest[:index] + [choice] + fastest[index + 1:]))
    return combos


def _canonical(combo: tuple[tuple[str, str, CorePrediction], ...]) -> bool:
    """Whether ``combo`` uses DLA1 only after DLA0 (the mirror image predicts the same)."""
    first = next((core for core, _, _ in combo if core.startswith("dla")), None)
    return first != "dla1"


@dataclass(frozen=True)
class _Scored:
    placements: tuple[Placement, ...]
    frame_ms: float
    busiest: str
    busy: dict[str, float]
    slowdown: float
    key: tuple[float, ...]

    @property
    def fps(self) -> float:
        return 1000.0 / self.frame_ms


def _score(combo: tuple[tuple[str, str, CorePrediction], ...], models: list[PlannedModel], perf: ModulePerformance,
           budget_ms: float | None, min_fps: float | None) -> _Scored:
    busy: dict[str, float] = {}
    bytes_per_frame = 0.0
    for core, _, got in combo:
        if core == "gpu":
            busy["gpu"] = busy.get("gpu", 0.0) + got.gpu_busy_ms
        else:
            busy[core] = busy.get(core, 0.0) + got.dla_busy_ms
            if got.gpu_busy_ms:
                busy["gpu"] = busy.get("gpu", 0.0) + got.gpu_busy_ms
        bytes_per_frame += got.dram_bytes
    usable = perf.memory_bandwidth_gbps * DRAM_EFFICIENCY * 1e9
    # each core at the average bandwidth of its models, all at once
    per_core: dict[str, tuple[float, float]] = {}
    for core, _, got in combo:
        moved, ms = per_core.get(core, (0.0, 0.0))
        per_core[core] = (moved + got.dram_bytes, ms + got.latency_ms)
    demand = sum(moved / (ms * 1e-3) for moved, ms in per_core.values() if ms > 0)
    slowdown = max(1.0, demand / usable)
    busy = {k: v * slowdown for k, v in busy.items()}
    busy["dram"] = bytes_per_frame / usable * 1e3
    busiest = max(busy, key=lambda k: busy[k])
    frame_ms = busy[busiest]
    placements = []
    for index, (core, precision, got) in enumerate(combo):
        wait = sum(other.latency_ms for j, (c, _, other) in enumerate(combo) if j != index and c == core)
        if core != "gpu" and got.gpu_busy_ms:
            wait += sum(other.gpu_busy_ms for j, (c, _, other) in enumerate(combo) if j != index and c != core)
        placements.append(Placement(models[index].name, core, precision, got, (got.latency_ms + wait) * slowdown))
    fps = 1000.0 / frame_ms
    headroom = _headroom(placements, fps, budget_ms, min_fps)
    # meeting the budget first, then the most headroom (or frames per second), then the least DRAM traffic
    key = (1.0 if headroom is None or headroom >= 1.0 else 0.0,
           headroom if headroom is not None else fps, fps, -bytes_per_frame)
    return _Scored(tuple(placements), frame_ms, busiest, busy, slowdown, key)


def _headroom(placements: tuple[Placement, ...] | list[Placement], fps: float, budget_ms: float | None,
              min_fps: float | None) -> float | None:
    ratios = [budget_ms / p.together_ms for p in placements] if budget_ms else []
    if min_fps:
        ratios.append(fps / min_fps)
    return min(ratios) if ratios else None


def _gpu_only_fps(models: list[PlannedModel], perf: ModulePerformance, fit: LatencyModel | None,
                  budget_ms: float | None, min_fps: float | None) -> float:
    """The group's frames per second with every model on the GPU at its fastest precision (a model pinned to a
    DLA core is counted on the GPU too: the comparison is with a GPU-only device)."""
    combo = []
    for model in models:
        runnable = []
        for precision in model.precisions:
            try:
                runnable.append((precision, predict_core(model.cost, perf, "gpu", precision, fit)))
            except TargetError:
                continue
        if not runnable:
            return 0.0  # a model only a DLA core runs at the precisions it may ship: no GPU-only device runs the group
        precision, got = min(runnable, key=lambda pg: pg[1].latency_ms)
        combo.append(("gpu", precision, got))
    return _score(tuple(combo), models, perf, budget_ms, min_fps).fps


def _notes(models: list[PlannedModel], best: _Scored, why_not: dict[str, list[str]], perf: ModulePerformance,
           budget_ms: float | None, min_fps: float | None,
           options: list[list[tuple[str, str, CorePrediction]]]) -> list[str]:
    """Why each model on the GPU is not on a DLA core."""
    notes = []
    for index, placement in enumerate(best.placements):
        if placement.core != "gpu":
            continue
        model = models[index]
        if model.pinned == "gpu":
            notes.append(f"{model.name}: on the GPU as placed (placement gpu)")
            continue
        dla = [c for c in options[index] if c[0] != "gpu"]
        if not dla:
            notes.append(f"{model.name}: not on a DLA core: " + "; ".join(why_not[model.name]))
            continue
        fastest = min(dla, key=lambda c: c[2].latency_ms)
        got = fastest[2]
        why = [f"on a DLA core at {fastest[1]} it would take {got.latency_ms:.2f} ms alone against "
               f"{placement.alone.latency_ms:.2f} ms on the GPU at {placement.precision}"]
        if got.fallback_ops:
            from edgebuild.latency.dla import dla_ops

            ops = sorted({op for layer in got.fallback_ops for op in layer.split("+") if op not in dla_ops()})
            layers = len(got.fallback_ops)
            why.append(f"{layers} layer{'s' if layers > 1 else ''} fall{'' if layers > 1 else 's'} back to the GPU "
                       f"(for {', '.join(ops[:6])}"
                       f"{', ...' if len(ops) > 6 else ''}), {got.handovers} GPU<->DLA hand-overs, "
                       f"{got.gpu_busy_ms:.2f} ms of GPU time per inference")
        combo = tuple((p.core, p.precision, p.alone) for p in best.placements)
        moved = _score(combo[:index] + ((fastest[0], fastest[1], got),) + combo[index + 1:], models, perf,
                       budget_ms, min_fps)
        if moved.busiest == "dram" or moved.slowdown > 1.0:
            why.append(f"with it there the cores would ask for more DRAM bandwidth than the module gives "
                       f"(every inference {moved.slowdown:.2f}x slower; bound by {moved.busiest})")
        why.append(f"the group would run {moved.fps:.1f} frames/s against {best.fps:.1f}")
        notes.append(f"{model.name}: not on a DLA core: " + "; ".join(why))
    return notes
