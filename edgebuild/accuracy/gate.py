"""The accuracy gate: every precision candidate measured against the FP32 reference.

retention = candidate metric / FP32 metric, on the same backend and the same images; a
candidate passes at retention >= accuracy.min_retention. When plain INT8 fails, the layers are
ranked by the quantization error of their activation inputs (per-channel SQNR in one run of the
INT8 graph; weights are per-channel and not ranked), the worst are kept in floating point one
more at a time and re-evaluated, until the gate passes or quantize.max_kept_layers is reached.

Measurements are kept apart from the decision. Each measurement (a candidate's metric and
latency, the sensitivity ranking) is stored under ``build/gate/measured/`` by a key of what it
depends on (model, data, calibration settings, the candidate itself, the backend, tools), never
on ``min_retention``, ``select`` or ``precisions``. Changing only those re-decides from the
stored measurements; a measurement the new decision needs and nobody took yet is taken then.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.accuracy.policy import AccuracyPolicy
from edgebuild.content import atomic_output_dir, digest, tool_versions
from edgebuild.errors import AccuracyGateError
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import HUB_SOURCE
from edgebuild.runtime.files import atomic_write_text

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.sources.export import ExportRecord

__all__ = ["GateResult", "PRECISION_ORDER", "decision_settings", "gate_dir", "measurement_key_parts", "require_pass",
           "run_gate", "tensorrt_rejections", "verdict"]

STAGE_VERSION = "gate/3"
RECORD_FILE = "gate.json"
MEASURED_DIR = "measured"
#: lowest precision first: the order "lowest-precision" selection walks
PRECISION_ORDER = ("int8", "int8-mixed", "fp16", "fp32")

Report = Callable[[str], None]


@dataclass(frozen=True)
class Measurement:
    """One candidate measured: what it scored and how fast it ran, with no verdict attached."""

    precision: str
    onnx: str  # path inside the gate folder
    metric: str
    value: float
    images: int
    backend: str
    latency_ms: float
    kept_fp32: list[str]
    note: str
    graph: str  # edgebuild.accuracy.quantize.graph_digest of the candidate
    seconds: float


@dataclass(frozen=True)
class CandidateResult:
    precision: str
    onnx: str  # path inside the gate folder
    metric: str
    value: float
    retention: float
    passed: bool
    selectable: bool
    backend: str
    latency_ms: float
    kept_fp32: list[str]
    note: str
    rejected_by: list[str]  # targets whose TensorRT parser would not take this graph (then not selectable)


@dataclass(frozen=True)
class GateResult:
    folder: Path
    policy: AccuracyPolicy  # the pass rule every later judgement (device acceptance, reports) reads
    reference_value: float
    backend: str
    images: int
    candidates: list[CandidateResult]
    selected: str | None
    selection_rule: str
    sensitivity: list[dict[str, Any]]
    next_steps: list[str]
    notes: list[str]
    measured: int  # measurements taken in this run (the rest were stored)
    stored: int  # measurements reused from earlier runs
    seconds: float

    @property
    def metric(self) -> str:
        return self.policy.metric

    @property
    def threshold(self) -> float:
        return self.policy.min_retention

    @property
    def passed(self) -> bool:
        return self.selected is not None

    def candidate(self, precision: str) -> CandidateResult:
        return next(c for c in self.candidates if c.precision == precision)

    @property
    def files(self) -> list[Path]:
        """The decision and every candidate it names (what the gate stage's record vouches for)."""
        return [self.folder / RECORD_FILE, *sorted({self.folder / c.onnx for c in self.candidates})]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["folder"] = str(self.folder)
        data["policy"] = self.policy.as_dict()
        data["stage"] = STAGE_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path) -> GateResult:
        data = {k: v for k, v in data.items() if k not in ("stage", "reused")}
        data["folder"] = folder  # the project may have moved since
        data["candidates"] = [CandidateResult(**c) for c in data["candidates"]]
        data["policy"] = AccuracyPolicy.from_dict(data["policy"])
        return cls(**data)

    @classmethod
    def load(cls, folder: Path) -> GateResult:
        return cls.from_dict(json.loads((folder / RECORD_FILE).read_text()), folder)


def gate_dir(project: Project) -> Path:
    return BuildLayout.of(project).gate


def measurement_key_parts(project: Project, export: ExportRecord) -> dict[str, str]:
    """What every measurement depends on; the gate's thresholds and selection are not in it."""
    from edgebuild.datasets.project_data import calibration_digest, validation_digest

    settings = project.quantize.model_dump(exclude={"precisions", "max_kept_layers"})
    return {
        "measurement": "gate-measurement/3",
        "model": export.content_sha256,
        "calibration": calibration_digest(project),
        "validation": validation_digest(project),
        "task": digest(project.task.model_dump()),
        "metric": project.metric,
        "inputs": digest([s.model_dump() for s in project.model.inputs]),  # latency shape, host-check profiles
        "quantize": digest(settings),
        "backend": project.accuracy.backend,
        "tools": digest(tool_versions("onnxruntime", "onnx", "faster-coco-eval",
                                      *(["tensorrt"] if project.accuracy.backend == "tensorrt" else []))),
    }


def decision_settings(project: Project) -> dict[str, Any]:
    """The settings only the decision reads: changing them re-decides from stored measurements."""
    return {**AccuracyPolicy.of(project).as_dict(), "select": project.accuracy.select,
            "precisions": sorted(project.quantize.precisions), "max_kept_layers": project.quantize.max_kept_layers}


def _latency_ms(runner: Any, inputs: dict, budget_s: float = 2.0, runs: int = 30) -> float:
    """Median wall time of one inference at the opt shape, after warm-up (indicative only)."""
    for _ in range(3):
        runner.run(inputs)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < runs and (len(times) < 5 or time.perf_counter() < deadline):
        started = time.perf_counter()
        runner.run(inputs)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


class _SameGraph(Exception):
    """A candidate whose graph is one already measured (raised inside its staging folder, so it is discarded)."""

    def __init__(self, of: Measurement) -> None:
        super().__init__(of.precision)
        self.of = of


class _Measurements:
    """The stored measurements of one exported model, taken on demand.

    Everything lives under ``build/gate/measured/<model sha256[:12]>/``: one folder per measured
    candidate (its ONNX and ``measurement.json``), the sensitivity ranking, the calibration cache
    and the pre-processed model they are made from. A folder is renamed into place only when its
    measurement is complete, so an interrupted gate never leaves half a measurement.
    """

    def __init__(self, project: Project, export: ExportRecord, *, force: bool, progress: bool, report: Report,
                 trt: Any = None, memory: Any = None) -> None:
        self.project, self.export, self.force = project, export, force
        self.progress, self.report, self.trt, self.memory = progress, report, trt, memory
        self.parts = measurement_key_parts(project, export)
        self.gate = gate_dir(project)
        self.root = self.gate / MEASURED_DIR / export.content_sha256[:12]
        self.calibration_cache = self.root / f"calibration-{digest(self.parts)[:12]}.json"
        if force:
            self.calibration_cache.unlink(missing_ok=True)
        self.measured = 0
        self.stored = 0
        self._data: Any = None
        self._latency_inputs: Any = None
        self._plan: Any = None
        self.graphs: dict[str, Measurement] = {}  # graph digest -> its measurement, this run

    def _key(self, spec: dict[str, Any]) -> str:
        return digest({**self.parts, "spec": spec})[:16]

    def _stored(self, path: Path, what: str) -> Any:
        """A stored measurement file's content, or None (and why, said once) when it must be taken."""
        if self.force or not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            self.report(f"gate: stored {what} unreadable ({exc}); measuring again")
            return None

    @property
    def data(self) -> Any:
        if self._data is None:
            from edgebuild.accuracy.evaluate import ValidationSet

            self._data = ValidationSet(self.project)
        return self._data

    def fp32_path(self) -> Path:
        """The exported model (and its external data) under the measurement root."""
        folder = self.root / "fp32-source"
        if not (folder / self.export.onnx_path.name).is_file():
            with atomic_output_dir(folder) as staging:
                for name in self.export.files:
                    shutil.copyfile(self.export.onnx_path.with_name(name), staging / name)
        return folder / self.export.onnx_path.name

    def prepared_path(self) -> Path:
        from edgebuild.accuracy.quantize import prepare_for_quantization

        out = self.root / "fp32-prepared.onnx"
        if not out.is_file():
            staging = out.with_name(f".tmp-{out.name}")  # keeps the .onnx suffix the pre-processor wants
            prepared = prepare_for_quantization(self.fp32_path(), staging)
            if prepared != staging.resolve():  # pre-processing failed: quantize the plain model, kept as such
                shutil.copyfile(prepared, staging)
            staging.replace(out)
        return out

    def candidate(self, precision: str, kept: tuple[str, ...] = ()) -> Measurement | None:
        """The measurement of one candidate, stored or taken now; None when its graph is one
        already measured (keeping those layers in float changed nothing)."""
        name = f"int8-mixed-{len(kept)}" if kept else precision
        folder = self.root / f"{name}-{self._key({'precision': precision, 'kept': sorted(kept)})}"
        stored = self._stored(folder / "measurement.json", f"{name} measurement")
        if stored is not None and (folder / "model.onnx").is_file():
            measurement = Measurement(**stored)
            if measurement.graph in self.graphs:
                return None
            self.stored += 1
            self.graphs[measurement.graph] = measurement
            self._say(measurement, "stored")
            return measurement
        started = time.perf_counter()
        try:
            return self._take(precision, kept, folder, started)
        except _SameGraph as same:
            self.report(f"gate: keeping {', '.join(kept)} in float gives the graph of {same.of.precision} "
                        f"{same.of.kept_fp32 or ''}: not measured again")
            return None

    def _take(self, precision: str, kept: tuple[str, ...], folder: Path, started: float) -> Measurement:
        from edgebuild.accuracy.quantize import graph_digest

        with atomic_output_dir(folder) as staging:  # an exception leaves nothing behind
            built = self._build(precision, kept, staging / "model.onnx")
            graph = graph_digest(built.onnx_path)
            if graph in self.graphs:
                raise _SameGraph(self.graphs[graph])
            runner = self._runner(built, staging)
            from edgebuild.accuracy.evaluate import evaluate

            if not self.progress:  # no bar: one line when the long step starts
                self.report(f"gate: measuring {built.precision} on {len(self.data)} validation images "
                            f"[{runner.backend}]")
            result = evaluate(self.project, runner, data=self.data, progress=self.progress,
                              desc=f"evaluate {built.precision}")
            measurement = Measurement(
                precision=built.precision, onnx=str((folder / "model.onnx").relative_to(self.gate)),
                metric=result.metric, value=round(result.value, 6), images=result.images, backend=runner.backend,
                latency_ms=_latency_ms(runner, self._latency()), kept_fp32=list(built.kept_fp32),
                note=built.note, graph=graph, seconds=round(time.perf_counter() - started, 3))
            atomic_write_text(staging / "measurement.json", json.dumps(asdict(measurement), indent=2))
        self.measured += 1
        self.graphs[graph] = measurement
        self._say(measurement, "measured")
        return measurement

    def _say(self, m: Measurement, how: str) -> None:
        self.report(f"gate: {m.precision:<10} {m.metric} {m.value:.4f}  [{m.backend}, {how}]")

    def _latency(self) -> dict:
        if self._latency_inputs is None:
            from edgebuild.sources.model import example_inputs

            self._latency_inputs = example_inputs(self.project, "opt_shape")
        return self._latency_inputs

    @property
    def plan(self) -> Any:
        """Which nodes TensorRT would run in INT8 (``edgebuild.accuracy.quantize.quantization_plan``)."""
        if self._plan is None:
            from edgebuild.accuracy.quantize import QuantizationPlan, quantization_plan

            path = self.root / f"plan-{self._key({'plan': 1})}.json"
            stored = self._stored(path, "INT8 placement")
            if stored is not None:
                self._plan = QuantizationPlan(**{k: tuple(v) for k, v in stored.items()})
            else:
                self._plan = quantization_plan(self.project, self.prepared_path())
                atomic_write_text(path, json.dumps(asdict(self._plan)))
        return self._plan

    def rejections(self, measurement: Measurement, groups: tuple[Any, ...]) -> list[str]:
        """``tensorrt_rejections`` of a measured candidate, kept beside it per set of targets and parser tables."""
        if not groups:
            return []
        from edgebuild.targets.preflight import rules_digest

        targets = digest([sorted(g.target.id for g in groups), rules_digest(), measurement.graph])
        path = (self.gate / measurement.onnx).parent / f"rejections-{targets[:16]}.json"
        stored = self._stored(path, "TensorRT check")
        if stored is not None:
            return list(stored)
        found = tensorrt_rejections(self.gate / measurement.onnx, groups)
        atomic_write_text(path, json.dumps(found))
        return found

    def _build(self, precision: str, kept: tuple[str, ...], out: Path) -> Any:
        from edgebuild.accuracy.quantize import Candidate, fp16_candidate, int8_candidate

        if precision == "fp32":
            for name in self.export.files:  # external data travels with the model
                target = out if name == self.export.onnx_path.name else out.with_name(name)
                shutil.copyfile(self.export.onnx_path.with_name(name), target)
            return Candidate("fp32", out, note="the exported model (reference)")
        if precision == "fp16":
            return fp16_candidate(self.fp32_path(), out)
        if not self.calibration_cache.is_file():
            self.report(f"gate: calibrating INT8 ({self.project.quantize.calibration_method})")
        return int8_candidate(self.project, self.prepared_path(), out, self.calibration_cache, self.plan,
                              exclude=kept, progress=self.progress)

    def _runner(self, candidate: Any, folder: Path) -> Any:
        """ONNX Runtime on the CPU, or an engine built from the candidate with this host's TensorRT."""
        if self.project.accuracy.backend == "onnxruntime":
            from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

            return OnnxRuntimeRunner(candidate.onnx_path)
        from edgebuild.runtime.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine

        plan = folder / "model.plan"
        self.report(f"gate: building a host-check TensorRT engine for {candidate.precision}")
        build_engine(BuildSettings(
            onnx_path=candidate.onnx_path, plan_path=plan,
            precision="int8" if candidate.precision.startswith("int8") else candidate.precision,
            profiles={s.name: (s.min_shape, s.opt_shape, s.max_shape) for s in self.project.model.inputs},
            workspace_bytes=1 << 30, timing_cache_path=self.root / "host-check-timing.cache",
            report=self.report), trt=self.trt)
        return TensorRTRunner(plan, trt=self.trt, memory=self.memory)

    def ranking(self, int8: Measurement) -> list[dict[str, Any]]:
        """The INT8 candidate's layers by the quantization error of their inputs, worst first
        (``edgebuild.accuracy.quantize.layer_errors`` on ``quantize.sensitivity_images`` validation images)."""
        settings = self.project.quantize
        path = self.root / f"sensitivity-{self._key({'sensitivity_images': settings.sensitivity_images})}.json"
        stored = self._stored(path, "layer ranking")
        if stored is not None:
            self.stored += 1
            self.report(f"gate: layer ranking of {len(stored)} layers (stored)")
            return stored
        from edgebuild.accuracy.quantize import layer_errors

        batches, seen = [], 0
        for chunk, batch, _ in self.data.batches():
            batches.append(batch)
            seen += len(chunk)
            if seen >= settings.sensitivity_images:
                break
        started = time.perf_counter()
        ranking = layer_errors(self.gate / int8.onnx, batches, self.project.model.inputs[0].name)
        self.report(f"gate: INT8 fails; ranked {len(ranking)} layers by the quantization error of their inputs on "
                    f"{seen} images in {time.perf_counter() - started:.1f} s")
        atomic_write_text(path, json.dumps(ranking, indent=1))
        self.measured += 1
        return ranking

    def prune_other_models(self) -> None:
        """Measurements of models that are no longer the export are never read again."""
        for folder in (self.gate / MEASURED_DIR).iterdir():
            if folder.is_dir() and folder != self.root:
                shutil.rmtree(folder, ignore_errors=True)


def run_gate(project: Project, export: ExportRecord, *, groups: tuple[Any, ...] = (), force: bool = False,
             progress: bool = True, report: Report = lambda _: None, trt: Any = None, memory: Any = None) -> GateResult:
    """Measure what the decision needs (stored measurements are reused), decide, write ``gate.json``.

    ``groups`` are the fleet groups the candidates are for: a candidate one of their TensorRT
    parsers would reject (preflight's type and attribute rules) is never selected. ``force``
    measures everything again. With ``accuracy.backend = "tensorrt"`` every candidate is built
    into a host-check engine with this host's TensorRT (``trt``/``memory`` are injectable for
    tests) and measured with it.
    """
    if project.accuracy.backend == "tensorrt" and trt is None:
        from edgebuild.runtime.backends.tensorrt import import_tensorrt

        import_tensorrt()  # fail before anything is measured when TensorRT is missing
    started = time.perf_counter()
    store = _Measurements(project, export, force=force, progress=progress, report=report, trt=trt, memory=memory)
    policy = AccuracyPolicy.of(project)
    if policy.gated and project.model.source and HUB_SOURCE.match(project.model.source) and not project.model.weights:
        raise AccuracyGateError(
            f"{project.source}: model.source {project.model.source!r} has no model.weights: its weights are random, "
            "so no accuracy of it means anything",
            hint="set model.weights to its state_dict (torch.save(model.state_dict(), path)); to try the later "
                 "stages with an untrained model: `edgebuild compile --no-gate`")
    fp32 = store.candidate("fp32")
    if fp32.value <= 0 and policy.gated:
        raise AccuracyGateError(
            f"{project.source}: the FP32 model scores {fp32.metric} {fp32.value:.4f} on the validation set "
            f"[{fp32.backend}], so retention cannot be measured",
            hint="check the weights, task.preprocess, task.postprocess and that task.classes is in the model's "
                 "output order; to try the later stages with an untrained model: `edgebuild compile --no-gate`")
    measured, notes = [fp32], []
    wanted = project.quantize.precisions
    if "fp16" in wanted:
        measured.append(store.candidate("fp16"))
    sensitivity: list[dict[str, Any]] = []
    if "int8" in wanted and store.plan.empty:
        notes.append(f"INT8 not applicable: the model has no {', '.join(project.quantize.op_types)} node "
                     "(quantize.op_types), so TensorRT would run nothing in INT8")
        report(f"gate: {notes[-1]}")
    elif "int8" in wanted:
        from edgebuild.accuracy.quantize import check_calibration

        check_calibration(project, report)
        int8 = store.candidate("int8")
        measured.append(int8)
        if policy.refuses(policy.retention(int8.value, fp32.value)) and project.quantize.max_kept_layers > 0:
            sensitivity = store.ranking(int8)
            mixed = _search(project, policy, store, fp32, [r["layer"] for r in sensitivity])
            if mixed is not None:
                measured.append(mixed)
    result = _decide(project, measured, sensitivity, groups=groups, notes=notes, store=store,
                     seconds=round(time.perf_counter() - started, 3))
    atomic_write_text(result.folder / RECORD_FILE, json.dumps(result.as_dict(), indent=2))
    store.prune_other_models()
    return result


def _search(project: Project, policy: AccuracyPolicy, store: _Measurements, fp32: Measurement,
            worst_first: list[str]) -> Measurement | None:
    """Keep the worst-ranked layers in float, one more at a time, until the gate passes.

    Only the candidates the ranking proposes are measured, each graph once; the search stops at
    the first that keeps ``min_retention`` (or at ``quantize.max_kept_layers``) and returns the
    last one measured.
    """
    last = None
    limit = min(project.quantize.max_kept_layers, len(worst_first))
    for count in range(1, limit + 1):
        mixed = store.candidate("int8", tuple(worst_first[:count]))
        if mixed is None:
            continue
        last = mixed
        if policy.keeps(mixed.value, fp32.value):
            break
    return last


def tensorrt_rejections(path: Path, groups: tuple[Any, ...]) -> list[str]:
    """Why the TensorRT parser of each group's JetPack would reject this candidate (empty: none would)."""
    from edgebuild.targets.preflight import check_target, load_graph

    if not groups:
        return []
    model = load_graph(path)
    problems = []
    for group in groups:
        blocking = check_target(model, group).blocking
        if blocking:
            first = blocking[0]
            problems.append(f"{group.name} (TensorRT {group.target.release.tensorrt}): {len(blocking)} node(s), "
                            f"e.g. {first.node}: {first.problem}")
    return problems


def _decide(project: Project, measured: list[Measurement], sensitivity: list[dict[str, Any]], *,
            groups: tuple[Any, ...], notes: list[str], store: _Measurements, seconds: float) -> GateResult:
    """The verdict per candidate and the selection, from measurements alone."""
    policy = AccuracyPolicy.of(project)
    reference = measured[0].value
    results = []
    if reference <= 0:  # an untrained model, or data that does not match it: retention is undefined
        notes = [*notes, f"the FP32 model scores {project.metric} {reference:.4f}: retention cannot be measured "
                         "(an untrained model, or validation data that does not match it); "
                         "`edgebuild compile --no-gate` dry-runs the later stages"]
    for m in measured:
        retention = policy.retention(m.value, reference)
        base = "int8" if m.precision == "int8-mixed" else m.precision
        rejected = store.rejections(m, groups)
        results.append(CandidateResult(
            precision=m.precision, onnx=m.onnx, metric=m.metric, value=m.value, retention=round(retention, 6),
            passed=policy.passes(retention), selectable=base in project.quantize.precisions and not rejected,
            backend=m.backend, latency_ms=m.latency_ms, kept_fp32=m.kept_fp32, note=m.note, rejected_by=rejected))
    passing = [r for r in results if r.passed and r.selectable]
    ungated = not policy.gated
    if ungated:  # a dry run: every selectable candidate may be selected, the summary says so
        passing = [r for r in results if r.selectable]
        notes = [*notes, "GATE OFF (--no-gate / accuracy.gate = false): the candidate is selected without "
                         "checking its accuracy; package refuses it unless --ship-ungated"]
    rule = project.accuracy.select
    backend = results[0].backend
    on_tensorrt = backend.startswith("tensorrt")
    if rule == "fastest" or (rule == "auto" and on_tensorrt):
        chosen = min(passing, key=lambda r: r.latency_ms, default=None)
        why = f"fastest passing candidate measured on {backend}"
        if ungated:
            why = f"GATE OFF: fastest selectable candidate measured on {backend}"
    else:
        chosen = min(passing, key=lambda r: PRECISION_ORDER.index(r.precision), default=None)
        why = ("lowest precision that passes: latency on this backend does not predict TensorRT on a "
               "Jetson, where INT8 and FP16 run on tensor cores" if rule == "auto" and not on_tensorrt
               else "lowest precision that passes (accuracy.select)")
        if ungated:
            why = "GATE OFF: lowest selectable precision, accuracy not checked"
    return GateResult(
        folder=gate_dir(project), policy=policy, reference_value=reference,
        backend=backend, images=measured[0].images, candidates=results, selected=chosen.precision if chosen else None,
        selection_rule=why, sensitivity=sensitivity, next_steps=[] if chosen else _next_steps(project, results),
        notes=notes, measured=store.measured, stored=store.stored, seconds=seconds)


def _next_steps(project: Project, results: list[CandidateResult]) -> list[str]:
    settings = project.quantize
    steps = []
    tried = {r.precision for r in results}
    if "int8" in tried:
        other = [m for m in ("percentile", "entropy", "minmax") if m != settings.calibration_method]
        steps.append(f"calibrate differently: quantize.calibration_method = {other[0]!r} or {other[1]!r}")
        steps.append(f"keep more layers in floating point: quantize.max_kept_layers (now {settings.max_kept_layers})")
        steps.append("calibrate on more, and more representative, images (data.calibration_images)")
    missing = [p for p in ("fp16", "fp32") if p not in settings.precisions]
    if missing:
        steps.append(f"allow a higher precision: add {' or '.join(repr(m) for m in missing)} to quantize.precisions")
    steps.append(f"lower accuracy.min_retention (now {project.accuracy.min_retention}) only if that loss is "
                 "acceptable for the application")
    return steps


def verdict(project: Project, result: GateResult) -> AccuracyGateError | None:
    """The gate's refusal as an error when no selectable candidate passed, else None."""
    if result.passed:
        return None
    lines = [f"  - {c.precision}: {c.metric} {c.value:.4f}, retention {c.retention:.3f}" + _why_not(project, c)
             for c in result.candidates]
    lines += [f"  {note}" for note in result.notes]
    return AccuracyGateError(
        f"{project.source}: no candidate keeps {result.threshold:.0%} of the FP32 {result.metric} "
        f"({result.reference_value:.4f}) [{result.backend}]:\n" + "\n".join(lines),
        hint="; ".join(result.next_steps),
    )


def _why_not(project: Project, candidate: CandidateResult) -> str:
    if candidate.rejected_by:
        return f" (TensorRT would reject it: {'; '.join(candidate.rejected_by)})"
    base = "int8" if candidate.precision == "int8-mixed" else candidate.precision
    return "" if base in project.quantize.precisions else " (not in quantize.precisions)"


def require_pass(project: Project, result: GateResult) -> None:
    error = verdict(project, result)
    if error is not None:
        raise error
