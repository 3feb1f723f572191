"""Contract tests: edgebuild's TensorRT code makes exactly the calls each version documents.

The double (tests/fakes/tensorrt_double.py) is held to the real API listings of TensorRT 8.5.3.1,
8.6.1 and 10.3.0, so a member a version lacks fails here as it would on the device.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pytest

from edgebuild.errors import CapabilityMissing, ConfigError, ExportError, TargetError
from edgebuild.runtime.engines.backends.tensorrt import (
    BuildSettings,
    TensorRTRunner,
    build_engine,
    check_engine_compatible,
)
from tests.fakes.tensorrt_double import PLAN, VERSIONS, ModelSpec, implemented_members, load_listing, make_tensorrt
from tests.support.project import REPO

REFERENCE = REPO.parent / "shared" / "reference" / "tensorrt-api"
SHAPES = {"images": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
STATIC = {"images": ((1, 3, 64, 64),) * 3}  # what a DLA engine is built at: min = opt = max


def _settings(tmp_path: Path, **overrides) -> BuildSettings:
    onnx = tmp_path / "model.onnx"
    if not onnx.exists():
        onnx.write_bytes(b"an ONNX file the double only checks exists")
    values = dict(onnx_path=onnx, engine_path=tmp_path / "out" / "model.plan", precision="fp16", profiles=SHAPES,
                  workspace_bytes=1 << 28)
    values.update(overrides)
    return BuildSettings(**values)


def _calls(trt, prefix: str) -> list[tuple]:
    return [(name, args, kwargs) for name, args, kwargs in trt.calls if name.startswith(prefix)]


# -- the double itself ---------------------------------------------------------------------------

def test_bundled_listings_are_the_shared_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"{REFERENCE} not present in this checkout")
    for version in VERSIONS:
        shared = REFERENCE / f"tensorrt-{version}.json"
        if not shared.is_file():  # made in this repository (11.x): it must say how
            assert "introspect_tensorrt.py" in load_listing(version)["provenance"]
            continue
        assert load_listing(version) == json.loads(shared.read_text())


def test_double_defines_only_members_some_listing_has() -> None:
    listings = [load_listing(v) for v in VERSIONS]
    for cls, names in implemented_members().items():
        known = set().union(*(set(listing["classes"].get(cls, ())) for listing in listings))
        assert known, f"no listing has class {cls}"
        assert names <= known, f"double invents {cls} members {sorted(names - known)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_version_attribute_comes_from_the_listing(version: str) -> None:
    assert make_tensorrt(version).__version__ == load_listing(version)["tensorrt_version"] == version


def test_double_rejects_members_10_3_removed() -> None:
    trt = make_tensorrt("10.3.0")
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    config = builder.create_builder_config()
    with pytest.raises(AttributeError,
                       match=r"^tensorrt 10\.3\.0: IBuilderConfig has no attribute 'max_workspace_size'"):
        config.max_workspace_size = 1 << 20
    with pytest.raises(AttributeError, match="10.3.0: IBuilderConfig has no attribute 'max_workspace_size'"):
        _ = config.max_workspace_size
    with pytest.raises(AttributeError, match="10.3.0: Builder has no attribute 'build_engine'"):
        _ = builder.build_engine
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(PLAN)
    context = engine.create_execution_context()
    for name in ("execute_async_v2", "execute_async", "set_binding_shape", "get_binding_shape"):
        with pytest.raises(AttributeError, match=f"10.3.0: IExecutionContext has no attribute '{name}'"):
            getattr(context, name)
    for name in ("num_bindings", "get_binding_index", "binding_is_input", "max_batch_size"):
        with pytest.raises(AttributeError, match=f"ICudaEngine has no attribute '{name}'"):
            getattr(engine, name)
    with pytest.raises(AttributeError, match="NetworkDefinitionCreationFlag has no member 'EXPLICIT_PRECISION'"):
        _ = trt.NetworkDefinitionCreationFlag.EXPLICIT_PRECISION


def test_double_rejects_members_8_5_lacks() -> None:
    trt = make_tensorrt("8.5.3.1")
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    with pytest.raises(AttributeError, match="8.5.3.1: IBuilderConfig has no attribute 'builder_optimization_level'"):
        config.builder_optimization_level = 3
    assert not hasattr(config, "progress_monitor")
    with pytest.raises(AttributeError, match="MemoryPoolType has no member 'TACTIC_DRAM'"):
        _ = trt.MemoryPoolType.TACTIC_DRAM
    # the gate is per version: 8.5 still lists the deprecated member, so the double accepts it there
    config.max_workspace_size = 1 << 20
    assert trt.calls[-1] == ("IBuilderConfig.max_workspace_size =", (1 << 20,), {})


def test_double_checks_keyword_names_against_the_signature() -> None:
    trt = make_tensorrt("8.6.1")
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    cache = config.create_timing_cache(b"")
    assert config.set_timing_cache(cache, ignore_mismatch=False) is True
    with pytest.raises(TypeError, match="no keyword"):
        config.set_timing_cache(cache, ignore=False)


# -- the builder -----------------------------------------------------------------------------------

# explicit batch before 10, 0 from 10 (EXPLICIT_BATCH is "deprecated, ignored" there), STRONGLY_TYPED
# (value 0 in 11.4's enum) from 11, where it is the only mode and EXPLICIT_BATCH is gone
EXPECTED_FLAGS = {"8.5.3.1": 1, "8.6.1": 1, "10.3.0": 0, "11.4.0.106": 1 << 0}
WEAKLY_TYPED = tuple(v for v in VERSIONS if int(v.split(".")[0]) < 11)
#: the FP16 candidate as a strongly typed network parses it: FP16 weights and activations
FP16_GRAPH = [("CONSTANT", "HALF"), ("CONVOLUTION", "HALF")]


def _double(version: str, **spec):
    """The double whose parsed network carries FP16 itself (``_settings`` asks for fp16), as the
    FP16 candidate does; the weakly typed versions ignore the layers."""
    return make_tensorrt(version, ModelSpec(layers=FP16_GRAPH, **spec))


@pytest.mark.parametrize("version", VERSIONS)
def test_builder_makes_the_documented_calls(tmp_path: Path, version: str) -> None:
    trt = _double(version)
    meta = build_engine(_settings(tmp_path), trt=trt)
    names = trt.call_names()
    precision = ["INetworkDefinition.get_layer", "ILayer.get_output"] * 2 if version not in WEAKLY_TYPED \
        else ["IBuilderConfig.set_flag"]  # strongly typed: the graph is read, no flag is set
    expected = [
        "Builder()", "Builder.create_network", "OnnxParser()", "OnnxParser.parse_from_file",
        "INetworkDefinition.get_input", "Builder.create_builder_config", "IBuilderConfig.set_memory_pool_limit",
        *precision, "IBuilderConfig.profiling_verbosity =", "Builder.create_optimization_profile",
        "IOptimizationProfile.set_shape", "IBuilderConfig.add_optimization_profile",
        "Builder.build_serialized_network", "Runtime()", "Runtime.deserialize_cuda_engine",
        "ICudaEngine.create_engine_inspector", "EngineInspector.get_engine_information",
    ]
    assert names == expected
    assert _calls(trt, "Builder.create_network")[0][1] == (EXPECTED_FLAGS[version],)
    (_, (pool, size), _), = _calls(trt, "IBuilderConfig.set_memory_pool_limit")
    assert pool.name == "WORKSPACE" and size == 1 << 28
    assert not any("max_workspace_size" in n or "build_engine" in n for n in names)
    (_, (name, low, opt, high), _), = _calls(trt, "IOptimizationProfile.set_shape")
    assert (name, low, opt, high) == ("images",) + SHAPES["images"]
    assert _calls(trt, "OnnxParser.parse_from_file")[0][1] == (str(tmp_path / "model.onnx"),)
    assert (tmp_path / "out" / "model.plan").read_bytes() == PLAN
    assert not list((tmp_path / "out").glob(".*tmp*"))
    assert meta["tensorrt_version"] == version and meta["precision"] == "fp16"
    assert meta["shapes"] == {"images": {"min": [1, 3, 32, 32], "opt": [2, 3, 64, 64], "max": [4, 3, 96, 96]}}
    assert meta["device_memory_size"] == 12345678
    assert meta["layers"]["Layers"][0]["Name"] == "conv"
    assert meta["plan_bytes"] == len(PLAN) and meta["build_seconds"] >= 0
    assert len(meta["onnx_sha256"]) == 64
    json.dumps(meta)  # engine.json material must serialize


@pytest.mark.parametrize("version", WEAKLY_TYPED)
@pytest.mark.parametrize(("precision", "flags"), [("fp32", []), ("fp16", ["FP16"]), ("int8", ["FP16", "INT8"])])
def test_precision_flags(tmp_path: Path, version: str, precision: str, flags: list[str]) -> None:
    trt = make_tensorrt(version)
    build_engine(_settings(tmp_path, precision=precision), trt=trt)
    assert [args[0].name for _, args, _ in _calls(trt, "IBuilderConfig.set_flag")] == flags
    assert not any("calibrator" in n for n in trt.call_names())  # Q/DQ gives INT8 scales


@pytest.mark.parametrize("version", VERSIONS)
def test_timing_cache_round_trip(tmp_path: Path, version: str) -> None:
    cache = tmp_path / "caches" / "orin-nano-8gb" / f"trt-{version}.cache"
    trt = _double(version)
    meta = build_engine(_settings(tmp_path, timing_cache_path=cache), trt=trt)
    assert _calls(trt, "IBuilderConfig.create_timing_cache")[0][1] == (b"",)  # none yet: start empty
    assert _calls(trt, "IBuilderConfig.set_timing_cache")[0][2] == {"ignore_mismatch": False}
    names = trt.call_names()
    assert names.index("IBuilderConfig.set_timing_cache") < names.index("Builder.build_serialized_network")
    assert names.index("IBuilderConfig.get_timing_cache") > names.index("Builder.build_serialized_network")
    assert "ITimingCache.serialize" in names
    assert cache.read_bytes() == b"TEST-DOUBLE-TIMING-CACHE"
    assert meta["timing_cache"] == {"path": str(cache), "loaded": False}

    trt2 = _double(version, timing_cache_out=b"TEST-DOUBLE-TIMING-CACHE v2")
    meta2 = build_engine(_settings(tmp_path, timing_cache_path=cache), trt=trt2)
    assert _calls(trt2, "IBuilderConfig.create_timing_cache")[0][1] == (b"TEST-DOUBLE-TIMING-CACHE",)
    assert cache.read_bytes() == b"TEST-DOUBLE-TIMING-CACHE v2" and meta2["timing_cache"]["loaded"] is True


@pytest.mark.parametrize("version", VERSIONS)
def test_no_timing_cache_calls_without_a_path(tmp_path: Path, version: str) -> None:
    trt = _double(version)
    build_engine(_settings(tmp_path), trt=trt)
    assert not any("timing_cache" in n for n in trt.call_names())


@pytest.mark.parametrize("version", VERSIONS)
def test_dla_with_gpu_fallback(tmp_path: Path, version: str) -> None:
    trt = _double(version)
    build_engine(_settings(tmp_path, dla_core=1, profiles=STATIC), trt=trt)
    device_type, = (args[0] for n, args, _ in trt.calls if n == "IBuilderConfig.default_device_type =")
    core, = (args[0] for n, args, _ in trt.calls if n == "IBuilderConfig.DLA_core =")
    assert device_type.name == "DLA" and core == 1
    precision = ["FP16"] if version in WEAKLY_TYPED else []  # strongly typed DLA: FP16 from the graph
    assert [a[0].name for _, a, _ in _calls(trt, "IBuilderConfig.set_flag")] == [*precision, "GPU_FALLBACK"]


def test_dla_core_the_device_lacks_and_fp32_on_dla_are_refused(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", ModelSpec(num_dla_cores=0))
    with pytest.raises(TargetError, match="DLA core 0 was requested, but this device has 0 DLA core"):
        build_engine(_settings(tmp_path, dla_core=0, profiles=STATIC), trt=trt)
    with pytest.raises(ConfigError, match="DLA runs only FP16 or INT8"):
        _settings(tmp_path, dla_core=0, precision="fp32", profiles=STATIC)


@pytest.mark.parametrize(("version", "applied"), [("8.5.3.1", False), ("8.6.1", True), ("10.3.0", True)])
def test_builder_optimization_level_only_where_it_exists(tmp_path: Path, version: str, applied: bool) -> None:
    trt, messages = make_tensorrt(version), []
    meta = build_engine(_settings(tmp_path, builder_optimization_level=5, progress=messages.append), trt=trt)
    sets = [args[0] for n, args, _ in trt.calls if n == "IBuilderConfig.builder_optimization_level ="]
    assert sets == ([5] if applied else [])
    assert meta["builder_optimization_level"] == (5 if applied else None)
    assert any("no builder optimization level" in m for m in messages) is not applied


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_is_reported(tmp_path: Path, version: str) -> None:
    messages: list[str] = []
    build_engine(_settings(tmp_path, progress=messages.append), trt=_double(version))
    assert messages[0] == f"TensorRT {version}: parsing model.onnx"
    assert any("building the fp16 engine" in m for m in messages)
    assert messages[-1].startswith("built in ")


def test_parser_errors_on_10_3_name_every_node(tmp_path: Path) -> None:
    errors = [(4, "/head/GroupNormalization", "GroupNormalization", "opset 21 GroupNorm is not supported"),
              (9, "/head/ScatterND_2", "ScatterND", "reduction attribute is unsupported")]
    trt = make_tensorrt("10.3.0", ModelSpec(parse_errors=errors))
    with pytest.raises(ExportError) as info:
        build_engine(_settings(tmp_path), trt=trt)
    text = str(info.value)
    assert "TensorRT 10.3.0 cannot parse" in text and "(2 error(s))" in text
    assert "node #4 '/head/GroupNormalization' (GroupNormalization): opset 21 GroupNorm is not supported" in text
    assert "node #9 '/head/ScatterND_2' (ScatterND): reduction attribute is unsupported" in text
    assert not (tmp_path / "out" / "model.plan").exists()


@pytest.mark.parametrize("version", ["8.5.3.1", "8.6.1"])
def test_parser_errors_on_8_x_use_node_index_and_desc(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version, ModelSpec(parse_errors=[(7, "ignored", "ignored", "Unsupported ONNX op Mod")]))
    with pytest.raises(ExportError, match=r"node #7: Unsupported ONNX op Mod"):
        build_engine(_settings(tmp_path), trt=trt)
    # 8.x ParserError has node()/desc() but not node_name(): the double refuses it, so the code did not call it
    assert not any("node_name" in n for n in trt.call_names())


def test_missing_onnx_and_unknown_profile_input(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="ONNX file not found"):
        build_engine(_settings(tmp_path, onnx_path=tmp_path / "absent.onnx"), trt=make_tensorrt("10.3.0"))
    with pytest.raises(ConfigError,
                       match=r"inputs \['image'\] that model.onnx does not have \(its inputs: \['images'\]\)"):
        build_engine(_settings(tmp_path, profiles={"image": SHAPES["images"]}), trt=make_tensorrt("10.3.0"))


def test_failed_build_is_a_clear_error_and_leaves_no_plan(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="TensorRT 8.6.1 failed to build an engine"):
        build_engine(_settings(tmp_path), trt=make_tensorrt("8.6.1", ModelSpec(build_fails=True)))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_settings_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="precision 'bf16'"):
        _settings(tmp_path, precision="bf16")
    with pytest.raises(ConfigError, match="min <= opt <= max"):
        _settings(tmp_path, profiles={"images": ((1, 3, 64, 64), (2, 3, 32, 32), (4, 3, 96, 96))})
    with pytest.raises(ConfigError, match="differ in rank"):
        _settings(tmp_path, profiles={"images": ((1, 3, 64), (2, 3, 64, 64), (4, 3, 96, 96))})
    with pytest.raises(ConfigError, match="workspace_bytes must be positive"):
        _settings(tmp_path, workspace_bytes=0)


def test_missing_tensorrt_is_capability_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_tensorrt(name, *args, **kwargs):
        if name == "tensorrt" or name.startswith("tensorrt."):
            raise ImportError("No module named 'tensorrt'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorrt)
    with pytest.raises(CapabilityMissing, match="TensorRT is not installed on this host") as info:
        build_engine(_settings(tmp_path))
    assert "deferred" in (info.value.hint or "")
    with pytest.raises(CapabilityMissing, match="TensorRT is not installed"):
        TensorRTRunner(tmp_path / "model.plan")


# -- the runner ------------------------------------------------------------------------------------

def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "model.plan"
    path.write_bytes(PLAN)
    return path


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [s for s in SHAPES["images"]])
def test_runner_uses_the_tensor_api(tmp_path: Path, version: str, shape: tuple) -> None:
    trt = make_tensorrt(version)
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory())
    assert runner.backend == f"tensorrt {version}"
    assert runner.input_names == ["images"] and runner.output_names == ["boxes", "scores"]
    images = np.random.default_rng(0).random(shape, dtype=np.float32)
    out = runner.run({"images": images.astype(np.float64)})  # converted to the engine's FLOAT
    cells = (shape[2] // 8) * (shape[3] // 8)
    assert out["boxes"].shape == (shape[0], cells, 4) and out["scores"].shape == (shape[0], cells, 2)
    assert out["boxes"].dtype == np.float32
    np.testing.assert_allclose(out["boxes"], images.sum(), rtol=1e-5)  # came back from the output's buffer
    names = trt.call_names()
    assert {n for n in names if n.startswith("ICudaEngine.")} == {
        "ICudaEngine.create_execution_context", "ICudaEngine.get_tensor_name", "ICudaEngine.get_tensor_mode",
        "ICudaEngine.get_tensor_dtype"}  # tensor API only: no bindings
    assert [n.split(".")[1] for n in names if n.startswith("IExecutionContext.")] == [
        "set_input_shape", "get_tensor_shape", "get_tensor_shape", "set_tensor_address", "set_tensor_address",
        "set_tensor_address", "execute_async_v3"]
    assert _calls(trt, "IExecutionContext.set_input_shape")[0][1] == ("images", shape)
    assert _calls(trt, "IExecutionContext.execute_async_v3")[0][1] == (77,)
    kinds = [entry[0] for entry in trt.device.log]
    assert kinds == ["create_stream", "alloc", "alloc", "alloc", "htod", "dtoh", "dtoh", "synchronize"]
    runner.close()
    assert not trt.device.buffers  # everything freed


def test_requests_reuse_the_device_buffers_and_a_larger_shape_grows_them(tmp_path: Path) -> None:
    """No cudaMalloc/cudaFree per request: buffers are kept per tensor and grown only when a shape needs more."""
    trt = make_tensorrt("10.3.0")
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory())
    small, large = np.ones((1, 3, 32, 32), np.float32), np.ones((2, 3, 64, 64), np.float32)
    for images in (small, small, small):
        out = runner.run({"images": images})
        np.testing.assert_allclose(out["boxes"], images.sum(), rtol=1e-5)
    kinds = [entry[0] for entry in trt.device.log]
    assert kinds.count("alloc") == 3 and "free" not in kinds  # three tensors, allocated once
    assert len(_calls(trt, "IExecutionContext.set_tensor_address")) == 3  # bound once
    out = runner.run({"images": large})
    np.testing.assert_allclose(out["boxes"], large.sum(), rtol=1e-5)
    kinds = [entry[0] for entry in trt.device.log]
    assert kinds.count("alloc") == 6 and kinds.count("free") == 3  # each grown once, the old one freed
    runner.run({"images": small})  # smaller again: the grown buffers serve
    assert [entry[0] for entry in trt.device.log].count("alloc") == 6
    runner.close()
    assert not trt.device.buffers


def test_timed_run_synchronises_after_each_phase(tmp_path: Path) -> None:
    """bench's breakdown: copy in, compute, copy out, each ended by a stream synchronise."""
    trt = make_tensorrt("10.3.0")
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory())
    timings = runner.run_timed({"images": np.zeros((1, 3, 32, 32), np.float32)})
    assert set(timings) == {"h2d_ms", "compute_ms", "d2h_ms"} and all(v >= 0 for v in timings.values())
    kinds = [entry[0] for entry in trt.device.log]
    assert kinds == ["create_stream", "alloc", "alloc", "alloc", "htod", "synchronize", "synchronize", "dtoh", "dtoh",
                     "synchronize", "synchronize"]


def test_runner_refuses_shapes_outside_the_engine_and_missing_inputs(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0")
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory())
    with pytest.raises(ExportError, match=r"input 'images' shape \[1, 4, 32, 32\] is outside"):
        runner.run({"images": np.zeros((1, 4, 32, 32), np.float32)})
    with pytest.raises(ExportError, match=r"inputs \['images'\] not given"):
        runner.run({"image": np.zeros((1, 3, 32, 32), np.float32)})


def test_runner_refuses_a_plan_the_runtime_cannot_load(tmp_path: Path) -> None:
    plan = tmp_path / "other.plan"
    plan.write_bytes(b"TEST-DOUBLE: some other version's plan")
    trt = make_tensorrt("8.6.1")
    with pytest.raises(TargetError, match="TensorRT 8.6.1 cannot load"):
        TensorRTRunner(plan, trt=trt, memory=trt.memory())


def test_runner_checks_engine_json_before_loading(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0")
    good = {"tensorrt_version": "10.3.0", "compute_capability": "8.7"}
    TensorRTRunner(_plan(tmp_path), good, trt=trt, memory=trt.memory("8.7"))
    stored = tmp_path / "engine.json"
    stored.write_text(json.dumps(good))
    with pytest.raises(TargetError, match="compute capability 8.7.*this device has TensorRT 10.3.0 and compute "
                                          "capability 7.2"):
        TensorRTRunner(_plan(tmp_path), stored, trt=trt, memory=trt.memory("7.2"))


# -- compatibility ---------------------------------------------------------------------------------

ENGINE = {"tensorrt_version": "8.5.2.2", "compute_capability": "8.7", "module": "agx-orin-64gb",
          "jetpack": "5.1.2", "plan": "build/engines/dock/model.plan"}


def test_check_accepts_the_exact_match() -> None:
    check_engine_compatible(ENGINE, "8.5.2.2", "8.7")
    check_engine_compatible(ENGINE, "8.5.2.2", (8, 7))
    check_engine_compatible(ENGINE, "8.5.2.2", "sm_87")


def test_check_refuses_another_tensorrt_version() -> None:
    with pytest.raises(TargetError) as info:
        check_engine_compatible(ENGINE, "8.5.3.1", "8.7")
    text = str(info.value)
    assert "build/engines/dock/model.plan was built for TensorRT 8.5.2.2 on compute capability 8.7 " \
           "(agx-orin-64gb, 5.1.2)" in text
    assert "this device has TensorRT 8.5.3.1 and compute capability 8.7 (TensorRT version differ)" in text


def test_check_refuses_another_compute_capability() -> None:
    with pytest.raises(TargetError) as info:
        check_engine_compatible(ENGINE, "8.5.2.2", "7.2")
    assert "built for TensorRT 8.5.2.2 on compute capability 8.7" in str(info.value)
    assert "this device has TensorRT 8.5.2.2 and compute capability 7.2 (compute capability differ)" in str(info.value)


def test_check_refuses_both_and_incomplete_metadata() -> None:
    with pytest.raises(TargetError, match="TensorRT version and compute capability differ"):
        check_engine_compatible(ENGINE, "10.3.0", "7.2")
    with pytest.raises(TargetError, match="does not say which TensorRT version"):
        check_engine_compatible({"plan": "x.plan"}, "10.3.0", "8.7")


def test_8_5_fallbacks_are_visible() -> None:
    """Classes the 8.5 listing lacks come from 8.6 and are reported, not silently assumed."""
    trt = make_tensorrt("8.5.3.1")
    trt.Logger(trt.Logger.WARNING)
    assert "Logger" in trt.unverified and "ILogger.Severity" in trt.unverified
    assert make_tensorrt("10.3.0").unverified == set()


def test_another_instance_is_another_execution_context_of_the_same_engine(tmp_path: Path) -> None:
    """The server's instance_count on TensorRT: one engine, an execution context, stream and buffers each."""
    trt = make_tensorrt("10.3.0")
    runner = TensorRTRunner(_plan(tmp_path), trt=trt, memory=trt.memory())
    other = runner.instance(threads=4)  # threads are ONNX Runtime's: ignored
    assert other._engine is runner._engine and other._context is not runner._context
    assert other._stream is not None and other.output_names == runner.output_names
    assert [n for n in trt.call_names() if n.startswith("ICudaEngine.create")] == [
        "ICudaEngine.create_execution_context"] * 2
    images = np.ones((2, 3, 32, 32), np.float32)
    for each in (runner, other):
        np.testing.assert_allclose(each.run({"images": images})["boxes"], images.sum(), rtol=1e-5)
    assert set(other._device) == set(runner._device) and not set(
        p for p, _ in other._device.values()) & set(p for p, _ in runner._device.values())  # buffers of its own
    other.attach_thread()  # the fake binding has no context to make current: nothing to do
    other.close()
    assert runner._device  # closing one instance leaves the other's buffers
    runner.close()
    assert not trt.device.buffers


@pytest.mark.parametrize("version", VERSIONS)
def test_an_fp16_build_keeps_the_candidates_fp32_layers_in_fp32(tmp_path: Path, version: str) -> None:
    """An FP16 candidate's layers kept in FP32 (measured overflow-prone: accuracy.quantize.fp16_float_layers) get
    FP32 precision and output types and OBEY_PRECISION_CONSTRAINTS, weakly typed; strongly typed (11), the
    ONNX's FP32 nodes are obeyed as they are and nothing is set. A name no layer has is said, not fatal."""
    graph = [("CONSTANT", "HALF", "w"), ("NORMALIZATION", "HALF", "/decoder/norm1"), ("SOFTMAX", "HALF", "attn")]
    trt = make_tensorrt(version, ModelSpec(layers=graph))
    said: list[str] = []
    build_engine(_settings(tmp_path, fp32_layers=("/decoder/norm1", "/gone"), progress=said.append), trt=trt)
    kept = [args for name, args, _ in trt.calls if name == "ILayer.precision ="]
    if version not in WEAKLY_TYPED:
        assert not kept and not _calls(trt, "ILayer.set_output_type") and not any("/gone" in s for s in said)
        return
    assert [a[0].name for a in kept] == ["FLOAT"]
    assert [a[1].name for _, a, _ in _calls(trt, "ILayer.set_output_type")] == ["FLOAT"]
    assert "OBEY_PRECISION_CONSTRAINTS" in [a[0].name for _, a, _ in _calls(trt, "IBuilderConfig.set_flag")]
    assert any("no layer named /gone" in s for s in said)
    plain = make_tensorrt(version, ModelSpec(layers=graph))  # an INT8 build's kept layers are its Q/DQ's business
    build_engine(_settings(tmp_path, precision="int8", fp32_layers=("/decoder/norm1",)), trt=plain)
    assert not [n for n, _, _ in plain.calls if n == "ILayer.precision ="]
