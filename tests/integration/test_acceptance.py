"""The acceptance check a model folder runs before it serves (first boot, or any start).

A correct model folder passes; one whose model computes something else (weights perturbed by
10%, which costs the shapes detector about 10% of its mAP50-95, more than the gate's margin), with
a recipe that matches it, so only acceptance can tell, is not served: not ready with the numbers,
and the OTA health check fails.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgebuild.errors import BundleError
from edgebuild.pipeline.runner import Options
from edgebuild.project.config import load_project
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.ota.ota import health_check
from edgebuild.runtime.serving.server import Server
from edgebuild.stages import compile_work
from edgebuild.workflows.work import select_work
from tests.support.compiled import compiled_copy
from tests.support.runtime_artifacts import Client


@pytest.fixture(scope="module")
def shapes_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = compiled_copy(tmp_path_factory, "shapes-detector", "yard-cams", tmp_path_factory.mktemp("acceptance"))
    work = select_work(load_project(root), "yard-cams")
    report = compile_work(work, until="engine", options=Options(progress=False))
    assert report.ok, report.error
    return root / "build" / "engines" / "yard-cams"


def _damaged_copy(folder: Path, target: Path, noise: float) -> Path:
    shutil.copytree(folder, target)
    model = onnx.load(str(target / "model.onnx"))
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 16:
            noisy = values * (1 + noise * rng.standard_normal(values.shape))
            tensor.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), tensor.name))
    onnx.save(model, str(target / "model.onnx"))
    recipe = Recipe.load(target)  # a consistent folder: the hashes match, only the computation is off
    dataclasses.replace(recipe, onnx_sha256=sha256_file(target / "model.onnx")).save(target)
    return target


def _serve(folder: Path) -> tuple[int, dict, str]:
    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
    try:
        client = Client(running.port)
        deadline = time.time() + 60
        while not running.service.ready.is_set() and running.service.failed is None and time.time() < deadline:
            time.sleep(0.05)
        status = client.request("GET", "/v2/health/ready")[0]
        metadata = client.json("GET", "/v2/models/shapes-detector")[1]
        metrics = client.request("GET", "/metrics")[1].decode()
    finally:
        running.stop()
    return status, metadata, metrics


def test_a_correct_model_folder_passes_its_acceptance_check(shapes_folder: Path) -> None:
    status, metadata, metrics = _serve(shapes_folder)
    accepted = metadata["parameters"]["acceptance"]
    assert status == 200 and accepted["passed"] and accepted["images"] == 32
    assert accepted["value"] >= accepted["threshold"] > 0.9
    assert 'edgebuild_acceptance_passed{model="shapes-detector"} 1' in metrics


def test_the_health_check_of_a_correct_folder_passes(shapes_folder: Path, tmp_path: Path) -> None:
    from edgebuild.runtime.ota.bundle import REFERENCE
    from edgebuild.shipping.ota import reference_outputs

    folder = shutil.copytree(shapes_folder, tmp_path / "installed")  # as a bundle installs it: with its reference
    (folder / REFERENCE).write_bytes(reference_outputs(folder, Recipe.load(folder)))
    assert "max_abs_diff" in health_check(folder, warmup_budget_s=1)


def _without_fallback(folder: Path) -> Path:
    recipe = Recipe.load(folder)
    dataclasses.replace(recipe, fallback=None, fallback_sha256=None).save(folder)
    shutil.rmtree(folder / "fallback")
    return folder


def test_the_first_boot_recipe_of_an_int8_model_carries_its_fp16_fallback(shapes_folder: Path) -> None:
    recipe = Recipe.load(shapes_folder)
    assert recipe.placement == "deferred" and recipe.candidate.startswith("int8") and recipe.fallback == "fallback"
    fallback = Recipe.load(shapes_folder / "fallback")
    assert fallback.candidate == "fp16" and fallback.precision == "fp16" and fallback.fallback is None


def test_a_model_that_computes_something_else_is_not_served_and_fails_the_health_check(shapes_folder: Path,
                                                                                       tmp_path: Path) -> None:
    damaged = _without_fallback(_damaged_copy(shapes_folder, tmp_path / "damaged", noise=0.10))
    status, metadata, metrics = _serve(damaged)
    assert status == 503
    reason = metadata["parameters"]["failed"]
    assert "acceptance failed" in reason and "detection agreement with FP32" in reason, reason
    assert 'edgebuild_acceptance_passed{model="shapes-detector"} 0' in metrics
    with pytest.raises(BundleError, match="acceptance failed"):
        health_check(damaged, warmup_budget_s=1)


def test_a_failing_engine_falls_back_to_the_bundles_fp16_recipe(shapes_folder: Path, tmp_path: Path) -> None:
    from edgebuild.runtime.ota.bundle import REFERENCE
    from edgebuild.shipping.ota import reference_outputs

    damaged = _damaged_copy(shapes_folder, tmp_path / "damaged", noise=0.10)
    status, metadata, metrics = _serve(damaged)
    parameters = metadata["parameters"]
    assert status == 200, parameters["failed"]
    fallback = parameters["fallback"]
    assert fallback["active"] and fallback["candidate"] == "fp16" and parameters["candidate"] == "fp16"
    assert "acceptance failed" in fallback["reason"] and not fallback["refused"]["passed"]
    assert parameters["acceptance"]["passed"]  # the fallback's own acceptance set
    assert 'edgebuild_fallback_active{model="shapes-detector"} 1' in metrics

    # as a bundle installs it, with each recipe's health reference: the check passes and says why
    (damaged / REFERENCE).write_bytes(reference_outputs(damaged, Recipe.load(damaged)))
    (damaged / "fallback" / REFERENCE).write_bytes(reference_outputs(damaged / "fallback",
                                                                     Recipe.load(damaged / "fallback")))
    checked = health_check(damaged, warmup_budget_s=1)
    assert checked["fallback"]["candidate"] == "fp16"


def test_an_update_whose_engine_fails_acceptance_is_rolled_back(shapes_folder: Path, tmp_path: Path) -> None:
    from edgebuild.runtime.ota.ota import active_version, install
    from edgebuild.shipping.ota import bundle_payload, write_bundle
    from tests.support.jetson import write_device_root

    device = write_device_root(tmp_path / "device", "orin-nano-8gb@6.2")
    recipe = Recipe.load(shapes_folder)
    install_root = tmp_path / "opt"

    def bundle(folder: Path, version: str) -> Path:
        recipe, files = bundle_payload(folder, None)
        manifest = {"model": recipe.model_name, "version": version, "group": recipe.group, "target": recipe.target,
                    "precision": recipe.precision, "compatibility": recipe.compatibility()}
        out = tmp_path / f"{version}.edgebundle"
        write_bundle(out, manifest=manifest, files=files)
        return out

    good = bundle(shapes_folder, "1.0.0")
    assert install(good, install_root, require_signature=False, root=device)["installed"] == "1.0.0"
    damaged = _without_fallback(_damaged_copy(shapes_folder, tmp_path / "damaged", noise=0.10))
    with pytest.raises(BundleError, match="failed its health check and was rolled back to 1.0.0.*acceptance failed"):
        install(bundle(damaged, "2.0.0"), install_root, require_signature=False, root=device)
    assert active_version(install_root) == "1.0.0" and recipe.target == "orin-nano-8gb@6.2"
