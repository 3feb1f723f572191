"""What a DLA placement costs: the layers that fall back to the GPU, their share of the work, the transfers.

A DLA engine with GPU fallback splits the graph: each layer the DLA cannot run (by the target
TensorRT's DLA rules, ``edgebuild.targets.dla.place_nodes``) runs on the GPU, and every tensor
that crosses between the two is a transfer of that tensor through memory (TensorRT splits the
network into several DLA loadables at each crossing). This module prices that split with the
per-node cost of ``edgebuild.latency.graph.node_costs`` (FLOPs, and the elements a node reads,
writes and holds as weights) at the group's input shape, and says when the DLA would not help:
when most of the compute falls back, the DLA runs the small part and the GPU still runs the rest,
with a copy at every crossing.

Shares are of the graph's own work, precision-free; no time is predicted here (the latency model,
``edgebuild.latency.model``, predicts time). Graph inputs and outputs are not counted as crossings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgebuild.latency.graph import node_costs
from edgebuild.targets.dla import AT_BUILD, ON_DLA, ON_GPU, place_nodes, uses_dla
from edgebuild.targets.preflight import DLA_FALLBACK, WARNING, Finding

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.profiles import SelectedGroup

__all__: list[str] = []

#: a DLA placement whose fallback layers hold more than this share of the FLOPs would not help
MOST_OF_THE_COMPUTE = 0.5
#: the fallback layers named in the summary, costliest first
SHOWN = 5
_SOURCE = "profiles/tensorrt/dla.toml (DLA rules); edgebuild.latency.graph (per-layer FLOPs and bytes)"


@dataclass(frozen=True)
class FallbackLayer:
    name: str
    op_type: str
    why: str
    flops_share: float
    bytes_share: float


@dataclass(frozen=True)
class DlaSplit:
    """One graph split between the DLA and the GPU under one TensorRT release's DLA rules."""

    tensorrt: str
    dla_layers: int
    fallbacks: tuple[FallbackLayer, ...]  # graph order
    flops_share: float  # of the graph's FLOPs, in the fallback layers
    bytes_share: float  # of the elements the graph's layers move (weights and activations), in the fallback layers
    transitions: int  # tensors crossing between the DLA and the GPU (one transfer each)
    boundary_elements: int  # their elements, all together
    unknown_shapes: int  # nodes whose cost could not be counted (counted as nothing)

    @property
    def helps(self) -> bool:
        """False where most of the compute would fall back to the GPU anyway."""
        return self.flops_share <= MOST_OF_THE_COMPUTE

    def costliest(self, shown: int = SHOWN) -> list[FallbackLayer]:
        return sorted(self.fallbacks, key=lambda f: (-f.flops_share, -f.bytes_share))[:shown]


def dla_split(model: onnx.ModelProto, tensorrt: str, *, batch: int = 1,
              input_hw: tuple[int, int] | None = None) -> DlaSplit:
    """The DLA/GPU split of ``model`` for TensorRT ``tensorrt`` at ``batch`` and ``input_hw``."""
    places = place_nodes(model, tensorrt)
    costs, sizes = node_costs(model, batch=batch, input_hw=input_hw)
    running = [(p, c) for p, c in zip(places, costs) if p.on != AT_BUILD]
    flops = sum(c.flops for _, c in running) or 1.0
    elements = sum(c.elements for _, c in running) or 1
    fallbacks = tuple(FallbackLayer(p.name, p.op_type, p.why, c.flops / flops, c.elements / elements)
                      for p, c in running if p.on == ON_GPU)
    crossings = _crossings(model, [p.on for p in places])
    return DlaSplit(tensorrt, sum(1 for p, _ in running if p.on == ON_DLA), fallbacks,
                    sum(f.flops_share for f in fallbacks), sum(f.bytes_share for f in fallbacks), len(crossings),
                    sum(sizes.get(name, 0) for name, _ in crossings), sum(1 for _, c in running if not c.known))


def _crossings(model: onnx.ModelProto, on: list[str]) -> set[tuple[str, str]]:
    """(tensor, the device that reads it) for every tensor made on one of the DLA and the GPU and read on the other."""
    made_on = {out: on[i] for i, node in enumerate(model.graph.node) for out in node.output}
    found = set()
    for i, node in enumerate(model.graph.node):
        if on[i] not in (ON_DLA, ON_GPU):
            continue
        for name in node.input:
            source = made_on.get(name)
            if source in (ON_DLA, ON_GPU) and source != on[i]:
                found.add((name, on[i]))
    return found


def dla_cost_findings(model: onnx.ModelProto, group: SelectedGroup, *, batch: int = 1,
                      input_hw: tuple[int, int] | None = None) -> list[Finding]:
    """For a group placed on a DLA core: the split's summary (fallback count, their share of the FLOPs and bytes,
    the GPU<->DLA transitions) and, where most of the compute would fall back, a warning that the DLA would not
    help and why. Nothing for a GPU group or a module without a DLA."""
    if not uses_dla(group.accelerator) or group.target.module.dla_cores == 0:
        return []
    split = dla_split(model, group.target.release.tensorrt, batch=batch, input_hw=input_hw)
    total = split.dla_layers + len(split.fallbacks)
    named = ", ".join(f"{f.name} ({f.op_type}, {_share(f.flops_share)} of FLOPs)" for f in split.costliest())
    where = f" at batch {batch}" + (f", {input_hw[0]}x{input_hw[1]}" if input_hw else "")
    summary = (f"{group.accelerator}: {len(split.fallbacks)} of {total} layers fall back to the GPU under TensorRT "
               f"{split.tensorrt}'s DLA rules{where}: {_share(split.flops_share)} of the FLOPs and "
               f"{_share(split.bytes_share)} of the bytes moved, with {split.transitions} GPU<->DLA transition(s) "
               f"(each a copy of the boundary tensor, {split.boundary_elements} elements in all)"
               + (f"; costliest: {named}" if named else "")
               + (f"; {split.unknown_shapes} node(s) without inferred shapes counted as nothing"
                  if split.unknown_shapes else ""))
    findings = [Finding("(model)", "DLA split", DLA_FALLBACK, summary,
                        "each fallback layer is listed below with the DLA rule that keeps it on the GPU", _SOURCE)]
    if not split.helps:
        findings.append(Finding(
            "(model)", "DLA split", WARNING,
            f"the DLA would not help: {split.flops_share:.0%} of the compute falls back to the GPU (more than "
            f"{MOST_OF_THE_COMPUTE:.0%}), so the GPU still runs most of the model, and the {split.transitions} "
            "crossing(s) between the DLA and the GPU each copy a tensor through memory",
            "place this model on the GPU (accelerator = \"gpu\"), or rewrite its costliest fallback layers with "
            "operators the DLA runs", _SOURCE))
    return findings


def _share(fraction: float) -> str:
    return "<0.1%" if 0 < fraction < 0.001 else f"{fraction:.1%}"


def image_shape(inputs: list) -> tuple[int, tuple[int, int] | None]:
    """(batch, (height, width)) of the first 4-D input's opt_shape (a DLA engine's static shape); (1, None) without."""
    image = next((spec for spec in inputs if len(spec.opt_shape) == 4), None)
    if image is None:
        return 1, None
    return int(image.opt_shape[0]), (int(image.opt_shape[2]), int(image.opt_shape[3]))
