"""TensorRT on the DLA: which releases run it, the split of a network between a DLA core and the GPU, the core
an engine opens on, and INT8 by implicit quantization (a dynamic range on every tensor, from the recipe's ranges
file).

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
from typing import Dict, List, Optional

from edgebuild.errors import ConfigError, ExportError, TargetError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.engines.backends.trt_api import (
    IBuilder,
    IBuilderConfig,
    INetworkDefinition,
    IRuntime,
    ITensor,
    TensorRT,
)

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


# -- where the layers run -----------------------------------------------------------------------

def dla_problem(version: str) -> Optional[str]:
    """Why TensorRT ``version`` runs no DLA on a Jetson, or None (profiles/tensorrt/dla.toml [[availability]], by
    major.minor: 8.x and 10.0 to 10.7 do, 11.4 does from 11.4.1 on AGX Orin; the device's core count says the rest)."""
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if major_minor < (10, 8) or major_minor == (11, 4):
        return None
    if major_minor < (11, 0):
        return ("'TensorRT 10.7 was the last 10.x release that supported DLA' (TensorRT 11.4.1, Working with DLA; "
                "unconfirmed for JetPack 7.2's TensorRT 10.16)")
    return ("DLA is unavailable in TensorRT 11.0 to 11.3 and 11.5 on (TensorRT 11.4.1 and 11.5.0, Working with DLA); "
            "11.4.1 runs it on AGX Orin with JetPack 7.2.2")


def place_on_dla(trt: TensorRT, builder: IBuilder, config: IBuilderConfig, network: INetworkDefinition,
                  core: int) -> List[str]:
    """DLA ``core`` as the default device, with GPU fallback, and each layer the DLA cannot run set to the GPU
    (``can_run_on_DLA``), so the engine's split is explicit and recorded; the names of those layers."""
    cores = int(builder.num_DLA_cores)
    if not 0 <= core < cores:
        raise TargetError(f"DLA core {core} was requested, but this device has {cores} DLA core(s)")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = int(core)
    config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    on_gpu = []
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if not config.can_run_on_DLA(layer):
            config.set_device_type(layer, trt.DeviceType.GPU)
            on_gpu.append(layer.name)
    return on_gpu


# -- the runner's core ---------------------------------------------------------------------------

#: DLA engines this process opened, per core: "either core" (dla) opens on the one fewer use
_OPENED_ON_CORE = {}  # type: Dict[int, int]


def open_on_dla(runtime: IRuntime, accelerator: Optional[str], path: Path) -> Optional[int]:
    """Set ``runtime.DLA_core`` for a DLA engine (gpu or None: nothing); the core it runs on."""
    if accelerator in (None, "gpu"):
        return None
    cores = int(runtime.num_DLA_cores)
    if accelerator == "dla":
        core = min(range(cores), key=lambda c: (_OPENED_ON_CORE.get(c, 0), c)) if cores else 0
    else:
        core = int(str(accelerator)[3:])
    if not 0 <= core < cores:
        raise TargetError(f"{path}: the engine runs on DLA core {core} ({accelerator}), but this device has "
                          f"{cores} DLA core(s)", hint="place the group on a core the module has, or on the GPU")
    runtime.DLA_core = core
    _OPENED_ON_CORE[core] = _OPENED_ON_CORE.get(core, 0) + 1
    return core
