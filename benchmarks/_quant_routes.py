"""The INT8 routes the gate benchmark puts side by side, scored and counted one way for all of them.

- :class:`Scorer`: the project's metric (COCO mAP through edgebuild's decode, or top-1) on any
  subset of the validation set, for an ONNX model (ONNX Runtime) or any ``infer(batch) -> outputs``
  (an OpenVINO model); a raw Ultralytics head ``[N, 4+C, A]`` goes through the same adapter edgebuild
  appends to an Ultralytics export (boxes x1y1x2y2, per-class scores).
- :func:`float_layers`: weighted layers (Conv, ConvTranspose, Gemm, MatMul; OpenVINO's
  Convolution, GroupConvolution, ConvolutionBackpropData, MatMul) that do not run in INT8 (weight
  and data input both quantized, TensorRT's rule) and those with INT8 weights, for an ONNX model
  (through DequantizeLinear) and an OpenVINO IR (FakeQuantize, or an int8 constant) alike;
  :func:`activation_quantizers` says what the activations' Q/DQ are (TensorRT takes int8 with
  zero point 0 only).
- :func:`run_nncf`: NNCF's ``quantize_with_accuracy_control`` on the project's FP32 ONNX, with
  TensorRT-compatible settings (preset PERFORMANCE: symmetric weights and activations, full-range
  weights: no overflow fix) or NNCF's defaults.
- :func:`run_ultralytics_export`: Ultralytics' own INT8 export (``quantize=8``) to ONNX (ONNX
  Runtime's static quantization) or OpenVINO (NNCF), calibrated on the same split.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgebuild.project.schema import WEIGHTED_OPS

OPENVINO_WEIGHTED = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")


@dataclass
class Route:
    """One route's result, as the table prints it."""

    name: str
    seconds: float
    model: str  # what the route produced ("int8", "int8+fp32 x3", an export's format)
    value: float  # the metric, by the Scorer unless ``scored_by`` says otherwise
    retention: float
    in_float: int
    quantized: int
    notes: list[str] = field(default_factory=list)
    short: str = ""  # the label of its notes


# -- counting ---------------------------------------------------------------------------------------

def float_layers(model) -> tuple[int, int, int]:  # noqa: ANN001 (an onnx.ModelProto or an openvino.Model)
    """(weighted layers that run in INT8, weighted layers with INT8 weights, weighted layers in all).

    A layer runs in INT8 (TensorRT's rule) only when both its weight and its data input come quantized:
    through DequantizeLinear in ONNX, through a FakeQuantize (or an int8 constant) in an OpenVINO IR.
    A layer with INT8 weights and a float input is counted in float (weight-only: float compute).
    """
    if hasattr(model, "graph"):
        producer = {out: node for node in model.graph.node for out in node.output}
        weighted = [n for n in model.graph.node if n.op_type in WEIGHTED_OPS]
        weights = [n for n in weighted if len(n.input) > 1 and n.input[1] in producer
                   and producer[n.input[1]].op_type == "DequantizeLinear"]
        both = [n for n in weights if _quantized_input(n.input[0], producer)]
        return len(both), len(weights), len(weighted)
    weighted = [op for op in model.get_ordered_ops() if op.get_type_name() in OPENVINO_WEIGHTED
                and _from_constant(op.input_value(1).get_node())]
    weights = [op for op in weighted if _int8_weight(op.input_value(1).get_node())]
    both = [op for op in weights if _quantized_activation(op.input_value(0).get_node())]
    return len(both), len(weights), len(weighted)


#: ops INT8 passes through as it is (TensorRT moves Q/DQ across them; NNCF quantizes their inputs instead)
KEEPS_INT8 = ("Concat", "Split", "MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten", "Transpose",
              "Squeeze", "Unsqueeze", "Slice", "Resize", "Pad", "Identity")


def _quantized_input(tensor: str, producer: dict, depth: int = 6) -> bool:
    """A data input that comes from a DequantizeLinear, maybe through ops that keep INT8 (a Concat of
    quantized inputs, a MaxPool, a Reshape): where NNCF puts the quantizer before a Concat, not after."""
    node = producer.get(tensor)
    if node is None or depth == 0:
        return False
    if node.op_type == "DequantizeLinear":
        return True
    if node.op_type == "Concat":
        return all(_quantized_input(i, producer, depth - 1) for i in node.input)
    return node.op_type in KEEPS_INT8 and _quantized_input(node.input[0], producer, depth - 1)


_PASS_THROUGH = ("Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze")


def _from_constant(node) -> bool:  # noqa: ANN001 (an openvino Node)
    """A weight: a Constant, maybe through a FakeQuantize or a decompression chain (not an activation)."""
    for _ in range(8):
        kind = node.get_type_name()
        if kind == "Constant":
            return True
        if kind not in (*_PASS_THROUGH, "FakeQuantize"):
            return False
        node = node.input_value(0).get_node()
    return False


def _int8_weight(node) -> bool:  # noqa: ANN001
    for _ in range(8):
        kind = node.get_type_name()
        if kind == "FakeQuantize":
            return True
        if kind == "Constant":
            return node.get_element_type().get_type_name() in ("i8", "u8")
        if kind not in _PASS_THROUGH:
            return False
        node = node.input_value(0).get_node()
    return False


def _quantized_activation(node, depth: int = 6) -> bool:  # noqa: ANN001
    """An activation that reaches its layer quantized: from a FakeQuantize, maybe through ops that keep
    INT8 as it is (a Concat of quantized inputs, a Split, a MaxPool, a Reshape)."""
    kind = node.get_type_name()
    if kind == "FakeQuantize":
        return True
    if depth == 0:
        return False
    if kind == "Concat":
        return all(_quantized_activation(i.get_node(), depth - 1) for i in node.input_values())
    if kind in ("Convert", "Reshape", "Transpose", "Split", "VariadicSplit", "MaxPool", "AvgPool", "StridedSlice",
                "Interpolate", "Pad"):
        return _quantized_activation(node.input_value(0).get_node(), depth - 1)
    return False


def activation_quantizers(model) -> str:  # noqa: ANN001 (an onnx.ModelProto)
    """What the activations' QuantizeLinear nodes are, e.g. ``68 int8 zp=0, 3 uint8 zp=0``."""
    from onnx import numpy_helper

    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    kinds: Counter = Counter()
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants:
            continue
        zero = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(1, np.uint8)
        kinds[f"{zero.dtype} zp{'=0' if not np.any(zero) else '!=0'}"] += 1
    return ", ".join(f"{n} {k}" for k, n in kinds.most_common()) or "none"


# -- scoring ----------------------------------------------------------------------------------------

def ultralytics_head(raw: np.ndarray) -> dict[str, np.ndarray]:
    """``[N, 4+C, A]`` (centre, size, class scores) to edgebuild's ``boxes [N, A, 4]`` and ``scores [N, A, C]``."""
    raw = raw.transpose(0, 2, 1)
    centre, size = raw[..., :2], raw[..., 2:4]
    return {"boxes": np.concatenate([centre - size / 2, centre + size / 2], -1), "scores": raw[..., 4:]}


class Scorer:
    """The project's metric on any subset of the validation set, with edgebuild's evaluation code."""

    def __init__(self, project) -> None:  # noqa: ANN001 (edgebuild.project.config.Project)
        from edgebuild.accuracy.evaluate import ValidationSet

        self.project = project
        self.data = ValidationSet(project, batch_size=1)
        self.items = list(self.data.batches())  # (samples, batch, transforms), one image each

    def __call__(self, onnx_model, items) -> float:  # noqa: ANN001 (NNCF's validation_fn: a ModelProto, items)
        import onnxruntime as ort

        session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        outputs = [o.name for o in session.get_outputs()]
        if len(outputs) == 1 and self.project.task.kind == "detection":  # a raw Ultralytics head
            return self.score(lambda batch: ultralytics_head(session.run(None, {name: batch})[0]), items)
        return self.score(lambda batch: dict(zip(outputs, session.run(outputs, {name: batch}))), items)

    def score(self, infer: Callable[[np.ndarray], dict[str, np.ndarray]], items) -> float:  # noqa: ANN001
        from edgebuild.accuracy.evaluate import _ClassificationCollector, _DetectionCollector

        items = list(items)
        detection = self.project.task.kind == "detection"
        collect = (_DetectionCollector if detection else _ClassificationCollector)(self.project, self.data)
        for samples, batch, transforms in items:
            collect.add(samples, transforms, infer(batch))
        if detection and len(items) < len(self.items):  # mAP over just these images
            from edgebuild.accuracy.metrics import coco_detection_metrics

            ids = {s.image_id for samples, _, _ in items for s in samples}
            gt = copy.deepcopy(self.data.coco.ground_truth)
            gt["images"] = [i for i in gt["images"] if i["id"] in ids]
            gt["annotations"] = [a for a in gt["annotations"] if a["image_id"] in ids]
            return coco_detection_metrics(gt, collect.results)[self.project.metric]
        return collect.metrics()[self.project.metric]

    def openvino(self, xml: Path) -> float:
        import openvino as ov

        compiled = ov.Core().compile_model(str(xml), "CPU")
        output = compiled.output(0)
        detection = self.project.task.kind == "detection"
        logits = self.project.task.postprocess.logits_output if not detection else ""
        return self.score(lambda batch: ultralytics_head(compiled(batch)[output]) if detection
                          else {logits: compiled(batch)[output]}, self.items)


def calibration_items(project) -> list[dict[str, np.ndarray]]:  # noqa: ANN001
    """The project's calibration images, preprocessed as the gate feeds them (one image a step)."""
    from edgebuild.accuracy.evaluate import preprocess_spec
    from edgebuild.datasets.project_data import calibration_images, read_image
    from edgebuild.runtime.base.vision import preprocess

    spec, name = preprocess_spec(project), project.model.inputs[0].name
    gray = spec.channel_order == "GRAY"
    return [{name: preprocess(read_image(path, gray), spec)[0][None]} for path in calibration_images(project)]


# -- NNCF -------------------------------------------------------------------------------------------

def _nncf_settings(trt: bool) -> dict:
    import nncf
    from nncf.common.quantization.structs import QuantizationScheme
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        OverflowFix,
        QuantizationParameters,
    )

    if not trt:
        return {}
    # Forcing activations signed (TensorRT's int8) is refused by NNCF's hardware config ("incompatible with HW
    # capabilities"): a tensor that is never negative keeps an unsigned symmetric quantizer, which
    # activation_quantizers() shows.
    symmetric = QuantizationScheme.SYMMETRIC  # advanced_parameters' QuantizationMode
    return {"preset": nncf.QuantizationPreset.PERFORMANCE,
            "advanced_quantization_parameters": AdvancedQuantizationParameters(
                overflow_fix=OverflowFix.DISABLE,
                activations_quantization_params=QuantizationParameters(mode=symmetric),
                weights_quantization_params=QuantizationParameters(mode=symmetric))}


class _NncfSays(logging.Handler):
    """NNCF's log lines, kept: which operations its accuracy control reverted to float (weighted or not)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_nncf(project, onnx_path: Path, scorer: Scorer, calibration: list, fp32: float, *, trt: bool) -> Route:  # noqa: ANN001
    """NNCF's accuracy-controlled quantization, relative max_drop = 1 - min_retention, timed in this process."""
    import nncf
    import onnx

    model = onnx.load(str(onnx_path))
    full: list[float] = []  # the metric of every whole-set validation NNCF asks for: FP32, plain PTQ, ...

    def validate(candidate, items) -> float:  # noqa: ANN001
        items = list(items)
        value = scorer(candidate, items)
        if len(items) == len(scorer.items):
            full.append(value)
        return value

    said = _NncfSays()
    logging.getLogger("nncf").addHandler(said)
    started = time.perf_counter()
    try:
        quantized = nncf.quantize_with_accuracy_control(
            model, nncf.Dataset(calibration), nncf.Dataset(scorer.items), validate,
            max_drop=1 - project.accuracy.min_retention, drop_type=nncf.DropType.RELATIVE,
            subset_size=len(calibration), **_nncf_settings(trt))
    finally:
        seconds = time.perf_counter() - started
        logging.getLogger("nncf").removeHandler(said)
    reverted = [line.replace("\n\t", ", ").replace(":, ", ": ") for line in said.lines if "reverted back" in line]
    value = scorer(quantized, scorer.items)
    int8, weights, total = float_layers(quantized)
    label = "TRT-compatible (PERFORMANCE, symmetric)" if trt else "defaults"
    notes = [f"plain PTQ retention {full[1] / fp32:.3f}" if len(full) > 1 else "",
             f"activation Q: {activation_quantizers(quantized)}", *reverted,
             f"{len(full)} validations on all {len(scorer.items)} images (its ranking's included when its "
             "subset is the whole set)"]
    return Route(f"NNCF accuracy control, {label}", seconds, "int8" if int8 == total else f"int8, {total - int8} float",
                 value, value / fp32, total - int8, weights, [n for n in notes if n],
                 "NNCF TRT-compatible" if trt else "NNCF defaults")


# -- Ultralytics ------------------------------------------------------------------------------------

def run_ultralytics_export(checkpoint: Path, data_yaml: Path, size: int, fmt: str, scorer: Scorer, fp32: float,
                           work: Path) -> Route:
    """Ultralytics' INT8 export of ``checkpoint`` (calibrated on the train split, as edgebuild's default),
    timed as the export call, scored by the Scorer (ONNX Runtime, or OpenVINO's CPU runtime)."""
    from _trained_models import offline_ultralytics

    offline_ultralytics(work)
    from ultralytics import YOLO

    work.mkdir(parents=True, exist_ok=True)
    local = work / checkpoint.name
    shutil.copy(checkpoint, local)
    here = os.getcwd()
    os.chdir(work)
    try:
        started = time.perf_counter()
        exported = Path(YOLO(str(local)).export(format=fmt, quantize=8, data=str(data_yaml), split="train", imgsz=size,
                                                batch=1, dynamic=False, device="cpu"))
        seconds = time.perf_counter() - started
    finally:
        os.chdir(here)
    exported = exported if exported.is_absolute() else work / exported
    if fmt == "onnx":
        import onnx

        model = onnx.load(str(exported))
        value = scorer(model, scorer.items)
        int8, weights, total = float_layers(model)
        notes = ["ONNX Runtime quantize_static (Ultralytics' settings: per-tensor, asymmetric activations, "
                 "only Conv/Gemm/MatMul quantized)",
                 f"activation Q: {activation_quantizers(model)}", "scored: the Scorer on ONNX Runtime"]
    else:
        import openvino as ov

        xml = next(exported.glob("*.xml")) if exported.is_dir() else exported
        value = scorer.openvino(xml)
        int8, weights, total = float_layers(ov.Core().read_model(str(xml)))
        notes = ["NNCF PTQ, preset MIXED (asymmetric activations); Detect's decode (DFL, Sigmoid, box "
                 "arithmetic) kept out, its convolutions quantized",
                 "scored: the Scorer on OpenVINO's CPU runtime"]
    return Route(f"Ultralytics export format={fmt} quantize=8", seconds, f"{fmt} int8", value, value / fp32,
                 total - int8, weights, notes, f"Ultralytics {fmt}")
