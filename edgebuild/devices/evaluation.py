"""A model folder measured on a device over SSH, scored here with the gate's own metric code.

Used by the engine stage's acceptance of an engine built on a device and by
``edgebuild validate --device``: the device runs the exact float32 batches the gate evaluated
(``accuracy.evaluate.device_inputs``) and sends back its raw results, which
``accuracy.evaluate.score_device_results`` turns into the project's metric.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.accuracy.evaluate import (
    Evaluation,
    ValidationSet,
    detection_settings,
    device_inputs,
    score_device_results,
)
from edgebuild.devices.ssh import SshDevice
from edgebuild.errors import RemoteError
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.recipe import RECIPE_FILE, Recipe
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["evaluate_on_device"]


def evaluate_on_device(project: Project, folder: Path, url: str, *, data: ValidationSet | None = None,
                       backend: str = "auto", progress: Progress = lambda _: None) -> tuple[Evaluation,
                                                                                                     JsonObject]:
    """A model folder's metric measured on the device at ``url`` (over SSH), scored here.

    The model folder and the validation inputs are each copied once per content hash (a second
    evaluation of the same folder and set sends nothing but the command). Returns the evaluation
    and the device's answer (backend, why, inference seconds, device facts).
    """
    data = data or ValidationSet(project)
    device = SshDevice(url)
    recipe = Recipe.load(folder)
    files = recipe.model_files(folder)
    model_key = hashlib.sha256(json.dumps(recipe.file_hashes(folder), sort_keys=True).encode()).hexdigest()
    model_dir = f"evaluations/models/{recipe.group}-{model_key[:12]}"
    inputs = device_inputs(project, data)
    inputs_file = f"{hashlib.sha256(inputs).hexdigest()[:16]}.npz"
    inputs_name = f"evaluations/inputs/{inputs_file}"
    sent = []
    if device.put_once(files, model_dir, RECIPE_FILE):
        sent.append(f"{len(files)} model file(s)")
    if device.put_once({inputs_file: inputs}, "evaluations/inputs", inputs_file):
        sent.append(f"the validation inputs ({len(inputs)} bytes)")
    progress(f"evaluate: sent {', '.join(sent)} to {url}" if sent else f"evaluate: {url} has the model and inputs")
    out = f"evaluations/results-{model_key[:12]}.npz"
    args = ["evaluate", model_dir, "--inputs", inputs_name, "--out", out, "--backend", backend]
    settings = detection_settings(project)
    if settings:
        args += ["--detection", json.dumps(settings)]
    answer = device.device_tool(args, timeout_s=3600)
    result = answer["evaluate"]
    fetched = device.fetch([out])[out]
    if hashlib.sha256(fetched).hexdigest() != result["results_sha256"]:
        raise RemoteError(f"{url}: the evaluation results arrived with another sha256 than the device computed")
    evaluation = score_device_results(project, data, fetched, result["backend"], result["inference_s"])
    return evaluation, {**result, "device": answer.get("device"), "sent": sent}
