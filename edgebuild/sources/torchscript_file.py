"""A TorchScript file as the model (``[model] source = "model.ts"``, ``kind = "torchscript"``).

Told by its content: a zip archive with TorchScript's ``constants.pkl`` or ``code/`` entries
(``is_torchscript_archive``). Loaded with ``torch.jit.load``, which rebuilds the module from its
TorchScript code and tensors: it unpickles no arbitrary Python class. The key covers the file's
content. The stages' route is ``edgebuild.sources.torch_source``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import digest, file_sha256
from edgebuild.errors import ModelError

if TYPE_CHECKING:
    import torch

    from edgebuild.project.config import Project

__all__ = []


def _path(project: Project) -> Path:
    return project.path(str(project.model.source))


def _sha(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    return _sha256(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


def files(project: Project) -> dict[str, str]:
    path = _path(project)
    return {path.name: _sha(path)}


def key_parts(project: Project) -> dict[str, str]:
    """The file's content: a new file under the same name is a new model."""
    return {"files": digest(files(project))}


def load(project: Project) -> tuple[torch.nn.Module, list[str]]:
    import torch

    path = _path(project)
    try:
        model = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch.jit.load raises RuntimeError and others for a file it cannot read
        raise ModelError(f"{project.source}: model.source: {path.name}: torch.jit.load failed: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                         hint="save the model with torch.jit.script(model).save(...) or torch.jit.trace") from None
    return model.float(), [f"TorchScript file {path.name} (sha256 {_sha(path)[:12]}) loaded with torch.jit.load"]
