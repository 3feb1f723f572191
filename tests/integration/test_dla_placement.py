"""The shapes example compiled with its AGX Orin group placed on either DLA core: preflight prices the split, the
gate says which candidate stands for the DLA's layout and why INT8 and FP32 do not, and the group's recipe is an
FP16 DLA recipe at one static shape (about 45 s on the 2-core CI machine: one calibration method, no bias
correction)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe

DOCK = 'name = "dock"\nmodule = "agx-orin-64gb"\njetpack = "5.1.2"'


def test_a_dla_group_compiles_to_an_fp16_recipe_at_one_shape_with_its_split_priced(example_copy) -> None:
    root: Path = example_copy("shapes-detector")
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    assert DOCK in text and "opt_shape = [4, 3, 160, 160]" in text
    toml.write_text(text.replace(DOCK, DOCK + '\naccelerator = "dla"')
                    .replace("opt_shape = [4, 3, 160, 160]", "opt_shape = [1, 3, 160, 160]")
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
    assert "scale on every tensor" in by_precision["int8"]["dla_refused"]
    assert any(n.startswith("dock runs on dla: the fp16 candidate is the DLA's own layout") for n in gate["notes"])

    recipe = Recipe.load(root / "build/engines/dock")
    assert recipe.accelerator == "dla" and recipe.runs_on == "dla" and recipe.dla_core == 0
    assert recipe.candidate == "fp16" and recipe.precision == "fp16" and recipe.fallback is None
    assert recipe.profiles == {"images": [[1, 3, 160, 160]] * 3}
