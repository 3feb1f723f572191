"""One memory plan per fleet group: every model the group runs, against the group's limit preset.

A Jetson's GPU and CPU share one DRAM. A group that runs several models runs them in one server
(one process, one CUDA context), so what it needs is the runtime's own footprint plus, per
model, its engine: the weights at the engine's precision and the activation memory TensorRT
allocates for an execution context at the profile's largest shape, once per model instance
(``[runtime] instance_count``: an execution context each, sharing the weights). A deferred engine is built on
the device at first start, one at a time, so the largest TensorRT workspace among them is needed
once more, for a while. The sum is compared with the preset's budget (its RAM plus its engine
device memory: ``LimitPreset.memory + engine_device_memory_max``, which the preset already
keeps within 75 % of the module's DRAM) before any engine is built; a set that does not fit is
refused with the table of what takes what and what to change.

Where an engine has been built, its ``engine.json`` gives the real numbers (``plan_bytes`` for
the weights, ``device_memory_size`` for the activations); before that they are estimated from
the ONNX: the initializers at the engine's precision, and the peak of live intermediate tensors
along the graph at the profile's max shape (TensorRT fuses layers and reuses memory, so this
errs high).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from edgebuild.errors import LimitError
from edgebuild.jsontypes import JsonObject
from edgebuild.targets.presets import LimitPreset, human_size

__all__ = ["MemoryPlan", "estimate_model_memory", "plan_group_memory"]

#: bytes a value takes in an engine of each precision (INT8 engines keep some layers in FP16:
#: their activations are counted at 2 bytes, their weights at 1). FP8 and NVFP4 engines are strongly typed
#: and edgebuild's candidates keep the layers without Q/DQ in FP32: activations at 4 bytes; NVFP4's weights
#: at 1, as its convolutions' (FP8) dominate a detector's (its GEMMs' take 0.5 and a block scale per 16)
_WEIGHT_BYTES = {"fp32": 4, "fp16": 2, "int8": 1, "fp8": 1, "nvfp4": 1}
_ACTIVATION_BYTES = {"fp32": 4, "fp16": 2, "int8": 2, "fp8": 4, "nvfp4": 4}
_ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


@dataclass(frozen=True)
class ModelMemory:
    """What one model of a group needs on the device."""

    model: str
    precision: str
    weights: int
    activations: int
    workspace: int  # the TensorRT memory-pool limit its engine is built with
    built_on_device: bool  # a deferred engine: built at first start, needing ``workspace`` then
    source: str  # "engine.json" or "estimate from the ONNX"
    instances: int = 1  # execution contexts ([runtime] instance_count): ``activations`` each

    @property
    def engine(self) -> int:
        return self.weights + self.activations * self.instances


@dataclass(frozen=True)
class MemoryPlan:
    """A group's models against its preset; ``fits`` says whether the set may be built."""

    group: str
    preset: str
    budget: int  # the preset's RAM plus its engine device memory
    runtime: int  # the server process's own footprint (``[runtime] footprint``)
    models: tuple[ModelMemory, ...]

    @property
    def build_workspace(self) -> int:
        """The largest workspace among engines built on the device (they are built one at a time)."""
        return max((m.workspace for m in self.models if m.built_on_device), default=0)

    @property
    def total(self) -> int:
        return self.runtime + sum(m.engine for m in self.models) + self.build_workspace

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def table(self) -> str:
        rows = [("what", "precision", "weights", "activations", "workspace", "from")]
        rows.append(("runtime (one server, one CUDA context)", "", "", "", "", human_size(self.runtime)))
        for m in self.models:
            rows.append((m.model, m.precision, human_size(m.weights),
                         human_size(m.activations) + (f" x {m.instances} instances" if m.instances > 1 else ""),
                         human_size(m.workspace) + ("" if m.built_on_device else " (built off the device)"),
                         m.source))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.append(f"total {human_size(self.total)} = runtime + every engine + the largest device-built workspace "
                     f"({human_size(self.build_workspace)}); budget {human_size(self.budget)} (preset {self.preset}: "
                     "memory + engine device memory)")
        return "\n".join(lines)

    def as_dict(self) -> JsonObject:
        return {"group": self.group, "preset": self.preset, "budget": self.budget, "runtime": self.runtime,
                "models": [asdict(m) for m in self.models], "build_workspace": self.build_workspace,
                "total": self.total, "fits": self.fits}

    @classmethod
    def from_dict(cls, data: JsonObject) -> MemoryPlan:
        return cls(data["group"], data["preset"], data["budget"], data["runtime"],
                   tuple(ModelMemory(**m) for m in data["models"]))

    def refusal(self) -> LimitError:
        over = self.total - self.budget
        biggest = max(self.models, key=lambda m: m.engine)
        return LimitError(
            f"{self.group}: the group's models need {human_size(self.total)}, {human_size(over)} more than the "
            f"{human_size(self.budget)} its limit preset {self.preset} allows:\n{self.table()}",
            hint=f"lower the precision of the largest ({biggest.model}, {biggest.precision}: quantize.precisions), "
                 "the max batch or input size of its profile (model.inputs max_shape), or move a model to another "
                 "group; fewer instances of a model ([runtime] instance_count); a preset with more memory "
                 "(cgroup_preset) if the module has it; a smaller [runtime] footprint only if you measured it")


def plan_group_memory(group: str, preset: LimitPreset, runtime: int, models: list[ModelMemory]) -> MemoryPlan:
    return MemoryPlan(group, preset.name, preset.memory + preset.engine_device_memory_max, runtime, tuple(models))


def estimate_model_memory(model: str, onnx_path: Path, precision: str, max_shapes: dict[str, list[int]],
                          workspace: int, built_on_device: bool, engine_json: Path | None = None,
                          instances: int = 1) -> ModelMemory:
    """A model's engine memory: from ``engine_json`` where the engine exists, else estimated from the ONNX;
    ``instances`` execution contexts, each with its activation memory."""
    if engine_json is not None and engine_json.is_file():
        facts = json.loads(engine_json.read_text())
        if "plan_bytes" in facts and "device_memory_size" in facts:
            return ModelMemory(model, precision, int(facts["plan_bytes"]), int(facts["device_memory_size"]),
                               workspace, built_on_device, "engine.json", instances)
    weights, activations = _onnx_estimate(onnx_path, max_shapes)
    return ModelMemory(model, precision, weights * _WEIGHT_BYTES[precision] // 4,
                       activations * _ACTIVATION_BYTES[precision] // 4, workspace, built_on_device,
                       "estimate from the ONNX", instances)


def _onnx_estimate(path: Path, max_shapes: dict[str, list[int]]) -> tuple[int, int]:
    """(float32 bytes of the weights, peak float32 bytes of live activations) at ``max_shapes``."""
    import onnx

    model = onnx.load(str(path))
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8}
    weights = sum(4 * math.prod(t.dims) for t in model.graph.initializer if t.data_type in floats)
    graph = model.graph
    for value in graph.input:
        shape = max_shapes.get(value.name)
        if shape is None:
            continue
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, shape):
            dim.Clear()
            dim.dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # noqa: BLE001 (an estimate: without shapes it counts the weights only)
        return weights, 0
    sizes: dict[str, int] = {}
    for value in [*inferred.value_info, *inferred.output, *inferred.input]:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        if dims and all(dims):
            sizes[value.name] = math.prod(dims) * 4 * _ELEMENT_BYTES.get(tensor.elem_type, 4) // 4
    constant = {t.name for t in graph.initializer}
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            last_use[name] = index
    outputs = {o.name for o in graph.output}
    live = {i.name: sizes.get(i.name, 0) for i in graph.input if i.name not in constant}
    peak = sum(live.values())
    for index, node in enumerate(graph.node):
        for name in node.output:
            live[name] = sizes.get(name, 0)
        peak = max(peak, sum(live.values()))
        for name in list(live):
            if last_use.get(name, -1) <= index and name not in outputs:
                del live[name]
    return weights, peak
