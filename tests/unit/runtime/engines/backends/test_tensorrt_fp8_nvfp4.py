"""Contract tests: FP8 and NVFP4 engines (Jetson AGX Thor) are built strongly typed on 10.x and 11.x, with no
precision flag, and never from a network without their types; and TensorRT 11's FP16 from a model folder.

The double holds the builder to the API listings of 8.6, 10.3 and 11.4 (tests/fakes/tensorrt-api/): 10.3 has
DataType.FP8 and no FP4 (added in 10.8), 11.4 has both and no precision builder flag at all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edgebuild.errors import ConfigError, ExportError
from edgebuild.runtime.engines.backends.tensorrt import build_engine
from tests.fakes.tensorrt_double import PLAN, ModelSpec, make_tensorrt
from tests.unit.runtime.engines.backends.test_tensorrt_strongly_typed import FP16_GRAPH, FP32_GRAPH, _settings

#: what TensorRT's parser makes of each candidate (LayerType, output DataType); FP32's and FP16's as in
#: the strongly typed builds' tests
FP8_GRAPH = [("QUANTIZE", "FP8"), ("DEQUANTIZE", "FLOAT"), ("CONSTANT", "FP8"), ("DEQUANTIZE", "FLOAT"),
             ("CONVOLUTION", "FLOAT")]
NVFP4_GRAPH = [*FP8_GRAPH, ("CONSTANT", "FP4"), ("DEQUANTIZE", "FLOAT"), ("DYNAMIC_QUANTIZE", "FP4"),
               ("DEQUANTIZE", "FLOAT"), ("MATRIX_MULTIPLY", "FLOAT")]


def _created_with(trt) -> tuple:
    (_, flags, _), = [c for c in trt.calls if c[0] == "Builder.create_network"]
    return flags


def _flags_set(trt) -> list[str]:
    return [args[0].name for name, args, _ in trt.calls if name == "IBuilderConfig.set_flag"]


@pytest.mark.parametrize(("version", "precision", "graph"), [
    ("10.3.0", "fp8", FP8_GRAPH),  # 10.x: strongly typed although not asked for
    ("11.4.0.106", "fp8", FP8_GRAPH),
    ("11.4.0.106", "nvfp4", NVFP4_GRAPH),
])
def test_fp8_and_nvfp4_build_strongly_typed_with_no_precision_flag(tmp_path: Path, version: str, precision: str,
                                                                   graph: list) -> None:
    trt = make_tensorrt(version, ModelSpec(layers=graph))
    meta = build_engine(_settings(tmp_path, precision), trt=trt)
    assert _created_with(trt) == (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED),)
    assert _flags_set(trt) == []  # neither FP8/FP4 (#4590: on 10.13 they build FP32 silently) nor FP16/INT8
    assert meta["strongly_typed"] is True and meta["precision"] == precision and "FP8" not in meta["builder_flags"]
    assert (tmp_path / "out" / "model.plan").read_bytes() == PLAN


@pytest.mark.parametrize(("version", "precision", "graph", "missing"), [
    ("10.3.0", "fp8", FP32_GRAPH, "no FP8 tensors"),
    ("11.4.0.106", "fp8", FP16_GRAPH, "no FP8 tensors"),
    ("11.4.0.106", "nvfp4", FP8_GRAPH, "no FP4 tensors"),  # FP8 only: the NVFP4 GEMMs are missing
])
def test_a_network_without_the_precision_s_types_is_refused_before_the_build(tmp_path: Path, version: str,
                                                                             precision: str, graph: list,
                                                                             missing: str) -> None:
    trt = make_tensorrt(version, ModelSpec(layers=graph))
    with pytest.raises(ExportError, match=missing) as info:
        build_engine(_settings(tmp_path, precision), trt=trt)
    assert f"not the {precision} engine" in str(info.value) and f"{precision} candidate" in info.value.hint
    assert "Builder.build_serialized_network" not in trt.call_names()
    assert not (tmp_path / "out" / "model.plan").exists()


@pytest.mark.parametrize(("version", "precision", "first"), [
    ("8.6.1", "fp8", "10.0"),  # 8.6 has FP8 weakly typed only
    ("10.3.0", "nvfp4", "10.8"),  # no DataType.FP4 before 10.8
])
def test_a_tensorrt_without_the_strongly_typed_type_refuses(tmp_path: Path, version: str, precision: str,
                                                           first: str) -> None:
    trt = make_tensorrt(version, ModelSpec(layers=NVFP4_GRAPH if version != "8.6.1" else FP8_GRAPH[:2]))
    with pytest.raises(ConfigError, match=f"needs TensorRT {first} or later"):
        build_engine(_settings(tmp_path, precision), trt=trt)
    assert "Builder.create_network" not in trt.call_names()


def test_a_device_builds_tensorrt_11_s_fp16_from_the_recipe_strongly_typed(tmp_path: Path) -> None:
    """JetPack 7.2.2 (TensorRT 11.4.1): the recipe's FP16 candidate (an ONNX with FP16 tensors) builds with the
    STRONGLY_TYPED network flag and no FP16 builder flag (there is none); nvfp4 likewise on Thor."""
    from edgebuild.runtime.engines.device import DeviceFacts, build_from_recipe
    from tests.support.runtime_artifacts import recipe_for, write_artifact

    for precision, graph in (("fp16", FP16_GRAPH), ("nvfp4", NVFP4_GRAPH)):
        folder = write_artifact(tmp_path / precision)
        dataclasses.replace(recipe_for(folder, "agx-thor@7.2.2"), precision=precision, candidate=precision).save(folder)
        trt = make_tensorrt("11.4.0.106", ModelSpec(layers=graph))
        engine_json = build_from_recipe(folder / "recipe.json", DeviceFacts("11.4.0.106", "", "11.0", None, ()),
                                        verify_device=False, trt=trt, timing_cache_dir=tmp_path / "caches")
        assert _created_with(trt) == (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED),)
        assert _flags_set(trt) == []
        assert f'"precision": "{precision}"' in engine_json.read_text()
