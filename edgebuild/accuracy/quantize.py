"""Precision candidates made from the verified FP32 ONNX: FP16, and INT8 as explicit Q/DQ.

INT8 uses ONNX Runtime's post-training static quantizer (``onnxruntime.quantization``) in QDQ
format with per-channel weights: a maintained quantizer that writes standard
QuantizeLinear/DequantizeLinear pairs, which TensorRT 8.5+ builds as explicit INT8 (TensorRT 10
deprecates implicit calibrators in favour of Q/DQ), and which ONNX Runtime on the CPU runs, so
the same file is measured here and built there. Calibration runs once per model
and is kept as activation statistics (``edgebuild.accuracy.calibration``), from which every range
method and every variant the gate tries is made without another pass over the images; ONNX
Runtime's quantizer reads each method's ranges from its own calibration cache format.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.errors import ExportError
from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress, python_output_dropped

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = []



@dataclass(frozen=True)
class Candidate:
    precision: str  # fp32 | fp16 | int8 | int8-mixed | fp8 | nvfp4
    onnx_path: Path
    kept_fp32: tuple[str, ...] = ()  # INT8 fallback: nodes left in floating point
    note: str = ""
    emulated: Path | None = None  # NVFP4: the FP32 graph that emulates ``onnx_path`` on the CPU (what is measured)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with python_output_dropped():
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def fp16_candidate(source: Path, out: Path, batches: Sequence[np.ndarray] = (), input_name: str = "") -> Candidate:
    """FP16 weights and activations, FP32 inputs and outputs (as TensorRT's FP16 mode keeps I/O); with ``batches``
    (validation images), the layers FP16 cannot carry, measured on them (``fp16_float_layers``), kept in FP32."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from edgebuild.accuracy.fp16.float_layers import FEEDS, fp16_float_layers, fp32_between_kept

    found = fp16_float_layers(source, list(batches), input_name) if len(batches) else {}
    with _quiet():
        model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True, node_block_list=list(found))
    onnx.save_model(fp32_between_kept(model) if found else model, str(out))
    note = "onnxruntime.transformers.float16, FP32 I/O"
    if found:  # the nodes found, each with why; the elementwise nodes feeding one kept with it, counted
        said = {name: why for name, why in found.items() if not why.startswith(FEEDS)}
        note += (f"; {len(found)} layer(s) kept in FP32, measured on {sum(len(b) for b in batches)} validation "
                 "images: " + "; ".join(f"{name} ({why})" for name, why in said.items())
                 + (f"; and {len(found) - len(said)} elementwise node(s) feeding them" if len(found) > len(said)
                    else ""))
    return Candidate("fp16", out, tuple(found), note)


def calibration_feeds(project: Project, progress: bool, limit: int | None = None
                      ) -> tuple[Iterator[dict[str, np.ndarray]], int, Any]:
    """The preprocessed calibration images in batches the model's profile allows (up to 8), their
    count and a progress bar to close."""
    from tqdm import tqdm

    from edgebuild.accuracy.validation_set import evaluation_batch_size, preprocess_spec
    from edgebuild.datasets.project_data import calibration_images, read_image
    from edgebuild.runtime.base.vision import preprocess, stack_batch

    paths = calibration_images(project)[:limit]
    spec = preprocess_spec(project)
    name = project.model.inputs[0].name
    size = evaluation_batch_size(project)
    bar = tqdm(total=len(paths), desc="calibrate", unit="img", disable=not progress, leave=False)

    def feeds() -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, len(paths), size):
            tensors = [preprocess(read_image(p, spec.channel_order == "GRAY"), spec)[0]
                       for p in paths[start:start + size]]
            yield {name: stack_batch(tensors)}

    return feeds(), len(paths), bar


def calibration_tensors_of(project: Project, prepared: Path, placement: QdqPlacement
                           ) -> tuple[list[str], list[str], list[str]]:
    """The activations ONNX Runtime's quantizer looks up ranges for, those its Q/DQ pairs read, and
    the weighted layers' inputs (``edgebuild.accuracy.calibration.calibration_tensors``)."""
    import onnx

    from edgebuild.accuracy.calibration import calibration_tensors
    from edgebuild.project.schema import WEIGHTED_OPS

    model = onnx.load(str(prepared), load_external_data=False)
    op_types = list(placement.op_types) + (["Add"] if placement.residual_adds else [])
    return calibration_tensors(model, placement.nodes, op_types, WEIGHTED_OPS)


def prepare_for_quantization(source: Path, out: Path) -> Path:
    """ONNX Runtime's recommended pre-processing (shape inference, graph clean-up) into ``out``.

    Symbolic shape inference first; where it cannot finish (it fails on some exported graphs)
    ONNX's own shape inference; where both fail, ``source`` itself, returned as it is.
    """
    from onnxruntime.quantization import quant_pre_process

    source, out = source.resolve(), out.resolve()
    previous = os.getcwd()
    for symbolic in (True, False):
        try:
            # its symbolic shape inference drops temporary files into the working directory
            with _quiet(), tempfile.TemporaryDirectory() as scratch:
                os.chdir(scratch)
                try:
                    quant_pre_process(str(source), str(out), skip_symbolic_shape=not symbolic)
                finally:
                    os.chdir(previous)
            return out
        except Exception:  # the pre-processor raises plain exceptions for graphs it cannot infer
            continue
    return source


#: what an activation passes through between a weighted op and a residual Add that TensorRT fuses
_FUSED_ACTIVATIONS = frozenset({"Relu", "BatchNormalization", "LeakyRelu", "Clip"})


@dataclass(frozen=True)
class QdqPlacement:
    """Which nodes of a model get Q/DQ on their inputs (and weights): TensorRT's placement."""

    nodes: tuple[str, ...]  # graph order
    op_types: tuple[str, ...]
    residual_adds: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.nodes


def qdq_placement(project: Project, source: Path) -> QdqPlacement:
    """The nodes TensorRT would run in INT8: ``quantize.op_types`` (inputs and weights), plus the
    Adds that join a weighted op's output with another activation (skip connections, which
    TensorRT fuses into the convolution when the residual input is quantized). Everything else,
    the detection head's decode math (Add/Mul with constants, Exp, Sigmoid, Concat, Resize), stays
    in float: TensorRT would not run it in INT8, and Q/DQ there only costs accuracy. Nor does
    anything from a TopK on to the next layer (an NMS-free head's top-k and the gathers after it, NMS
    inside; a DETR's decoder layers after its encoder's choice of queries are layers again):
    quantized scores reorder the top-k and quantized class indices change the class. Nor the
    expectation a DFL head takes over its softmax (``_expectations``): decode math written as a Conv."""
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    op_types = tuple(project.quantize.op_types)
    produced = {out: node for node in model.graph.node for out in node.output}
    constants = {i.name for i in model.graph.initializer}

    def from_weighted(tensor: str, hops: int = 0) -> bool:
        node = produced.get(tensor)
        if node is None:
            return False
        if node.op_type in op_types:
            return True
        return node.op_type in _FUSED_ACTIVATIONS and hops < 2 and from_weighted(node.input[0], hops + 1)

    def activation(tensor: str) -> bool:
        node = produced.get(tensor)
        return tensor not in constants and node is not None and node.op_type != "Constant"

    residual = tuple(n.name for n in model.graph.node
                     if project.quantize.residual_add and n.op_type == "Add" and len(n.input) == 2
                     and all(activation(i) for i in n.input) and any(from_weighted(i) for i in n.input))
    tail = _selection_tail(model, frozenset(op_types)) | _expectations(model)
    residual = tuple(n for n in residual if n not in tail)
    nodes = tuple(n.name for n in model.graph.node if n.name and n.name not in tail
                  and (n.op_type in op_types or n.name in residual))
    return QdqPlacement(nodes, op_types, residual)


def _expectations(model: Any) -> set[str]:
    """The Convs that take an expectation over a softmax: a 1x1 Conv with one output channel and weights 0..n-1
    reading a Softmax, as Ultralytics' DFL turns each side's distribution over ``reg_max`` bins into a distance
    (weights 0..reg_max-1). Box decode math, not a learned layer: its input, probabilities in 0..1, quantized to
    1/127 steps moves every box side by up to reg_max/254 of a stride (on a trained YOLOv10n, INT8 kept 0.969 of
    mAP50-95 with it quantized and 1.003 with it in float: docs/accuracy.md)."""
    from onnx import numpy_helper

    produced = {out: node for node in model.graph.node for out in node.output}
    weights = {i.name: i for i in model.graph.initializer}
    found = set()
    for node in model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or not node.name or node.input[1] not in weights:
            continue
        source, weight = produced.get(node.input[0]), weights[node.input[1]]
        if source is None or source.op_type != "Softmax" or len(weight.dims) != 4 or weight.dims[0] != 1 \
                or tuple(weight.dims[2:]) != (1, 1) or weight.dims[1] > 1024:
            continue
        values = numpy_helper.to_array(weight).reshape(-1)
        if np.array_equal(values, np.arange(values.size, dtype=values.dtype)):  # the bins 0..n-1
            found.add(node.name)
    return found


#: where a detector selects its detections: these nodes and every one after them stay in float
SELECTION_OPS = frozenset({"TopK", "NonMaxSuppression", "GatherElements", "GatherND", "ScatterND"})


def _selection_tail(model: Any, layers: frozenset[str] = frozenset()) -> set[str]:
    """The names of the selection nodes (``SELECTION_OPS``) and of every node that reads what they made, up to
    the next layer (``layers``: the weighted op types): a DETR's encoder picks its queries with a TopK and its
    decoder's layers run on them, which quantize as any layer's (the decode math between stays in float)."""
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    wanted = [n for n in model.graph.node if n.op_type in SELECTION_OPS]
    seen: set[int] = set()
    while wanted:
        node = wanted.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        wanted += [r for out in node.output for r in readers.get(out, []) if r.op_type not in layers]
    return {n.name for n in model.graph.node if id(n) in seen and n.name}


def int8_candidate(project: Project, source: Path, out: Path, ranges: Path, placement: QdqPlacement, *,
                   exclude: tuple[str, ...] = (), how: str = "") -> Candidate:
    """Static INT8 Q/DQ on the placement's nodes but ``exclude``, with the activation ranges of ``ranges``
    (ONNX Runtime's calibration cache, written by ``edgebuild.accuracy.calibration``).

    Signed symmetric INT8 (zero point 0) for weights (per channel) and activations (per tensor),
    Q/DQ on inputs only (never on a weighted op's output), biases left in float (TensorRT takes
    DequantizeLinear on INT8 only), one Q/DQ pair per consumer so a node kept in float reads the
    float tensor even where a neighbour reads the same tensor quantized.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    op_types = list(placement.op_types) + (["Add"] if placement.residual_adds else [])
    extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
             "DedicatedQDQPair": True, "OpTypesToExcludeOutputQuantization": op_types}
    nodes = [n for n in placement.nodes if n not in set(exclude)]
    try:
        with _quiet():
            quantize_static(
                str(source), str(out), None, quant_format=QuantFormat.QDQ,
                per_channel=project.quantize.per_channel, activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax, extra_options=extra,
                op_types_to_quantize=op_types, nodes_to_quantize=nodes, calibration_cache_path=str(ranges),
            )
    except Exception as exc:  # the quantizer raises plain exceptions for graphs it cannot handle
        raise ExportError(f"{source}: INT8 quantization failed: {type(exc).__name__}: {exc}") from exc
    if exclude:
        _unshare_kept_inputs(out, exclude)
    leaks = float_leaks(out, exclude)
    if leaks:  # a bug of ours or the quantizer's: never measure a graph that is not what it says
        raise ExportError(f"{out}: layers meant to stay in float still read quantized tensors: {', '.join(leaks)}")
    how = (f"{how or 'calibrated'}, {'per-channel' if project.quantize.per_channel else 'per-tensor'} "
           f"weights, Q/DQ on {len(nodes)} node(s) ({', '.join(placement.op_types)}"
           + (f", {len(placement.residual_adds)} residual Add" if placement.residual_adds else "") + ")")
    if exclude:
        return Candidate("int8-mixed", out, tuple(exclude), f"Q/DQ INT8, {len(exclude)} layer(s) kept in float; {how}")
    return Candidate("int8", out, note=f"Q/DQ INT8, {how}")


def _unshare_kept_inputs(path: Path, kept: tuple[str, ...]) -> None:
    """Give the nodes of ``kept`` their float inputs back where ONNX Runtime's quantizer shared a Q/DQ pair.

    Its ``DedicatedQDQPair`` makes one pair per quantized reader only where a tensor has two or more of
    them; a tensor with one quantized reader gets a single pair whose output every reader reads, those
    kept in float too (a YOLO26 feature map read by the next stage's Conv and by the head's branches)."""
    import onnx

    model = onnx.load(str(path))
    produced = {out: node for node in model.graph.node for out in node.output}
    wanted, changed = set(kept), False
    for node in model.graph.node:
        if node.name not in wanted:
            continue
        for k, name in enumerate(node.input):
            dequantize = produced.get(name)
            if dequantize is None or dequantize.op_type != "DequantizeLinear":
                continue
            quantize = produced.get(dequantize.input[0])
            if quantize is not None and quantize.op_type == "QuantizeLinear":  # an activation's pair, not a weight's
                node.input[k] = quantize.input[0]
                changed = True
    if changed:
        onnx.save(model, str(path))


def float_leaks(path: Path, kept: tuple[str, ...]) -> list[str]:
    """Nodes of ``kept`` that read a DequantizeLinear output: not really in float."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    produced = {out: node.op_type for node in model.graph.node for out in node.output}
    wanted = set(kept)
    return [n.name for n in model.graph.node
            if n.name in wanted and any(produced.get(i) == "DequantizeLinear" for i in n.input)]


def graph_digest(path: Path) -> str:
    """Identity of a candidate's graph: two candidates with the same digest measure the same thing."""
    import hashlib

    import onnx

    model = onnx.load(str(path), load_external_data=False)
    model.graph.ClearField("doc_string")
    return hashlib.sha256(model.graph.SerializeToString()).hexdigest()


def check_calibration(project: Project, progress: Progress) -> None:
    """Refuse calibration data that cannot give INT8 ranges; warn about data too small or too close
    to the validation set to trust."""
    from edgebuild.content import file_sha256
    from edgebuild.datasets.project_data import calibration_images, load_validation_set
    from edgebuild.errors import DataError

    images = calibration_images(project)
    where = (f"data.calibration_images ({project.path(project.data.calibration_images)})"
             if project.data.calibration_images else f"data.dataset split {project.data.calibration_split!r}")
    hashes = [file_sha256(p) for p in images]
    distinct = set(hashes)
    if len(images) > 1 and len(distinct) == 1:
        raise DataError(f"{where}: all {len(images)} images in it are identical: INT8 ranges from one "
                        "picture repeated would clip what real inputs show",
                        hint="calibrate on a few dozen representative images of the application")
    if len(images) < 8:
        progress(f"gate: WARNING: only {len(images)} calibration image(s); INT8 ranges from so few rarely hold "
                 "on real inputs (use 32 or more)")
    elif len(distinct) < len(images) * 0.8:
        progress(f"gate: WARNING: {where}: only {len(distinct)} of {len(images)} calibration images are distinct; "
                 "repeated pictures weigh their content over the rest")
    classes = len(project.task.classes or [])
    if classes and len(distinct) < classes:
        progress(f"gate: WARNING: {where}: {len(distinct)} distinct calibration image(s) for {classes} classes; "
                 "ranges from fewer pictures than the model has classes miss what some classes look like")
    _, samples = load_validation_set(project)
    shared = len(distinct & {file_sha256(s.path) for s in samples})
    if shared:
        progress(f"gate: WARNING: {where}: {shared} calibration image(s) have the content of validation images; "
                 "ranges fitted to the images the gate measures on inflate INT8's retention (use the training split)")


def layer_errors(int8_path: Path, batches: list[np.ndarray], input_name: str) -> list[JsonObject]:
    """How much quantizing each layer's inputs loses, worst first, in one pass over ``batches``.

    For every activation Q/DQ pair of the INT8 graph the tensor before quantization is compared
    with what DequantizeLinear gives back, in the same run: the error that this one quantization
    adds, not what accumulated upstream. The signal-to-noise ratio is taken per channel and
    averaged in dB, so a tensor whose small channels are crushed by one large one (per-tensor
    scales) scores low even though its energy is dominated by the channel that survives. A layer
    scores its worst input.
    """
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(int8_path))
    produced = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    pairs = []  # (float tensor, dequantized tensor, layer reading it)
    for node in model.graph.node:
        quantize = produced.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if quantize is not None and quantize.op_type == "QuantizeLinear":
            pairs += [(quantize.input[0], node.output[0], c.name) for c in consumers.get(node.output[0], [])]
    if not pairs:
        return []
    graph_inputs = {i.name for i in model.graph.input}
    wanted = sorted({t for pair in pairs for t in pair[:2] if t not in graph_inputs})
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in wanted if t not in present)
    with _quiet():
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    signal: dict[tuple[str, str], np.ndarray] = {}
    noise: dict[tuple[str, str], np.ndarray] = {}
    for batch in batches:
        values = dict(zip(wanted, session.run(wanted, {input_name: batch})))
        values[input_name] = batch
        for before, after, _ in pairs:
            x, y = values[before].astype(np.float64), values[after].astype(np.float64)
            axes = tuple(i for i in range(x.ndim) if i != (1 if x.ndim == 4 else x.ndim - 1))
            key = (before, after)
            signal[key] = signal.get(key, 0) + np.sum(x * x, axis=axes)
            noise[key] = noise.get(key, 0) + np.sum((x - y) ** 2, axis=axes)
    scores: dict[str, float] = {}
    for before, after, layer in pairs:
        s, n = signal[(before, after)], noise[(before, after)]
        live = s > 0
        if not live.any():
            continue
        per_channel = 10 * np.log10(s[live] / np.maximum(n[live], s[live] * 1e-12))
        score = float(np.mean(np.minimum(per_channel, 120.0)))
        scores[layer] = min(score, scores.get(layer, score))
    return [{"layer": layer, "sqnr_db": round(score, 2)} for layer, score in sorted(scores.items(), key=lambda i: i[1])]
