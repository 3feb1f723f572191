"""Which backend runs a model folder here: its TensorRT engine, one built now, or ONNX Runtime.

The server, the bench runner and the OTA health check all ask this one function, so they run
what the others would:

- the folder's ``engine.plan`` where it exists (built for this device at compile time);
- in ``deferred`` placement, the engine built once from the recipe into an engine cache keyed by
  TensorRT version, compute capability, precision and ONNX (``--engine-cache``, ``$EDGEBUILD_ENGINE_CACHE``, or
  ``<folder>/engine-cache``);
- ONNX Runtime on the CPU where no engine can be used, with the reason, which every caller
  reports (the log, ``/v2/models/NAME``, the bench result).

Python 3.8; TensorRT and ONNX Runtime are imported only when chosen.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import os
import sys
from pathlib import Path
from typing import Any, Optional, Tuple

from edgebuild.errors import CapabilityMissing, EdgebuildError
from edgebuild.runtime.base.files import atomic_write_bytes
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, RECIPE_FILE, Recipe

__all__ = ["load_backend"]

BACKENDS = ("auto", "tensorrt", "onnxruntime")
ENGINE_CACHE_ENV = "EDGEBUILD_ENGINE_CACHE"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_backend(folder: Path, choice: str = "auto", engine_cache: Optional[Path] = None,
                 progress: Progress = _stderr, recipe: Optional[Recipe] = None) -> Tuple[Any, str]:
    """(runner, why this backend) for a model folder; ``choice`` is one of ``BACKENDS``."""
    folder = Path(folder)
    recipe = recipe or Recipe.load(folder)
    recipe.verify_files(folder)  # nothing loads from a folder whose files are not the ones recorded
    if choice in ("auto", "tensorrt"):
        try:
            return tensorrt_runner(folder, recipe, engine_cache, progress)
        except EdgebuildError as exc:
            if choice == "tensorrt":
                raise
            reason = exc.message
    else:
        reason = "--backend onnxruntime was asked for"
    try:
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        runner = OnnxRuntimeRunner.for_device(folder / recipe.onnx)  # imports onnxruntime itself
    except ImportError:
        raise CapabilityMissing("neither the TensorRT engine nor ONNX Runtime can be used: " + reason,
                                hint="install JetPack's TensorRT, or `pip install onnxruntime`") from None
    why = "ONNX Runtime on the CPU, NOT TensorRT: " + reason
    progress("WARNING: serving with " + why)
    return runner, why


def tensorrt_runner(folder: Path, recipe: Recipe, engine_cache: Optional[Path],
                    progress: Progress) -> Tuple[Any, str]:
    """The folder's engine, or the one built here from its recipe into the engine cache."""
    from edgebuild.runtime.engines import device  # not at the top: every host command imports BACKENDS from here
    from edgebuild.runtime.engines.backends.tensorrt import TensorRTRunner

    facts = device.probe()
    if facts.tensorrt is None:
        raise CapabilityMissing("TensorRT is not installed here ({})".format(facts.tensorrt_problem))
    on = recipe.runs_on  # each model's engine opens on its own core (dla: the one fewer models use)
    if Recipe.has_engine(folder):
        return (TensorRTRunner(folder / ENGINE_FILE, folder / ENGINE_JSON, accelerator=on),
                "TensorRT engine {} built for {}{}".format(folder / ENGINE_FILE, recipe.target, _on(on)))
    if facts.compute_capability is None:
        raise CapabilityMissing(facts.tensorrt_problem)
    # the device's TensorRT and GPU, and the model: a cache shared by versions never serves another model
    key = "trt{}-sm{}-{}-{}".format(facts.tensorrt, facts.compute_capability.replace(".", ""), recipe.precision,
                                   recipe.onnx_sha256[:12])
    if recipe.dla_core is not None:  # a DLA engine is another engine of the same ONNX
        key += "-dla{}".format(recipe.dla_core)
    cache = Path(engine_cache or os.environ.get(ENGINE_CACHE_ENV) or folder / "engine-cache") / key
    if not (cache / ENGINE_JSON).is_file():
        progress("no engine for {} yet: building it from the recipe into {} (this takes minutes, once)".format(
            key, cache))
        for name in recipe.file_names(engine=False):
            staged = cache / name
            if not staged.exists():
                atomic_write_bytes(staged, (folder / name).read_bytes())
        device.build_from_recipe(cache / RECIPE_FILE, facts, progress=progress)
    return (TensorRTRunner(cache / ENGINE_FILE, cache / ENGINE_JSON, accelerator=on),
            "TensorRT engine built on this device from the recipe, cached in {}{}".format(cache, _on(on)))


def _on(accelerator: str) -> str:
    return "" if accelerator == "gpu" else ", on {}".format("either DLA core" if accelerator == "dla" else accelerator)
