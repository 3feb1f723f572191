"""INT8 on the DLA by implicit quantization: a dynamic range on every tensor, read from the recipe's ranges file.

The DLA runs no QuantizeLinear/DequantizeLinear (NVIDIA/TensorRT#2222), so a DLA INT8 engine is built
from the FP32 ONNX with ``BuilderFlag.INT8`` (and FP16) and a range ``[-amax, amax]`` on each tensor
(``ITensor.set_dynamic_range``, TensorRT 8.5 to 10.x; deprecated with the rest of implicit quantization
from 10.1, where the calibrators are "Superseded by explicit quantization",
https://docs.nvidia.com/deeplearning/tensorrt/api/c_api/deprecated.html, and removed in 11 with the
weakly typed builder: the 11.4 listing in tests/fakes/tensorrt-api has no ``set_dynamic_range``). No
calibrator runs on the device: the build host calibrated (``edgebuild.accuracy.dla_int8``).

- every float tensor a layer reads or writes gets its range where the file names it; the outputs of
  constant layers are weights, which TensorRT quantizes itself;
- a tensor of a DLA layer with no range refuses the build, naming it (the DLA would fall back or fail);
- the GPU fallback layers run in FP16 (``ILayer.precision`` and ``PREFER_PRECISION_CONSTRAINTS``), the
  layout the gate measured on its emulation; their tensors keep the ranges the file gives them.

The file is JSON: ``{"format": "edgebuild.dynamic-ranges/1", "method", "images", "ranges": {name: amax}}``.
Python 3.8, the device's TensorRT.
"""

# ruff: noqa: UP006, UP035
# (typing.Dict/List on purpose: this file must run on Python 3.8)

import json
from pathlib import Path
from typing import Dict, List

from edgebuild.errors import ConfigError, ExportError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.engines.backends.trt_api import IBuilderConfig, INetworkDefinition, ITensor, TensorRT

__all__: list = []  # used by tensorrt.py, the same layer

RANGES_FORMAT = "edgebuild.dynamic-ranges/1"
SHOWN = 5


def read_ranges(path: Path) -> Dict[str, float]:
    """Tensor name -> amax of a ranges file, each a positive finite number, or a ConfigError naming the file."""
    hint = "compile the model folder again (`edgebuild compile --force --target GROUP`)"
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("{}: cannot read the dynamic ranges ({})".format(path, exc), hint=hint) from None
    ranges = data.get("ranges") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != RANGES_FORMAT or not isinstance(ranges, dict):
        raise ConfigError("{}: not a {} file".format(path, RANGES_FORMAT), hint=hint)
    bad = [k for k, v in ranges.items() if not isinstance(v, (int, float)) or not 0 < float(v) < float("inf")]
    if bad:
        raise ConfigError("{}: the range of {} is not a positive number".format(path, ", ".join(bad[:SHOWN])),
                          hint=hint)
    return {str(k): float(v) for k, v in ranges.items()}


def refuse_typed(trt: TensorRT, typed: bool) -> None:
    """A strongly typed network has no dynamic ranges (TensorRT 11: every network): refuse, saying why."""
    if typed:
        raise ConfigError(
            "TensorRT {} builds this network strongly typed, which has no dynamic ranges (implicit quantization "
            "and the INT8 flag are gone in TensorRT 11), and the DLA runs no Q/DQ: no DLA INT8 engine can be "
            "built".format(trt.__version__),
            hint="use the recipe's FP16 candidate on the DLA, or place the group on the GPU (accelerator = \"gpu\")")


def apply_dynamic_ranges(trt: TensorRT, config: IBuilderConfig, network: INetworkDefinition,
                         ranges: Dict[str, float], gpu_layers: List[str], source: Path) -> JsonObject:
    """Set the range of every float tensor the file names; the GPU fallback layers to FP16; what was set.

    Refuses (ExportError) when a tensor a DLA layer reads or writes has no range."""
    floats = (trt.DataType.FLOAT, trt.DataType.HALF)
    on_gpu = set(gpu_layers)
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    weights = {layer.get_output(0).name for layer in layers if layer.type == trt.LayerType.CONSTANT}
    done = {}  # type: Dict[str, float]
    missing = {}  # type: Dict[str, str]  # tensor -> the first DLA layer that reads or writes it

    def give(tensor: ITensor, where: str, needed: bool) -> None:
        name = tensor.name
        if name in done or name in weights or tensor.dtype not in floats:
            return
        if name in ranges:
            amax = ranges[name]
            tensor.set_dynamic_range(-amax, amax)
            done[name] = amax
        elif needed and name not in missing:
            missing[name] = where

    for index in range(network.num_inputs):
        give(network.get_input(index), "a network input", False)
    half = 0
    for layer in layers:
        if layer.type == trt.LayerType.CONSTANT:
            continue
        on_dla = layer.name not in on_gpu
        where = "DLA layer {}".format(layer.name)
        for k in range(layer.num_inputs):
            tensor = layer.get_input(k)
            if tensor is not None:
                give(tensor, where, on_dla)
        outputs = [layer.get_output(k) for k in range(layer.num_outputs)]
        for tensor in outputs:
            give(tensor, where, on_dla)
        if not on_dla and outputs and all(t.dtype in floats for t in outputs):
            layer.precision = trt.DataType.HALF
            half += 1
    if missing:
        raise ExportError(
            "{}: INT8 on the DLA needs a dynamic range on every tensor a DLA layer reads or writes; {} of them have "
            "none: {}{}".format(source, len(missing), ", ".join("{} ({})".format(k, v) for k, v in
                                                               list(missing.items())[:SHOWN]),
                                " and {} more".format(len(missing) - SHOWN) if len(missing) > SHOWN else ""),
            hint="the ranges name the ONNX's tensors, and these were made by TensorRT's parser: build the group's "
                 "FP16 candidate on the DLA or place it on the GPU, and report the model to edgebuild")
    config.set_flag(trt.BuilderFlag.PREFER_PRECISION_CONSTRAINTS)  # the fallback layers in FP16, as measured
    return {"tensors": len(done), "gpu_layers_fp16": half, "file": Path(source).name}
