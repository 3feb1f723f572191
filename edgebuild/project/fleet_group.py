"""``[[fleet]]``: one group of devices (a module on a JetPack release) and where its models run.

A section of its own beside ``schema.py`` (which holds it in ``Project.fleet``). Its ``accelerator``
places the group's model on the GPU or a DLA core; in a fleet file, ``placement`` places each of
the group's models (``edgebuild.project.fleet_file``). What needs the profile catalog (a module's
DLA cores, whether the JetPack's TensorRT runs the DLA) is checked by ``edgebuild.project.groups``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__: list[str] = []

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")  # project, fleet group and limit preset names

#: gpu, one DLA core, or either DLA core (the device's runtime picks): edgebuild.targets.dla.ACCELERATORS
Accelerator = Literal["gpu", "dla0", "dla1", "dla"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FleetGroup(_Section):
    name: str
    module: str
    jetpack: str
    # where the group's model runs: "gpu", "dla0", "dla1" or "dla" (either core, the device's runtime picks)
    accelerator: Accelerator = "gpu"
    use_dla: bool = False  # deprecated: the spelling of accelerator = "dla0" before placements
    build_on: str | None = None  # ssh://user@host[:port] of a Jetson of this profile that builds the engine
    cgroup_preset: str | None = None  # limit preset (cgroups/ name or file); default [runtime]'s, then the module's
    power_mode: str | None = None  # on the device farm: the power_mode tag its boards must have (e.g. MAXN)
    models: list[str] | None = None  # a fleet file's group: the models it runs (edgebuild.project.fleet_file)
    # a fleet file's group: where each of its models runs, by model name (the others: ``accelerator``)
    placement: dict[str, Accelerator] | None = None
    # predicted p50 (GPU compute, batch 1) each image must meet: a group no candidate precision can meet, even at
    # the low end of the latency model's error band, is refused before engines are built (docs/latency-plan.md)
    latency_budget_ms: float | None = Field(None, gt=0)
    min_fps: float | None = Field(None, gt=0)  # images per second at batch 1: a budget of 1000 / min_fps ms

    @model_validator(mode="before")
    @classmethod
    def _use_dla_is_dla0(cls, data: Any) -> Any:
        """``use_dla = true`` is ``accelerator = "dla0"``; written beside another accelerator, it must agree."""
        if not isinstance(data, dict) or not data.get("use_dla"):
            return data
        written = data.get("accelerator")
        if written is None:
            return {**data, "accelerator": "dla0"}
        if written == "gpu":
            raise ValueError("use_dla = true (deprecated: the old spelling of accelerator = \"dla0\") contradicts "
                             "accelerator = \"gpu\"; keep only accelerator")
        return data

    @field_validator("build_on")
    @classmethod
    def _build_on(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from edgebuild.project.addresses import parse_ssh_url

        parse_ssh_url(value)  # its ValueError names what is allowed
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(f"must be lower-case letters, digits, '-' or '_', found {value!r}")
        return value

    @field_validator("jetpack", mode="before")
    @classmethod
    def _jetpack_as_text(cls, value: Any) -> Any:
        if isinstance(value, float):  # `jetpack = 6.2` written without quotes
            return repr(value)
        return value

    @property
    def target_id(self) -> str:
        return f"{self.module}@{self.jetpack}"

    @property
    def accelerator_key(self) -> str:
        """The key that placed the group, as the user wrote it (for messages): use_dla or accelerator."""
        return "use_dla" if self.use_dla and self.accelerator == "dla0" else "accelerator"
