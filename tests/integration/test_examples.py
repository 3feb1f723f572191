"""The bundled examples, end to end, with their real numbers."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.accuracy.evaluate import evaluate
from edgebuild.cli import main
from edgebuild.datasets.project_data import prepare_data
from edgebuild.project.config import load_project
from edgebuild.sources.entry_point import TorchRunner, resolve_entry_point


def test_shapes_detector_fp32_map_is_at_least_half(example_copy) -> None:
    project = load_project(example_copy("shapes-detector"))
    assert prepare_data(project)  # data.prepare generates the data
    result = evaluate(project, TorchRunner(project), progress=False)
    print(f"\nshapes-detector FP32 [{result.backend}]: mAP50-95 {result.metrics['mAP50-95']:.4f}, "
          f"mAP50 {result.metrics['mAP50']:.4f} on {result.images} images")
    assert result.images == 200
    assert result.metrics["mAP50-95"] >= 0.5


def test_shapes_data_is_generated_deterministically(example_copy, tmp_path: Path) -> None:
    first = load_project(example_copy("shapes-detector"))
    prepare_data(first)
    annotations = (first.root / "data/val/annotations.json").read_bytes()
    prepare = resolve_entry_point(first, first.data.prepare, "data.prepare")
    again = tmp_path / "again"
    again.mkdir()
    prepare(str(again))
    assert (again / "data/val/annotations.json").read_bytes() == annotations
    names = sorted(p.name for p in (first.root / "data/calibration").iterdir())
    assert names == sorted(p.name for p in (again / "data/calibration").iterdir()) and len(names) == 64


def test_digits_classifier_fp32_top1(example_copy) -> None:
    project = load_project(example_copy("digits-classifier"))
    prepare_data(project)
    result = evaluate(project, TorchRunner(project), progress=False)
    print(f"\ndigits-classifier FP32 [{result.backend}]: top-1 {result.metrics['top-1']:.4f}")
    assert result.metrics["top-1"] >= 0.95


def _runs(stage: dict) -> dict:
    return {run["group"]: run["record"] for run in stage["runs"]}


@pytest.mark.slow
def test_compile_orin_on_the_shapes_example(example_copy) -> None:
    root = example_copy("shapes-detector")
    before = set(os.listdir("."))
    result = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "orin", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [u["group"] for u in report["units"]] == ["yard-cams", "dock", "gate"]
    assert {u["target"]: u["tensorrt"] for u in report["units"]}["agx-orin-64gb@5.1.2"].startswith("8.5")
    stages = {s["name"]: s for s in report["stages"]}
    assert {n: s["status"] for n, s in stages.items()} == dict.fromkeys(
        ["model", "reference", "export", "preflight", "gate", "budget", "engine", "container", "package"], "ran")
    containers = _runs(stages["container"])
    assert {g: c["base_image"] for g, c in containers.items()} == {
        "yard-cams": "nvcr.io/nvidia/l4t-tensorrt:r10.3.0-runtime",
        "dock": "nvcr.io/nvidia/l4t-tensorrt:r8.5.2-runtime",
        "gate": "nvcr.io/nvidia/l4t-tensorrt:r10.3.0-runtime"}
    assert (root / "build" / "containers" / "yard-cams" / "edgebuild-yard-cams.service").is_file()
    assert containers["dock"]["systemd_unit"] is None  # JetPack 5: cgroup v1
    fleet = json.loads((root / "build" / "packages" / "fleet.json").read_text())
    assert sorted(fleet["groups"]) == ["dock", "gate", "yard-cams"] and fleet["notes"][0].startswith("unsigned")
    assert (root / fleet["groups"]["dock"]["mender"]["path"]).is_file()
    assert _runs(stages["export"])[None]["opset"] == 17  # JetPack 5.1.2's TensorRT 8.5 parser limits it
    gate = _runs(stages["gate"])[None]
    values = {c["precision"]: (c["value"], c["retention"], c["passed"]) for c in gate["candidates"]}
    print("\nshapes-detector gate [{}]: {}; selected {}".format(gate["backend"], values, gate["selected"]))
    assert values["fp32"][0] >= 0.5 and values["fp16"][1] >= 0.98
    assert gate["selected"] in ("int8", "int8-mixed")
    assert values[gate["selected"]][1] >= 0.92
    assert set(os.listdir(".")) == before, "nothing may be written into the working directory"

    again = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "orin", "--json"])
    statuses = {s["name"]: s["status"] for s in json.loads(again.stdout)["stages"]}
    assert set(statuses.values()) == {"reused"}, statuses
    text = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "orin"]).output
    assert "reused (up to date): model, reference, export, preflight, gate, budget, engine, container, package" \
        in text
    assert (root / "build" / ".cache" / "files.json").is_file(), "hashes and image sizes are kept by stat"
    assert _no_op_imports(root) == [], "a no-op compile reads keys and records: no model library, numpy or PIL"


#: what a compile that reuses every stage has no use for (tensorrt: not installed here, but neither needed):
#: the model libraries, and what only makes or scores arrays and images (numpy, PIL, the COCO evaluator, yaml)
HEAVY = ("torch", "onnx", "onnxruntime", "tensorrt", "matplotlib", "numpy", "PIL", "faster_coco_eval",
         "pycocotools", "yaml")


def _no_op_imports(root: Path) -> list[str]:
    """The HEAVY modules a fresh process imported running ``compile`` again on ``root`` (every stage reused)."""
    code = ("import sys\nfrom edgebuild.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code, "compile", "-p", str(root), "--target", "orin", "--json"],
                         capture_output=True, text=True, check=True)
    statuses = {s["name"]: s["status"] for s in json.loads(out.stdout[:out.stdout.rindex("HEAVY")])["stages"]}
    assert set(statuses.values()) == {"reused"}, statuses
    return list(ast.literal_eval(out.stdout[out.stdout.rindex("HEAVY") + len("HEAVY"):].strip()))
