"""ONNX Runtime on the CPU: the reference backend that exists on every build host."""

from pathlib import Path
from typing import Dict, Optional

import numpy as np

from edgebuild.errors import ExportError

__all__ = ["OnnxRuntimeRunner"]

class OnnxRuntimeRunner:
    """Runs an ONNX file (inline or external-data layout) with ONNX Runtime's CPU provider.

    ``threads``: intra-op threads of a run (None: ONNX Runtime's default, one per core);
    ``spinning``: whether those threads spin waiting for work (ONNX Runtime's default) or sleep;
    ``basic_optimizations``: only ONNX Runtime's basic graph optimizations, for a graph with float8 Q/DQ (an
    FP8 or NVFP4 candidate): its extended ones drop a Relu before a float8 QuantizeLinear (the Relu + Q fusion
    takes a zero point of 0 for the quantized minimum, which holds for uint8 only), and an FP8 candidate's
    outputs were off by thousands of pixels (1.32); the basic ones keep the graph's meaning.
    """

    def __init__(self, onnx_path: Path, *, threads: Optional[int] = None, spinning: bool = True,
                 basic_optimizations: bool = False) -> None:
        import onnxruntime as ort

        self.threads, self.spinning, self.basic_optimizations = threads, spinning, basic_optimizations
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only; ORT's warnings are not the user's problem
        if threads:
            options.intra_op_num_threads = threads
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if basic_optimizations:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
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

    def instance(self, threads: Optional[int] = None) -> "OnnxRuntimeRunner":
        """Another session of the same model (a model instance of the server), with ``threads`` intra-op
        threads (None: this one's)."""
        return type(self)(self.path, threads=threads if threads is not None else self.threads, spinning=self.spinning,
                          basic_optimizations=self.basic_optimizations)

    @classmethod
    def for_device(cls, onnx_path: Path) -> "OnnxRuntimeRunner":
        """The session the device runtime runs (server, bench, OTA health check: ``backends.select``): one
        thread per run, no spinning.

        The server runs a request on the HTTP worker that holds it, up to ``workers`` at once, so runs
        overlap across cores instead of splitting one run over them. ONNX Runtime's default (an
        intra-op thread per core, spinning between ops and after a run) made a 2-core host's 8-thread
        loop of a 160x160 detector 466 runs/s against 793 with this, its one-at-a-time run 3.0 ms
        against 2.3 when the other core was busy, and a spinning thread takes the core that the HTTP
        dispatcher and the clients need (docs/server.md, "The server's own cost").
        """
        return cls(onnx_path, threads=1, spinning=False)
