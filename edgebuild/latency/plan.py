"""``edgebuild plan``: predicted TensorRT latency per module, power mode and precision.

With ``--model FILE.onnx``, for the modules asked for (:func:`plan_latency`); in a project, for each
selected fleet group (its module, JetPack and power mode) on the project's export, at batch 1 and at
the largest batch its input profile allows (:func:`plan_groups`; ``edgebuild.workflows.plan`` runs the
export first).

No device and no engine: the ONNX graph's FLOPs and bytes per fused layer, the module's peaks at
the power mode's clock and the efficiency factors fitted to published figures
(``edgebuild.latency.model``). Each prediction carries the band that held every published
figure when its model, or its module, was left out of the fit. With ``accelerator="dla"`` (``plan
--accelerator dla``), on one DLA core of each module that has one (``edgebuild.latency.cores``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import ConfigError, TargetError
from edgebuild.latency.budget import module_cost_key
from edgebuild.latency.cores import CORES, predict_core
from edgebuild.latency.graph import GraphCost, fixed_graph_cost
from edgebuild.latency.model import (
    ALL_PRECISIONS,
    NARROW_PRECISIONS,
    PRECISIONS,
    LatencyModel,
    load_latency_model,
    performance_modes,
    runs,
)
from edgebuild.targets.profiles import Module, ModulePerformance, SelectedGroup, load_catalog

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["LatencyPlan", "ModuleChoice", "PlanRequest", "candidate_precisions", "plan_groups", "plan_latency"]

#: the runtime's preprocessing (edgebuild.runtime.base.vision.preprocess: a bilinear resize by fancy
#: indexing, the letterbox canvas, the normalisation, the CHW copy) counted as this many passes,
#: each a read and a write, over the float32 input tensor ...
PREPROCESS_PASSES = 20
#: ... on the CPU cores, which numpy drives at this fraction of the module's memory bandwidth: an
#: assumption, not fitted to any measurement (docs/latency-plan.md, "End to end")
CPU_BANDWIDTH_SHARE = 0.25


@dataclass(frozen=True)
class LatencyRow:
    """One module, power mode and precision: predicted GPU compute time of one batch."""

    module: str
    power_mode: str
    jetpack: str  # the --jetpack asked for, else the releases whose nvpmodel has this mode at this clock
    precision: str
    batch: int
    latency_ms: float
    low_ms: float
    high_ms: float
    fps: float  # images per second: batch / latency
    gpu_mhz: int
    meets_budget: bool | None = None  # p50 within --budget-ms / --min-fps; None when none was given
    extrapolated: bool = False  # no published figure of this GPU architecture was fitted
    group: str | None = None  # the fleet group, in a project
    end_to_end_ms: float | None = None  # in a project: + input upload, output download and preprocessing (below)
    # in a project: the engine's weights + activations at the profile's largest shape, as the memory plan
    # estimates them from the ONNX before any engine exists (edgebuild.devices.memory_plan)
    engine_memory_bytes: int | None = None
    accelerator: str = "gpu"  # gpu, or dla: one DLA core, the layers it cannot run on the GPU
    dla_mhz: int | None = None  # on the DLA: its clock in this power mode
    fallback_ops: tuple[str, ...] | None = None  # on the DLA: the ops of the layers that fall back to the GPU

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LatencyPlan:
    """The predictions, what they rest on, and per precision the cheapest mode meeting the budget."""

    model: Path
    input_hw: tuple[int, int] | None  # None: the model has no 4-D (image) input
    batch: int
    gflops: float
    layers: int
    unknown_shapes: int
    rows: tuple[LatencyRow, ...]
    budget_ms: float | None
    cheapest: dict[str, LatencyRow | None]  # precision -> the first row meeting the budget, cheapest first
    skipped: tuple[str, ...]  # modules or modes with no prediction, and why
    fit: LatencyModel
    accelerator: str = "gpu"

    def as_dict(self) -> dict:
        return {
            "model": str(self.model), "input_size": list(self.input_hw) if self.input_hw else None, "batch": self.batch,
            "gflops": round(self.gflops, 3), "layers": self.layers, "unknown_shapes": self.unknown_shapes,
            "budget_ms": self.budget_ms, "rows": [row.as_dict() for row in self.rows],
            "cheapest": {p: (row.as_dict() if row else None) for p, row in self.cheapest.items()},
            "skipped": list(self.skipped),
            "error_band": {"low": self.band[0], "high": self.band[1],
                           "leave_one_model_out_median": self.fit.median_error,
                           "leave_one_model_out_max": self.fit.max_error, "fitted_on": list(self.fit.fitted_on),
                           "per_accelerator": {k: {"figures": n, "median": median, "max": worst}
                                               for k, (n, median, worst) in self.fit.errors.items()}},
            "accelerator": self.accelerator,
        }

    @property
    def band(self) -> tuple[float, float]:
        """The rows' band factors: the GPU's, or the DLA's on the DLA."""
        dla = self.fit.dla if self.accelerator == "dla" else None
        return (dla.band_low, dla.band_high) if dla else (self.fit.band_low, self.fit.band_high)


def _cost(model: Path, batch: int, input_hw: tuple[int, int] | None) -> GraphCost:
    return fixed_graph_cost(model, batch=batch, input_hw=input_hw,
                            hint="give --input-size N or H,W (an image input's height and width)")


def _jetpack_text(perf: ModulePerformance, jetpack: str | None) -> str:
    if jetpack:
        return jetpack
    if perf.jetpack_min and perf.jetpack_max:
        return f"{perf.jetpack_min}-{perf.jetpack_max}"
    if perf.jetpack_min:
        return f">={perf.jetpack_min}"
    if perf.jetpack_max:
        return f"<={perf.jetpack_max}"
    return "any"


def _selected_modules(module: str, jetpack: str | None) -> list[Module]:
    catalog = load_catalog()
    if module == "all":
        chosen = list(catalog.modules.values())
    else:
        names = [m.strip() for m in module.split(",") if m.strip()]
        unknown = [n for n in names if n not in catalog.modules]
        if unknown:
            raise TargetError(f"unknown module {', '.join(unknown)}",
                              hint=f"modules: {', '.join(sorted(catalog.modules))}")
        chosen = [catalog.modules[n] for n in names]
    if jetpack is not None:
        if jetpack not in catalog.releases:
            raise TargetError(f"unknown JetPack release {jetpack!r}", hint=f"releases: {', '.join(catalog.releases)}")
        chosen = [m for m in chosen if jetpack in m.jetpack]
        if not chosen:
            raise TargetError(f"no selected module runs JetPack {jetpack}")
    return sorted(chosen, key=module_cost_key)


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is asked for, whatever it plans: precisions, batch and budget (``--precision``, ``--batch``,
    ``--budget-ms``, ``--min-fps``). ``min_fps`` becomes a budget of ``batch * 1000 / min_fps`` ms (the tighter
    of the two when both are given)."""

    precisions: tuple[str, ...] | None = None  # None: all three for a model file (+ FP8/NVFP4 where the GPU has
    # them; INT8 on the DLA), the gate's candidates in a project
    batch: int | None = None  # None: 1 for a model file; in a project 1 and the input profile's largest
    budget_ms: float | None = None
    min_fps: float | None = None
    accelerator: str = "gpu"  # gpu, or dla: one DLA core of each module that has one

    def budget(self, batch: int) -> float | None:
        return _budget(self.budget_ms, self.min_fps, batch)


@dataclass(frozen=True)
class ModuleChoice:
    """The modules and power modes a model file is planned on (``--module``, ``--power-mode``, ``--jetpack``);
    in a project the fleet groups say them."""

    module: str = "all"  # module ids, comma-separated, or all
    power_mode: str | None = None  # None: every one with a known GPU clock
    jetpack: str | None = None  # only modules and power modes this release has


def plan_latency(model: Path, request: PlanRequest = PlanRequest(), modules: ModuleChoice = ModuleChoice(), *,
                 input_size: list[int] | None = None, fit: LatencyModel | None = None) -> LatencyPlan:
    """Predict ``model`` on every chosen module's power modes with a known clock, at each precision asked
    (default all three, and FP8/NVFP4 where the GPU has them; on the DLA INT8, FP16 where it has a peak) and
    batch (default 1),
    on the GPU or one DLA core (``request.accelerator``). The rows are ordered cheapest module first, then by
    clock."""
    batch = request.batch or 1
    bad = [p for p in request.precisions or () if p not in ALL_PRECISIONS]
    if bad:
        raise ConfigError(f"unknown precision {', '.join(bad)}", hint=f"precisions: {', '.join(ALL_PRECISIONS)}")
    if batch < 1:
        raise ConfigError(f"--batch {batch}: a batch is 1 or more images")
    chosen = _selected_modules(modules.module, modules.jetpack)
    _check_accelerator(request.accelerator, chosen)
    budget = request.budget(batch)
    fit = fit or load_latency_model()
    cost = _cost(model, batch, (input_size[0], input_size[-1]) if input_size else None)
    rows, skipped = _rows(cost, chosen, modules.power_mode, modules.jetpack, request.precisions, batch, budget, fit,
                          accelerator=request.accelerator)
    return _plan(model, batch, cost, rows, skipped, budget, fit, request.accelerator)


def _check_accelerator(accelerator: str, modules: Sequence[Module]) -> None:
    """A TargetError where ``accelerator`` is unknown, or the DLA is asked of modules none of which has one."""
    if accelerator not in CORES:
        raise ConfigError(f"unknown accelerator {accelerator!r}", hint=f"accelerators: {', '.join(CORES)}")
    if accelerator == "dla" and not any(m.dla_cores for m in modules):
        with_dla = sorted(m.id for m in load_catalog().modules.values() if m.dla_cores)
        raise TargetError(f"{', '.join(m.id for m in modules)}: no DLA core (only AGX Orin, Orin NX and Xavier "
                          "modules have one; Orin Nano and AGX Thor do not)",
                          hint=f"plan the GPU (--accelerator gpu), or a module with a DLA: {', '.join(with_dla)}")


def candidate_precisions(project: Project, request: PlanRequest = PlanRequest()) -> tuple[str, ...]:
    """The precisions a project's plan predicts: those asked, else the gate's candidates (``quantize.precisions``)."""
    return request.precisions or tuple(p for p in ALL_PRECISIONS if p in project.quantize.precisions)


def plan_groups(project: Project, onnx_path: Path, groups: Sequence[SelectedGroup],
                request: PlanRequest = PlanRequest(), *, fit: LatencyModel | None = None,
                engine_memory: Mapping[str, int] | None = None) -> LatencyPlan:
    """Each of ``groups`` on the project's export ``onnx_path``, one row per precision
    (:func:`candidate_precisions`), at the input profile's optimal size, at batch 1 and at the profile's
    largest batch (or ``request.batch``).

    A group's power mode is its ``power_mode``, else its module's fastest with a known clock (as the
    compile's budget stage assumes). The budget is the request's, else the group's own
    ``latency_budget_ms``/``min_fps``. Each row also carries ``end_to_end_ms``: the GPU compute time
    plus the input's upload, the outputs' download and the runtime's preprocessing (:func:`_host_ms`),
    and ``engine_memory``'s figure for its precision (the memory plan's estimate, from the caller).
    """
    precisions = candidate_precisions(project, request)
    _check_accelerator(request.accelerator, [g.target.module for g in groups])
    image = next((i for i in project.model.inputs if len(i.opt_shape) == 4), None)
    hw = (image.opt_shape[2], image.opt_shape[3]) if image else None
    batches = [request.batch] if request.batch else sorted({1, image.max_shape[0] if image else 1})
    fit = fit or load_latency_model()
    rows: list[LatencyRow] = []
    skipped: list[str] = []
    own = {g.name: g for g in project.fleet}
    for size in batches:
        cost = _cost(onnx_path, size, hw)
        io = _io_bytes(onnx_path, size, hw)
        for group in groups:
            fleet_group = own.get(group.name)
            budget = (request.budget(size) if request.budget_ms or request.min_fps else
                      _budget(fleet_group.latency_budget_ms, fleet_group.min_fps, size) if fleet_group else None)
            got, missed = _rows(cost, [group.target.module], group.power_mode or _fastest_mode(group),
                                group.target.release.jetpack, precisions, size, budget, fit,
                                host_ms=partial(_host_ms, io), accelerator=request.accelerator)
            rows += [replace(r, group=group.name, engine_memory_bytes=(engine_memory or {}).get(r.precision))
                     for r in got]
            skipped += [f"group {group.name}: {s}" for s in missed if f"group {group.name}: {s}" not in skipped]
    return _plan(onnx_path, batches[-1], cost, rows, skipped, request.budget(batches[-1]), fit, request.accelerator)


def _fastest_mode(group: SelectedGroup) -> str | None:
    modes = performance_modes(group.target.module, group.target.release.jetpack)
    return max(modes, key=lambda p: p.gpu_mhz).power_mode if modes else None


def _io_bytes(onnx_path: Path, batch: int, hw: tuple[int, int] | None) -> tuple[int, int]:
    """(bytes of every input, bytes of every output) at ``batch`` and ``hw``, as float32; an output whose
    shape inference cannot give counts nothing."""
    import math

    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in weights or not dims:
            continue
        dims[0].ClearField("dim_param")
        dims[0].dim_value = batch
        if len(dims) == 4 and hw is not None:
            for dim, length in zip(dims[2:], hw):
                dim.ClearField("dim_param")
                dim.dim_value = length
    try:
        graph = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # noqa: BLE001 (an estimate: without shapes the outputs count nothing)
        graph = model.graph

    def size(values: Sequence[onnx.ValueInfoProto]) -> int:
        total = 0
        for value in values:
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim]
            total += 4 * math.prod(dims) if dims and all(dims) else 0
        return total

    return size([v for v in graph.input if v.name not in weights]), size(graph.output)


def _host_ms(io: tuple[int, int], perf: ModulePerformance) -> float:
    """What the runtime adds to the GPU compute time, in ms, on a module whose CPU and GPU share one DRAM:
    the input copied to the engine's buffer and the outputs back (each copy a read and a write at the
    module's memory bandwidth), and the preprocessing (PREPROCESS_PASSES over the input, on the CPU)."""
    inputs, outputs = io
    bandwidth = perf.memory_bandwidth_gbps * 1e9
    copies = 2 * (inputs + outputs) / bandwidth
    preprocess = PREPROCESS_PASSES * 2 * inputs / (bandwidth * CPU_BANDWIDTH_SHARE)
    return (copies + preprocess) * 1e3


def _budget(budget_ms: float | None, min_fps: float | None, batch: int) -> float | None:
    budgets = [b for b in (budget_ms, batch * 1000.0 / min_fps if min_fps else None) if b is not None]
    return min(budgets) if budgets else None


def _plan(model: Path, batch: int, cost: GraphCost, rows: list[LatencyRow], skipped: list[str],
          budget: float | None, fit: LatencyModel, accelerator: str) -> LatencyPlan:
    catalog = load_catalog()
    fitted_archs = {catalog.modules[m].gpu_arch for m in fit.modules if m in catalog.modules}
    rows = [replace(r, extrapolated=catalog.modules[r.module].gpu_arch not in fitted_archs) for r in rows]
    precisions = [p for p in ALL_PRECISIONS if any(r.precision == p for r in rows)]
    cheapest = {p: next((r for r in rows if r.precision == p and r.meets_budget), None) for p in precisions} \
        if budget is not None else {}
    return LatencyPlan(model, cost.input_hw, batch, cost.flops / 1e9, len(cost.layers), cost.unknown_shapes,
                       tuple(rows), budget, cheapest, tuple(skipped), fit, accelerator)


def _default_precisions(perf: ModulePerformance, accelerator: str) -> tuple[str, ...]:
    """What a plan predicts where no precision is asked: on the DLA INT8, and FP16 where the profile gives the
    DLA an FP16 peak; on the GPU all three, and FP8 and NVFP4 where it has them (Blackwell)."""
    if accelerator == "dla":
        return ("fp16", "int8") if perf.dla_fp16_tflops else ("int8",)
    return PRECISIONS + tuple(p for p in NARROW_PRECISIONS if runs(perf, p))


def _rows(cost: GraphCost, modules: list[Module], power_mode: str | None, jetpack: str | None,
          precisions: tuple[str, ...] | None, batch: int, budget: float | None, fit: LatencyModel,
          host_ms: Callable[[ModulePerformance], float] | None = None,
          accelerator: str = "gpu") -> tuple[list[LatencyRow], list[str]]:
    rows: list[LatencyRow] = []
    skipped: list[str] = []
    for mod in modules:
        modes = [p for p in performance_modes(mod, jetpack) if power_mode is None or p.power_mode == power_mode]
        if accelerator == "dla" and not mod.dla_cores:
            skipped.append(f"{mod.id}: no DLA core (dla_cores = 0 in profiles/modules/{mod.id}.toml)")
            continue
        if not modes:
            what = f"power mode {power_mode}" if power_mode else "power mode"
            skipped.append(f"{mod.id}: no {what} with a known GPU clock in profiles/modules/{mod.id}.toml")
            continue
        for perf in sorted(modes, key=lambda p: p.gpu_mhz):
            for precision in precisions or _default_precisions(perf, accelerator):
                try:
                    core = predict_core(cost, perf, accelerator, precision, fit)
                except TargetError as exc:
                    where = f"{mod.id} {perf.power_mode} " + ("dla " if accelerator == "dla" else "")
                    skipped.append(f"{where}{precision}: {exc.message.removeprefix(perf.power_mode + ': ')}")
                    continue
                ms = core.latency_ms
                rows.append(LatencyRow(
                    mod.id, perf.power_mode, _jetpack_text(perf, jetpack), precision, batch, round(ms, 6),
                    round(core.low_ms, 6), round(core.high_ms, 6), round(batch * 1000.0 / ms, 2),
                    perf.gpu_mhz, None if budget is None else ms <= budget,
                    end_to_end_ms=round(ms + host_ms(perf), 6) if host_ms else None, accelerator=accelerator,
                    dla_mhz=perf.dla_mhz if accelerator == "dla" else None,
                    fallback_ops=core.fallback_ops if accelerator == "dla" else None,
                ))
    return rows, skipped
