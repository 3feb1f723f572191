"""FP8 and NVFP4 on trained detectors for a Jetson AGX Thor group (issue 47, part 3).

- the trained shapes detector (examples/shapes-detector): FP8 keeps >= 0.995 of FP32's mAP50-95 on the CPU
  emulation and is selected; it has no NVFP4 candidate (convolutions only: TensorRT runs FP4 in GEMMs only);
- the same detector with a token MLP on its stride-32 map (tests/support/hybrid_detector.py), fine-tuned
  from the trained weights: NVFP4 is measured on its emulation and gated like INT8, its model folder holds
  TensorRT's form and the host-side emulation the OTA health reference is computed from;
- a fleet file that runs an fp8 model on an Orin group is refused naming the group.

docs/accuracy.md ("FP8 and NVFP4") has the numbers of ``benchmarks/thor_precisions.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ConfigError

THOR = '[[fleet]]\nname = "thor"\nmodule = "agx-thor"\njetpack = "7.0"\n\n'


def _for_thor(root: Path, precisions: str, **model: str) -> Path:
    """The example's edgebuild.toml with one Thor group and ``precisions``, and ``model``'s keys replaced."""
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    head, tail = text.split("[[fleet]]", 1)
    text = head + THOR + f"[quantize]\nprecisions = {precisions}\n\n[runtime]" + tail.split("[runtime]", 1)[1]
    for key, value in model.items():
        text = text.replace(next(line for line in text.splitlines() if line.startswith(f"{key} = ")),
                            f'{key} = "{value}"')
    toml.write_text(text)
    return root


def _validate(root: Path) -> dict:
    done = CliRunner().invoke(main, ["validate", "-p", str(root), "--no-progress"])
    assert done.exit_code == 0, done.output
    return json.loads((root / "build" / "gate" / "gate.json").read_text())


def test_fp8_keeps_0_995_of_the_trained_shapes_detector_and_nvfp4_says_why_it_has_no_candidate(
        example_copy) -> None:
    root = _for_thor(example_copy("shapes-detector"), '["fp8", "nvfp4", "fp32"]')
    gate = _validate(root)
    fp32, fp8 = (next(c for c in gate["candidates"] if c["precision"] == p) for p in ("fp32", "fp8"))
    print(f"\nshapes detector on agx-thor@7.0: FP32 mAP50-95 {fp32['value']:.4f}, FP8 {fp8['value']:.4f} "
          f"(retention {fp8['retention']:.4f}) [{fp8['backend']}]")
    assert fp8["retention"] >= 0.995 and fp8["passed"] and fp8["selectable"] and not fp8["rejected_by"]
    assert gate["selected"] == "fp8"
    assert "Q/DQ FP8 E4M3" in fp8["note"] and "Conv kept in float (no FP8 kernel" in fp8["note"]
    assert not any(c["precision"] == "nvfp4" for c in gate["candidates"])
    assert any(n.startswith("NVFP4 not applicable: TensorRT runs FP4 only in GEMMs") for n in gate["notes"])
    shipped = onnx.load(str(root / "build" / "gate" / fp8["onnx"]))
    assert any(i.data_type == onnx.TensorProto.FLOAT8E4M3FN for i in shipped.graph.initializer)


def test_a_fleet_file_running_an_fp8_model_on_orin_is_refused(example_copy) -> None:
    from edgebuild.project.fleet_file import load_fleet

    example_copy("digits-classifier")
    _for_thor(example_copy("shapes-detector"), '["fp8", "fp32"]')  # its own group: a Thor
    box = example_copy("camera-box")  # runs the detector on yard-cams (Orin Nano) and dock (AGX Orin)
    with pytest.raises(ConfigError) as caught:
        load_fleet(box)
    assert "models.detector: quantize.precisions: 'fp8' for fleet group 'yard-cams'" in caught.value.message
    assert "has no FP8 (E4M3) tensor cores" in caught.value.message


@pytest.mark.slow
def test_nvfp4_is_measured_on_its_emulation_and_gated_on_a_trained_hybrid_detector(example_copy) -> None:
    from edgebuild.runtime.base.recipe import Recipe
    from edgebuild.shipping.ota import reference_outputs
    from tests.support import hybrid_detector

    root = example_copy("shapes-detector")
    shutil.copy(hybrid_detector.__file__, root / "hybrid_detector.py")
    hybrid_detector.fine_tune(root, root / "weights" / "hybrid.pt", steps=40, batch_size=8)
    _for_thor(root, '["nvfp4", "fp32"]', entry_point=hybrid_detector.ENTRY_POINT, weights="weights/hybrid.pt")
    gate = _validate(root)
    fp32, nvfp4 = (next(c for c in gate["candidates"] if c["precision"] == p) for p in ("fp32", "nvfp4"))
    print(f"\nhybrid shapes detector on agx-thor@7.0: FP32 mAP50-95 {fp32['value']:.4f}, NVFP4 {nvfp4['value']:.4f} "
          f"(retention {nvfp4['retention']:.4f})")
    assert "on 2 GEMM(s)" in nvfp4["note"] and nvfp4["emulated"].endswith("emulated.onnx")
    assert nvfp4["passed"] is (nvfp4["retention"] >= gate["policy"]["min_retention"])  # gated like INT8
    assert nvfp4["selectable"] and not nvfp4["rejected_by"]  # TensorRT 10.13 takes its form, no silent fallback

    from edgebuild.stages.engine import ENGINE
    from edgebuild.workflows.work import load_work, ran, run_until

    outcome = ran(run_until(load_work(root, "thor"), ENGINE, say=lambda _: None), ENGINE)  # no TensorRT: deferred
    assert outcome.error is None
    folder = root / "build" / "engines" / "thor"
    recipe = Recipe.load(folder)
    assert gate["selected"] == ("nvfp4" if nvfp4["passed"] else "fp32")
    if nvfp4["passed"]:
        assert recipe.precision == "nvfp4" and recipe.fallback and (folder / Recipe.EMULATED_ONNX).is_file()
        assert Recipe.EMULATED_ONNX not in recipe.file_names()  # host-side only: never shipped
        model = onnx.load(str(folder / recipe.onnx), load_external_data=False)
        assert any(n.op_type == "TRT_FP4DynamicQuantize" for n in model.graph.node)
        assert reference_outputs(folder, recipe)  # ONNX Runtime ran the emulation for the OTA health reference
