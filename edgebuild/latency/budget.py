"""A fleet group's latency budget against the predicted latency of each candidate precision.

The prediction is ``edgebuild.latency.model``'s (a roofline per fused layer with factors fitted
to published figures), at batch 1 on the group's module, JetPack and power mode (the fastest mode
with a known clock where the group names none). Each candidate precision gets a verdict:

- ``meets``: its p50 is within the budget;
- ``in band``: its p50 is over the budget, but the low end of its error band is not: it may
  still meet it on a device (a warning, not a refusal);
- ``misses``: even the low end of its band is over the budget.

A group is refused when its fastest candidate misses, before any engine is built
(:class:`edgebuild.errors.LatencyBudgetError`), with the table and what would meet the budget:
another precision, a smaller input, a faster power mode, the cheapest module that would.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import EdgebuildError, LatencyBudgetError, TargetError
from edgebuild.jsontypes import JsonObject
from edgebuild.latency.graph import GraphCost, fixed_graph_cost, graph_cost_from_file
from edgebuild.latency.model import (
    ALL_PRECISIONS,
    LatencyModel,
    layer_seconds,
    load_latency_model,
    performance_modes,
    runs,
)
from edgebuild.targets.profiles import Module, ModulePerformance, SelectedGroup, load_catalog

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.project.schema import FleetGroup

__all__ = ["PredictedLatency", "predict_candidates", "predict_groups"]


def budget_ms(latency_budget_ms: float | None, min_fps: float | None) -> float | None:
    """The tighter of ``latency_budget_ms`` and ``1000 / min_fps`` (batch 1), or None when neither is set."""
    budgets = [b for b in (latency_budget_ms, 1000.0 / min_fps if min_fps else None) if b is not None]
    return min(budgets) if budgets else None


def module_cost_key(module: Module) -> tuple[int, int, int]:
    """"Cheapest" order: edgebuild has no price list; a smaller GPU, then less memory, is the cheaper module."""
    return module.tensor_cores, module.cuda_cores, module.memory_gb


@dataclass(frozen=True)
class CandidateLatency:
    """One candidate precision's predicted GPU compute time at batch 1, and its budget verdict."""

    precision: str
    latency_ms: float
    low_ms: float
    high_ms: float
    verdict: str  # "meets", "in band", "misses", or "no budget"


@dataclass(frozen=True)
class GroupLatency:
    """A group's (and one model's) predicted latency per candidate precision against its budget."""

    group: str
    model: str
    module: str
    power_mode: str
    power_mode_assumed: bool  # the group names no power_mode: its fastest mode with a known clock
    jetpack: str
    budget_ms: float | None
    candidates: tuple[CandidateLatency, ...]
    source: str  # what produced the numbers (never a measurement)
    would_meet: str = ""  # the cheapest module and power mode whose fastest candidate meets the budget
    accelerator: str = "gpu"  # where the group places the model: gpu, or a DLA core (dla0, dla1, dla: either)

    @property
    def fastest(self) -> CandidateLatency:
        return min(self.candidates, key=lambda c: c.latency_ms)

    @property
    def refused(self) -> bool:
        """Every candidate misses the budget beyond its error band."""
        return self.budget_ms is not None and all(c.verdict == "misses" for c in self.candidates)

    @property
    def warning(self) -> str | None:
        """Over the budget at p50 but inside the band: said, not refused."""
        if self.budget_ms is None or self.refused or any(c.verdict == "meets" for c in self.candidates):
            return None
        return (f"{self._who()}: no candidate's predicted p50 meets the {self.budget_ms:g} ms budget "
                f"(fastest: {self.fastest.precision} {self.fastest.latency_ms:.2f} ms, band "
                f"{self.fastest.low_ms:.2f}-{self.fastest.high_ms:.2f} ms); inside the error band, so not refused: "
                "measure it on a device (edgebuild bench)")

    @property
    def over_budget(self) -> tuple[str, ...]:
        """The candidate precisions whose p50 is over the budget (a selection prefers the others)."""
        return tuple(c.precision for c in self.candidates if c.verdict in ("in band", "misses"))

    def _who(self) -> str:
        return self.group + (f" ({self.model})" if self.model else "")

    def where(self) -> str:
        mode = self.power_mode + (" (assumed: the group names no power_mode)" if self.power_mode_assumed else "")
        return f"{self.module} {mode}, JetPack {self.jetpack}"

    def table(self) -> str:
        rows = [("precision", "p50 ms", "band ms", "fps", "budget")]
        for c in self.candidates:
            rows.append((c.precision, f"{c.latency_ms:.2f}", f"{c.low_ms:.2f}-{c.high_ms:.2f}",
                         f"{1000.0 / c.latency_ms:.0f}", c.verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        budget = f"budget {self.budget_ms:g} ms" if self.budget_ms is not None else "no budget"
        core = ("GPU compute time" if self.accelerator == "gpu" else
                f"time on a DLA core ({self.accelerator}; its fallback layers on the GPU)")
        lines.append(f"predicted p50 {core} at batch 1 on {self.where()}; {budget}; {self.source}")
        return "\n".join(lines)

    def refusal(self) -> LatencyBudgetError:
        fastest = self.fastest
        hints = [f"a lower precision in quantize.precisions (the fastest candidate here, {fastest.precision}, "
                 f"needs {fastest.latency_ms:.2f} ms)" if fastest.precision != "int8" else
                 "INT8 is already the fastest candidate"]
        share = (self.budget_ms or 0) / fastest.low_ms
        if share >= 0.1:  # below that the per-layer overhead, not the pixels, is most of the time
            hints.append(f"a smaller input (model.inputs opt_shape): the time grows about with the pixels, so "
                         f"about x{share:.2f} of them")
        if self.power_mode_assumed:
            hints.append("the power mode assumed is already the module's fastest")
        else:
            hints.append("a faster power_mode (MAXN / MAXN_SUPER)")
        hints.append(f"another module: {self.would_meet}" if self.would_meet else
                     "no module edgebuild knows meets it at p50")
        return LatencyBudgetError(
            f"{self._who()}: every candidate's predicted latency misses the {self.budget_ms:g} ms budget even at "
            f"the low end of its error band; no engine is built for it\n{self.table()}",
            hint="; ".join(hints) + "; or a looser latency_budget_ms / min_fps (docs/latency-plan.md#budgets)")

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["candidates"] = [asdict(c) for c in self.candidates]
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> GroupLatency:
        fields = dict(data)
        fields["candidates"] = tuple(CandidateLatency(**c) for c in data["candidates"])
        return cls(**fields)


@dataclass(frozen=True)
class PredictedLatency:
    """A compile's predicted latency per selected group (and model) and candidate precision; what could not be
    predicted, and why. The budget stage's record (one group's), kept with the compile's records for the report."""

    groups: tuple[GroupLatency, ...]
    notes: tuple[str, ...] = ()

    def refusals(self) -> dict[str, LatencyBudgetError]:
        """Group -> the refusal of its first model whose every candidate misses the budget."""
        found: dict[str, LatencyBudgetError] = {}
        for g in self.groups:
            if g.refused and g.group not in found:
                found[g.group] = g.refusal()
        return found

    def warnings(self) -> list[str]:
        return [w for g in self.groups if (w := g.warning)]

    @classmethod
    def merged(cls, parts: Iterable[PredictedLatency]) -> PredictedLatency:
        """One prediction of several (the budget stage's, one per group), each note once."""
        parts = list(parts)
        return cls(tuple(g for p in parts for g in p.groups), tuple(dict.fromkeys(n for p in parts for n in p.notes)))

    def for_group(self, group: str) -> tuple[GroupLatency, ...]:
        return tuple(g for g in self.groups if g.group == group)

    def as_dict(self) -> JsonObject:
        return {"groups": [g.as_dict() for g in self.groups], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: JsonObject) -> PredictedLatency:
        return cls(tuple(GroupLatency.from_dict(g) for g in data.get("groups", [])), tuple(data.get("notes", [])))


def predict_groups(project: Project, onnx_path: Path, groups: Sequence[SelectedGroup], fleet: Sequence[FleetGroup],
                   *, model: str = "", fit: LatencyModel | None = None) -> PredictedLatency:
    """Each of ``groups`` on ``onnx_path`` at batch 1 and the input profile's optimal size, per candidate
    precision (``quantize.precisions``), against its budget in ``fleet`` (the ``[[fleet]]`` entries).

    A group the latency model cannot predict (no known clock for its power mode, a graph without fixed
    shapes) gets a note instead; its budget is then not checked, which the note says."""
    image = next((i for i in project.model.inputs if len(i.opt_shape) == 4), None)
    hw = (image.opt_shape[2], image.opt_shape[3]) if image else None
    precisions = tuple(p for p in ALL_PRECISIONS if p in project.quantize.precisions)
    budgets = {g.name: budget_ms(g.latency_budget_ms, g.min_fps) for g in fleet}
    notes: list[str] = []
    try:
        fit = fit or load_latency_model()
        cost = fixed_graph_cost(onnx_path, batch=1, input_hw=hw)
    except EdgebuildError as exc:
        checked = [g.name for g in groups if budgets.get(g.name) is not None]
        return PredictedLatency((), (f"no latency prediction: {exc.message.splitlines()[0]}"
                                     + (f"; the latency budget of {', '.join(checked)} is NOT checked" if checked
                                        else ""),))
    catalog = list(load_catalog().modules.values())
    found = []
    for group in groups:
        budget = budgets.get(group.name)
        predicted = predict_group(cost, group=group.name, module=group.target.module,
                                  jetpack=group.target.release.jetpack, power_mode=group.power_mode,
                                  precisions=precisions, budget=budget, fit=fit, catalog=catalog, model=model,
                                  accelerator=group.accelerator)
        if predicted is None and group.use_dla:
            notes.append(f"{group.name}: no latency prediction on the DLA at {', '.join(precisions)}: the latency "
                         "model predicts the DLA at INT8 only (no published DLA FP16 figure) and with a DLA clock "
                         f"in profiles/modules/{group.target.module.id}.toml"
                         + ("; its latency budget is NOT checked" if budget is not None else ""))
        elif predicted is None:
            notes.append(f"{group.name}: no latency prediction: power mode {group.power_mode or 'any'} of "
                         f"{group.target.module.id} has no known GPU clock (profiles/modules/)"
                         + ("; its latency budget is NOT checked" if budget is not None else ""))
        else:
            found.append(predicted)
    return PredictedLatency(tuple(found), tuple(notes))


def _verdict(ms: float, low: float, budget: float | None) -> str:
    if budget is None:
        return "no budget"
    return "meets" if ms <= budget else "in band" if low <= budget else "misses"


def _candidates(cost: GraphCost, perf: ModulePerformance, precisions: Iterable[str], fit: LatencyModel,
                budget: float | None, core: str = "gpu") -> tuple[CandidateLatency, ...]:
    """The candidates ``core`` runs ("gpu", or "dla": one DLA core, its fallback layers on the GPU), predicted
    there (``edgebuild.latency.cores``); a precision the core has no path for is left out (on the GPU: no INT8,
    FP8 or NVFP4 path TensorRT uses, the candidate would run in float; on the DLA: FP32, or FP16 unpredicted)."""
    from edgebuild.latency.cores import predict_core

    found = []
    for precision in precisions:
        try:
            got = predict_core(cost, perf, core, precision, fit)
        except TargetError:
            continue
        found.append(CandidateLatency(precision, round(got.latency_ms, 4), round(got.low_ms, 4),
                                      round(got.high_ms, 4), _verdict(got.latency_ms, got.low_ms, budget)))
    return tuple(found)


def _cheapest_meeting(cost: GraphCost, modules: Iterable[Module], precisions: Iterable[str], fit: LatencyModel,
                      budget: float) -> str:
    for module in sorted(modules, key=module_cost_key):
        for perf in sorted(performance_modes(module), key=lambda p: p.gpu_mhz):
            meeting = [c for c in _candidates(cost, perf, precisions, fit, budget) if c.verdict == "meets"]
            if meeting:
                best = min(meeting, key=lambda c: c.latency_ms)
                return f"{module.id} {perf.power_mode} at {best.precision} (p50 {best.latency_ms:.2f} ms)"
    return ""


def predict_group(cost: GraphCost, *, group: str, module: Module, jetpack: str, power_mode: str | None,
                  precisions: Iterable[str], budget: float | None, fit: LatencyModel,
                  catalog: Iterable[Module] = (), model: str = "", accelerator: str = "gpu") -> GroupLatency | None:
    """The group's candidates at batch 1 (``cost``'s) on its module, on the GPU or where ``accelerator`` places
    the model (a DLA core: ``edgebuild.latency.cores``); None when its power mode has no known clock, or the
    DLA no prediction at any of ``precisions``.

    ``catalog``: the modules to name the cheapest one meeting a missed budget from (GPU placements)."""
    precisions = tuple(precisions)
    perf = performance_for(module, jetpack, power_mode)
    if perf is None:
        return None
    on_dla = accelerator != "gpu"
    candidates = _candidates(cost, perf, precisions, fit, budget, "dla" if on_dla else "gpu")
    if not candidates:
        return None
    source = _source(fit)
    found = GroupLatency(group, model, module.id, perf.power_mode, power_mode is None, jetpack, budget, candidates,
                         source, accelerator=accelerator)
    if budget is not None and not on_dla and not any(c.verdict == "meets" for c in candidates):
        from dataclasses import replace

        found = replace(found, would_meet=_cheapest_meeting(cost, catalog, precisions, fit, budget))
    return found


def _source(fit: LatencyModel) -> str:
    """What produced a prediction, in words: never a measurement."""
    published = getattr(fit, "published", 0)
    figures = f"{published} published figures" if published else ", ".join(fit.fitted_on[:1]) or "published figures"
    measured = getattr(fit, "measured", 0)
    own = f" and {measured} of this project's measurements (plan --calibrate)" if measured else ""
    return f"latency model fitted to {figures} of TensorRT latency{own}, not a measurement"


def performance_for(module: Module, jetpack: str, power_mode: str | None) -> ModulePerformance | None:
    """``power_mode`` of the module on ``jetpack``, else its fastest with a known clock; None when unknown."""
    modes = [p for p in performance_modes(module, jetpack) if power_mode is None or p.power_mode == power_mode]
    return max(modes, key=lambda p: p.gpu_mhz) if modes else None


def _candidate_ms(cost: GraphCost, perf: ModulePerformance, precision: str, kept: Iterable[str],
                  fit: LatencyModel) -> float | None:
    """A gate candidate's predicted ms: "int8-mixed" runs its layers kept in float in FP16 and the rest in INT8;
    None where the GPU has no INT8 path for an INT8 candidate."""
    import numpy as np
    base = precision.split("-")[0]  # "int8-mixed": INT8 with some layers kept in float
    if base not in ALL_PRECISIONS or not runs(perf, base):
        return None
    times = layer_seconds(cost, perf, base, fit)
    kept = set(kept)
    if base == "int8" and kept:
        fp16 = layer_seconds(cost, perf, "fp16", fit)
        times = np.where([layer.name in kept for layer in cost.layers], fp16, times)
    return float(sum(times) * 1e3)


def predict_candidates(onnx_path: Path, input_hw: tuple[int, int] | None,
                       targets: Iterable[tuple[Module, str, str | None]],
                       candidates: Iterable[tuple[str, Iterable[str]]],
                       fit: LatencyModel | None = None) -> dict[str, float]:
    """Each gate candidate (precision, layers kept in float) predicted at batch 1 on every target (module,
    JetPack, power mode or None for its fastest): its time on the slowest. A candidate some target cannot
    predict is left out; nothing at all when the graph or the latency model cannot be read."""

    targets = list(targets)
    try:
        fit = fit or load_latency_model()
        cost = graph_cost_from_file(onnx_path, batch=1, input_hw=input_hw)
    except EdgebuildError:
        return {}
    perfs = [performance_for(module, jetpack, mode) for module, jetpack, mode in targets]
    if not perfs or cost.dynamic_inputs or any(p is None for p in perfs):
        return {}
    found = {}
    for precision, kept in candidates:
        kept = tuple(kept)
        times = [_candidate_ms(cost, perf, precision, kept, fit) for perf in perfs if perf is not None]
        if all(t is not None for t in times):
            found[precision] = max(t for t in times if t is not None)
    return found
