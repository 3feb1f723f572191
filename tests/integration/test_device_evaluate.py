"""Accuracy measured on the device: `edgebuild validate --device ssh://...` against a loopback sshd.

The stand-in device runs the model folder with ONNX Runtime (it has no TensorRT), as the host's
gate did, so its metric must equal the host's on the same ONNX; a second run sends nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.accuracy.evaluate import ValidationSet, evaluate
from edgebuild.cli import main
from edgebuild.project.config import load_project
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

pytestmark = pytest.mark.ssh


def _shapes(example_copy) -> Path:
    root = example_copy("shapes-detector")
    toml = root / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('images = "data/val/images"', 'images = "data/val/images"\n'
                                                                          "max_images = 48"))
    return root


def test_the_device_measures_what_the_host_measures_and_inputs_travel_once(example_copy, loopback_jetson) -> None:
    import numpy

    jetson = loopback_jetson("orin-nano-4gb@6.2", extra_pythonpath=Path(numpy.__file__).parent.parent)
    root = _shapes(example_copy)
    first = CliRunner().invoke(main, ["validate", "-p", str(root), "--target", "yard-cams", "--device", jetson.url,
                                      "--json", "--no-progress"])
    assert first.exit_code == 0, first.output
    answer = json.loads(first.stdout)
    group = answer["groups"][0]
    assert group["backend"].startswith("onnxruntime") and "NOT TensorRT" in group["backend_reason"]
    assert group["images"] == 48 and group["device"]["l4t"] == "36.4.3"
    assert any("validation inputs" in s for s in group["sent"]) and any("model file" in s for s in group["sent"])

    project = load_project(root)
    folder = root / "build" / "engines" / "yard-cams"
    here = evaluate(project, OnnxRuntimeRunner(folder / "model.onnx"), data=ValidationSet(project), progress=False)
    print(f"\nshapes (48 images) {group['candidate']}: device {group['value']:.6f}, host {here.value:.6f}")
    assert group["value"] == pytest.approx(here.value, abs=1e-9)
    assert group["retention"] == pytest.approx(here.value / answer["reference_value"])

    again = CliRunner().invoke(main, ["validate", "-p", str(root), "--target", "yard-cams", "--device", jetson.url,
                                      "--json", "--no-progress"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["groups"][0]["sent"] == []  # same folder, same inputs: nothing copied
    table = CliRunner().invoke(main, ["validate", "-p", str(root), "--target", "yard-cams", "--device", jetson.url])
    assert "retention" in table.output and "onnxruntime-cpu" in table.output and jetson.url in table.output


def test_a_model_folder_changed_after_compile_is_refused_on_the_device(example_copy, loopback_jetson) -> None:
    import numpy

    from edgebuild.devices.evaluation import evaluate_on_device
    from edgebuild.errors import BundleError
    from edgebuild.pipeline.runner import Options
    from edgebuild.stages import compile_work
    from edgebuild.workflows.work import select_work

    jetson = loopback_jetson("orin-nano-4gb@6.2", extra_pythonpath=Path(numpy.__file__).parent.parent)
    root = _shapes(example_copy)
    project = load_project(root)
    compile_work(select_work(project, "yard-cams"), until="engine", options=Options(progress=False))
    folder = root / "build" / "engines" / "yard-cams"
    (folder / "model.onnx").write_bytes((folder / "model.onnx").read_bytes()[:-1] + b"\1")
    with pytest.raises(BundleError, match="model.onnx does not match the onnx_sha256"):
        evaluate_on_device(project, folder, jetson.url)
