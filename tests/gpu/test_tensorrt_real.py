"""Real TensorRT: build engines from edgebuild's own ONNX export and compare them with ONNX Runtime.

Marked ``gpu``: skipped (with the reason) where TensorRT or an NVIDIA GPU is missing; a failure
under ``EDGEBUILD_REQUIRE=gpu``. Run on a GPU machine with
``EDGEBUILD_REQUIRE=gpu python -m pytest tests/gpu -q``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgebuild.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine, check_engine_compatible
from edgebuild.config import load_project
from edgebuild.export import export_model
from tests.conftest import write_tiny_project

pytestmark = pytest.mark.gpu

SHAPES = {"min": (1, 3, 32, 32), "opt": (2, 3, 64, 64), "max": (4, 3, 96, 96)}  # as in TINY_TOML
#: (rtol, atol) per precision against ONNX Runtime FP32
TOLERANCE = {"fp32": (1e-3, 1e-3), "fp16": (2e-2, 5e-2)}


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    write_tiny_project(root)
    return export_model(load_project(root), 17, "gpu test").onnx_path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_real_engine_matches_onnxruntime_at_min_opt_max(onnx_path: Path, tmp_path: Path, precision: str) -> None:
    import tensorrt as trt

    messages: list[str] = []
    settings = BuildSettings(onnx_path=onnx_path, plan_path=tmp_path / f"model-{precision}.plan",
                             precision=precision, profiles={"images": tuple(SHAPES.values())},
                             workspace_bytes=1 << 28, timing_cache_path=tmp_path / "timing.cache",
                             builder_optimization_level=None, report=messages.append)
    meta = build_engine(settings)
    assert meta["tensorrt_version"] == trt.__version__
    assert settings.plan_path.stat().st_size == meta["plan_bytes"] > 0
    assert (tmp_path / "timing.cache").stat().st_size > 0
    assert meta["device_memory_size"] >= 0 and meta["layers"]
    json.dumps(meta)

    # a second build reuses the timing cache it wrote
    again = build_engine(replace(settings, plan_path=tmp_path / "again.plan"))
    assert again["timing_cache"]["loaded"] is True

    runner = TensorRTRunner(settings.plan_path)
    assert runner.backend == f"tensorrt {trt.__version__}"
    reference = OnnxRuntimeRunner(onnx_path)
    rtol, atol = TOLERANCE[precision]
    rng = np.random.default_rng(0)
    for which, shape in SHAPES.items():
        images = rng.standard_normal(shape).astype(np.float32)
        got, want = runner.run({"images": images}), reference.run({"images": images})
        assert set(got) == set(want) == {"boxes", "scores"}
        for name in want:
            assert got[name].shape == want[name].shape, (which, name)
            np.testing.assert_allclose(got[name].astype(np.float32), want[name], rtol=rtol, atol=atol,
                                       err_msg=f"{precision} {name} at the {which} shape {shape}")


def test_runner_refuses_engine_json_for_another_version(onnx_path: Path, tmp_path: Path) -> None:
    import tensorrt as trt

    from edgebuild.errors import TargetError

    plan = tmp_path / "model.plan"
    build_engine(BuildSettings(onnx_path=onnx_path, plan_path=plan, precision="fp32",
                               profiles={"images": tuple(SHAPES.values())}, workspace_bytes=1 << 28))
    with pytest.raises(TargetError, match="built for TensorRT 0.0.0"):
        TensorRTRunner(plan, {"tensorrt_version": "0.0.0", "compute_capability": "8.7"})
    with pytest.raises(TargetError, match="compute capability 1.0"):
        check_engine_compatible({"tensorrt_version": trt.__version__, "compute_capability": "1.0"},
                                trt.__version__, "8.7")
