"""The shapes example compiled with its AGX Orin group placed on either DLA core: preflight prices the split, the
gate says which candidate stands for the DLA's layout and measures the INT8 candidate's own DLA layout (implicit
INT8: a dynamic range on every tensor, its emulation on ONNX Runtime), and the group's recipe is an FP16 DLA recipe
at one static shape where that layout misses min_retention, an INT8 one (the FP32 ONNX and its ranges) where it
keeps it (about 60 s on the 2-core CI machine: one calibration method, no bias correction; the second compile
re-decides from the stored measurements)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.content import file_sha256
from edgebuild.runtime.base.recipe import Recipe

DOCK = 'name = "dock"\nmodule = "agx-orin-64gb"\njetpack = "5.1.2"'


def test_a_dla_group_compiles_to_fp16_or_to_implicit_int8_by_its_own_layouts_retention(example_copy) -> None:
    root: Path = example_copy("shapes-detector")
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    assert DOCK in text and "opt_shape = [4, 3, 160, 160]" in text and "min_retention = 0.92" in text
    toml.write_text(text.replace(DOCK, DOCK + '\naccelerator = "dla"')
                    .replace("opt_shape = [4, 3, 160, 160]", "opt_shape = [1, 3, 160, 160]")
                    .replace("min_retention = 0.92", "min_retention = 0.95")  # the DLA's INT8 keeps about 0.92
                    .replace("[accuracy]", '[quantize]\ncalibration_method = "minmax"\nbias_correction = "off"\n\n'
                                           "[accuracy]"))
    done = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "dock", "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "engine: dock: dla (built for DLA core 0, GPU fallback), fp16, one static shape" in done.output

    preflight = CliRunner().invoke(main, ["preflight", "-p", str(root), "--target", "dock", "--json"])
    report = json.loads(preflight.output[preflight.output.index("{"): preflight.output.rindex("}") + 1])
    findings = report["targets"][0]["findings"]
    split = next(f for f in findings if f["op_type"] == "DLA split")
    assert "layers fall back to the GPU under TensorRT 8.5.2.2's DLA rules at batch 1, 160x160" in split["problem"]
    assert {f["op_type"] for f in findings if f["severity"] == "dla-fallback"} >= {"Exp", "static shape"}

    gate = json.loads((root / "build/gate/gate.json").read_text())
    by_precision = {c["precision"]: c for c in gate["candidates"]}
    assert "no FP32" in by_precision["fp32"]["dla_refused"] and "dla_refused" not in by_precision["fp16"]
    dla = by_precision["int8"]["dla_int8"]
    layout = dla["layouts"]["8.5.2.2"]
    assert layout["missing"] == [] and layout["dla_tensors"] > 100 and layout["gpu_layers"] >= 1
    assert 0.5 < layout["retention"] < 0.95 and not layout["passed"]
    assert f"keeps retention {layout['retention']:.3f} < 0.95 on its emulation" in by_precision["int8"]["dla_refused"]
    assert any(n.startswith("dock runs on dla: the fp16 candidate is the DLA's own layout") for n in gate["notes"])

    recipe = Recipe.load(root / "build/engines/dock")
    assert recipe.accelerator == "dla" and recipe.runs_on == "dla" and recipe.dla_core == 0
    assert recipe.candidate == "fp16" and recipe.precision == "fp16" and recipe.fallback is None
    assert recipe.profiles == {"images": [[1, 3, 160, 160]] * 3} and recipe.dynamic_ranges is None

    # a threshold the DLA layout keeps: the same measurements, re-decided, and an INT8 DLA recipe
    toml.write_text(toml.read_text().replace("min_retention = 0.95", "min_retention = 0.90"))
    done = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "dock", "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "engine: dock: dla (built for DLA core 0, GPU fallback), int8, one static shape" in done.output
    gate = json.loads((root / "build/gate/gate.json").read_text())
    int8 = next(c for c in gate["candidates"] if c["precision"] == "int8")
    assert "dla_refused" not in int8 and int8["dla_int8"]["layouts"]["8.5.2.2"]["passed"]
    recipe = Recipe.load(root / "build/engines/dock")
    folder = root / "build/engines/dock"
    assert recipe.candidate == "int8" and recipe.precision == "int8" and recipe.dla_core == 0
    assert recipe.retention == layout["retention"]  # the DLA layout's, not the Q/DQ candidate's
    assert file_sha256(folder / recipe.onnx) == file_sha256(root / "build/gate" / int8["dla_int8"]["onnx"])
    ranges = json.loads((folder / recipe.dynamic_ranges).read_text())
    assert ranges["format"] == "edgebuild.dynamic-ranges/1" and len(ranges["ranges"]) == int8["dla_int8"]["tensors"]
    recipe.verify_files(folder)
    assert Recipe.load(folder / "fallback").candidate == "fp16"  # first boot falls back to the DLA's FP16
