"""Precision candidates made from the verified FP32 ONNX: FP16, and INT8 as explicit Q/DQ.

INT8 uses ONNX Runtime's post-training static quantizer (``onnxruntime.quantization``) in QDQ
format with per-channel weights: a maintained quantizer that writes standard
QuantizeLinear/DequantizeLinear pairs, which TensorRT 8.5+ builds as explicit INT8 (TensorRT 10
deprecates implicit calibrators in favour of Q/DQ), and which ONNX Runtime on the CPU runs, so
the same file is measured here and built there. Calibration runs once per model and is kept
as ONNX Runtime's calibration cache, so the sensitivity analysis can quantize many variants.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.errors import ExportError

if TYPE_CHECKING:
    from edgebuild.config import Project

#: ops that only move or reshape data: quantizing them alone changes nothing worth ranking
_SHAPE_ONLY = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Gather", "Split",
                         "Slice", "Expand", "Tile", "Identity", "Shape", "Constant"})

Report = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    precision: str  # fp32 | fp16 | int8 | int8-mixed
    onnx_path: Path
    kept_fp32: tuple[str, ...] = ()  # INT8 fallback: nodes left in floating point
    note: str = ""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(io.StringIO()):
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def fp16_candidate(source: Path, out: Path) -> Candidate:
    """FP16 weights and activations, FP32 inputs and outputs (as TensorRT's FP16 mode keeps I/O)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with _quiet():
        model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save_model(model, str(out))
    return Candidate("fp16", out, note="onnxruntime.transformers.float16, FP32 I/O")


class _CalibrationImages:
    """Feeds preprocessed calibration images, one per step, to ONNX Runtime's calibrator."""

    def __init__(self, project: Project, progress: bool) -> None:
        from tqdm import tqdm

        from edgebuild.datasets import calibration_images, read_image
        from edgebuild.evaluate import preprocess_spec
        from edgebuild.runtime.vision import preprocess

        self._paths = calibration_images(project)
        self._spec = preprocess_spec(project)
        self._read, self._preprocess = read_image, preprocess
        self._name = project.model.inputs[0].name
        self._index = 0
        self._bar = tqdm(total=len(self._paths), desc="calibrate", unit="img", disable=not progress, leave=False)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._index >= len(self._paths):
            self._bar.close()
            return None
        path = self._paths[self._index]
        self._index += 1
        self._bar.update(1)
        tensor, _ = self._preprocess(self._read(path, self._spec.channel_order == "GRAY"), self._spec)
        return {self._name: tensor[None]}

    def rewind(self) -> None:
        self._index = 0

    def __len__(self) -> int:
        return len(self._paths)


def _reader_class() -> type:
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(_CalibrationImages, CalibrationDataReader):
        pass

    return Reader


def _method(project: Project) -> tuple[Any, dict[str, Any]]:
    from onnxruntime.quantization import CalibrationMethod

    settings = project.quantize
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[settings.calibration_method]
    options = {"CalibPercentile": settings.percentile} if settings.calibration_method == "percentile" else {}
    return method, options


def prepare_for_quantization(source: Path, out: Path) -> Path:
    """ONNX Runtime's recommended pre-processing (shape inference, graph clean-up)."""
    from onnxruntime.quantization import quant_pre_process

    source, out = source.resolve(), out.resolve()
    previous = os.getcwd()
    try:
        # its symbolic shape inference drops temporary files into the working directory
        with _quiet(), tempfile.TemporaryDirectory() as scratch:
            os.chdir(scratch)
            try:
                quant_pre_process(str(source), str(out), skip_symbolic_shape=False)
            finally:
                os.chdir(previous)
    except Exception:  # symbolic shape inference fails on some graphs; the plain model still quantizes
        return source
    return out


def int8_candidate(project: Project, source: Path, out: Path, calibration_cache: Path, *,
                   exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None,
                   progress: bool = False) -> Candidate:
    """Static INT8 Q/DQ. The first call calibrates and writes ``calibration_cache``; later reuse it."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    method, extra = _method(project)
    reader = None if calibration_cache.is_file() else _reader_class()(project, progress)
    # TensorRT takes only symmetric INT8 (zero point 0), for weights and activations alike
    extra = {**extra, "ActivationSymmetric": True, "WeightSymmetric": True}
    try:
        with _quiet():
            quantize_static(
                str(source), str(out), reader, quant_format=QuantFormat.QDQ,
                per_channel=project.quantize.per_channel, activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, calibrate_method=method, extra_options=extra,
                nodes_to_exclude=list(exclude) or None, nodes_to_quantize=list(only) if only else None,
                calibration_cache_path=str(calibration_cache),
            )
    except Exception as exc:  # the quantizer raises plain exceptions for graphs it cannot handle
        raise ExportError(f"{source}: INT8 quantization failed: {type(exc).__name__}: {exc}") from exc
    if exclude:
        return Candidate("int8-mixed", out, tuple(exclude),
                         f"Q/DQ INT8, {len(exclude)} layer(s) kept in floating point")
    settings = project.quantize
    return Candidate("int8", out, note=f"Q/DQ INT8, {settings.calibration_method} calibration, "
                                       f"{'per-channel' if settings.per_channel else 'per-tensor'} weights")


def quantizable_nodes(source: Path) -> list[str]:
    """Nodes the quantizer would quantize, in graph order, without pure data-movement ops."""
    import onnx
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    quantized_ops = set(QDQRegistry) | set(QLinearOpsRegistry)  # quantize_static's default op types
    model = onnx.load(str(source), load_external_data=False)
    return [n.name for n in model.graph.node
            if n.name and n.op_type in quantized_ops and n.op_type not in _SHAPE_ONLY]
