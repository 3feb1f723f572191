"""Which layers an FP16 candidate keeps in FP32, measured on validation images, and that candidate's graph.

Two things go wrong in FP16 (TensorRT's FP16 layers keep their tensors in FP16 between them):

- **range**: a tensor past 65504 is inf. Decided by the FP32 graph's magnitudes, per tensor: a node whose
  output or input goes past it is made and read in FP32; a normalization whose input passes sqrt(65504)
  squares it past the range in TensorRT's FP16 kernels. Infinities FP32 has too (RT-DETR's masked anchors)
  do not count.
- **precision**: a node whose output is far more wrong than its inputs amplifies FP16's rounding (a DETR's
  inverse sigmoid, log(x / (1 - x)) near 0 or 1 of a box). Measured by running the model with every tensor
  stored in FP16 (``fp16_storage``: FP32 arithmetic, each tensor rounded to FP16 and back) next to FP32, with
  the TopKs of the FP16 run fed FP32's picks, so the errors compared are arithmetic, not a different choice of
  queries where scores nearly tie. Such a node is kept with the elementwise nodes that feed it, back to the
  last layer, since it is their FP16 rounding it amplifies.

ONNX Runtime's own FP16 run is no measure of either: where its CPU provider has no FP16 kernel it computes in
FP32 and removes the casts to FP16 that would round or overflow (its RemoveDuplicateCastTransformer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = []

#: FP16's largest finite value: a tensor past it is inf in FP16
FP16_MAX = 65504.0
#: a node whose FP16 output is this far from FP32's (relative L2: ten times FP16's rounding of 4.9e-4) ...
FP16_ERROR = 0.005
#: ... and this many times further than its inputs are, adds the error itself: it is kept in FP32
FP16_ERROR_GROWTH = 8.0
#: normalizations square their centred input: TensorRT's FP16 kernels overflow where |x| passes sqrt(FP16_MAX)
_SQUARING_OPS = frozenset({"LayerNormalization", "GroupNormalization", "InstanceNormalization"})
#: what feeds an amplifying node without being a layer of its own: kept in FP32 with it (at most _FEEDING_HOPS back)
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Clip", "Sigmoid", "Neg", "Abs", "Min", "Max", "Relu", "Exp",
                          "Log", "Sqrt", "Reciprocal", "Pow", "Identity"})
_FEEDING_HOPS = 4
#: how the reason of a node kept because it feeds another begins
FEEDS = "feeds "


def fp16_float_layers(source: Path, batches: list[np.ndarray], input_name: str) -> dict[str, str]:
    """{node: why} of the layers to keep in FP32 for an FP16 candidate, measured on ``batches``, in graph order."""
    import onnx

    model = onnx.load(str(source))
    picks = [n.output[1] for n in model.graph.node if n.op_type == "TopK" and len(n.output) > 1]
    fp32 = _session(model, onnx.TensorProto.FLOAT, extra=picks)
    fp16 = _session(fp16_storage(onnx.load(str(source)), picks), onnx.TensorProto.FLOAT, only=set(fp32[1]))
    peak: dict[str, float] = {}
    signal: dict[str, float] = {}
    noise: dict[str, float] = {}
    for batch in batches:
        for image in batch:  # one image at a time: every intermediate tensor is held at once
            feed = {input_name: image[None]}
            ours = dict(zip(fp32[1] + picks, fp32[0].run(fp32[1] + picks, feed)))
            theirs = dict(zip(fp16[1], fp16[0].run(fp16[1], {**feed, **{p: ours[p] for p in picks}})))
            for name in fp32[1]:
                x, y = ours[name], theirs[name].astype(np.float64)
                finite = np.isfinite(x)
                peak[name] = max(peak.get(name, 0.0), float(np.abs(x[finite]).max(initial=0.0)))
                both = finite & np.isfinite(y)
                broken = bool((finite & ~np.isfinite(y)).any())
                signal[name] = signal.get(name, 0.0) + float(np.square(x[both], dtype=np.float64).sum())
                noise[name] = np.inf if broken else noise.get(name, 0.0) + float(np.square(x[both] - y[both]).sum())
    error = {n: (noise[n] / signal[n]) ** 0.5 if signal[n] > 0 else (0.0 if noise[n] == 0 else np.inf)
             for n in signal}
    return _decide(model, peak, error)


def _decide(model: Any, peak: dict[str, float], error: dict[str, float]) -> dict[str, str]:
    """The nodes to keep, by the rules of the module docstring, in graph order."""
    produced = {o: n for n in model.graph.node for o in n.output}
    found: dict[str, str] = {}
    for node in model.graph.node:
        outputs = [o for o in node.output if o in peak]
        if not node.name or not outputs:
            continue
        top = max(peak[o] for o in outputs)
        inputs = max((peak.get(i, 0.0) for i in node.input), default=0.0)
        grown = max(error.get(o, 0.0) for o in outputs)
        carried = max((error.get(i, 0.0) for i in node.input), default=0.0)
        if top > FP16_MAX:
            found[node.name] = f"FP32 output up to {top:.3g}, past FP16's {FP16_MAX:g}"
        elif inputs > FP16_MAX:  # an FP16 copy of its input would be inf: it reads the FP32 tensor
            found[node.name] = f"reads FP32 values up to {inputs:.3g}, past FP16's {FP16_MAX:g}"
        elif node.op_type in _SQUARING_OPS and inputs > FP16_MAX ** 0.5:
            found[node.name] = f"input up to {inputs:.3g}: its square passes FP16's {FP16_MAX:g}"
        elif (not np.isfinite(grown) and np.isfinite(carried)) or \
                (grown > FP16_ERROR and grown > FP16_ERROR_GROWTH * carried):
            why = "non-finite in FP16 where FP32 is finite" if not np.isfinite(grown) else \
                f"FP16 error {grown:.2g} of its output, {carried:.2g} of its inputs"
            found[node.name] = why
            for feeder in _feeding(node, produced):
                found.setdefault(feeder, f"{FEEDS}{node.name}, kept in FP32 ({why})")
    order = [n.name for n in model.graph.node]
    return {name: found[name] for name in order if name in found}


def _feeding(node: Any, produced: dict[str, Any]) -> list[str]:
    """The elementwise nodes whose outputs reach ``node`` without a layer between, up to ``_FEEDING_HOPS`` back."""
    found, frontier = [], [node]
    for _ in range(_FEEDING_HOPS):
        frontier = [produced[i] for n in frontier for i in n.input if i in produced
                    and produced[i].op_type in _ELEMENTWISE and produced[i].name]
        found += [n.name for n in frontier]
    return list(dict.fromkeys(found))


def fp16_storage(model: Any, picks: Sequence[str] = ()) -> Any:
    """``model`` computing in FP32 with every float tensor (weights, each node's outputs) rounded to FP16 and back,
    so it overflows to inf and loses precision where TensorRT's FP16 tensors would; each TopK's indices output
    named in ``picks`` becomes a graph input of that name (the caller feeds FP32's picks)."""
    import onnx
    from onnx import helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *model.graph.output]}
    floats = {t for n in model.graph.node for t in n.output if typed.get(t) == onnx.TensorProto.FLOAT}
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            values = np.clip(numpy_helper.to_array(init), -FP16_MAX, FP16_MAX).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(values, init.name))
    rounded = []
    for node in model.graph.node:
        for k, name in enumerate(node.output):
            if node.op_type == "TopK" and name in picks:
                node.output[k] = f"{name}/own"
            elif name in floats:
                node.output[k] = f"{name}/fp32"
                rounded += [helper.make_node("Cast", [f"{name}/fp32"], [f"{name}/fp16"], to=onnx.TensorProto.FLOAT16),
                            helper.make_node("Cast", [f"{name}/fp16"], [name], to=onnx.TensorProto.FLOAT)]
    model.graph.node.extend(rounded)
    model.graph.input.extend(helper.make_tensor_value_info(p, onnx.TensorProto.INT64, None) for p in picks)
    return model


def _session(model: Any, elem_type: int, only: set[str] | None = None,
             extra: Sequence[str] = ()) -> tuple[Any, list[str]]:
    """An ONNX Runtime session of ``model`` answering every intermediate tensor of ``elem_type`` (of ``only``) and
    ``extra``, and the names of the former."""
    import onnx
    import onnxruntime as ort

    from edgebuild.text import python_output_dropped

    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *model.graph.output]}
    present = {o.name for o in model.graph.output}
    wanted = [o for node in model.graph.node for o in node.output
              if typed.get(o) == elem_type and (only is None or o in only)]
    model.graph.output.extend(onnx.helper.make_tensor_value_info(t, typed.get(t, elem_type), None)
                              for t in [*wanted, *extra] if t not in present)
    with python_output_dropped():
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session, wanted


def fp32_between_kept(model: Any) -> Any:
    """``model`` (converted to FP16 with layers kept in FP32) without the FP16 round trips between kept layers:
    ONNX Runtime's converter casts every kept node's output to FP16 and back for the next kept node, which
    overflows what the node was kept for. A Cast to FP32 of such an FP16 copy reads the FP32 tensor instead (an
    Identity where it is a graph output); FP16 copies nothing reads are dropped, and the graph is re-sorted."""
    import onnx

    def cast_to(node: Any) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    produced = {o: n for n in model.graph.node for o in n.output}
    outputs = {o.name for o in model.graph.output}
    renamed: dict[str, str] = {}
    dropped: set[int] = set()
    for node in model.graph.node:
        half = produced.get(node.input[0]) if cast_to(node) == onnx.TensorProto.FLOAT else None
        if half is None or cast_to(half) != onnx.TensorProto.FLOAT16:
            continue
        if node.output[0] in outputs:
            node.op_type, node.input[0] = "Identity", half.input[0]
            del node.attribute[:]
        else:
            renamed[node.output[0]] = half.input[0]
            dropped.add(id(node))
    kept = [n for n in model.graph.node if id(n) not in dropped]
    for node in kept:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    read = {i for n in kept for i in n.input} | outputs
    kept = [n for n in kept if cast_to(n) != onnx.TensorProto.FLOAT16 or n.output[0] in read]  # unread FP16 copies
    del model.graph.node[:]
    model.graph.node.extend(_in_graph_order(model, kept))
    made = {o for n in kept for o in n.output}
    infos = [v for v in model.graph.value_info if v.name in made]
    del model.graph.value_info[:]
    model.graph.value_info.extend(infos)
    return model


def _in_graph_order(model: Any, nodes: list[Any]) -> list[Any]:
    """``nodes`` sorted so that each comes after what it reads (the converter appends its Casts at the end)."""
    ready = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer} | {""}
    ordered: list[Any] = []
    waiting = list(nodes)
    while waiting:
        runnable = [n for n in waiting if all(i in ready for i in n.input)]
        if not runnable:  # a subgraph's outer names, or a cycle: the rest as they were
            return ordered + waiting
        for node in runnable:
            ready.update(node.output)
        ordered += runnable
        done = {id(n) for n in runnable}
        waiting = [n for n in waiting if id(n) not in done]
    return ordered
