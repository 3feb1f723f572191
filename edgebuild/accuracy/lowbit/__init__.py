"""FP8 and NVFP4 candidates (Jetson AGX Thor's Blackwell tensor cores), measured on the CPU.

``formats`` holds the number formats in numpy (E4M3, E2M1, NVFP4's two-level block scales), ``fp8``
the FP8 candidate (ONNX Q/DQ in float8e4m3fn, which ONNX Runtime runs on the CPU as it is), ``nvfp4``
the NVFP4 candidate: the ONNX TensorRT builds (FP4 weights and ``trt::TRT_FP4DynamicQuantize``) and
beside it the graph that emulates it in FP32 for ONNX Runtime, which has no FP4 kernels.
docs/accuracy.md ("FP8 and NVFP4") says what is emulated and what differs from the device.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

__all__: list[str] = []

#: the precisions past INT8, made from the INT8 candidate's calibration statistics and placement
LOWBIT = ("fp8", "nvfp4")
#: the version of how they are made (a stored candidate of another version is made again)
LOWBIT_VERSION = 1


def host_runner(path: Path) -> OnnxRuntimeRunner:
    """ONNX Runtime on the CPU for a gate candidate: basic graph optimizations only where it holds float8
    constants (an FP8 or NVFP4 candidate: ``OnnxRuntimeRunner``'s ``basic_optimizations`` says why)."""
    import onnx

    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    float8 = (onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
              onnx.TensorProto.FLOAT8E5M2FNUZ)
    model = onnx.load(str(path), load_external_data=False)
    return OnnxRuntimeRunner(path, basic_optimizations=any(i.data_type in float8 for i in model.graph.initializer))


def emulation_path(folder: Path, name: str, nms_inside: bool) -> Path | None:
    """The emulated graph ONNX Runtime measures in place of a candidate (with the decode appended), or None."""
    return (folder / (f"detections-{name}" if nms_inside else name)) if name else None
