"""Real TensorRT: the FP8 candidate builds strongly typed into FP8 kernels and computes what ONNX Runtime measured.

Marked ``gpu``; needs a GPU with FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper, Blackwell;
Jetson AGX Thor) and TensorRT 10: skipped with the reason elsewhere (the shapes detector has no NVFP4
candidate: convolutions only). Run on such a machine with
``EDGEBUILD_REQUIRE=gpu python -m pytest tests/gpu/test_tensorrt_fp8_real.py -q``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgebuild.project.config import load_project

pytestmark = pytest.mark.gpu

THOR = '[[fleet]]\nname = "thor"\nmodule = "agx-thor"\njetpack = "7.0"\n\n'


def _compute_capability() -> tuple[int, ...]:
    from edgebuild.runtime.engines.backends.cuda_memory import default_memory

    return tuple(int(p) for p in default_memory().compute_capability().split("."))


@pytest.fixture(scope="module")
def thor_gate(tmp_path_factory: pytest.TempPathFactory):
    """The shapes example for a Thor group, its FP8 (and NVFP4: none, convolutions only) measured on the CPU."""
    from edgebuild.accuracy.gate import run_gate
    from edgebuild.datasets.project_data import prepare_data
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_work
    from edgebuild.stages.export import EXPORT
    from edgebuild.workflows.work import select_work
    from tests.support.project import EXAMPLES

    if _compute_capability() < (8, 9):
        pytest.skip(f"this GPU (compute capability {'.'.join(map(str, _compute_capability()))}) has no FP8 tensor "
                    "cores: FP8 needs 8.9 or later")
    root = tmp_path_factory.mktemp("shapes") / "shapes-detector"
    shutil.copytree(EXAMPLES / "shapes-detector", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    text = (root / "edgebuild.toml").read_text()
    head, tail = text.split("[[fleet]]", 1)
    (root / "edgebuild.toml").write_text(head + THOR + '[quantize]\nprecisions = ["fp8", "fp32"]\n\n[runtime]'
                                         + tail.split("[runtime]", 1)[1])
    project = load_project(root)
    prepare_data(project)
    work = select_work(project, "thor")
    outcome = compile_work(work, until="export", options=Options(progress=False)).outcome(EXPORT)
    assert outcome.error is None, outcome.error
    record = outcome.record()
    return project, record, run_gate(project, record, progress=False)


def test_the_fp8_candidate_builds_fp8_kernels_and_matches_its_cpu_emulation(thor_gate, tmp_path: Path) -> None:
    from edgebuild.accuracy.lowbit import host_runner
    from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine

    project, _, gate = thor_gate
    onnx = gate.folder / gate.candidate("fp8").onnx
    spec = project.model.inputs[0]
    settings = BuildSettings(onnx_path=onnx, engine_path=tmp_path / "fp8.plan", precision="fp8",
                             profiles={spec.name: (spec.min_shape, spec.opt_shape, spec.max_shape)},
                             workspace_bytes=1 << 30)
    meta = build_engine(settings)
    assert meta["strongly_typed"] is True and "FP8" not in meta["builder_flags"]
    layers = json.dumps(meta["layers"])
    assert "FP8" in layers or "Fp8" in layers, "the inspector shows no FP8 layer: TensorRT built it wider"
    runner, reference = TensorRTRunner(settings.engine_path), host_runner(onnx)
    images = np.random.default_rng(1).uniform(-2, 2, size=spec.opt_shape).astype(np.float32)
    got, want = runner.run({spec.name: images}), reference.run({spec.name: images})
    for name in want:
        scale = float(np.abs(want[name]).max()) or 1.0
        print(f"fp8 {name}: max |TensorRT - ONNX Runtime| / max = "
              f"{float(np.abs(got[name].astype(np.float32) - want[name]).max()) / scale:.4f}")


def test_the_gate_measures_fp8_retention_on_tensorrt(thor_gate) -> None:
    from edgebuild.accuracy.gate import run_gate

    project, record, on_cpu = thor_gate
    on_gpu = run_gate(project.with_accuracy_backend("tensorrt"), record, force=True, progress=False)
    cpu, gpu = on_cpu.candidate("fp8"), on_gpu.candidate("fp8")
    print(f"FP8 retention: ONNX Runtime emulation {cpu.retention:.4f}, TensorRT {gpu.retention:.4f} ({gpu.backend})")
    assert gpu.retention >= 0.99 and abs(cpu.retention - gpu.retention) < 0.01
