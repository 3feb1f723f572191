"""The TensorRT backend on a DLA core, against the documented API of 8.5, 8.6, 10.3 and 11.4 (the test double):
default device type DLA, the core, GPU fallback, each layer the DLA cannot run set to the GPU and recorded, one
static shape, refused where the TensorRT runs no DLA; and the runner opening each engine on its core."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.errors import ConfigError, TargetError
from edgebuild.runtime.engines.backends import tensorrt_dla
from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine
from tests.fakes.tensorrt_double import PLAN, VERSIONS, ModelSpec, make_tensorrt

STATIC = {"images": ((1, 3, 64, 64),) * 3}
#: FP16 outputs: what a strongly typed (11.x) FP16 build needs of the graph; the weakly typed ones ignore them
LAYERS = [("CONVOLUTION", "HALF"), ("ACTIVATION", "HALF"), ("CONVOLUTION", "HALF"), ("SOFTMAX", "HALF")]


def _settings(tmp_path: Path, **overrides) -> BuildSettings:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"an ONNX file the double only checks exists")
    values = dict(onnx_path=onnx, engine_path=tmp_path / "out" / "model.plan", precision="fp16", profiles=STATIC,
                  workspace_bytes=1 << 28, dla_core=0)
    values.update(overrides)
    return BuildSettings(**values)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dla_build_sets_the_core_gpu_fallback_and_each_fallback_layer(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version, ModelSpec(layers=LAYERS, gpu_only_layers=(1, 3)))
    said: list[str] = []
    meta = build_engine(_settings(tmp_path, dla_core=1, progress=said.append), trt=trt)
    names = trt.call_names()
    assert names.index("IBuilderConfig.default_device_type =") < names.index("IBuilderConfig.set_device_type")
    assert [args for n, args, _ in trt.calls if n == "IBuilderConfig.DLA_core ="] == [(1,)]
    assert "GPU_FALLBACK" in [a[0].name for n, a, _ in trt.calls if n == "IBuilderConfig.set_flag"]
    assert names.count("IBuilderConfig.can_run_on_DLA") == len(LAYERS)
    moved = [(args[0].name, args[1].name) for n, args, _ in trt.calls if n == "IBuilderConfig.set_device_type"]
    assert moved == [("activation_1", "GPU"), ("softmax_3", "GPU")]
    assert names.index("IBuilderConfig.set_device_type") < names.index("Builder.build_serialized_network")
    assert meta["dla_core"] == 1 and meta["dla_gpu_fallback"] == ["activation_1", "softmax_3"]
    assert "DLA core 1: 2 of 4 layers on the DLA, 2 on the GPU (GPU fallback): activation_1, softmax_3" in said


@pytest.mark.parametrize("version", VERSIONS)
def test_a_gpu_build_touches_no_dla_setting(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version, ModelSpec(layers=LAYERS))
    meta = build_engine(_settings(tmp_path, dla_core=None), trt=trt)
    assert not [n for n in trt.call_names() if "DLA" in n or "device_type" in n]
    assert meta["dla_core"] is None and meta["dla_gpu_fallback"] is None


def test_a_dla_engine_takes_one_static_shape_and_no_fp32(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a DLA engine runs one static shape .* min = opt = max"):
        _settings(tmp_path, profiles={"images": ((1, 3, 32, 32), (1, 3, 64, 64), (1, 3, 64, 64))})
    with pytest.raises(ConfigError, match="DLA runs only FP16 or INT8"):
        _settings(tmp_path, precision="fp32")
    _settings(tmp_path, dla_core=None, profiles={"images": ((1, 3, 32, 32), (1, 3, 64, 64), (1, 3, 64, 64))})


@pytest.mark.parametrize("version, words", [("10.16.2.10", "10.7 was the last 10.x release"),
                                            ("11.3.0", "unavailable in TensorRT 11.0 to 11.3"),
                                            ("11.5.0", "unavailable in TensorRT 11.0 to 11.3 and 11.5 on")])
def test_a_tensorrt_without_the_dla_refuses_before_building(tmp_path: Path, version: str, words: str) -> None:
    trt = make_tensorrt("10.3.0")
    trt.__version__ = version  # the 10.3 API under another version: what the refusal reads is the version alone
    with pytest.raises(TargetError, match=f"TensorRT {version} runs no DLA") as refused:
        build_engine(_settings(tmp_path), trt=trt)
    assert words in refused.value.message and "GPU" in (refused.value.hint or "")
    assert "Builder.build_serialized_network" not in trt.call_names()
    assert not [n for n in trt.call_names() if n.startswith("IBuilderConfig.DLA_core")]


def test_the_tensorrt_releases_that_run_the_dla() -> None:
    for version in ("8.2.1.8", "8.5.2.2", "8.6.2.3", "10.3.0.30", "10.7.0", "11.4.1", "11.4.0.106"):
        assert tensorrt_dla.dla_problem(version) is None, version
    for version in ("10.8.0", "10.13.3.9", "11.0.0", "11.5.0"):
        assert tensorrt_dla.dla_problem(version), version


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "model.plan"
    path.write_bytes(PLAN)
    return path


@pytest.fixture(autouse=True)
def _no_core_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensorrt_dla, "_OPENED_ON_CORE", {})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_runner_opens_a_dla_engine_on_its_core_before_deserializing(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version)
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory(), accelerator="dla1")
    assert runner.dla_core == 1
    calls = trt.call_names()
    assert [args for n, args, _ in trt.calls if n == "Runtime.DLA_core ="] == [(1,)]
    assert calls.index("Runtime.DLA_core =") < calls.index("Runtime.deserialize_cuda_engine")
    gpu = make_tensorrt(version)
    assert TensorRTRunner(_plan(tmp_path), trt=gpu, memory=gpu.memory(), accelerator="gpu").dla_core is None
    assert "Runtime.DLA_core =" not in gpu.call_names()


def test_either_core_opens_each_engine_on_the_core_fewer_models_use(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0")
    cores = [TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory(), accelerator=placed).dla_core
             for placed in ("dla", "dla", "dla0", "dla")]
    assert cores == [0, 1, 0, 1]


def test_a_core_the_device_lacks_is_refused(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", ModelSpec(num_dla_cores=1))
    with pytest.raises(TargetError, match="runs on DLA core 1 \\(dla1\\), but this device has 1 DLA core"):
        TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory(), accelerator="dla1")
    assert TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory(), accelerator="dla").dla_core == 0
