"""ONNX Runtime on the CPU: the reference backend that exists on every build host."""

from pathlib import Path
from typing import Dict, Optional

import numpy as np

from edgebuild.errors import ExportError

__all__ = ["OnnxRuntimeRunner"]


class OnnxRuntimeRunner:
    """Runs an ONNX file (inline or external-data layout) with ONNX Runtime's CPU provider."""

    def __init__(self, onnx_path: Path, *, threads: Optional[int] = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only; ORT's warnings are not the user's problem
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types for invalid models
            raise ExportError(f"{onnx_path}: ONNX Runtime cannot load the model: {exc}") from None
        self.path = Path(onnx_path)
        self.backend = f"onnxruntime-cpu {ort.__version__}"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise ExportError(f"{self.path}: inputs {missing} not given (model inputs: {self.input_names})")
        try:
            values = self.session.run(self.output_names, {n: inputs[n] for n in self.input_names})
        except Exception as exc:
            shapes = {n: list(inputs[n].shape) for n in self.input_names}
            raise ExportError(f"{self.path}: ONNX Runtime failed at input shapes {shapes}: {exc}") from None
        return dict(zip(self.output_names, values))
