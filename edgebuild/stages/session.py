"""What the stages of one compile share: the settings it was given beyond the project file, and
objects that are expensive to make, made once, by the first stage that needs them (and only if one does)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.pipeline.runner import StageInputs
from edgebuild.targets.profiles import SelectedGroup

if TYPE_CHECKING:
    import onnx

    from edgebuild.accuracy.gate import GateResult
    from edgebuild.devices.farm import Farm
    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.device import DeviceFacts
    from edgebuild.sources.entry_point import TorchRunner

__all__ = ["CompileSession", "CompileSettings"]


@dataclass(frozen=True)
class CompileSettings:
    """How this compile's stages work, beyond the project file (the command's flags)."""

    build_on: str | None = None  # --build-on: an ssh:// build device for every selected group
    container_flavor: str = "jetson"
    base_image: str | None = None
    package_since: Path | None = None
    farm: Farm | None = None  # groups without a build device build on its boards
    ship_ungated: bool = False  # package a candidate selected with the gate off (accuracy.gate = false)


@dataclass
class CompileSession:
    settings: CompileSettings = field(default_factory=CompileSettings)
    _torch_runner: TorchRunner | None = None
    _host: DeviceFacts | None = None
    _graphs: dict[Path, onnx.ModelProto] = field(default_factory=dict)
    _acceptance: dict[str, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # per-group stages may run at once

    def torch_runner(self, project: Project) -> TorchRunner:
        """The project's PyTorch model, loaded once per compile."""
        if self._torch_runner is None:
            from edgebuild.sources.entry_point import TorchRunner

            self._torch_runner = TorchRunner(project)
        return self._torch_runner

    @property
    def loaded_torch_runner(self) -> TorchRunner | None:
        """The PyTorch model if a stage loaded it already (the export reuses it, it does not load it)."""
        return self._torch_runner

    def host(self) -> DeviceFacts:
        """This machine's TensorRT, GPU and Jetson facts, probed once."""
        with self._lock:
            if self._host is None:
                from edgebuild.runtime.engines.device import probe

                self._host = probe()
            return self._host

    def onnx_graph(self, path: Path) -> onnx.ModelProto:
        """An ONNX graph as preflight reads it, loaded once for every group."""
        from edgebuild.targets.preflight import load_graph

        with self._lock:
            if path not in self._graphs:
                self._graphs[path] = load_graph(path)
            return self._graphs[path]

    def acceptance_payload(self, project: Project, gate: GateResult, candidate: str) -> bytes:
        """A candidate's acceptance set: the same for every group, made once."""
        from edgebuild.devices.recipes import acceptance_payload

        with self._lock:
            if candidate not in self._acceptance:
                self._acceptance[candidate] = acceptance_payload(project, gate, candidate)
            return self._acceptance[candidate]


#: what a compile stage's ``key``, ``run``, ... see: a fleet group as the unit, this session as what is shared
CompileInputs = StageInputs[SelectedGroup, CompileSession]
