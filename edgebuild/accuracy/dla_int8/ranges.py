"""Dynamic ranges for every activation tensor of an FP32 graph: what a DLA INT8 engine is built with.

The DLA runs no QuantizeLinear/DequantizeLinear; TensorRT (8.5 to 10.7, the releases that run the DLA in
INT8) builds it by implicit quantization: each tensor a DLA layer reads or writes carries a dynamic range
``[-amax, amax]`` (``ITensor.set_dynamic_range``), and the layer runs INT8 at scale ``amax / 127``.

One FP32 pass over the project's calibration images (``edgebuild.accuracy.quantize.calibration_feeds``)
records, for every float activation of the graph (its float inputs and every float output of a node that is
not constant at build time, by ONNX shape inference), the statistics ``edgebuild.accuracy.calibration``
keeps for the Q/DQ candidates; each range method (minmax, percentile, entropy, mse) is a computation on
them, as there. The ranges are written as JSON, tensor name -> amax (``RANGES_FORMAT``), the file a DLA
recipe carries beside its FP32 ONNX.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.errors import DataError
from edgebuild.runtime.base.files import atomic_write_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import numpy as np
    import onnx

__all__: list[str] = []

#: the ranges file's ``format``: {"format", "method", "images", "ranges": {tensor name: amax}}
RANGES_FORMAT = "edgebuild.dynamic-ranges/1"
#: a tensor that was exactly zero on every calibration image gets this amax (FP16's smallest normal number): a
#: range must be positive, and any scale quantizes zeros exactly
ZERO_RANGE = 2.0 ** -14
_FLOAT = 1  # onnx.TensorProto.FLOAT


def activation_tensors(model: onnx.ModelProto) -> list[str]:
    """Every float activation of ``model``, in graph order: its float inputs and each float output of a node
    not computed from constants alone (initializers, Constant nodes and what only they feed are weights,
    which TensorRT quantizes itself). Types come from ONNX shape inference; a tensor whose type it cannot
    tell is left out, and the coverage check then names it."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (a graph shape inference cannot read: the types the file itself says)
        inferred = model
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.value_info, *graph.input, *graph.output)}
    known = {i.name for i in graph.initializer}
    found: dict[str, None] = {}
    for tensor in graph.input:
        if tensor.name not in known and types.get(tensor.name) == _FLOAT:
            found[tensor.name] = None
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type == "Constant" or (inputs and all(i in known for i in inputs)):
            known.update(node.output)
            continue
        for name in node.output:
            if name and types.get(name) == _FLOAT:
                found[name] = None
    return list(found)


def collect_ranges(model_path: Path, feeds: Iterable[dict[str, np.ndarray]], *, bins: int,
                   progress: Callable[[int], None] = lambda _: None) -> Any:
    """One pass over ``feeds``: the activation statistics of every activation tensor of ``model_path``
    (``edgebuild.accuracy.calibration.ActivationStatistics``, histograms for all, so every method applies)."""
    import onnx

    from edgebuild.accuracy.calibration import collect_statistics

    tensors = activation_tensors(onnx.load(str(model_path), load_external_data=False))
    return collect_statistics(model_path, tensors, [], feeds, bins=bins, quantized=tensors, progress=progress)


def method_ranges(stats: Any, method: str) -> dict[str, float]:
    """Each tensor's amax by ``method`` (a calibration method's threshold), zero ranges raised to ZERO_RANGE."""
    from edgebuild.accuracy.calibration import thresholds

    found = thresholds(stats, method)
    return {name: max(float(t), ZERO_RANGE) for name, t in zip(stats.tensors, found.tolist())}


def write_ranges(path: Path, ranges: dict[str, float], method: str, images: int) -> None:
    atomic_write_text(path, json.dumps({"format": RANGES_FORMAT, "method": method, "images": images,
                                        "ranges": ranges}, indent=1))


def read_ranges(path: Path) -> dict[str, float]:
    """The tensor name -> amax of a ranges file, checked (the runtime's reader is
    ``edgebuild.runtime.engines.backends.tensorrt_dla.read_ranges``; the two formats are one)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a dynamic-ranges file ({exc})",
                        hint="compile again: the gate writes it (`edgebuild compile --force`)") from None
    if not isinstance(data, dict) or data.get("format") != RANGES_FORMAT or not isinstance(data.get("ranges"), dict):
        raise DataError(f"{path}: not a {RANGES_FORMAT} file", hint="compile again: `edgebuild compile --force`")
    return {str(k): float(v) for k, v in data["ranges"].items()}
