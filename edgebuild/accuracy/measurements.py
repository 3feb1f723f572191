"""The gate's measurements, stored by what each depends on and taken on demand.

Everything lives under ``build/gate/measured/<model sha256[:12]>/``: one folder per candidate
(its ONNX, ``built.json``, and once measured ``measurement.json``; an INT8 variant also keeps its
cheap error signal in ``signal.json``), the calibration statistics, the ranges of each method,
the layer rankings and the pre-processed model they are made from. A folder is renamed into
place only when complete, so an interrupted gate never leaves half a measurement.

Keys: FP32 and FP16 measurements depend on the model, the validation data, the task and the
backend; INT8 ones also on the calibration data and the quantization settings (placement,
per-channel weights, histogram bins) and on their variant (range method, bias correction). So
a new calibration method or set re-measures only INT8 candidates.

NMS inside the model (``[task.postprocess] in_model``; detection, pose, segmentation): every candidate
is made from the raw head (so Q/DQ never reaches the NMS part) and gets the decode appended after, as
``detections.onnx`` beside its ``model.onnx``. The metric, latency and TensorRT check read that file,
the one that ships; the INT8 signal and the layer ranking read the head.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from edgebuild.accuracy.gate_records import LayerSensitivity, NmsParity
from edgebuild.accuracy.int8_variants import Int8Variant, method_names
from edgebuild.accuracy.lowbit import LOWBIT, LOWBIT_VERSION, emulation_path
from edgebuild.content import atomic_output_dir, digest, tool_versions
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.text import Progress

if TYPE_CHECKING:
    import numpy as np

    from edgebuild.accuracy.calibration import ActivationStatistics
    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.accuracy.quantize import Candidate, QdqPlacement
    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.backends import Runner
    from edgebuild.runtime.engines.backends.trt_api import DeviceMemory
    from edgebuild.sources.export.onnx_export import ExportRecord
    from edgebuild.targets.profiles import SelectedGroup

__all__ = []

MEASURED_DIR = "measured"
#: NMS inside: a candidate's file with the decode appended, beside its raw-head model.onnx
DETECTIONS_FILE = "detections.onnx"
#: quantize settings that choose among INT8 variants (each variant is keyed by its own method)
INT8_CHOICE_SETTINGS = frozenset({"calibration_method", "percentile", "bias_correction", "measure_best"})



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
    variant: str = ""  # INT8: the Int8Variant's name
    shipped: str = ""  # NMS inside: the candidate with the decode appended (what ships); "": ``onnx`` ships
    # every metric the task computes (segmentation, pose: the box mAP beside the gate's mask or pose mAP)
    metrics: dict[str, float] = field(default_factory=dict)
    emulated: str = ""  # NVFP4: the FP32 emulation of ``ships`` that ONNX Runtime measured; "": ``ships`` itself

    @property
    def ships(self) -> str:
        """The path (inside the gate folder) of the file that ships and was scored."""
        return self.shipped or self.onnx


@dataclass(frozen=True)
class _Built:
    precision: str
    onnx: Path
    kept_fp32: tuple[str, ...]
    note: str
    graph: str
    shipped: Path | None = None  # NMS inside: ``detections.onnx``
    emulated: Path | None = None  # NVFP4: what ONNX Runtime runs in place of the shipped file


def float_key_parts(project: Project, export: ExportRecord) -> dict[str, str]:
    """What an FP32 or FP16 measurement depends on."""
    from edgebuild.datasets.project_data import validation_digest

    return {
        "measurement": "gate-measurement/4",
        "model": export.content_sha256,
        "validation": validation_digest(project),
        "task": digest(project.task.model_dump()),
        "metric": project.metric,
        "inputs": digest([s.model_dump() for s in project.model.inputs]),  # latency shape, host-check profiles
        "backend": project.accuracy.backend,
        "tools": digest(tool_versions("onnxruntime", "onnx", "faster-coco-eval",
                                      *(["tensorrt"] if project.accuracy.backend == "tensorrt" else []))),
    }


def int8_key_parts(project: Project) -> dict[str, str]:
    """What every INT8 measurement depends on besides its variant."""
    from edgebuild.datasets.project_data import calibration_digest

    settings = project.quantize.model_dump(exclude={"precisions", "max_kept_layers", *INT8_CHOICE_SETTINGS})
    # calibration/3: a DFL head's expectation Conv left in float (quantize._expectations)
    return {"int8": "calibration/3", "calibration": calibration_digest(project), "quantize": digest(settings)}


def int8_variants(project: Project) -> list[Int8Variant]:
    """The INT8 variants a project's settings ask for, in the order they are tried."""
    settings = project.quantize
    corrections = {"auto": (False, True), "on": (True,), "off": (False,)}[settings.bias_correction]
    return [Int8Variant(m, c) for m in method_names(settings.calibration_method, settings.percentile)
            for c in corrections]


def _latency_ms(runner: Runner, inputs: dict[str, np.ndarray], budget_s: float = 2.0, runs: int = 30) -> float:
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


def output_sqnr_db(reference: list[dict[str, np.ndarray]], outputs: list[dict[str, np.ndarray]]) -> float:
    """Signal-to-noise ratio of a candidate's outputs against FP32's, in dB, averaged over outputs."""
    import numpy as np
    scores = []
    for name in reference[0]:
        signal = sum(float(np.sum(np.square(r[name], dtype=np.float64))) for r in reference)
        noise = sum(float(np.sum(np.square(r[name].astype(np.float64) - o[name]))) for r, o in zip(reference, outputs))
        scores.append(120.0 if noise <= signal * 1e-12 else 10 * np.log10(max(signal, 1e-30) / noise))
    return round(float(np.mean(scores)), 3)


class SameGraph(Exception):
    """A candidate whose graph is one already measured (raised inside its staging folder, so it is discarded)."""

    def __init__(self, of: Measurement | _Built) -> None:
        super().__init__(of.precision)
        self.of = of


class MeasurementStore:
    """The stored measurements of one exported model, taken on demand."""

    def __init__(self, project: Project, export: ExportRecord, *, force: bool, progress: bool, say: Progress,
                 trt: ModuleType | None = None, memory: DeviceMemory | None = None) -> None:
        self.project, self.export, self.force = project, export, force
        self.progress, self.say, self.trt, self.memory = progress, say, trt, memory
        self.float_parts = float_key_parts(project, export)
        self.int8_parts = {**self.float_parts, **int8_key_parts(project)}
        self.gate = BuildLayout.of(project).gate
        self.root = self.gate / MEASURED_DIR / export.content_sha256[:12]
        self.measured = 0
        self.stored = 0
        self._data: ValidationSet | None = None
        self._latency_inputs: dict[str, np.ndarray] | None = None
        self._placement: QdqPlacement | None = None
        self._statistics: ActivationStatistics | None = None
        self._thresholds: dict[str, np.ndarray] = {}
        self._shifts: dict[str, dict[str, np.ndarray]] = {}
        self._reference: list[dict[str, np.ndarray]] | None = None
        self.graphs: dict[str, Measurement] = {}  # graph digest -> its measurement, this run
        self.variant_graphs: dict[str, str] = {}  # graph digest -> the first INT8 variant that made it
        self._made: set[Path] = set()  # written in this run: read back even when forced

    # -- keys and stored files ---------------------------------------------------------------------

    def _key(self, spec: JsonObject, int8: bool = True) -> str:
        return digest({**(self.int8_parts if int8 else self.float_parts), "spec": spec})[:16]

    def _stored(self, path: Path, what: str) -> Any:  # JSON in
        """A stored measurement file's content, or None (and why, said once) when it must be taken."""
        if (self.force and path.parent not in self._made and path not in self._made) or not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            self.say(f"gate: stored {what} unreadable ({exc}); measuring again")
            return None

    @property
    def data(self) -> ValidationSet:
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

    @property
    def placement(self) -> QdqPlacement:
        """Which nodes TensorRT would run in INT8 (``edgebuild.accuracy.quantize.qdq_placement``)."""
        if self._placement is None:
            from edgebuild.accuracy.quantize import QdqPlacement, qdq_placement

            # the file's name and key are what stored measurements were written under: kept as they were
            path = self.root / f"plan-{self._key({'plan': 1})}.json"
            stored = self._stored(path, "INT8 placement")
            if stored is not None:
                self._placement = QdqPlacement(**{k: tuple(v) for k, v in stored.items()})
            else:
                self._placement = qdq_placement(self.project, self.prepared_path())
                atomic_write_text(path, json.dumps(asdict(self._placement)))
        return self._placement

    # -- calibration: statistics once, every method's ranges from them ----------------------------

    def statistics(self) -> ActivationStatistics:
        """The activation statistics of the calibration set (one FP32 pass, stored)."""
        if self._statistics is None:
            from edgebuild.accuracy.calibration import ActivationStatistics, collect_statistics
            from edgebuild.accuracy.quantize import calibration_feeds, calibration_tensors_of

            path = self.root / f"statistics-{self._key({'statistics': 1})}.npz"
            if path.is_file() and not self.force:
                self._statistics = ActivationStatistics.load(path)
            else:
                tensors, quantized, weighted = calibration_tensors_of(self.project, self.prepared_path(),
                                                                      self.placement)
                feeds, count, bar = calibration_feeds(self.project, self.progress)
                if not self.progress:
                    self.say(f"gate: calibrating INT8: activation statistics of {len(quantized)} tensors on "
                             f"{count} calibration images")
                started = time.perf_counter()
                with bar:
                    self._statistics = collect_statistics(self.prepared_path(), tensors, weighted, feeds,
                                                          bins=self.project.quantize.calibration_bins,
                                                          quantized=quantized,
                                                          progress=lambda n: bar.update(n - bar.n))
                self._statistics.save(path)
                self.say(f"gate: calibration statistics of {len(quantized)} tensors on {count} images in "
                         f"{time.perf_counter() - started:.1f} s")
        return self._statistics

    def thresholds(self, method: str) -> np.ndarray:
        if method not in self._thresholds:
            from edgebuild.accuracy.calibration import thresholds

            self._thresholds[method] = thresholds(self.statistics(), method)
        return self._thresholds[method]

    def ranges_cache(self, method: str) -> Path:
        """ONNX Runtime's calibration cache holding ``method``'s ranges."""
        from edgebuild.accuracy.calibration import write_ranges_cache

        path = self.root / f"ranges-{method}-{self._key({'ranges': method})[:12]}.json"
        if (self.force and path not in self._made) or not path.is_file():
            write_ranges_cache(path, self.statistics(), self.thresholds(method))
            self._made.add(path)
        return path

    def shifts(self, method: str) -> dict[str, np.ndarray]:
        """Per weighted layer input, the mean error its quantization adds per channel (bias correction)."""
        import numpy as np
        if method not in self._shifts:
            from edgebuild.accuracy.calibration import activation_shifts
            from edgebuild.accuracy.quantize import calibration_feeds

            methods = [v.method for v in int8_variants(self.project) if v.bias_correction]
            methods = list(dict.fromkeys([method, *methods]))
            path = self.root / f"shifts-{self._key({'shifts': sorted(methods), 'images': BIAS_IMAGES})}.npz"
            if path.is_file() and not self.force:
                with np.load(path) as saved:
                    for m in methods:
                        self._shifts[m] = {k.split(":", 1)[1]: saved[k] for k in saved.files if k.startswith(f"{m}:")}
            else:
                feeds, _, bar = calibration_feeds(self.project, False, limit=BIAS_IMAGES)
                with bar:
                    found = activation_shifts(self.prepared_path(), self.statistics(),
                                              {m: self.thresholds(m) for m in methods}, feeds)
                self._shifts.update(found)
                staging = path.with_name(f".tmp-{path.name}")
                with staging.open("wb") as out:
                    arrays = {f"{m}:{k}": v for m in found for k, v in found[m].items()}
                    # numpy's stub matches **arrays against its allow_pickle: bool
                    np.savez(out, **arrays)  # type: ignore[arg-type]
                staging.replace(path)
        return self._shifts[method]

    # -- candidates --------------------------------------------------------------------------------

    def _folder(self, precision: str, kept: tuple[str, ...], variant: Int8Variant | None) -> Path:
        if precision in LOWBIT:  # made from the calibration statistics: keyed by them too
            return self.root / f"{precision}-{self._key({'precision': precision, 'lowbit': LOWBIT_VERSION})}"
        if precision != "int8":
            spec = {"precision": precision} if precision != "fp16" else \
                {"precision": precision, "fp16": "float-layers/1", "images": self._signal_images}
            return self.root / f"{precision}-{self._key(spec, int8=False)}"
        assert variant is not None
        name = f"int8-{variant.name}" + (f"-mixed-{len(kept)}" if kept else "")
        key = self._key({"precision": precision, "variant": variant.name, "kept": sorted(kept)})
        return self.root / f"{name}-{key}"

    def built(self, precision: str, kept: tuple[str, ...] = (), variant: Int8Variant | None = None) -> _Built:
        """The candidate's ONNX, made now unless stored (raises ``SameGraph`` for a graph already measured)."""
        built = self._built(precision, kept, variant)
        if built.graph in self.graphs:
            raise SameGraph(self.graphs[built.graph])
        return built

    def _built(self, precision: str, kept: tuple[str, ...], variant: Int8Variant | None) -> _Built:
        from edgebuild.accuracy.quantize import graph_digest

        folder = self._folder(precision, kept, variant)
        stored = self._stored(folder / "built.json", f"{folder.name} candidate")
        shipped = folder / DETECTIONS_FILE if self.nms_inside else None
        if stored is not None and (folder / "model.onnx").is_file() and (shipped is None or shipped.is_file()):
            return _Built(stored["precision"], folder / "model.onnx", tuple(stored["kept_fp32"]), stored["note"],
                          stored["graph"], shipped, emulation_path(folder, stored.get("emulated", ""), self.nms_inside))
        with atomic_output_dir(folder) as staging:
            made = self._make(precision, kept, variant, staging / "model.onnx")
            graph = graph_digest(made.onnx_path)
            if graph in self.graphs:
                raise SameGraph(self.graphs[graph])
            if shipped is not None:
                self._append_nms(made.onnx_path, staging / DETECTIONS_FILE)
            emulated = made.emulated.name if made.emulated else ""
            if made.emulated and shipped is not None:
                self._append_nms(made.emulated, staging / f"detections-{emulated}")
            atomic_write_text(staging / "built.json", json.dumps(
                {"precision": made.precision, "kept_fp32": list(made.kept_fp32), "note": made.note, "graph": graph,
                 "emulated": emulated}))
        self._made.add(folder)
        return _Built(made.precision, folder / "model.onnx", tuple(made.kept_fp32), made.note, graph, shipped,
                      emulation_path(folder, emulated, self.nms_inside))

    @property
    def nms_inside(self) -> bool:
        return self.project.task.kind in ("detection", "pose", "segmentation") and \
            self.project.task.postprocess.in_model

    def _append_nms(self, head: Path, out: Path) -> None:
        """The candidate with the project's decode and NMS appended (``edgebuild.sources.export.nms_graph``)."""
        import onnx

        from edgebuild.sources.export.checks import save_onnx
        from edgebuild.sources.export.nms_graph import append_nms, check_nms_settings

        settings = check_nms_settings(self.project.task.kind, self.project.task.postprocess.model_dump())
        external = head.with_name(f"{head.name}.data").exists()
        save_onnx(append_nms(onnx.load(str(head)), settings, len(self.project.task.classes)), out, external)

    def candidate(self, precision: str, kept: tuple[str, ...] = (), variant: Int8Variant | None = None
                  ) -> Measurement | None:
        """The measurement of one candidate, stored or taken now; None when its graph is one
        already measured (keeping those layers in float changed nothing)."""
        folder = self._folder(precision, kept, variant)
        stored = self._stored(folder / "measurement.json", f"{folder.name} measurement")
        if stored is not None and (folder / "model.onnx").is_file() \
                and (not self.nms_inside or (folder / DETECTIONS_FILE).is_file()):
            measurement = Measurement(**stored)
            if measurement.graph in self.graphs:
                return None
            self.stored += 1
            self.graphs[measurement.graph] = measurement
            self._say(measurement, "stored")
            return measurement
        started = time.perf_counter()
        try:
            built = self.built(precision, kept, variant)
        except SameGraph as same:
            self.say(f"gate: keeping {', '.join(kept)} in float gives the graph of {same.of.precision} "
                     f"{same.of.kept_fp32 or ''}: not measured again")
            return None
        runner = self._runner(built, folder)
        from edgebuild.accuracy.evaluate import evaluate

        if not self.progress:  # no bar: one line when the long step starts
            self.say(f"gate: measuring {built.precision} on {len(self.data)} validation images [{runner.backend}]")
        result = evaluate(self.project, runner, data=self.data, progress=self.progress,
                          desc=f"evaluate {built.precision}")
        measurement = Measurement(
            precision=built.precision, onnx=str(built.onnx.relative_to(self.gate)), metric=result.metric,
            value=round(result.value, 6), images=result.images, backend=runner.backend,
            latency_ms=_latency_ms(runner, self._latency()), kept_fp32=list(built.kept_fp32), note=built.note,
            graph=built.graph, seconds=round(time.perf_counter() - started, 3),
            variant=variant.name if variant else "",
            shipped=str(built.shipped.relative_to(self.gate)) if built.shipped else "",
            metrics={k: round(v, 6) for k, v in result.metrics.items()},
            emulated=str(built.emulated.relative_to(self.gate)) if built.emulated else "")
        atomic_write_text(folder / "measurement.json", json.dumps(asdict(measurement), indent=2))
        self.measured += 1
        self.graphs[built.graph] = measurement
        self._say(measurement, "measured")
        return measurement

    def _make(self, precision: str, kept: tuple[str, ...], variant: Int8Variant | None, out: Path) -> Candidate:
        from edgebuild.accuracy.quantize import Candidate, fp16_candidate, int8_candidate

        if precision == "fp32":
            for name in self.export.files:  # external data travels with the model
                target = out if name == self.export.onnx_path.name else out.with_name(name)
                shutil.copyfile(self.export.onnx_path.with_name(name), target)
            return Candidate("fp32", out, note="the exported model (reference)")
        if precision == "fp16":
            images = list(self._signal_batches())  # its layers FP16 cannot carry are measured on them
            return fp16_candidate(self.fp32_path(), out, images, self.project.model.inputs[0].name)
        if precision in LOWBIT:
            from edgebuild.accuracy.lowbit.candidates import make_lowbit

            return make_lowbit(precision, self.prepared_path(), out, self.placement, self.statistics())
        assert variant is not None
        if not variant.bias_correction:
            return int8_candidate(self.project, self.prepared_path(), out, self.ranges_cache(variant.method),
                                  self.placement, exclude=kept, how=variant.describe())
        from edgebuild.accuracy.calibration import correct_biases

        plain = self._built(precision, kept, Int8Variant(variant.method, False))  # the same Q/DQ, biases as exported
        shutil.copyfile(plain.onnx, out)
        corrected = correct_biases(out, self.prepared_path(), self.statistics(), self.shifts(variant.method),
                                   exclude=kept)
        note = plain.note.replace(Int8Variant(variant.method, False).describe(), variant.describe())
        return Candidate(plain.precision, out, plain.kept_fp32, f"{note} ({corrected} layer biases)")

    def signal(self, variant: Int8Variant) -> float | None:
        """The INT8 variant's cheap error signal: its outputs' SQNR against FP32's on the first
        ``quantize.sensitivity_images`` validation images (stored); None when it makes the graph
        of a variant already looked at."""
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        try:
            built = self.built("int8", (), variant)
        except SameGraph:
            return None
        first = self.variant_graphs.setdefault(built.graph, variant.name)
        if first != variant.name:
            self.say(f"gate: INT8 {variant.name} gives the graph of {first}: not measured again")
            return None
        path = built.onnx.with_name("signal.json")
        stored = self._stored(path, f"{variant.name} signal")
        if stored is not None:
            return float(stored["sqnr_db"])
        runner = OnnxRuntimeRunner(built.onnx)
        outputs = [runner.run({self.project.model.inputs[0].name: batch}) for batch in self._signal_batches()]
        sqnr = output_sqnr_db(self.reference_outputs(), outputs)
        atomic_write_text(path, json.dumps({"sqnr_db": sqnr, "images": self._signal_images}))
        return sqnr

    def _signal_batches(self) -> Iterator[np.ndarray]:
        seen = 0
        for chunk, batch, _ in self.data.batches():
            yield batch
            seen += len(chunk)
            if seen >= self.project.quantize.sensitivity_images:
                break

    @property
    def _signal_images(self) -> int:
        return min(len(self.data), self.project.quantize.sensitivity_images)

    def reference_outputs(self) -> list[dict[str, np.ndarray]]:
        if self._reference is None:
            from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

            runner = OnnxRuntimeRunner(self.fp32_path())
            self._reference = [runner.run({self.project.model.inputs[0].name: b}) for b in self._signal_batches()]
        return self._reference

    def nms_parity(self, fp32: Measurement) -> NmsParity:
        """NMS inside the FP32 candidate against the host's decode of its head (stored beside it)."""
        path = (self.gate / fp32.onnx).with_name("nms-parity.json")
        stored = self._stored(path, "NMS parity")
        if stored:
            parity = NmsParity.from_dict(stored)
            assert parity is not None
            return parity
        from edgebuild.accuracy.evaluate import nms_parity
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        self.say(f"gate: NMS inside the model against the host's decode of the FP32 head on {len(self.data)} "
                 "validation images")
        found = nms_parity(self.project, OnnxRuntimeRunner(self.gate / fp32.onnx),
                           OnnxRuntimeRunner(self.gate / fp32.ships), self.data)
        atomic_write_text(path, json.dumps(found.as_dict(), indent=2))
        return found

    def _say(self, m: Measurement, how: str) -> None:
        beside = "".join(f", {k} {v:.4f}" for k, v in m.metrics.items() if k.endswith("mAP50-95") and k != m.metric)
        self.say(f"gate: {m.precision:<10} {m.metric} {m.value:.4f}{beside}  [{m.backend}, {how}]"
                 + (f" {m.variant}" if m.variant else ""))

    def _latency(self) -> dict:
        if self._latency_inputs is None:
            from edgebuild.sources.entry_point import example_inputs

            self._latency_inputs = example_inputs(self.project, "opt_shape")
        return self._latency_inputs

    def rejections(self, measurement: Measurement, groups: tuple[SelectedGroup, ...]) -> list[str]:
        """``tensorrt_rejections`` of a measured candidate, kept beside it per set of targets and parser tables."""
        if not groups:
            return []
        from edgebuild.targets.preflight import preflight, rules_digest

        targets = digest([sorted(g.target.id for g in groups), rules_digest(), measurement.graph])
        path = (self.gate / measurement.ships).parent / f"rejections-{targets[:16]}.json"
        stored = self._stored(path, "TensorRT check")
        if stored is not None:
            return list(stored)
        # the parser's blocking findings, and the layouts TensorRT would build in a wider type than the candidate's
        found = [r.rejection() for r in preflight(self.gate / measurement.ships, list(groups),
                                                     measurement.precision.removesuffix("-mixed")) if r.blocking]
        atomic_write_text(path, json.dumps(found))
        return found

    def _runner(self, candidate: _Built, folder: Path) -> Runner:
        """ONNX Runtime on the CPU, or an engine built from the candidate with this host's TensorRT."""
        if self.project.accuracy.backend == "onnxruntime":
            from edgebuild.accuracy.lowbit import host_runner

            return host_runner(candidate.emulated or candidate.shipped or candidate.onnx)
        from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine

        engine_file = folder / "model.plan"
        self.say(f"gate: building a host-check TensorRT engine for {candidate.precision}")
        build_engine(BuildSettings(
            onnx_path=candidate.shipped or candidate.onnx, engine_path=engine_file,
            precision="int8" if candidate.precision.startswith("int8") else candidate.precision,
            profiles={s.name: (tuple(s.min_shape), tuple(s.opt_shape), tuple(s.max_shape))
                      for s in self.project.model.inputs},
            workspace_bytes=1 << 30, timing_cache_path=self.root / "host-check-timing.cache",
            fp32_layers=candidate.kept_fp32, progress=self.say), trt=self.trt)
        return TensorRTRunner(engine_file, trt=self.trt, memory=self.memory)

    def ranking(self, int8: Measurement) -> list[LayerSensitivity]:
        """The INT8 candidate's layers by the quantization error of their inputs, worst first
        (``edgebuild.accuracy.quantize.layer_errors`` on ``quantize.sensitivity_images`` validation images)."""
        settings = self.project.quantize
        key = self._key({"sensitivity_images": settings.sensitivity_images, "variant": int8.variant})
        path = self.root / f"sensitivity-{key}.json"
        stored = self._stored(path, "layer ranking")
        if stored is not None:
            self.stored += 1
            self.say(f"gate: layer ranking of {len(stored)} layers (stored)")
            return [LayerSensitivity.from_dict(row) for row in stored]
        from edgebuild.accuracy.quantize import layer_errors

        batches = list(self._signal_batches())
        started = time.perf_counter()
        ranking = layer_errors(self.gate / int8.onnx, batches, self.project.model.inputs[0].name)
        self.say(f"gate: INT8 fails; ranked {len(ranking)} layers by the quantization error of their inputs on "
                 f"{self._signal_images} images in {time.perf_counter() - started:.1f} s")
        atomic_write_text(path, json.dumps(ranking, indent=1))
        self.measured += 1
        return [LayerSensitivity.from_dict(row) for row in ranking]

    def prune_other_models(self) -> None:
        """Measurements of models that are no longer the export are never read again."""
        for folder in (self.gate / MEASURED_DIR).iterdir():
            if folder.is_dir() and folder != self.root:
                shutil.rmtree(folder, ignore_errors=True)


#: calibration images the bias correction's activation shifts are measured on
BIAS_IMAGES = 8
