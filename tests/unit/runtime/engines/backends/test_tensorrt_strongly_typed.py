"""Contract tests: the strongly typed build path (always on TensorRT 11, on request on 10.x).

TensorRT 11 removed every precision builder flag (BuilderFlag.FP16, INT8, ...), the INT8
calibrators and EXPLICIT_BATCH; a network is strongly typed and its precision comes from the ONNX.
The double holds the builder to the 11.4 API listing (tests/fakes/tensorrt-api/), so touching any
removed member fails here as it would on a JetPack 7.2.2 device with TensorRT 11.4.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.errors import ConfigError, ExportError
from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, build_engine
from tests.fakes.tensorrt_double import PLAN, ModelSpec, make_tensorrt

TRT11 = "11.4.0.106"
SHAPES = {"images": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
#: what TensorRT's parser makes of each candidate edgebuild builds from (LayerType, output DataType)
FP32_GRAPH = [("CONVOLUTION", "FLOAT"), ("ACTIVATION", "FLOAT")]
FP16_GRAPH = [("CONSTANT", "HALF"), ("CONVOLUTION", "HALF"), ("ACTIVATION", "HALF")]
QDQ_GRAPH = [("QUANTIZE", "INT8"), ("DEQUANTIZE", "FLOAT"), ("CONVOLUTION", "FLOAT")]
GRAPHS = {"fp32": FP32_GRAPH, "fp16": FP16_GRAPH, "int8": QDQ_GRAPH}


def _settings(tmp_path: Path, precision: str, **overrides) -> BuildSettings:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"an ONNX file the double only checks exists")
    values = dict(onnx_path=onnx, engine_path=tmp_path / "out" / "model.plan", precision=precision, profiles=SHAPES,
                  workspace_bytes=1 << 28)
    values.update(overrides)
    return BuildSettings(**values)


def _flag_calls(trt) -> list[str]:
    return [args[0].name for name, args, _ in trt.calls if name == "IBuilderConfig.set_flag"]


def test_the_11_listing_has_no_weak_typing() -> None:
    """What the builder must never touch on 11 is really gone from the listed API."""
    trt = make_tensorrt(TRT11)
    for flag in ("FP16", "INT8", "BF16", "FP8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"):
        with pytest.raises(AttributeError, match=f"enum BuilderFlag has no member '{flag}'"):
            getattr(trt.BuilderFlag, flag)
    with pytest.raises(AttributeError, match="NetworkDefinitionCreationFlag has no member 'EXPLICIT_BATCH'"):
        _ = trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    for name in ("IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator", "CalibrationAlgoType"):
        with pytest.raises(AttributeError, match=f"tensorrt {TRT11} has no attribute '{name}'"):
            getattr(trt, name)
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    with pytest.raises(AttributeError, match="IBuilderConfig has no attribute 'int8_calibrator'"):
        config.int8_calibrator = object()
    assert int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) == 0


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_11_builds_strongly_typed_with_no_precision_flag(tmp_path: Path, precision: str) -> None:
    trt = make_tensorrt(TRT11, ModelSpec(layers=GRAPHS[precision]))
    meta = build_engine(_settings(tmp_path, precision), trt=trt)
    (_, flags, _), = [c for c in trt.calls if c[0] == "Builder.create_network"]
    assert flags == (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED),)
    assert _flag_calls(trt) == []  # neither FP16 nor INT8 (the listing has neither)
    assert not any("calibrat" in name.lower() for name in trt.call_names())
    assert (tmp_path / "out" / "model.plan").read_bytes() == PLAN
    assert meta["strongly_typed"] is True and meta["precision"] == precision


@pytest.mark.parametrize(("precision", "graph", "missing"), [
    ("int8", FP32_GRAPH, "no QuantizeLinear/DequantizeLinear nodes"),
    ("int8", FP16_GRAPH, "no QuantizeLinear/DequantizeLinear nodes"),
    ("fp16", FP32_GRAPH, "no FP16 tensors"),
])
def test_11_refuses_a_precision_the_onnx_does_not_carry(tmp_path: Path, precision: str, graph: list,
                                                        missing: str) -> None:
    """An INT8 request on an ONNX without Q/DQ would build FP32 on 11: refused, nothing built or written."""
    trt = make_tensorrt(TRT11, ModelSpec(layers=graph))
    with pytest.raises(ExportError, match=missing) as info:
        build_engine(_settings(tmp_path, precision), trt=trt)
    assert "strongly typed" in str(info.value) and f"not the {precision} engine" in str(info.value)
    assert "candidate" in info.value.hint
    assert "Builder.build_serialized_network" not in trt.call_names()
    assert not (tmp_path / "out" / "model.plan").exists()


def test_11_int8_with_dla_keeps_only_gpu_fallback(tmp_path: Path) -> None:
    """TensorRT 11.4.1 restores DLA on AGX Orin (JetPack 7.2.2+), strongly typed: GPU_FALLBACK still exists."""
    trt = make_tensorrt(TRT11, ModelSpec(layers=QDQ_GRAPH))
    build_engine(_settings(tmp_path, "int8", dla_core=0, profiles={"images": ((1, 3, 64, 64),) * 3}), trt=trt)
    assert _flag_calls(trt) == ["GPU_FALLBACK"]


def test_10_takes_the_strongly_typed_path_on_request(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", ModelSpec(layers=QDQ_GRAPH))
    meta = build_engine(_settings(tmp_path, "int8", strongly_typed=True), trt=trt)
    (_, flags, _), = [c for c in trt.calls if c[0] == "Builder.create_network"]
    assert flags == (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED),) == (2,)
    assert _flag_calls(trt) == [] and meta["strongly_typed"] is True
    with pytest.raises(ExportError, match="no QuantizeLinear/DequantizeLinear"):
        build_engine(_settings(tmp_path, "int8", strongly_typed=True),
                     trt=make_tensorrt("10.3.0", ModelSpec(layers=FP32_GRAPH)))


@pytest.mark.parametrize(("version", "flags"), [("8.5.3.1", 1), ("8.6.1", 1), ("10.3.0", 0)])
def test_8_and_10_stay_weakly_typed_by_default(tmp_path: Path, version: str, flags: int) -> None:
    """The flags path as before: EXPLICIT_BATCH / 0, FP16 + INT8 flags, the graph never inspected."""
    trt = make_tensorrt(version, ModelSpec(layers=FP32_GRAPH))
    meta = build_engine(_settings(tmp_path, "int8"), trt=trt)
    assert [c[1] for c in trt.calls if c[0] == "Builder.create_network"] == [(flags,)]
    assert _flag_calls(trt) == ["FP16", "INT8"] and meta["strongly_typed"] is False
    assert not any(name.startswith(("INetworkDefinition.get_layer", "ILayer.")) for name in trt.call_names())


@pytest.mark.parametrize("version", ["8.5.3.1", "8.6.1"])
def test_8_x_refuses_a_strongly_typed_request(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version)
    with pytest.raises(ConfigError, match="strongly typed build needs TensorRT 10 or later"):
        build_engine(_settings(tmp_path, "fp16", strongly_typed=True), trt=trt)
    assert "Builder.create_network" not in trt.call_names()
