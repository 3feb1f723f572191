"""The accuracy gate: every precision candidate measured against the FP32 reference.

retention = candidate metric / FP32 metric, on the same backend and the same images; a
candidate passes at retention >= accuracy.min_retention.

INT8 is chosen by measurement. One pass over the calibration images gives the activation
statistics every range method is computed from (``edgebuild.accuracy.calibration``); each
variant (a range method, with and without bias correction) is made from them and ranked by a
cheap signal, the SQNR of its outputs against FP32's on ``quantize.sensitivity_images``
validation images; the best ``quantize.measure_best`` are measured with the project's metric
and the one with the highest retention is the INT8 candidate (the report says which and why).
With ``[accuracy.tracking]`` the variants that keep min_retention are tracked too, best first, and the
first that also keeps the tracking gate's min_retention is the candidate (``_track_int8``).
When it still fails, the layers are ranked by the quantization error of their activation inputs
(per-channel SQNR in one run of the INT8 graph), the worst are kept in floating point one more
at a time and re-evaluated, until the gate passes or quantize.max_kept_layers is reached.

FP8 and NVFP4 (Jetson AGX Thor groups) are one candidate each, made from the same calibration statistics
and placement (``edgebuild.accuracy.lowbit``), measured on ONNX Runtime (NVFP4 on its FP32 emulation) and
kept at the same min_retention; where the model has nothing TensorRT runs in that precision, a note says why.

Before any candidate is decided, the FP32 baseline itself is judged (``edgebuild.accuracy.baseline``:
against chance and against the metric the model file records); a wrong one stops the gate with its likely
causes unless ``accuracy.baseline = "accept"``, and with the gate off it is reported, not enforced.

Measurements are kept apart from the decision (``edgebuild.accuracy.measurements``): each is
stored by a key of what it depends on, never on ``min_retention``, ``select`` or ``precisions``.
Changing only those re-decides from the stored measurements; a measurement the new decision
needs and nobody took yet is taken then.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.accuracy.baseline import BaselineCheck, judge_project_baseline
from edgebuild.accuracy.dla_int8.layout import DlaInt8
from edgebuild.accuracy.gate_records import Int8Choice, Int8VariantRow, LayerSensitivity, NmsParity, TrackingGate
from edgebuild.accuracy.measurements import (
    INT8_CHOICE_SETTINGS,
    Measurement,
    MeasurementStore,
    float_key_parts,
    int8_key_parts,
    int8_variants,
)
from edgebuild.accuracy.policy import AccuracyPolicy, fastest_predicted
from edgebuild.accuracy.tracking.gate import (
    TRACKED_INT8_VARIANTS,
    TrackingRun,
    enabled,
    tracking_decision,
    tracking_key_parts,
)
from edgebuild.content import digest
from edgebuild.errors import AccuracyGateError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import HUB_SOURCE
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.text import Progress

if TYPE_CHECKING:
    from types import ModuleType

    from edgebuild.accuracy.int8_variants import Int8Variant
    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.backends.trt_api import DeviceMemory
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["GateResult", "PRECISION_ORDER", "decision_settings", "measurement_key_parts", "run_gate", "verdict"]

STAGE_VERSION = "gate/5"
RECORD_FILE = "gate.json"
#: lowest precision first: the order "lowest-precision" selection walks, and the device falls back along. FP8
#: after INT8 (the same width and, on Thor, the same tensor-core rate; FP8's exponent keeps more of a tail)
PRECISION_ORDER = ("nvfp4", "int8", "int8-mixed", "fp8", "fp16", "fp32")



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
    metrics: dict[str, float] = field(default_factory=dict)  # every metric of the task (pose, masks: box mAP too)
    refused: str = ""  # why the tracking gate refuses it, both numbers named ("": it does not, or is off)
    # why the groups placed on a DLA core cannot build from it (edgebuild.targets.dla_precision; "": they can)
    dla_refused: str = ""
    # the INT8 candidate's own DLA layout: its ranges and retention per TensorRT version (None: none measured)
    dla_int8: DlaInt8 | None = None
    emulated: str = ""  # NVFP4: the FP32 emulation of ``onnx`` that ONNX Runtime runs on the host ("": none)


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
    sensitivity: list[LayerSensitivity]
    next_steps: list[str]
    notes: list[str]
    measured: int  # measurements taken in this run (the rest were stored)
    stored: int  # measurements reused from earlier runs
    seconds: float
    # how the INT8 candidate was made: its variant, why, and every variant looked at
    int8_choice: Int8Choice | None = None  # None: no INT8 candidate (``{}`` in the file)
    # NMS inside the model: its FP32 candidate against the host's decode of the head (evaluate.nms_parity)
    nms_parity: NmsParity | None = None  # None: no NMS inside the model (``{}`` in the file)
    # the FP32 baseline judged (None: a record written before the check existed)
    baseline: BaselineCheck | None = None
    # [accuracy.tracking]: every candidate's tracks scored and judged (None: not asked for; ``{}`` in the file)
    tracking: TrackingGate | None = None

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

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["folder"] = str(self.folder)
        data["policy"] = self.policy.as_dict()
        data["sensitivity"] = [s.as_dict() for s in self.sensitivity]
        data["int8_choice"] = self.int8_choice.as_dict() if self.int8_choice else {}
        data["nms_parity"] = self.nms_parity.as_dict() if self.nms_parity else {}
        # written only where the tracking gate ran, so a record of a project without it reads back key for key
        data.pop("tracking")
        if self.tracking is not None:
            data["tracking"] = self.tracking.as_dict()
        for candidate in data["candidates"]:
            # written only where said, so older records read back as they were
            for key in ("refused", "dla_refused", "dla_int8", "emulated"):
                if not candidate[key]:
                    del candidate[key]
        data["stage"] = STAGE_VERSION
        return data

    @classmethod
    def from_dict(cls, data: JsonObject, folder: Path) -> GateResult:
        data = {k: v for k, v in data.items() if k not in ("stage", "reused")}
        data["folder"] = folder  # the project may have moved since
        data["candidates"] = [CandidateResult(**{**c, "dla_int8": DlaInt8.from_dict(c.get("dla_int8") or {})})
                              for c in data["candidates"]]
        data["policy"] = AccuracyPolicy.from_dict(data["policy"])
        data["sensitivity"] = [LayerSensitivity.from_dict(s) for s in data["sensitivity"]]
        data["int8_choice"] = Int8Choice.from_dict(data.get("int8_choice") or {})
        data["nms_parity"] = NmsParity.from_dict(data.get("nms_parity") or {})
        data["tracking"] = TrackingGate.from_dict(data.get("tracking") or {})
        if data.get("baseline") is not None:
            data["baseline"] = BaselineCheck.from_dict(data["baseline"])
        return cls(**data)

    @classmethod
    def load(cls, folder: Path) -> GateResult:
        return cls.from_dict(json.loads((folder / RECORD_FILE).read_text()), folder)


def gate_dir(project: Project) -> Path:
    return BuildLayout.of(project).gate


def measurement_key_parts(project: Project, export: ExportRecord) -> dict[str, str]:
    """What the gate's measurements depend on (the stage's key); the thresholds and selection are not in it."""
    return {**float_key_parts(project, export), **int8_key_parts(project),
            "int8_choice": digest(project.quantize.model_dump(include=set(INT8_CHOICE_SETTINGS))),
            **tracking_key_parts(project)}


def decision_settings(project: Project) -> JsonObject:
    """The settings only the decision reads: changing them re-decides from stored measurements."""
    return {**AccuracyPolicy.of(project).as_dict(), "select": project.accuracy.select,
            "baseline": project.accuracy.baseline,
            "precisions": sorted(project.quantize.precisions), "max_kept_layers": project.quantize.max_kept_layers,
            **tracking_decision(project)}


def run_gate(project: Project, export: ExportRecord, *, groups: tuple[SelectedGroup, ...] = (), force: bool = False,
             progress: bool = True, say: Progress = lambda _: None, trt: ModuleType | None = None,
             memory: DeviceMemory | None = None) -> GateResult:
    """Measure what the decision needs (stored measurements are reused), decide, write ``gate.json``.

    ``groups`` are the fleet groups the candidates are for: a candidate one of their TensorRT
    parsers would reject (preflight's type and attribute rules) is never selected. ``force``
    measures everything again. With ``accuracy.backend = "tensorrt"`` every candidate is built
    into a host-check engine with this host's TensorRT (``trt``/``memory`` are injectable for
    tests) and measured with it.
    """
    if project.accuracy.backend == "tensorrt" and trt is None:
        from edgebuild.runtime.engines.backends.tensorrt import import_tensorrt

        import_tensorrt()  # fail before anything is measured when TensorRT is missing
    started = time.perf_counter()
    store = MeasurementStore(project, export, force=force, progress=progress, say=say, trt=trt, memory=memory)
    policy = AccuracyPolicy.of(project)
    if policy.gated and project.model.source and HUB_SOURCE.match(project.model.source) and not project.model.weights:
        raise AccuracyGateError(
            f"{project.source}: model.source {project.model.source!r} has no model.weights: its weights are random, "
            "so no accuracy of it means anything",
            hint="set model.weights to its state_dict (torch.save(model.state_dict(), path)); to try the later "
                 "stages with an untrained model: `edgebuild compile --no-gate`")
    fp32 = store.candidate("fp32")
    assert fp32 is not None, "the first graph of a run is never one already measured"
    baseline = check_baseline(project, fp32, say)  # a wrong FP32 stops here, before any candidate
    if fp32.value <= 0 and policy.gated:  # accepted, but retention is undefined
        raise AccuracyGateError(
            f"{project.source}: the FP32 model scores {fp32.metric} {fp32.value:.4f} on the validation set "
            f"[{fp32.backend}], so retention cannot be measured",
            hint="check the weights, task.preprocess, task.postprocess and that task.classes is in the model's "
                 "output order; to try the later stages with an untrained model: `edgebuild compile --no-gate`")
    measured: list[Measurement] = [fp32]
    notes: list[str] = []
    parity = _check_nms_parity(project, store, fp32, say) if store.nms_inside else None
    if parity:  # the report, the summary and the CLI show the notes
        notes.append(parity.line())
    wanted = project.quantize.precisions
    if "fp16" in wanted:
        fp16 = store.candidate("fp16")
        assert fp16 is not None, "an FP16 graph differs from the FP32 one measured before it"
        measured.append(fp16)
    sensitivity: list[LayerSensitivity] = []
    choice: Int8Choice | None = None
    calibration_checked = False
    tracker = TrackingRun(project, store.root, force=force, progress=progress, say=say) if enabled(project) else None
    if "int8" in wanted and store.placement.empty:
        notes.append(f"INT8 not applicable: the model has no {', '.join(project.quantize.op_types)} node "
                     "(quantize.op_types), so TensorRT would run nothing in INT8")
        say(f"gate: {notes[-1]}")
    elif "int8" in wanted:
        from edgebuild.accuracy.quantize import check_calibration

        check_calibration(project, say)
        calibration_checked = True
        int8, choice, preferred = _choose_int8(project, policy, store, fp32, say)
        if tracker is not None and len(preferred) > 1:
            int8, choice = _track_int8(policy, tracker, store.gate, fp32, preferred, choice)
        measured.append(int8)
        if policy.refuses(policy.retention(int8.value, fp32.value)) and project.quantize.max_kept_layers > 0:
            sensitivity = store.ranking(int8)
            variant = next(v for v in int8_variants(project) if v.name == int8.variant)
            mixed = _search(project, policy, store, fp32, [r.layer for r in sensitivity], variant)
            if mixed is not None:
                measured.append(mixed)
    measured += _lowbit(project, store, notes, say, calibration_checked)
    from edgebuild.accuracy.dla_int8.layout import measure_dla_int8

    dla_int8 = measure_dla_int8(project, store, policy, measured, groups, say)  # a DLA group's own INT8 layout
    predicted = _predicted(project, export, groups, measured)
    tracking = None
    if tracker is not None:  # the tracking gate: every candidate's tracks against FP32's (docs/tracking-gate.md)
        tracking = tracker.judge([(m.precision, store.gate / (m.emulated or m.ships)) for m in measured])
    result = _decide(project, measured, sensitivity, groups=groups, notes=notes, store=store,
                     seconds=round(time.perf_counter() - started, 3), int8_choice=choice, nms_parity=parity,
                     predicted=predicted, tracking=tracking, dla_int8=dla_int8)
    result = replace(result, baseline=baseline)
    atomic_write_text(result.folder / RECORD_FILE, json.dumps(result.as_dict(), indent=2))
    store.prune_other_models()
    return result


def _lowbit(project: Project, store: MeasurementStore, notes: list[str], say: Progress,
            calibration_checked: bool) -> list[Measurement]:
    """The FP8 and NVFP4 candidates ``quantize.precisions`` asks for (Jetson AGX Thor), each measured once and
    gated like INT8; where the model has nothing TensorRT would run in that precision, a note says why."""
    from edgebuild.accuracy.lowbit import LOWBIT
    from edgebuild.accuracy.lowbit.candidates import not_applicable

    found = []
    for precision in (p for p in LOWBIT if p in project.quantize.precisions):
        why = not_applicable(precision, store.prepared_path(), store.placement)
        if why:
            notes.append(why)
            say(f"gate: {why}")
            continue
        if not calibration_checked:
            from edgebuild.accuracy.quantize import check_calibration

            check_calibration(project, say)
            calibration_checked = True
        measurement = store.candidate(precision)
        if measurement is not None:
            found.append(measurement)
    return found


def check_baseline(project: Project, fp32: Measurement, progress: Progress) -> BaselineCheck:
    """The FP32 measurement judged before any candidate: a wrong baseline stops the gate (exit 11) naming the
    numbers and the likely causes, unless accuracy.baseline = "accept"; with the gate off it is only said."""
    check = judge_project_baseline(project, fp32.value, backend=fp32.backend, images=fp32.images)
    progress(f"gate: {check.line()}")
    if check.refuses:
        raise AccuracyGateError(
            check.message(str(project.source)),
            hint="fix the first cause that applies (`edgebuild init` measures the usual preprocessing conventions "
                 "when a model file says none); if the number is right, set accuracy.baseline = \"accept\"")
    return check


#: NMS inside the model scores what the host's decode of its head scores, to this (issue 28's bar)
NMS_PARITY_METRIC_TOLERANCE = 1e-6


def _check_nms_parity(project: Project, store: MeasurementStore, fp32: Measurement, progress: Progress) -> NmsParity:
    """The appended NMS must find what the host's decode finds: the same metric to 1e-6, or the gate stops."""
    parity = store.nms_parity(fp32)
    line = parity.line()
    progress(f"gate: {line}")
    if parity.difference > NMS_PARITY_METRIC_TOLERANCE:
        raise AccuracyGateError(
            f"{project.source}: {line}: they differ by {parity.difference:.2g} (more than "
            f"{NMS_PARITY_METRIC_TOLERANCE:g}), so the model would not ship what the gate measures",
            hint="usually ties in score at the pre-NMS cut (1000 candidates) or boxes with no area; set "
                 "task.postprocess.in_model = false to decode on the host, and report the model at "
                 "edgebuild's issue tracker")
    return parity


def _choose_int8(project: Project, policy: AccuracyPolicy, store: MeasurementStore, fp32: Measurement,
                 progress: Progress) -> tuple[Measurement, Int8Choice, list[Measurement]]:
    """The INT8 variant with the highest retention among the best ``measure_best`` by the cheap signal, and every
    variant measured, in that preference (the chosen one first)."""
    variants = int8_variants(project)
    if len(variants) == 1:
        only = store.candidate("int8", variant=variants[0])
        assert only is not None  # the first INT8 graph of a run is never one already measured
        why = "the one variant quantize.calibration_method and quantize.bias_correction name"
        return only, Int8Choice(only.variant, why, (Int8VariantRow(only.variant, only.value, ranked=False),)), [only]
    started = time.perf_counter()
    signals = {v.name: store.signal(v) for v in variants}
    looked = [v for v in variants if signals[v.name] is not None]
    ranked = sorted(looked, key=lambda v: -signals[v.name])  # type: ignore[operator]
    progress(f"gate: {len(looked)} INT8 variants by the SQNR of their outputs against FP32 in "
             f"{time.perf_counter() - started:.1f} s: "
             + ", ".join(f"{v.name} {signals[v.name]:.1f} dB" for v in ranked))
    tried = []
    for variant in ranked[: project.quantize.measure_best]:
        measurement = store.candidate("int8", variant=variant)
        if measurement is not None:
            tried.append(measurement)
    further = 0
    # none of the best by the signal keeps min_retention: the others are measured, in signal order, until
    # one does, before any layer goes to float (a variant costs one measurement, its graph is built; a
    # fallback step also builds one, and the signal can misrank on a detector: YOLOv8n, docs/accuracy.md)
    for variant in ranked[project.quantize.measure_best:]:
        if any(policy.keeps(m.value, fp32.value) for m in tried) or not policy.gated:
            break
        measurement = store.candidate("int8", variant=variant)
        if measurement is not None:
            tried.append(measurement)
            further += 1
    preferred = sorted(tried, key=lambda m: (-m.value, -signals[m.variant]))  # type: ignore[operator]
    best = preferred[0]
    rows = []
    for v in variants:
        m = next((t for t in tried if t.variant == v.name), None)
        rows.append(Int8VariantRow(v.name, m.value if m else None, sqnr_db=signals[v.name],
                                   retention=round(policy.retention(m.value, fp32.value), 6) if m else None))
    why = (f"highest {best.metric} ({best.value:.4f}, retention {policy.retention(best.value, fp32.value):.3f}) of "
           f"the {len(tried) - further} best of {len(looked)} variants by output SQNR on "
           f"{min(len(store.data), project.quantize.sensitivity_images)} images"
           + (f", and {further} more measured because none of those kept min_retention" if further else ""))
    return best, Int8Choice(best.variant, why, tuple(rows)), preferred


def _track_int8(policy: AccuracyPolicy, tracker: TrackingRun, gate: Path, fp32: Measurement,
                preferred: list[Measurement], choice: Int8Choice) -> tuple[Measurement, Int8Choice]:
    """With [accuracy.tracking]: the first variant, in the metric's preference, that keeps both min_retentions.

    Only variants that keep the gate's min_retention are tracked, at most ``TRACKED_INT8_VARIANTS``, each
    once (the tracking gate reuses them); where none keeps the tracking one, the metric's choice stands.
    """
    section = tracker.section
    passing = [m for m in preferred if policy.keeps(m.value, fp32.value)]
    keeping = passing[:TRACKED_INT8_VARIANTS]
    tracked: dict[str, float] = {}
    chosen = preferred[0]
    for m in keeping:
        tracked[m.variant] = tracker.retention(f"int8 ({m.variant})", gate / m.ships, gate / fp32.ships)
        if tracked[m.variant] >= section.min_retention:
            chosen = m
            break
    if not tracked:
        return chosen, choice
    rows = tuple(replace(r, tracking_retention=round(tracked[r.variant], 6)) if r.variant in tracked else r
                 for r in choice.variants)
    looked = ", ".join(f"{v} {r:.3f}" for v, r in tracked.items())
    if tracked.get(chosen.variant, 0.0) >= section.min_retention:
        head = (f"the best by {fp32.metric} that also keeps [accuracy.tracking] min_retention {section.min_retention}"
                f" of FP32's {section.metric}")
    else:
        head = f"none kept [accuracy.tracking] min_retention {section.min_retention} of FP32's {section.metric}"
    why = (f"{head} (tracked, best {fp32.metric} first, {len(tracked)} of the {len(passing)} variants keeping "
           f"min_retention, at most {TRACKED_INT8_VARIANTS}; {section.metric} retention: {looked}); "
           f"by {fp32.metric} alone: {choice.why}")
    return chosen, Int8Choice(chosen.variant, why, rows)


#: the layer fallback keeps the worst layers in float one more at a time up to this many, then in growing steps
SEARCH_ONE_BY_ONE = 8


def _search(project: Project, policy: AccuracyPolicy, store: MeasurementStore, fp32: Measurement,
            worst_first: list[str], variant: Int8Variant | None) -> Measurement | None:
    """Keep the worst-ranked layers in float, one more at a time up to ``SEARCH_ONE_BY_ONE``, then in growing
    steps (12, 16, 24, 32, ...: a transformer's INT8 loss spreads over many layers), until the gate passes.

    Only the candidates the ranking proposes are measured, each graph once; the search stops at
    the first that keeps ``min_retention`` (or at ``quantize.max_kept_layers``) and returns the
    last one measured.
    """
    last = None
    limit = min(project.quantize.max_kept_layers, len(worst_first))
    steps = [*range(1, min(SEARCH_ONE_BY_ONE, limit) + 1),
             *(n for n in (12, 16, 24, 32, 48, 64, 96, 128, 192, 256) if SEARCH_ONE_BY_ONE < n < limit),
             *([limit] if limit > SEARCH_ONE_BY_ONE else [])]
    for count in steps:
        mixed = store.candidate("int8", tuple(worst_first[:count]), variant)
        if mixed is None:
            continue
        last = mixed
        if policy.keeps(mixed.value, fp32.value):
            break
    return last


def _predicted(project: Project, export: ExportRecord, groups: tuple[SelectedGroup, ...],
               measured: list[Measurement]) -> dict[str, float]:
    """Each candidate's predicted latency on the slowest group, where ``accuracy.select = "auto"`` may use it
    (nothing is measured on TensorRT): {} otherwise."""
    if project.accuracy.select != "auto" or project.accuracy.backend == "tensorrt" or not groups:
        return {}
    from edgebuild.latency.budget import predict_candidates

    image = next((i for i in project.model.inputs if len(i.opt_shape) == 4), None)
    return predict_candidates(export.onnx_path, (image.opt_shape[2], image.opt_shape[3]) if image else None,
                              [(g.target.module, g.target.release.jetpack, g.power_mode) for g in groups],
                              [(m.precision, m.kept_fp32) for m in measured])


def _decide(project: Project, measured: list[Measurement], sensitivity: list[LayerSensitivity], *,
            groups: tuple[SelectedGroup, ...], notes: list[str], store: MeasurementStore, seconds: float,
            int8_choice: Int8Choice | None = None, nms_parity: NmsParity | None = None,
            predicted: dict[str, float] | None = None, tracking: TrackingGate | None = None,
            dla_int8: DlaInt8 | None = None) -> GateResult:
    """The verdict per candidate and the selection, from measurements alone."""
    from edgebuild.accuracy.dla_int8.layout import dla_int8_notes
    from edgebuild.targets.dla_precision import dla_note, dla_refusal

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
        refused = tracking.refusal(m.precision) if tracking else ""
        results.append(CandidateResult(
            precision=m.precision, onnx=m.ships, metric=m.metric, value=m.value, retention=round(retention, 6),
            passed=policy.passes(retention) and not refused,
            selectable=base in project.quantize.precisions and not rejected,
            backend=m.backend, latency_ms=m.latency_ms, kept_fp32=m.kept_fp32, note=m.note, rejected_by=rejected,
            metrics=dict(m.metrics), refused=refused, emulated=m.emulated,
            dla_refused=dla_refusal(m.precision, store.gate / m.ships, groups, dla_int8.refusals(policy.min_retention)
                                    if dla_int8 is not None and m.precision == "int8" else None),
            dla_int8=dla_int8 if m.precision == "int8" else None))
    refused_on_dla = {r.precision: r.dla_refused for r in results}
    notes = [*notes, *(dla_note(g, refused_on_dla) for g in groups if g.use_dla),
             *dla_int8_notes(dla_int8, policy.min_retention)]
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
    elif rule == "auto" and (chosen := fastest_predicted(passing, predicted)) is not None:
        assert predicted is not None, "a candidate is chosen by prediction only where there is one"
        why = (f"{'GATE OFF: fastest selectable' if ungated else 'fastest passing'} candidate by the latency "
               f"model's prediction on the slowest group ({chosen.precision} {predicted[chosen.precision]:.2f} ms; "
               f"{backend} latency does not predict TensorRT on a Jetson, docs/latency-plan.md)")
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
        notes=notes, measured=store.measured, stored=store.stored, seconds=seconds, int8_choice=int8_choice,
        nms_parity=nms_parity, tracking=tracking)


def _next_steps(project: Project, results: list[CandidateResult]) -> list[str]:
    settings = project.quantize
    steps = []
    tried = {r.precision for r in results}
    if "int8" in tried:
        if settings.calibration_method != "auto":
            steps.append("let the gate try every range method and bias correction: quantize.calibration_method = "
                         "'auto' (now " + repr(settings.calibration_method) + ")")
        else:
            steps.append(f"measure more of the INT8 variants with the metric: quantize.measure_best "
                         f"(now {settings.measure_best})")
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
    if candidate.refused:
        return f" ({candidate.refused})"
    if candidate.rejected_by:
        return f" (TensorRT would reject it: {'; '.join(candidate.rejected_by)})"
    base = "int8" if candidate.precision == "int8-mixed" else candidate.precision
    return "" if base in project.quantize.precisions else " (not in quantize.precisions)"


def require_pass(project: Project, result: GateResult) -> None:
    error = verdict(project, result)
    if error is not None:
        raise error
