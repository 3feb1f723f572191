"""The accuracy gate: every precision candidate measured against the FP32 reference.

retention = candidate metric / FP32 metric, on the same backend and the same images; a
candidate passes at retention >= accuracy.min_retention. When plain INT8 fails, a sensitivity
analysis ranks the layers by what quantizing each one alone costs, keeps the worst in floating
point and re-evaluates, until the gate passes or quantize.max_kept_layers is reached.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.cache import (
    atomic_output_dir,
    digest,
    file_sha256,
    files_digest,
    find_reusable_record,
    tool_versions,
)
from edgebuild.errors import AccuracyGateError

if TYPE_CHECKING:
    from edgebuild.config import Project
    from edgebuild.export import ExportRecord

STAGE_VERSION = "gate/1"
RECORD_FILE = "gate.json"
#: lowest precision first: the order "lowest-precision" selection walks
PRECISION_ORDER = ("int8", "int8-mixed", "fp16", "fp32")

Report = Callable[[str], None]


@dataclass(frozen=True)
class CandidateResult:
    precision: str
    onnx: str  # file name inside the gate folder
    metric: str
    value: float
    retention: float
    passed: bool
    selectable: bool
    backend: str
    latency_ms: float
    kept_fp32: list[str]
    note: str


@dataclass(frozen=True)
class GateResult:
    folder: Path
    metric: str
    threshold: float
    reference_value: float
    backend: str
    images: int
    candidates: list[CandidateResult]
    selected: str | None
    selection_rule: str
    sensitivity: list[dict[str, Any]]
    next_steps: list[str]
    files: dict[str, str]
    key_parts: dict[str, str]
    seconds: float
    reused: bool = field(default=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.selected is not None

    def candidate(self, precision: str) -> CandidateResult:
        return next(c for c in self.candidates if c.precision == precision)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["folder"] = str(self.folder)
        data["stage"] = STAGE_VERSION
        return data

    @classmethod
    def load(cls, folder: Path) -> GateResult:
        data = json.loads((folder / RECORD_FILE).read_text())
        data.pop("stage", None)
        data["folder"] = folder
        data["candidates"] = [CandidateResult(**c) for c in data["candidates"]]
        return cls(**data)


def gate_dir(project: Project) -> Path:
    return project.build_dir / "gate"


def cache_key_parts(project: Project, export: ExportRecord) -> dict[str, str]:
    from edgebuild.datasets import calibration_images, load_class_folder_set, load_coco_set

    if project.task.kind == "detection":
        coco = load_coco_set(project)
        validation = [coco.annotations_path, *[s.path for s in coco.samples]]
    else:
        validation = [s.path for s in load_class_folder_set(project)]
    return {
        "stage": STAGE_VERSION,
        "model": export.sha256,
        "calibration": files_digest(calibration_images(project)),
        "validation": files_digest(validation),
        "task": digest(project.task.model_dump()),
        "settings": digest([project.quantize.model_dump(), project.accuracy.model_dump()]),
        "tools": digest(tool_versions("onnxruntime", "onnx", "pycocotools",
                                      *(["tensorrt"] if project.accuracy.backend == "tensorrt" else []))),
    }


def find_reusable(project: Project, export: ExportRecord) -> tuple[GateResult | None, str]:
    return find_reusable_record(gate_dir(project), RECORD_FILE, GateResult.load,
                                lambda: cache_key_parts(project, export), "gate run")


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


def run_gate(project: Project, export: ExportRecord, *, force: bool = False, progress: bool = True,
             report: Report = lambda _: None, trt: Any = None, memory: Any = None) -> GateResult:
    """Evaluate the candidates, select one, and keep their files in ``build/gate``.

    With ``accuracy.backend = "tensorrt"`` every candidate is built into a host-check engine with
    this host's TensorRT (``trt``/``memory`` are injectable for tests) and measured with it.
    """
    if project.accuracy.backend == "tensorrt" and trt is None:
        from edgebuild.runtime.backends.tensorrt import import_tensorrt

        import_tensorrt()  # fail before anything is measured when TensorRT is missing
    if not force:
        result, why = find_reusable(project, export)
        if result is not None:
            report(f"gate: didn't change, skipping ({result.selected or 'nothing'} selected)")
            return result
        report(f"gate: {why}")
    started = time.perf_counter()
    parts = cache_key_parts(project, export)
    with atomic_output_dir(gate_dir(project)) as staging:
        run = _GateRun(project, export, staging, progress, report, trt=trt, memory=memory)
        result = run.execute()
        result = replace(result, folder=gate_dir(project), key_parts=parts,
                         seconds=round(time.perf_counter() - started, 3))
        (staging / RECORD_FILE).write_text(json.dumps(result.as_dict(), indent=2))
    return result


class _GateRun:
    """One evaluation of every candidate; holds what the steps share."""

    def __init__(self, project: Project, export: ExportRecord, folder: Path, progress: bool,
                 report: Report, *, trt: Any = None, memory: Any = None) -> None:
        from edgebuild.evaluate import ValidationSet
        from edgebuild.model import example_inputs

        self.project, self.export, self.folder = project, export, folder
        self.progress, self.report = progress, report
        self.trt, self.memory = trt, memory
        self.data = ValidationSet(project)
        self.latency_inputs = example_inputs(project, "opt_shape")
        self.calibration_cache = folder / "calibration-cache.json"
        self.results: list[CandidateResult] = []
        self.reference = 0.0
        self.sensitivity: list[dict[str, Any]] = []

    def _runner(self, candidate: Any) -> Any:
        """ONNX Runtime on the CPU, or an engine built from the candidate with this host's TensorRT."""
        if self.project.accuracy.backend == "onnxruntime":
            from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

            return OnnxRuntimeRunner(candidate.onnx_path)
        from edgebuild.runtime.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine

        plan = candidate.onnx_path.with_suffix(".plan")
        self.report(f"gate: building a host-check TensorRT engine for {candidate.precision}")
        build_engine(BuildSettings(
            onnx_path=candidate.onnx_path, plan_path=plan,
            precision="int8" if candidate.precision.startswith("int8") else candidate.precision,
            profiles={s.name: (s.min_shape, s.opt_shape, s.max_shape) for s in self.project.model.inputs},
            workspace_bytes=1 << 30, timing_cache_path=self.folder / "host-check-timing.cache",
            report=self.report), trt=self.trt)
        return TensorRTRunner(plan, trt=self.trt, memory=self.memory)

    def _measure(self, candidate: Any) -> CandidateResult:
        from edgebuild.evaluate import evaluate

        runner = self._runner(candidate)
        result = evaluate(self.project, runner, data=self.data, progress=self.progress,
                          desc=f"evaluate {candidate.precision}")
        if candidate.precision == "fp32":
            if result.value <= 0:
                raise AccuracyGateError(
                    f"{self.project.source}: the FP32 model scores {result.metric} {result.value:.4f} on the "
                    f"validation set [{runner.backend}], so retention cannot be measured",
                    hint="check the weights, task.preprocess, task.postprocess and that task.classes is in "
                         "the model's output order",
                )
            self.reference = result.value
        retention = result.value / self.reference if self.reference > 0 else 0.0
        threshold = self.project.accuracy.min_retention
        base = "int8" if candidate.precision == "int8-mixed" else candidate.precision
        measured = CandidateResult(
            precision=candidate.precision, onnx=candidate.onnx_path.name, metric=result.metric,
            value=round(result.value, 6), retention=round(retention, 6), passed=retention >= threshold,
            selectable=base in self.project.quantize.precisions, backend=runner.backend,
            latency_ms=_latency_ms(runner, self.latency_inputs), kept_fp32=list(candidate.kept_fp32),
            note=candidate.note)
        self.report(f"gate: {measured.precision:<10} {result.metric} {measured.value:.4f}  "
                    f"retention {measured.retention:.3f}  {'pass' if measured.passed else 'FAIL'}  "
                    f"[{runner.backend}]")
        self.results.append(measured)
        return measured

    def execute(self) -> GateResult:
        from edgebuild.quantize import Candidate, fp16_candidate, int8_candidate, prepare_for_quantization

        fp32_path = self.folder / "fp32.onnx"
        shutil.copyfile(self.export.onnx_path, fp32_path)
        for name in self.export.files:  # external data travels with the model
            if name != self.export.onnx_path.name:
                shutil.copyfile(self.export.onnx_path.with_name(name), self.folder / name)
        self._measure(Candidate("fp32", fp32_path, note="the exported model (reference)"))
        wanted = self.project.quantize.precisions
        if "fp16" in wanted:
            self._measure(fp16_candidate(fp32_path, self.folder / "fp16.onnx"))
        if "int8" in wanted:
            prepared = prepare_for_quantization(fp32_path, self.folder / "fp32-prepared.onnx")
            self.report("gate: calibrating INT8")
            int8 = self._measure(int8_candidate(self.project, prepared, self.folder / "int8.onnx",
                                                self.calibration_cache, progress=self.progress))
            if not int8.passed and self.project.quantize.max_kept_layers > 0:
                self._fallback(prepared)
            (self.folder / "fp32-prepared.onnx").unlink(missing_ok=True)
        return self._decide()

    def _fallback(self, prepared: Path) -> None:
        """Rank layers by what quantizing each alone costs; keep the worst in floating point."""
        from tqdm import tqdm

        from edgebuild.evaluate import ValidationSet, evaluate
        from edgebuild.quantize import int8_candidate, quantizable_nodes
        from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

        settings = self.project.quantize
        subset = ValidationSet(self.project, limit=settings.sensitivity_images)
        reference = evaluate(self.project, OnnxRuntimeRunner(prepared), data=subset, progress=False).value
        nodes = quantizable_nodes(prepared)
        self.report(f"gate: INT8 fails; ranking {len(nodes)} layers by sensitivity on {len(subset)} images")
        probe = self.folder / "probe.onnx"
        costs = []
        for node in tqdm(nodes, desc="sensitivity", unit="layer", disable=not self.progress, leave=False):
            int8_candidate(self.project, prepared, probe, self.calibration_cache, only=(node,))
            value = evaluate(self.project, OnnxRuntimeRunner(probe), data=subset, progress=False).value
            costs.append({"layer": node, "cost": round(reference - value, 6)})
        probe.unlink(missing_ok=True)
        costs.sort(key=lambda c: -c["cost"])
        self.sensitivity = costs
        worst = [c["layer"] for c in costs if c["cost"] > 0][: settings.max_kept_layers]
        for count in range(1, len(worst) + 1):
            kept = tuple(worst[:count])
            mixed = self._measure(int8_candidate(self.project, prepared, self.folder / f"int8-mixed-{count}.onnx",
                                                 self.calibration_cache, exclude=kept))
            if mixed.passed:
                break
        # keep only the last mixed candidate's file: the earlier ones are superseded
        last = next((r for r in reversed(self.results) if r.precision == "int8-mixed"), None)
        for path in self.folder.glob("int8-mixed-*.onnx"):
            if last is None or path.name != last.onnx:
                path.unlink()
        self.results = [r for r in self.results if r.precision != "int8-mixed" or r is last]

    def _decide(self) -> GateResult:
        passing = [r for r in self.results if r.passed and r.selectable]
        rule = self.project.accuracy.select
        backend = self.results[0].backend
        on_tensorrt = backend.startswith("tensorrt")
        if rule == "fastest" or (rule == "auto" and on_tensorrt):
            chosen = min(passing, key=lambda r: r.latency_ms, default=None)
            why = f"fastest passing candidate measured on {backend}"
        else:
            chosen = min(passing, key=lambda r: PRECISION_ORDER.index(r.precision), default=None)
            why = ("lowest precision that passes: latency on this backend does not predict TensorRT on a "
                   "Jetson, where INT8 and FP16 run on tensor cores" if rule == "auto" and not on_tensorrt
                   else "lowest precision that passes (accuracy.select)")
        files = {p.name: file_sha256(p) for p in sorted(self.folder.iterdir()) if p.is_file()}
        return GateResult(
            folder=self.folder, metric=self.project.metric, threshold=self.project.accuracy.min_retention,
            reference_value=self.reference, backend=backend, images=len(self.data), candidates=self.results,
            selected=chosen.precision if chosen else None, selection_rule=why, sensitivity=self.sensitivity,
            next_steps=[] if chosen else _next_steps(self.project, self.results), files=files, key_parts={},
            seconds=0.0)


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
    lines = [f"  - {c.precision}: {c.metric} {c.value:.4f}, retention {c.retention:.3f}"
             + ("" if c.selectable else " (not in quantize.precisions)") for c in result.candidates]
    return AccuracyGateError(
        f"{project.source}: no candidate keeps {result.threshold:.0%} of the FP32 {result.metric} "
        f"({result.reference_value:.4f}) [{result.backend}]:\n" + "\n".join(lines),
        hint="; ".join(result.next_steps),
    )


def require_pass(project: Project, result: GateResult) -> None:
    error = verdict(project, result)
    if error is not None:
        raise error
