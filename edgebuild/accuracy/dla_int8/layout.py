"""The INT8 candidate on the DLA: its dynamic ranges, its layout per TensorRT version, measured like a candidate.

For a gate whose groups include one placed on a DLA core and which measured an INT8 candidate, the
DLA's own INT8 is measured beside it (the Q/DQ candidate itself cannot run there: the DLA runs no Q/DQ,
``edgebuild.targets.dla_precision``):

1. ranges: one FP32 pass of the ONNX that ships (the FP32 candidate's) over the calibration images gives
   every activation's statistics (``ranges``), and the INT8 candidate's own range method its amax
   (bias correction is not carried: the DLA engine is built from the FP32 ONNX as exported);
2. per TensorRT version of the DLA groups: the DLA placement of that graph (``targets.dla.place_nodes``),
   and the tensors the DLA would run without a range (none, unless shape inference cannot type one);
3. the emulation of that layout (``emulation``) measured on ONNX Runtime over the validation set like every
   candidate, its retention against FP32's, and the verdict at ``accuracy.min_retention``.

Everything is stored under the measurement root (``dla-int8-<key>/``), keyed by what the INT8 candidates
depend on, so a compile that changes nothing measures nothing again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import digest
from edgebuild.runtime.base.files import atomic_write_text

if TYPE_CHECKING:
    from edgebuild.accuracy.measurements import Measurement, MeasurementStore
    from edgebuild.accuracy.policy import AccuracyPolicy
    from edgebuild.jsontypes import JsonObject
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup
    from edgebuild.text import Progress

__all__: list[str] = []

#: the version of how ranges and emulations are made (in the folder's key)
DLA_INT8_VERSION = "dla-int8/1"
SHOWN = 3


@dataclass(frozen=True)
class DlaLayout:
    """The INT8 candidate's DLA layout under one TensorRT version's DLA rules, and what it scored."""

    tensorrt: str
    dla_layers: int
    gpu_layers: int
    dla_tensors: int  # activations the DLA layers read or write: each carries a range
    fp16_tensors: int  # written by GPU fallback layers, in FP16
    missing: list[str]  # DLA tensors without a range (then nothing is measured)
    emulation: str = ""  # path inside the gate folder
    value: float = 0.0
    retention: float = 0.0
    passed: bool = False

    def refusal(self, threshold: float) -> str:
        """Why the DLA groups of this TensorRT cannot run INT8 ("" where they can)."""
        if self.missing:
            shown = ", ".join(self.missing[:SHOWN]) + (f" and {len(self.missing) - SHOWN} more"
                                                       if len(self.missing) > SHOWN else "")
            return (f"INT8 on the DLA needs a dynamic range on every tensor the DLA runs: {len(self.missing)} of "
                    f"its {self.dla_tensors} have none (ONNX shape inference cannot type {shown})")
        if not self.passed:
            return (f"its DLA layout (implicit INT8, a range on each of {self.dla_tensors} DLA tensors, "
                    f"{self.gpu_layers} GPU fallback layer(s) in FP16) keeps retention {self.retention:.3f} < "
                    f"{threshold} on its emulation")
        return ""

    def line(self) -> str:
        return (f"TensorRT {self.tensorrt}: {self.dla_layers} layers on the DLA in INT8 (a range on each of "
                f"{self.dla_tensors} tensors), {self.gpu_layers} GPU fallback layer(s) in FP16")


@dataclass(frozen=True)
class DlaInt8:
    """What a DLA INT8 recipe ships (the FP32 ONNX and its ranges) and its layout per TensorRT version."""

    onnx: str  # the FP32 ONNX that ships, inside the gate folder
    ranges: str  # the ranges file (``ranges.RANGES_FORMAT``), inside the gate folder
    method: str  # the INT8 candidate's range method
    tensors: int  # ranges written (every activation of the graph)
    images: int  # calibration images
    layouts: dict[str, DlaLayout] = field(default_factory=dict)  # by TensorRT version

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> DlaInt8 | None:
        if not data:
            return None
        layouts = {k: DlaLayout(**v) for k, v in data["layouts"].items()}
        return cls(**{**data, "layouts": layouts})

    def refusals(self, threshold: float) -> dict[str, str]:
        """TensorRT version -> why its DLA groups cannot build INT8 ("": they can)."""
        return {version: layout.refusal(threshold) for version, layout in self.layouts.items()}


def measure_dla_int8(project: Project, store: MeasurementStore, policy: AccuracyPolicy, measured: list[Measurement],
                     groups: tuple[SelectedGroup, ...], say: Progress) -> DlaInt8 | None:
    """The INT8 candidate's DLA layout for each TensorRT version of the DLA groups (None: no DLA group, or no
    INT8 candidate measured)."""
    from edgebuild.targets.dla_precision import implicit_int8_problem

    versions = sorted({g.target.release.tensorrt for g in groups if g.use_dla} - {None})
    versions = [v for v in versions if not implicit_int8_problem(v)]  # TensorRT 11: refused, never measured
    int8 = next((m for m in measured if m.precision == "int8"), None)
    if not versions or int8 is None:
        return None
    import onnx

    from edgebuild.accuracy.dla_int8.ranges import activation_tensors, read_ranges
    from edgebuild.accuracy.measurements import int8_variants

    fp32 = measured[0]
    method = next((v.method for v in int8_variants(project) if v.name == int8.variant), "minmax")
    folder = store.root / f"dla-int8-{digest({**store.int8_parts, 'dla_int8': DLA_INT8_VERSION})[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    source = store.gate / fp32.ships
    ranges_path, images = _ranges(project, store, source, folder, method, say)
    ranges = read_ranges(ranges_path)
    model = onnx.load(str(source), load_external_data=False)
    activations = activation_tensors(model)
    layouts = {}
    done: dict[str, DlaLayout] = {}  # one measurement per distinct placement
    for version in versions:
        layout = _layout(project, store, policy, fp32, model, activations, ranges, version, folder, method, done)
        layouts[version] = layout
        outcome = (f"{fp32.metric} {layout.value:.4f}, retention {layout.retention:.3f}" if not layout.missing
                   else f"not measured: {len(layout.missing)} DLA tensor(s) without a range")
        say(f"gate: int8 on the DLA ({layout.line()}; {method} ranges): {outcome}")
    return DlaInt8(onnx=str(source.relative_to(store.gate)), ranges=str(ranges_path.relative_to(store.gate)),
                   method=method, tensors=len(ranges), images=images, layouts=layouts)


def _ranges(project: Project, store: MeasurementStore, source: Path, folder: Path, method: str,
            say: Progress) -> tuple[Path, int]:
    """The ranges file of ``method`` (from the statistics of every activation, one calibration pass, stored)."""
    from edgebuild.accuracy.dla_int8.ranges import method_ranges, write_ranges

    path = folder / f"ranges-{method}.json"
    if path.is_file() and not store.force:  # forced: made again (once: the gate measures the DLA once a run)
        return path, int(json.loads(path.read_text()).get("images", 0))
    from edgebuild.accuracy.calibration import ActivationStatistics
    from edgebuild.accuracy.dla_int8.ranges import collect_ranges
    from edgebuild.accuracy.quantize import calibration_feeds

    statistics = folder / "statistics.npz"
    if statistics.is_file() and not store.force:
        stats = ActivationStatistics.load(statistics)
    else:
        feeds, count, bar = calibration_feeds(project, store.progress)
        if not store.progress:
            say(f"gate: calibrating INT8 for the DLA: dynamic ranges of every activation on {count} calibration "
                "images")
        started = time.perf_counter()
        with bar:
            stats = collect_ranges(source, feeds, bins=project.quantize.calibration_bins,
                                   progress=lambda n: bar.update(n - bar.n))
        stats.save(statistics)
        say(f"gate: DLA calibration: statistics of {len(stats.tensors)} tensors on {stats.images} images in "
            f"{time.perf_counter() - started:.1f} s")
    write_ranges(path, method_ranges(stats, method), method, stats.images)
    return path, stats.images


def _layout(project: Project, store: MeasurementStore, policy: AccuracyPolicy, fp32: Measurement, model: object,
            activations: list[str], ranges: dict[str, float], version: str, folder: Path, method: str,
            done: dict[str, DlaLayout]) -> DlaLayout:
    import onnx

    from edgebuild.accuracy.dla_int8.emulation import dla_tensors, emulation_model
    from edgebuild.targets.dla import place_nodes

    assert isinstance(model, onnx.ModelProto)
    places = place_nodes(model, version)
    tensors = dla_tensors(model, places, activations)
    base = DlaLayout(version, tensors.dla_layers, tensors.gpu_layers, len(tensors.dla), len(tensors.gpu),
                     list(tensors.missing(ranges)))
    if base.missing:
        return base
    key = digest([[p.on for p in places], method])[:12]
    if key in done:
        return replace(done[key], tensorrt=version)
    emulation = folder / f"emulation-{method}-{key}.onnx"
    record = emulation.with_suffix(".json")
    measured = json.loads(record.read_text()) if record.is_file() and emulation.is_file() and not store.force \
        else None
    if measured is None:
        from edgebuild.accuracy.evaluate import evaluate
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        staging = emulation.with_name(f".tmp-{emulation.name}")
        onnx.save(emulation_model(model, places, tensors, ranges), str(staging))
        staging.replace(emulation)
        if not store.progress:
            store.say(f"gate: measuring int8 on the DLA (emulation) on {len(store.data)} validation images")
        result = evaluate(project, OnnxRuntimeRunner(emulation), data=store.data, progress=store.progress,
                          desc="evaluate int8 (DLA)")
        measured = {"metric": result.metric, "value": round(result.value, 6), "images": result.images}
        atomic_write_text(record, json.dumps(measured, indent=1))
        store.measured += 1
    else:
        store.stored += 1
    retention = policy.retention(measured["value"], fp32.value)
    layout = replace(base, emulation=str(emulation.relative_to(store.gate)), value=measured["value"],
                     retention=round(retention, 6), passed=policy.passes(retention))
    done[key] = layout
    return layout


def dla_int8_notes(dla: DlaInt8 | None, threshold: float) -> list[str]:
    """The gate's notes on the INT8 candidate's DLA layouts."""
    if dla is None:
        return []
    notes = []
    for layout in dla.layouts.values():
        why = layout.refusal(threshold)
        head = (f"int8 on the DLA, {layout.line()}, {dla.method} ranges on {dla.tensors} tensors from {dla.images} "
                f"calibration images ({dla.ranges})")
        notes.append(f"{head}: refused: {why}" if why else
                     f"{head}: retention {layout.retention:.3f} on its emulation ({layout.emulation}): the DLA INT8 "
                     "engine is built from the FP32 ONNX and these ranges")
    return notes
