"""Contract tests: a DLA INT8 build by implicit quantization sets a dynamic range on every tensor, with the calls
each TensorRT version documents (the double is held to the 8.5, 8.6, 10.3 and 11.4 listings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgebuild.errors import ConfigError, ExportError
from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, build_engine
from edgebuild.runtime.engines.backends.tensorrt_dla import RANGES_FORMAT, read_ranges
from tests.fakes.tensorrt_double import ModelSpec, TensorSpec, make_tensorrt

STATIC = {"images": ((1, 3, 64, 64),) * 3}
WEAKLY_TYPED = ("8.5.3.1", "8.6.1", "10.3.0")
#: a conv on the DLA, a constant (weights), an add reading both, and a sigmoid the DLA cannot run (GPU fallback)
LAYERS = [("CONVOLUTION", "FLOAT"), ("CONSTANT", "FLOAT"), ("ELEMENTWISE", "FLOAT"), ("ACTIVATION", "FLOAT")]
IO = [(("images",), ("conv",)), ((), ("bias",)), (("conv", "bias"), ("sum",)), (("sum",), ("scores",))]
RANGES = {"images": 2.0, "conv": 7.5, "sum": 9.0, "scores": 1.0}


def _spec(**overrides) -> ModelSpec:
    tensors = [TensorSpec("images", "INPUT", (1, 3, 64, 64)), TensorSpec("scores", "OUTPUT", (1, 10))]
    return ModelSpec(**{"tensors": tensors, "layers": LAYERS, "layer_io": IO, "gpu_only_layers": (3,), **overrides})


def _settings(tmp_path: Path, ranges: dict[str, float] = RANGES, **overrides) -> BuildSettings:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"an FP32 ONNX file the double only checks exists")
    path = tmp_path / "dynamic_ranges.json"
    path.write_text(json.dumps({"format": RANGES_FORMAT, "method": "minmax", "images": 8, "ranges": ranges}))
    values = dict(onnx_path=onnx, engine_path=tmp_path / "out" / "model.plan", precision="int8", profiles=STATIC,
                  workspace_bytes=1 << 28, dla_core=0, dynamic_ranges=path)
    return BuildSettings(**{**values, **overrides})


@pytest.mark.parametrize("version", WEAKLY_TYPED)
def test_every_tensor_gets_its_range_and_the_fallback_runs_fp16(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version, _spec())
    meta = build_engine(_settings(tmp_path), trt=trt)
    assert trt.ranges == {name: (-amax, amax) for name, amax in RANGES.items()}  # the constant's output: weights
    flags = [a[0].name for n, a, _ in trt.calls if n == "IBuilderConfig.set_flag"]
    assert flags == ["FP16", "INT8", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS"]
    half, = [a[0] for n, a, _ in trt.calls if n == "ILayer.precision ="]  # the one GPU fallback layer
    assert half.name == "HALF"
    assert meta["dynamic_ranges"] == {"tensors": 4, "gpu_layers_fp16": 1, "file": "dynamic_ranges.json"}
    assert meta["dla_gpu_fallback"] == ["activation_3"]


def test_a_dla_tensor_without_a_range_refuses_the_build_naming_it(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", _spec())
    with pytest.raises(ExportError, match=r"1 of them have none: conv \(DLA layer convolution_0\)"):
        build_engine(_settings(tmp_path, {k: v for k, v in RANGES.items() if k != "conv"}), trt=trt)
    # a GPU fallback layer's tensor without one is no refusal: that layer runs FP16
    build_engine(_settings(tmp_path, {k: v for k, v in RANGES.items() if k != "scores"}), trt=make_tensorrt(
        "10.3.0", _spec()))


def test_strongly_typed_builds_and_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="strongly typed, which has no dynamic ranges"):
        build_engine(_settings(tmp_path), trt=make_tensorrt("11.4.0.106", _spec()))
    with pytest.raises(ConfigError, match="strongly typed"):
        build_engine(_settings(tmp_path, strongly_typed=True), trt=make_tensorrt("10.3.0", _spec()))
    with pytest.raises(ConfigError, match="dynamic ranges are INT8 scales"):
        _settings(tmp_path, precision="fp16")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": RANGES_FORMAT, "ranges": {"conv": 0.0}}))
    with pytest.raises(ConfigError, match="the range of conv is not a positive number"):
        read_ranges(bad)
    bad.write_text("{}")
    with pytest.raises(ConfigError, match=f"not a {RANGES_FORMAT} file"):
        read_ranges(bad)
