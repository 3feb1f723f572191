"""Where a TensorRT engine's precision comes from: builder flags, or the ONNX graph itself.

Weakly typed (TensorRT 8.5 to 10.x, the default there): the network is created without
STRONGLY_TYPED and ``BuilderFlag.FP16`` / ``BuilderFlag.INT8`` let TensorRT pick lower-precision
kernels; an INT8 build reads its scales from the ONNX's Q/DQ nodes (no calibrator).

Strongly typed (always from TensorRT 11, which removed every precision builder flag and the
calibrators; on request from 10.0, which added the creation flag): every tensor keeps the type the
ONNX gives it, so the ONNX must already be the precision asked for. An INT8 build needs
QuantizeLinear/DequantizeLinear nodes (edgebuild's INT8 candidates have them) and an FP16 build
needs FP16 tensors (edgebuild's FP16 candidate is the model converted to FP16 with FP32 I/O).
Layers an INT8 candidate leaves without Q/DQ run in FP32 here, not FP16 as with the flags.

FP8 and NVFP4 (Jetson AGX Thor) are built strongly typed on every version, 10.x included: their
precision is the ONNX's FP8/FP4 Q/DQ (edgebuild's fp8 and nvfp4 candidates), never a builder flag. On
TensorRT 10.13 ``BuilderFlag.FP8``/``FP4`` on a graph without such Q/DQ silently builds FP32
(NVIDIA/TensorRT#4590), and 10.2 picked no FP8 convolution unless the network was strongly typed
(NVIDIA/TensorRT#3987); the ONNX parser itself warns that "a strongly typed network is recommended for
networks with QuantizedLinear/DequantizedLinear nodes using precisions other than int8"
(onnx-tensorrt onnxOpImporters.cpp). So no FP8/FP4 flag is ever set, and a build whose network carries
no FP8 (or FP4) tensor is refused before it starts.

Sources: TensorRT 11.x migration guide, "Removed Python APIs and Replacements" (BuilderFlag.FP16,
INT8, ..., IBuilderConfig.int8_calibrator) and "Strongly Typed Networks Are Now Required"; NVIDIA's
trt-strong-typing-migration skill (the STRONGLY_TYPED flag is "accepted but ignored" on 11.x,
required on 10.x); the API listings in tests/fakes/tensorrt-api/ (11.4: no EXPLICIT_BATCH, no
BuilderFlag.FP16/INT8, no IInt8Calibrator classes).
"""

# ruff: noqa: UP006, UP007, UP035, UP045
# (typing.Set on purpose: this file must run on Python 3.8)

from pathlib import Path
from typing import List, Sequence, Set

from edgebuild.errors import ConfigError, ExportError
from edgebuild.runtime.engines.backends.trt_api import IBuilderConfig, INetworkDefinition, TensorRT

__all__: list = []  # used by tensorrt.py, the same layer

#: the first TensorRT major version in which every network is strongly typed
ALWAYS_STRONGLY_TYPED = 11
#: precisions only ever built strongly typed: the DataType their tensors carry, and the first TensorRT with it
TYPED_ONLY = {"fp8": ("FP8", "10.0"), "nvfp4": ("FP4", "10.8")}


def _major(version: str) -> int:
    return int(str(version).split(".")[0])


def _version(text: str) -> tuple:
    return tuple(int(p) for p in str(text).split(".") if p.isdigit())


def strongly_typed(trt: TensorRT, requested: bool, precision: str = "fp32") -> bool:
    """Whether the network is created strongly typed: always from 11 and for FP8/NVFP4, on request from 10."""
    major = _major(trt.__version__)
    if precision in TYPED_ONLY:
        dtype, first = TYPED_ONLY[precision]
        if _version(trt.__version__) < _version(first) or getattr(trt.DataType, dtype, None) is None:
            raise ConfigError(f"a {precision} engine is built strongly typed from {dtype} Q/DQ, which needs TensorRT "
                              f"{first} or later; this TensorRT is {trt.__version__}",
                              hint="build this device from an INT8 or FP16 candidate (quantize.precisions)")
        return True
    if major >= ALWAYS_STRONGLY_TYPED:
        return True
    if requested and major < 10:
        raise ConfigError(f"a strongly typed build needs TensorRT 10 or later; this TensorRT is {trt.__version__}",
                          hint="build weakly typed (the default before TensorRT 11)")
    return bool(requested)


def network_flags(trt: TensorRT, typed: bool) -> int:
    """``create_network`` flags: STRONGLY_TYPED when typed (required on 10.x, accepted and ignored on 11,
    where it is always on); else ``0`` from 10 (EXPLICIT_BATCH is ignored there, gone in 11) and
    EXPLICIT_BATCH before 10."""
    if typed:
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    if _major(trt.__version__) >= 10:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def graph_precisions(trt: TensorRT, network: INetworkDefinition) -> Set[str]:
    """What the parsed network itself carries: "int8" (Q/DQ layers), "fp16" (FP16 tensors), "fp8" (FP8 tensors:
    an FP8 Q/DQ's quantized side, FP8 weights), "nvfp4" (FP4 tensors: FP4 weights, dynamic FP4 quantization)."""
    quantizing = {trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE}
    typed = {"fp16": trt.DataType.HALF}
    for precision, (dtype, _) in TYPED_ONLY.items():
        member = getattr(trt.DataType, dtype, None)  # FP4 only from 10.8
        if member is not None:
            typed[precision] = member
    found = set()  # type: Set[str]
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.type in quantizing:
            found.add("int8")
        dtypes = [layer.get_output(i).dtype for i in range(layer.num_outputs)]
        found.update(p for p, member in typed.items() if member in dtypes)
    return found


def apply_precision(trt: TensorRT, config: IBuilderConfig, network: INetworkDefinition, precision: str, typed: bool,
                    onnx_path: Path) -> None:
    """Set the precision flags (weakly typed), or check that the graph carries ``precision`` (strongly typed).

    Strongly typed, an INT8 request on an ONNX without Q/DQ nodes (or FP16 on one without FP16
    tensors) would silently build an FP32 engine, so it is refused. Never constructs a calibrator.
    """
    if not typed:
        assert precision not in TYPED_ONLY, "strongly_typed() makes FP8/NVFP4 networks strongly typed"
        if precision in ("fp16", "int8"):
            config.set_flag(trt.BuilderFlag.FP16)
        if precision == "int8":
            config.set_flag(trt.BuilderFlag.INT8)  # explicit Q/DQ in the ONNX gives the scales; no calibrator
        return
    if precision == "fp32":
        return
    found = graph_precisions(trt, network)
    if precision in found:
        return
    what, candidate = {
        "int8": ("QuantizeLinear/DequantizeLinear nodes", "INT8 candidate (Q/DQ ONNX)"),
        "fp8": ("FP8 tensors (float8e4m3fn Q/DQ)", "fp8 candidate (FP8 Q/DQ ONNX)"),
        "nvfp4": ("FP4 tensors (FP4 weights, TRT_FP4DynamicQuantize)", "nvfp4 candidate (its model.onnx)"),
    }.get(precision, ("FP16 tensors", "FP16 candidate (the model converted to FP16)"))
    raise ExportError(
        f"TensorRT {trt.__version__} builds strongly typed networks, whose precision comes from the ONNX, and "
        f"{onnx_path.name} has no {what}: it would build an FP32 engine, not the {precision} engine asked for",
        hint=f"build from edgebuild's {candidate}, which the accuracy gate writes, or ask for precision fp32",
    )


def keep_layers_fp32(trt: TensorRT, config: IBuilderConfig, network: INetworkDefinition, names: Sequence[str],
                     typed: bool) -> List[str]:
    """An FP16 build's layers that must stay in FP32 (an FP16 candidate's ``kept_fp32``: its ONNX node names, which
    the parser gives the layers it makes) get FP32 precision and output types, and the builder obeys them; the
    names no layer has are returned (the builder reports them).

    Weakly typed, the FP16 flag lets TensorRT run any layer in FP16 whatever the ONNX's types; strongly typed,
    the candidate's FP32 nodes already carry FP32 tensors, so nothing is set. (TensorRT's own advice for a
    LayerNorm after self-attention: "forcing layernorm layers to run in FP32 precision can help".)
    """
    if typed or not names:
        return []
    wanted, found = set(names), set()
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.name not in wanted:
            continue
        found.add(layer.name)
        layer.precision = trt.DataType.FLOAT
        for output in range(layer.num_outputs):
            if layer.get_output(output).dtype in (trt.DataType.FLOAT, trt.DataType.HALF):
                layer.set_output_type(output, trt.DataType.FLOAT)
    if found:
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return sorted(wanted - found)
