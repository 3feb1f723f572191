"""What the container and package writers ship from: a model project, or a fleet file's view of itself.

A fleet group with several models is shipped through the same writers as a one-model project
(``shipping.container``, ``shipping.ota``); they read a project's name, folders, ``[ota]`` and
``[runtime]``, which :class:`FleetShipping` gives for a fleet file. ``Shipped`` is either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from edgebuild.project.fleet_file import Fleet
from edgebuild.project.schema import OtaSection, Project, ProjectSection, RuntimeSection

__all__ = []


@dataclass(frozen=True)
class FleetShipping:
    """The fleet as the container and package writers read a project: its name, folders, [ota] and [runtime]."""

    fleet: Fleet

    @property
    def project(self) -> ProjectSection:
        return self.fleet.file.project

    @property
    def ota(self) -> OtaSection:
        return self.fleet.file.ota

    @property
    def runtime(self) -> RuntimeSection:
        return self.fleet.file.runtime

    @property
    def root(self) -> Path:
        return self.fleet.root

    @property
    def build_dir(self) -> Path:
        return self.fleet.build_dir

    def path(self, relative: str) -> Path:
        return (self.fleet.root / relative).resolve()


#: what packages: a model project, or a fleet file's view for a group with several models
Shipped: TypeAlias = "Project | FleetShipping"
