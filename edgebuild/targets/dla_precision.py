"""Which gate candidates a group placed on a DLA core can be built from: the precisions the DLA runs, judged on
each candidate's own layout.

The DLA computes in FP16 or INT8 only (dla.toml's general restrictions), and a DLA engine runs
each layer the DLA cannot run on the GPU (GPU fallback, at the engine's GPU precision). So:

- **fp16**: the DLA runs its layers in FP16 and the fallback layers run in FP16 on the GPU:
  the FP16 candidate's own layout. The gate measured exactly that graph on ONNX Runtime (every
  tensor FP16, the converter's few FP32 ops reading and writing FP16-rounded values, which
  equals FP16 compute up to the rounding inside one layer), so its retention stands for the DLA.
- **fp32**: refused: the DLA has no FP32, and TensorRT refuses an FP32 DLA engine
  (``edgebuild.runtime.engines.backends.tensorrt.BuildSettings``).
- **int8**, **int8-mixed**: the DLA runs a layer in INT8 only with a scale on every tensor it
  reads and writes (implicit quantization, what NVIDIA's qdq-translator makes for the DLA), and
  it runs no QuantizeLinear/DequantizeLinear (dla.toml; NVIDIA/TensorRT#2222: "DLA doesn't
  support QAT ... if you convert it to implicit quantization, it would work with DLA").
  edgebuild's INT8 candidates are explicit Q/DQ on the inputs of Conv/Gemm/MatMul (what
  TensorRT runs in INT8 on the GPU), so :func:`int8_scale_gaps` lists the DLA tensors they give
  no scale. The DLA's own INT8 is therefore built by implicit quantization: the FP32 ONNX with a
  dynamic range on every tensor (``edgebuild.accuracy.dla_int8``), whose layout the gate measures on
  its emulation; **int8** runs on the DLA where those ranges cover every DLA tensor and that
  layout keeps min_retention (the gate's verdict per TensorRT version, ``implicit`` below), and is
  refused with why otherwise. **int8-mixed** stays refused (its layers kept in float are a Q/DQ
  layout), as is INT8 on the DLA with TensorRT 11 (:func:`implicit_int8_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.profiles import SelectedGroup

__all__: list[str] = []

_QDQ = ("QuantizeLinear", "DequantizeLinear")
SHOWN = 3


@dataclass(frozen=True)
class ScaleGaps:
    """An INT8 candidate against the DLA: the tensors the DLA would run, those without a scale, the Q/DQ layers."""

    tensors: int  # activation tensors the DLA's layers read or write
    missing: tuple[str, ...]  # of those, the ones the candidate gives no scale
    qdq_layers: int  # activation QuantizeLinear/DequantizeLinear nodes: none runs on the DLA

    def refusal(self) -> str:
        shown = ", ".join(self.missing[:SHOWN]) + (f" and {len(self.missing) - SHOWN} more"
                                                   if len(self.missing) > SHOWN else "")
        scales = (f"it gives {self.tensors - len(self.missing)} of the {self.tensors} tensors the DLA would run a "
                  f"scale (none for {shown})" if self.missing else f"it gives all {self.tensors} DLA tensors a scale")
        return (f"INT8 on the DLA needs a scale on every tensor the DLA runs and no Q/DQ layer (the DLA runs none: "
                f"implicit quantization only, NVIDIA/TensorRT#2222): {scales}, and its {self.qdq_layers} activation "
                "Q/DQ layer(s) would each fall back to the GPU")


def int8_scale_gaps(model: onnx.ModelProto, tensorrt: str) -> ScaleGaps:
    """The DLA tensors of a Q/DQ candidate without a scale, by the DLA rules of TensorRT ``tensorrt``.

    A tensor has a scale where the candidate quantizes it (a QuantizeLinear reads it) or it is a
    dequantized activation. Weights are not counted: TensorRT quantizes them itself.
    """
    from edgebuild.targets.dla import AT_BUILD, ON_DLA, ON_GPU, place_nodes

    places = place_nodes(model, tensorrt)
    constants = {i.name for i in model.graph.initializer}  # and what is folded at build time (a weight's Q/DQ)
    constants |= {o for n, p in zip(model.graph.node, places) if p.on == AT_BUILD for o in n.output}
    dequantized = {n.output[0] for n, p in zip(model.graph.node, places) if n.op_type == "DequantizeLinear"}
    scaled = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"} | dequantized
    tensors: dict[str, None] = {}
    for node, place in zip(model.graph.node, places):
        if place.on == ON_DLA and node.op_type not in _QDQ:
            for name in (*node.input, *node.output):
                if name and name not in constants and name not in tensors:
                    tensors[name] = None
    missing = tuple(t for t in tensors if t not in scaled)
    qdq = sum(1 for n, p in zip(model.graph.node, places) if n.op_type in _QDQ and p.on == ON_GPU)
    return ScaleGaps(len(tensors), missing, qdq)


def implicit_int8_problem(tensorrt: str) -> str:
    """Why TensorRT ``tensorrt`` cannot build INT8 on the DLA by implicit quantization ("" where it can)."""
    if int(tensorrt.split(".")[0]) >= 11:
        return ("TensorRT 11 builds strongly typed networks only: the INT8 flag, calibrators and dynamic ranges are "
                "removed (TensorRT 11.x migration guide, 'Removed Python APIs and Replacements', "
                "https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/"
                "tensorrt-10x-to-11x-python-api-reference.html), and the DLA runs no Q/DQ")
    return ""


def dla_refusal(precision: str, onnx_path: Path, groups: tuple[SelectedGroup, ...],
                implicit: dict[str, str] | None = None) -> str:
    """Why the DLA groups among ``groups`` cannot build from this candidate ("" where they can, or none is on a DLA).

    ``implicit``: for the INT8 candidate, the gate's verdict on its DLA layout per TensorRT version (why not,
    or "" where it runs; ``edgebuild.accuracy.dla_int8.layout.DlaInt8.refusals``); a version it has no verdict
    for is refused with the Q/DQ candidate's scale gaps."""
    dla = [g for g in groups if g.use_dla]
    if not dla or precision == "fp16":
        return ""
    if precision == "fp32":
        return "the DLA has no FP32 (it runs FP16 and INT8 layers only)"
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    reasons = {}
    for g in dla:
        version = g.target.release.tensorrt
        if precision == "int8" and implicit is not None and version in implicit:
            reasons[version] = implicit[version]
        elif precision == "int8" and implicit_int8_problem(version):
            reasons[version] = implicit_int8_problem(version)
        else:
            reasons[version] = int8_scale_gaps(model, version).refusal()
    if not any(reasons.values()):
        return ""
    if len(set(reasons.values())) == 1:
        return next(iter(reasons.values()))
    return "; ".join(f"TensorRT {version}: {why}" for version, why in reasons.items() if why)


def dla_note(group: SelectedGroup, refused: dict[str, str]) -> str:
    """The gate's note for one DLA group: which candidate stands for the DLA's layout, and what is refused."""
    said = "; ".join(f"{precision} refused: {why}" for precision, why in refused.items() if why)
    return (f"{group.name} runs on {group.accelerator}: the fp16 candidate is the DLA's own layout (DLA layers in "
            "FP16, fallback layers in FP16 on the GPU), so its retention stands for the DLA engine"
            + (f"; {said}" if said else ""))
