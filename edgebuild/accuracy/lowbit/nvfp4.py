"""The NVFP4 candidate: FP4 GEMMs where TensorRT runs them, FP8 elsewhere, and its CPU emulation.

TensorRT runs FP4 only in matrix multiplications (no FP4 convolution: profiles/tensorrt/
silent-fallbacks.toml), with the activation quantized at run time in blocks of 16 along the last
axis of a 2-D or 3-D tensor (``IDynamicQuantizeLayer``, ONNX ``trt::TRT_FP4DynamicQuantize``). So a
MatMul/Gemm of the INT8 placement is FP4 where its weight is a 2-D constant whose reduction axis K is a
multiple of 16 and its activation is [M, K] or [B, M, K]; every other node of the placement gets the
FP8 candidate's Q/DQ (``edgebuild.accuracy.lowbit.fp8``). A model without such a GEMM (a convolutional
detector) has no NVFP4 candidate: the gate says so.

Two files are written. ``model.onnx`` is what TensorRT builds (opset 23, which DequantizeLinear needs
for FLOAT4E2M1): the weight as a FLOAT4E2M1 initializer behind DequantizeLinear(block_size 16), whose
scale is DequantizeLinear(E4M3 block scales, FP32 tensor scale); the activation through
TRT_FP4DynamicQuantize(block_size 16, scale_type E4M3, the calibrated FP32 tensor scale amax / (6 * 448))
and the same two DequantizeLinear. ONNX Runtime has no FP4 kernels, so ``emulated.onnx`` is what is
measured: the same graph in FP32 with the weight replaced by its dequantized NVFP4 values (exactly what
the DequantizeLinear chain gives) and the activation passed through standard ONNX operators that do what
TRT_FP4DynamicQuantize + DequantizeLinear do: per block of 16, ``amax / 6`` relative to the tensor scale
rounded to E4M3 (QuantizeLinear/DequantizeLinear float8e4m3fn), the values divided by it and rounded to
E2M1 (nearest, ties to even, saturating at 6: Round on three ranges of step 0.5, 1 and 2), multiplied back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.accuracy.lowbit.formats import E2M1_MAX, E4M3_MAX, NVFP4_BLOCK, nvfp4_weight, scale_of
from edgebuild.accuracy.lowbit.fp8 import amax_of, at_opset, drop_unread, fp8_nodes, insert_fp8

if TYPE_CHECKING:
    import onnx

    from edgebuild.accuracy.calibration import ActivationStatistics
    from edgebuild.accuracy.quantize import Candidate, QdqPlacement

__all__: list[str] = []

#: DequantizeLinear takes FLOAT4E2M1 from opset 23
FP4_OPSET = 23
TRT_DOMAIN = "trt"
EMULATED_FILE = "emulated.onnx"


def _attribute(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    return {v.name: len(v.type.tensor_type.shape.dim) for v in (*model.graph.input, *model.graph.value_info)
            if v.type.tensor_type.HasField("shape")}


def fp4_gemms(model: onnx.ModelProto, names: tuple[str, ...] | list[str]) -> dict[str, int]:
    """The GEMMs of ``names`` TensorRT can run in NVFP4, each with its weight's reduction axis."""
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer if i.data_type == 1}  # FP32 constants
    ranks, wanted, found = _ranks(model), set(names), {}
    for node in model.graph.node:
        if node.name not in wanted or node.op_type not in ("MatMul", "Gemm") or node.input[1] not in weights:
            continue
        dims = weights[node.input[1]]
        if len(dims) != 2 or (node.op_type == "Gemm" and _attribute(node, "transA", 0)):
            continue
        axis = 1 if node.op_type == "Gemm" and _attribute(node, "transB", 0) else 0
        rank = ranks.get(node.input[0])
        if dims[axis] % NVFP4_BLOCK == 0 and rank in ((2,) if node.op_type == "Gemm" else (2, 3)):
            found[node.name] = axis
    return found


def _tensor(name: str, array: Any) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(array), name)


def _device_gemm(node: Any, axis: int, weight: np.ndarray, act_scale: np.ndarray) -> tuple[list[Any], list[Any]]:
    """(nodes before ``node``, initializers) of the form TensorRT builds: FP4 weight and dynamic FP4 activation."""
    from onnx import TensorProto, helper

    values, block_scale, tensor_scale, _ = nvfp4_weight(weight, axis)
    stem = f"{node.name}_nvfp4"
    inits = [_tensor(f"{stem}_w", values), _tensor(f"{stem}_w_block", block_scale),
             _tensor(f"{stem}_w_scale", tensor_scale), _tensor(f"{stem}_x_scale", act_scale)]
    nodes = [
        helper.make_node("DequantizeLinear", [f"{stem}_w_block", f"{stem}_w_scale"], [f"{stem}_w_bs"],
                         name=f"{stem}_w_scale_DequantizeLinear"),
        helper.make_node("DequantizeLinear", [f"{stem}_w", f"{stem}_w_bs"], [f"{stem}_w_dq"], axis=axis,
                         block_size=NVFP4_BLOCK, name=f"{stem}_w_DequantizeLinear"),
        helper.make_node("TRT_FP4DynamicQuantize", [node.input[0], f"{stem}_x_scale"], [f"{stem}_x_q", f"{stem}_x_s"],
                         domain=TRT_DOMAIN, axis=-1, block_size=NVFP4_BLOCK, scale_type=TensorProto.FLOAT8E4M3FN,
                         name=f"{stem}_TRT_FP4DynamicQuantize"),
        helper.make_node("DequantizeLinear", [f"{stem}_x_s", f"{stem}_x_scale"], [f"{stem}_x_bs"],
                         name=f"{stem}_x_scale_DequantizeLinear"),
        helper.make_node("DequantizeLinear", [f"{stem}_x_q", f"{stem}_x_bs"], [f"{stem}_x_dq"], axis=-1,
                         block_size=NVFP4_BLOCK, name=f"{stem}_x_DequantizeLinear"),
    ]
    node.input[0], node.input[1] = f"{stem}_x_dq", f"{stem}_w_dq"
    return nodes, inits


def _custom_types(stem: str) -> list[Any]:
    """The element types of TRT_FP4DynamicQuantize's outputs, which ONNX's shape inference cannot know."""
    from onnx import TensorProto, helper

    return [helper.make_tensor_value_info(f"{stem}_x_q", TensorProto.FLOAT4E2M1, None),
            helper.make_tensor_value_info(f"{stem}_x_s", TensorProto.FLOAT8E4M3FN, None)]


def _emulated_gemm(node: Any, axis: int, weight: np.ndarray, act_scale: np.ndarray, rank: int
                   ) -> tuple[list[Any], list[Any]]:
    """(nodes before ``node``, initializers) that compute in FP32 what the device form computes."""
    from onnx import helper

    from edgebuild.accuracy.lowbit.fp8 import ZERO_POINT

    stem = f"{node.name}_nvfp4"
    k = weight.shape[axis]
    x = node.input[0]
    block_shape = [0] * (rank - 1) + [k // NVFP4_BLOCK, NVFP4_BLOCK]  # 0: keep that dimension
    inits = [_tensor(f"{stem}_w_emulated", nvfp4_weight(weight, axis)[3]), _tensor(f"{stem}_x_scale", act_scale),
             _tensor(f"{stem}_blocks", np.array(block_shape, np.int64)), _tensor(f"{stem}_last", np.array([-1])),
             _tensor(f"{stem}_one", np.float32(1.0)), _tensor(f"{stem}_zero", np.float32(0.0)),
             *(_tensor(f"{stem}_c{v:g}", np.float32(v)) for v in (0.5, 2.0, 4.0, E2M1_MAX))]

    def n(op: str, inputs: list[str], out: str, **attrs: Any) -> Any:
        return helper.make_node(op, inputs, [f"{stem}_{out}"], name=f"{stem}_{out}_{op}", **attrs)

    c = {v: f"{stem}_c{v:g}" for v in (0.5, 2.0, 4.0, E2M1_MAX)}
    s = lambda name: f"{stem}_{name}"  # noqa: E731
    nodes = [
        n("Reshape", [x, s("blocks")], "xb"),
        n("Abs", [s("xb")], "abs"),
        n("ReduceMax", [s("abs"), s("last")], "amax", keepdims=1),
        n("Div", [s("amax"), c[E2M1_MAX]], "bs_raw"), n("Div", [s("bs_raw"), s("x_scale")], "bs_rel"),
        n("QuantizeLinear", [s("bs_rel"), s("one"), ZERO_POINT], "bs_q"),  # the block scale rounded to E4M3
        n("DequantizeLinear", [s("bs_q"), s("one"), ZERO_POINT], "bs_e4m3"),
        n("Mul", [s("bs_e4m3"), s("x_scale")], "bs"),
        n("Equal", [s("bs"), s("zero")], "bs_is_zero"), n("Where", [s("bs_is_zero"), s("one"), s("bs")], "bs_safe"),
        n("Div", [s("xb"), s("bs_safe")], "y"), n("Abs", [s("y")], "ya"), n("Sign", [s("y")], "ysign"),
        # E2M1: step 0.5 below 2, 1 below 4, 2 up to 6 (ONNX Round: half to even, as the FP4 cast)
        n("Div", [s("ya"), c[0.5]], "r1a"), n("Round", [s("r1a")], "r1b"), n("Mul", [s("r1b"), c[0.5]], "r1"),
        n("Round", [s("ya")], "r2"),
        n("Div", [s("ya"), c[2.0]], "r3a"), n("Round", [s("r3a")], "r3b"), n("Mul", [s("r3b"), c[2.0]], "r3c"),
        n("Min", [s("r3c"), c[E2M1_MAX]], "r3"),
        n("Less", [s("ya"), c[4.0]], "below4"), n("Where", [s("below4"), s("r2"), s("r3")], "r23"),
        n("Less", [s("ya"), c[2.0]], "below2"), n("Where", [s("below2"), s("r1"), s("r23")], "qa"),
        n("Mul", [s("qa"), s("ysign")], "q"), n("Mul", [s("q"), s("bs")], "xb_dq"),
        n("Shape", [x], "x_shape"), n("Reshape", [s("xb_dq"), s("x_shape")], "x_dq"),
    ]
    node.input[0], node.input[1] = s("x_dq"), f"{stem}_w_emulated"
    return nodes, inits


def _with_gemms(model: onnx.ModelProto, gemms: dict[str, int], amax: dict[str, float], emulated: bool) -> None:
    """Rewrite the FP4 GEMMs of ``model`` in place, in the device form or the emulated one."""
    from onnx import helper, numpy_helper

    weights = {i.name: i for i in model.graph.initializer}
    ranks = _ranks(model)
    order, added, replaced = [], [], set()
    for node in model.graph.node:
        axis = gemms.get(node.name)
        if axis is not None:
            weight = numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
            replaced.add(node.input[1])
            act_scale = scale_of(np.float32(amax[node.input[0]]), E2M1_MAX * E4M3_MAX)
            if emulated:
                nodes, inits = _emulated_gemm(node, axis, weight, act_scale, ranks[node.input[0]])
            else:
                nodes, inits = _device_gemm(node, axis, weight, act_scale)
                model.graph.value_info.extend(_custom_types(f"{node.name}_nvfp4"))
            order += nodes
            added += inits
        order.append(node)
    model.graph.ClearField("node")
    model.graph.node.extend(order)
    model.graph.initializer.extend(added)
    drop_unread(model, replaced)
    if not emulated:
        model.opset_import.append(helper.make_opsetid(TRT_DOMAIN, 1))


def nvfp4_candidate(prepared: Path, out: Path, placement: QdqPlacement, statistics: ActivationStatistics
                    ) -> Candidate:
    """The NVFP4 candidate of the pre-processed model: ``out`` (for TensorRT) and ``emulated.onnx`` beside it."""
    import onnx

    from edgebuild.accuracy.quantize import Candidate
    from edgebuild.sources.export.checks import save_onnx

    amax = amax_of(statistics)
    base = onnx.shape_inference.infer_shapes(at_opset(onnx.load(str(prepared)), FP4_OPSET))
    readers = {n.name: n.input[0] for n in base.graph.node}
    gemms = {name: axis for name, axis in fp4_gemms(base, placement.nodes).items() if readers[name] in amax}
    chosen, no_kernel = fp8_nodes(base, [n for n in placement.nodes if n not in gemms], amax)
    insert_fp8(base, chosen, amax)
    external = prepared.with_name(f"{prepared.name}.data").exists()
    for emulated, path in ((False, out), (True, out.with_name(EMULATED_FILE))):
        model = onnx.ModelProto()
        model.CopyFrom(base)
        _with_gemms(model, gemms, amax, emulated)
        save_onnx(model, path, external_data=external)
    kept = f"; {len(no_kernel)} Conv kept in float (no FP8 kernel)" if no_kernel else ""
    return Candidate("nvfp4", out, note=f"NVFP4 (E2M1, 16-element blocks, E4M3 block scales) on {len(gemms)} GEMM(s), "
                                        f"activations quantized at run time; FP8 Q/DQ on {len(chosen)} other node(s)"
                                        f"{kept}; measured on its FP32 emulation ({EMULATED_FILE})",
                     emulated=out.with_name(EMULATED_FILE))


def nvfp4_gemm_count(prepared: Path, placement: QdqPlacement) -> int:
    """How many GEMMs of the placement TensorRT could run in NVFP4 (0: no NVFP4 candidate)."""
    import onnx

    return len(fp4_gemms(onnx.load(str(prepared), load_external_data=False), placement.nodes))
