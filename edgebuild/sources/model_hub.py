"""A torchvision or timm model by name as the model (``[model] source = "torchvision:resnet18"``).

Built with ``torchvision.models.get_model(name, weights=None, num_classes=...)`` or
``timm.create_model(name, pretrained=False, num_classes=...)`` (the class count: ``task.classes``;
nothing is downloaded), then ``[model] weights``, a state_dict, loaded with
``torch.load(weights_only=True)``. Without weights the model is random: the stage line says so and
the gate refuses it unless ``--no-gate``. A name the library does not have is a ModelError with its
close matches; the library not installed, CapabilityMissing naming the pip package. The key covers
the name, the library's version and the weights file's content. The stages' route is
``edgebuild.sources.torch_source``.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.content import digest, file_sha256, tool_versions
from edgebuild.errors import CapabilityMissing, ModelError

if TYPE_CHECKING:
    import torch

    from edgebuild.project.config import Project

__all__ = ["split_name"]

LIBRARIES = ("torchvision", "timm")
HUB_NAME = re.compile(r"^(torchvision|timm):([A-Za-z0-9_.\-]+)$")


def is_hub_name(source: str | None) -> bool:
    return source is not None and HUB_NAME.match(source) is not None


def split_name(source: str) -> tuple[str, str]:
    """``"torchvision:resnet18"`` -> ``("torchvision", "resnet18")``."""
    match = HUB_NAME.match(source)
    if match is None:
        raise ValueError(f"not a model hub name: {source!r}")
    return match.group(1), match.group(2)


def _weights(project: Project) -> Path | None:
    return project.path(project.model.weights) if project.model.weights else None


@lru_cache(maxsize=8)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


def files(project: Project) -> dict[str, str]:
    """The weights file's name -> sha256 (none: random weights)."""
    path = _weights(project)
    if path is None:
        return {}
    try:
        stat = path.stat()
    except OSError:
        return {path.name: "missing"}
    return {path.name: _sha256(str(path), stat.st_mtime_ns, stat.st_size)}


def key_parts(project: Project) -> dict[str, str]:
    """The name, the library's version, the class count and the weights' content."""
    library, name = split_name(str(project.model.source))
    return {"hub": f"{library}:{name}", "library": digest(tool_versions(library)),
            "classes": str(len(getattr(project.task, "classes", []) or [])), "files": digest(files(project))}


def _library(project: Project, library: str) -> Any:
    try:
        if library == "timm":
            import timm

            return timm
        import torchvision

        return torchvision
    except ImportError as exc:
        raise CapabilityMissing(f"{project.source}: model.source {project.model.source!r} needs the {library} "
                                f"package, which is not importable here: {exc}",
                                hint=f"pip install {library}") from None
    except Exception as exc:  # installed, but broken: e.g. torchvision built for another torch
        raise CapabilityMissing(f"{project.source}: model.source {project.model.source!r} needs the {library} "
                                f"package, which is installed but fails to import ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}): a version built for another "
                                f"torch ({tool_versions('torch').get('torch', '?')})?",
                                hint=f"pip install the {library} release that matches your torch") from None


def _names(module: Any, library: str) -> list[str]:
    return list(module.list_models()) if library == "timm" else list(module.models.list_models())


def load(project: Project) -> tuple[torch.nn.Module, list[str]]:
    import torch

    library, name = split_name(str(project.model.source))
    module = _library(project, library)
    names = _names(module, library)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
        raise ModelError(f"{project.source}: model.source: {library} has no model {name!r}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""),
                         hint=f"list the names with {library}" + (".list_models()" if library == "timm"
                                                                  else ".models.list_models()"))
    classes = len(project.task.classes)
    try:
        if library == "timm":
            model = module.create_model(name, pretrained=False, num_classes=classes)
        else:
            model = module.models.get_model(name, weights=None, num_classes=classes)
    except Exception as exc:  # the library's own constructors raise many types
        raise ModelError(f"{project.source}: model.source: {library} could not build {name!r} with "
                         f"num_classes={classes}: {type(exc).__name__}: {exc}") from None
    version = tool_versions(library).get(library, "?")
    path = _weights(project)
    if path is None:
        return model.float(), [f"{library} {version} {name}, {classes} classes, random weights (no model.weights): "
                               "the gate refuses it unless --no-gate"]
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle that is not plain tensors, a truncated file
        raise ModelError(f"{project.source}: model.weights: {path.name} is not a state_dict that "
                         f"torch.load(weights_only=True) reads: {type(exc).__name__}: {exc}",
                         hint="save it with torch.save(model.state_dict(), path)") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    try:
        model.load_state_dict(state)
    except Exception as exc:  # missing or unexpected keys, shape mismatches
        raise ModelError(f"{project.source}: model.weights: {path.name} does not fit {library}:{name} with "
                         f"{classes} classes: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                         hint="the class count is len(task.classes); save the weights of the same model") from None
    return model.float(), [f"{library} {version} {name}, {classes} classes, weights {path.name} "
                           f"(sha256 {files(project)[path.name][:12]}, torch.load(weights_only=True))"]
