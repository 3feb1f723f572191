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

from edgebuild.project.config import load_project
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.runtime.engines.backends.tensorrt import (
    BuildSettings,
    TensorRTRunner,
    build_engine,
    check_engine_compatible,
)
from edgebuild.sources.export.onnx_export import export_model
from tests.support.project import write_tiny_project

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
    settings = BuildSettings(onnx_path=onnx_path, engine_path=tmp_path / f"model-{precision}.plan",
                             precision=precision, profiles={"images": tuple(SHAPES.values())},
                             workspace_bytes=1 << 28, timing_cache_path=tmp_path / "timing.cache",
                             builder_optimization_level=None, progress=messages.append)
    meta = build_engine(settings)
    assert meta["tensorrt_version"] == trt.__version__
    assert settings.engine_path.stat().st_size == meta["plan_bytes"] > 0
    assert (tmp_path / "timing.cache").stat().st_size > 0
    assert meta["device_memory_size"] >= 0 and meta["layers"]
    json.dumps(meta)

    # a second build reuses the timing cache it wrote
    again = build_engine(replace(settings, engine_path=tmp_path / "again.plan"))
    assert again["timing_cache"]["loaded"] is True

    runner = TensorRTRunner(settings.engine_path)
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
    build_engine(BuildSettings(onnx_path=onnx_path, engine_path=plan, precision="fp32",
                               profiles={"images": tuple(SHAPES.values())}, workspace_bytes=1 << 28))
    with pytest.raises(TargetError, match="built for TensorRT 0.0.0"):
        TensorRTRunner(plan, {"tensorrt_version": "0.0.0", "compute_capability": "8.7"})
    with pytest.raises(TargetError, match="compute capability 1.0"):
        check_engine_compatible({"tensorrt_version": trt.__version__, "compute_capability": "1.0"},
                                trt.__version__, "8.7")


# -- the shapes example: FP32, FP16 and INT8 (Q/DQ) engines, and the gate measured on TensorRT ----------

#: max |TensorRT - ONNX Runtime| as a fraction of the output's largest magnitude, per precision;
#: INT8 is compared with ONNX Runtime running the same Q/DQ file
RELATIVE_TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2, "int8": 6e-2}


@pytest.fixture(scope="module")
def shapes_gate(tmp_path_factory: pytest.TempPathFactory):
    """The shapes example's candidates, measured on ONNX Runtime (the CPU reference)."""
    import shutil

    from edgebuild.accuracy.gate import run_gate
    from edgebuild.datasets.project_data import prepare_data
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_work
    from edgebuild.stages.export import EXPORT
    from edgebuild.workflows.work import select_work
    from tests.support.project import EXAMPLES

    root = tmp_path_factory.mktemp("shapes") / "shapes-detector"
    shutil.copytree(EXAMPLES / "shapes-detector", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    project = load_project(root)
    prepare_data(project)
    outcome = compile_work(select_work(project, "orin"), until="export",
                           options=Options(progress=False)).outcome(EXPORT)  # as `edgebuild export` runs it
    assert outcome.error is None, outcome.error
    record = outcome.record()
    return project, record, run_gate(project, record, progress=False)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_shapes_engines_match_onnxruntime_at_min_opt_max(shapes_gate, tmp_path: Path, precision: str) -> None:
    project, _, gate = shapes_gate
    candidate = next(c for c in gate.candidates if c.precision == precision)
    onnx = gate.folder / candidate.onnx
    spec = project.model.inputs[0]
    shapes = {"min": spec.min_shape, "opt": spec.opt_shape, "max": spec.max_shape}
    settings = BuildSettings(onnx_path=onnx, engine_path=tmp_path / f"shapes-{precision}.plan", precision=precision,
                             profiles={spec.name: (spec.min_shape, spec.opt_shape, spec.max_shape)},
                             workspace_bytes=1 << 30, timing_cache_path=tmp_path / "timing.cache")
    meta = build_engine(settings)
    if precision == "int8":  # Q/DQ honoured: the inspector shows INT8 layers
        assert "Int8" in json.dumps(meta["layers"]) or "INT8" in json.dumps(meta["layers"])
    runner, reference = TensorRTRunner(settings.engine_path), OnnxRuntimeRunner(onnx)
    rng = np.random.default_rng(1)
    for which, shape in shapes.items():
        images = rng.uniform(-2, 2, size=shape).astype(np.float32)
        got, want = runner.run({spec.name: images}), reference.run({spec.name: images})
        for name in want:
            assert got[name].shape == want[name].shape, (which, name)
            scale = float(np.abs(want[name]).max()) or 1.0
            error = float(np.abs(got[name].astype(np.float32) - want[name]).max()) / scale
            assert error <= RELATIVE_TOLERANCE[precision], f"{precision} {name} at {which} {shape}: {error:.3g}"


def test_the_gate_measures_retention_on_tensorrt(shapes_gate) -> None:
    from edgebuild.accuracy.gate import run_gate

    project, record, on_cpu = shapes_gate
    on_gpu = run_gate(project.with_accuracy_backend("tensorrt"), record, force=True, progress=False)
    assert {c.backend.split()[0] for c in on_gpu.candidates} == {"tensorrt"}
    cpu_fp32, gpu_fp32 = on_cpu.candidate("fp32"), on_gpu.candidate("fp32")
    assert abs(cpu_fp32.value - gpu_fp32.value) < 0.01, (cpu_fp32.value, gpu_fp32.value)
    assert on_gpu.candidate("fp16").retention >= 0.98
    assert on_gpu.selected is not None and on_gpu.candidate(on_gpu.selected).passed
    print({c.precision: (round(c.value, 4), round(c.retention, 3), c.backend) for c in on_gpu.candidates})
