"""INT8 on the DLA: ranges for every activation of a small graph, and its emulation's layout (Q/DQ on every DLA
tensor at amax / 127, weights on their per-channel grid, the GPU fallback rounded to FP16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgebuild.accuracy.dla_int8.emulation import dla_tensors, emulation_model, quantize_per_channel
from edgebuild.accuracy.dla_int8.ranges import activation_tensors, collect_ranges, method_ranges
from edgebuild.targets.dla import ON_DLA, ON_GPU, place_nodes

TENSORRT = "8.5.2.2"


def _graph(path: Path) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Mul -> Exp (the DLA cannot run it: GPU fallback) -> Conv -> y, with a dynamic batch."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "b1"),
               numpy_helper.from_array((rng.normal(size=(2, 4, 1, 1)) * 0.1).astype(np.float32), "w2"),
               numpy_helper.from_array(np.array(0.2, dtype=np.float32), "k")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Mul", ["r1", "k"], ["m1"], name="scaled"),
             helper.make_node("Exp", ["m1"], ["e1"], name="exp1"),
             helper.make_node("Conv", ["e1", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 8, 8])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


def _feeds(count: int = 3) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": (rng.normal(size=(2, 3, 8, 8)) * 0.3).astype(np.float32)} for _ in range(count)]


def test_the_ranges_cover_every_activation_with_its_absolute_maximum(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = _graph(tmp_path / "small.onnx")
    assert activation_tensors(model) == ["x", "c1", "r1", "m1", "e1", "y"]  # weights are not activations
    stats = collect_ranges(tmp_path / "small.onnx", iter(_feeds()), bins=512)
    ranges = method_ranges(stats, "minmax")
    assert set(ranges) == set(activation_tensors(model))
    model.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("c1", "m1", "e1"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [dict(zip(["y", "c1", "m1", "e1"], session.run(["y", "c1", "m1", "e1"], feed))) | feed for feed in _feeds()]
    for name in ("x", "c1", "m1", "e1", "y"):
        assert np.isclose(ranges[name], max(float(np.abs(r[name]).max()) for r in runs), rtol=1e-6)


def test_the_emulation_quantizes_every_dla_tensor_and_rounds_the_fallback_to_fp16(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = _graph(tmp_path / "small.onnx")
    ranges = method_ranges(collect_ranges(tmp_path / "small.onnx", iter(_feeds()), bins=512), "minmax")
    places = place_nodes(model, TENSORRT)
    assert [p.on for p in places] == [ON_DLA, ON_DLA, ON_DLA, ON_GPU, ON_DLA]
    tensors = dla_tensors(model, places, activation_tensors(model))
    assert tensors.dla == ("x", "c1", "r1", "m1", "e1", "y") and tensors.gpu == () and not tensors.missing(ranges)
    assert dla_tensors(model, places, activation_tensors(model)).missing({"x": 1.0}) == ("c1", "r1", "m1", "e1", "y")
    emulated = emulation_model(model, places, tensors, ranges)
    onnx.checker.check_model(emulated)
    produced = {o: n for n in emulated.graph.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in emulated.graph.initializer}
    for name in ("c1", "r1", "m1", "e1", "y"):  # made by a DequantizeLinear of a QuantizeLinear, at amax / 127
        dequantize = produced[name]
        assert dequantize.op_type == "DequantizeLinear" and produced[dequantize.input[0]].op_type == "QuantizeLinear"
        scale, zero = inits[dequantize.input[1]], inits[dequantize.input[2]]
        assert np.isclose(float(scale), ranges[name] / 127) and int(zero) == 0
    conv1 = next(n for n in emulated.graph.node if n.name == "conv1")
    assert conv1.input[0] == "x::dla_int8" and produced["x::dla_int8"].op_type == "DequantizeLinear"
    w1 = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w1"))
    steps = inits[conv1.input[1]] / (np.abs(w1).max(axis=(1, 2, 3), keepdims=True) / 127)
    assert np.allclose(steps, np.round(steps), atol=1e-3) and np.allclose(inits[conv1.input[1]], w1, atol=0.05)
    session = ort.InferenceSession(emulated.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = _feeds(1)[0]
    y, fp32 = session.run(["y"], feed)[0], reference.run(["y"], feed)[0]
    scale = ranges["y"] / 127
    assert np.allclose(y / scale, np.round(y / scale), atol=1e-3)  # INT8 values
    assert not np.array_equal(y, fp32) and np.abs(y - fp32).max() < 0.1 * np.abs(fp32).max()


def test_a_fallback_layer_feeding_only_the_gpu_is_rounded_to_fp16(tmp_path: Path) -> None:
    model = _graph(tmp_path / "small.onnx")
    model.graph.node.append(helper.make_node("Exp", ["e1"], ["z"], name="exp2"))  # GPU, read by nothing on the DLA
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    ranges = {t: 1.0 for t in activation_tensors(model)}
    places = place_nodes(model, TENSORRT)
    tensors = dla_tensors(model, places, activation_tensors(model))
    assert tensors.gpu == ("z",)
    produced = {o: n for n in emulation_model(model, places, tensors, ranges).graph.node for o in n.output}
    back, half = produced["z"], produced[produced["z"].input[0]]
    assert (back.op_type, half.op_type) == ("Cast", "Cast") and half.attribute[0].i == TensorProto.FLOAT16


def test_per_channel_weights_keep_a_zero_channel_zero() -> None:
    w = np.array([[1.0, -0.5], [0.0, 0.0]], dtype=np.float32)
    assert np.array_equal(quantize_per_channel(w, 0), np.array([[1.0, -64 / 127], [0.0, 0.0]], dtype=np.float32))
