"""Limit presets (``cgroups/*.toml``): what one model server may use on a module, in bytes and cores.

A preset says what one model server may use on a module: RAM, swap, CPU quota, the cores it may
run on and the number of tasks, which the container's cgroup enforces; and the TensorRT
memory-pool limit and the largest engine device memory, because CUDA allocations on a Jetson
(nvmap) come from the same DRAM but are probably not charged to the cgroup.

This module reads and checks preset files and nothing else, so that ``profiles`` (a group's
``limits``) and ``project.schema`` (sizes) can use it; ``edgebuild.targets.limits`` checks a preset
against a module and runs commands inside a cgroup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from edgebuild._compat import tomllib
from edgebuild.datafiles import data_dir
from edgebuild.errors import ConfigError

__all__ = ["LimitPreset", "human_size", "load_preset", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_size(value: str | int) -> int:
    """``"512M"`` -> bytes; binary units like docker's ``--memory`` (``k``, ``m``, ``g``, ``t``)."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; write it like 512M, 2G or 1.5G")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * (1 << (10 * " kmgt".index(unit or " "))))


def human_size(n: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{int(n)} B"


def cpuset_cpus(text: str) -> list[int]:
    """``"0-2,4"`` -> ``[0, 1, 2, 4]``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


class _PresetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    class Limits(BaseModel):
        model_config = ConfigDict(extra="forbid")
        memory: str
        memory_swap: str | None = None
        cpus: float = Field(gt=0)
        cpuset: str | None = None
        pids: int = Field(256, ge=16)

        @field_validator("memory", "memory_swap")
        @classmethod
        def _size(cls, value: str | None) -> str | None:
            if value is not None:
                parse_size(value)
            return value

        @field_validator("cpuset")
        @classmethod
        def _cpuset(cls, value: str | None) -> str | None:
            if value is not None and not _CPUSET.match(value):
                raise ValueError(f"{value!r} is not a cpuset; write it like 2-5 or 0,2-3")
            return value

    class Gpu(BaseModel):
        model_config = ConfigDict(extra="forbid")
        tensorrt_workspace: str
        engine_device_memory_max: str

        @field_validator("tensorrt_workspace", "engine_device_memory_max")
        @classmethod
        def _size(cls, value: str) -> str:
            parse_size(value)
            return value

    module: str
    description: str = ""
    limits: Limits
    gpu: Gpu


@dataclass(frozen=True)
class LimitPreset:
    """One preset, sizes in bytes. ``memory_swap`` is RAM plus swap, as docker's ``--memory-swap``."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # for from_dict: an unknown key is an error

    name: str
    module: str
    description: str
    source: str
    memory: int
    memory_swap: int
    cpus: float
    cpuset: str | None
    pids: int
    tensorrt_workspace: int
    engine_device_memory_max: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "limit preset") -> LimitPreset:  # JSON in
        """A preset from its ``as_dict()`` (the ``limits`` a recipe carries); ``source`` names where it came from."""
        try:
            return TypeAdapter(cls).validate_json(json.dumps(data), strict=True)  # JSON mode: from a dict, strictly
        except ValidationError as exc:
            raise ConfigError(f"{source}: {_problems(exc)}",
                              hint="rebuild it with this edgebuild: `edgebuild compile --force`") from None

    def describe(self) -> str:
        swap = "no swap" if self.memory_swap == self.memory else f"swap {human_size(self.memory_swap - self.memory)}"
        cores = f" on cores {self.cpuset}" if self.cpuset else ""
        return (f"memory {human_size(self.memory)} ({swap}), {self.cpus:g} CPUs{cores}, {self.pids} tasks; "
                f"TensorRT workspace {human_size(self.tensorrt_workspace)}, engine device memory at most "
                f"{human_size(self.engine_device_memory_max)}")

    def with_overrides(self, *, memory: str | None = None, cpus: float | None = None, cpuset: str | None = None,
                       pids: int | None = None) -> LimitPreset:
        """The preset with command-line overrides (``edgebuild run --memory 256M``)."""
        changes: dict[str, Any] = {}
        if memory is not None:
            size = _parse_option(parse_size, memory, "--memory")
            # a RAM override keeps the preset's swap allowance (none, for every preset we ship)
            changes.update(memory=size, memory_swap=size + (self.memory_swap - self.memory))
        if cpus is not None:
            changes["cpus"] = cpus
        if cpuset is not None:
            if not _CPUSET.match(cpuset):
                raise ConfigError(f"--cpuset {cpuset!r} is not a cpuset; write it like 2-5 or 0,2-3")
            changes["cpuset"] = cpuset
        if pids is not None:
            changes["pids"] = pids
        return replace(self, **changes) if changes else self


def _parse_option(parse: Callable[[str], int], value: str, option: str) -> int:
    try:
        return parse(value)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def _problems(exc: ValidationError) -> str:
    return "; ".join(": ".join(filter(None, (".".join(str(p) for p in e["loc"]), e["msg"]))) for e in exc.errors())


def preset_path(name: str, project_root: Path | None = None) -> Path:
    """A preset by name (a file in cgroups/) or by path (relative to the project)."""
    if name.endswith(".toml") or "/" in name:
        path = Path(name)
        if not path.is_absolute() and project_root is not None:
            path = project_root / path
        return path
    return data_dir("cgroups") / f"{name}.toml"


def available_presets() -> list[str]:
    return sorted(p.stem for p in data_dir("cgroups").glob("*.toml"))


def load_preset(name: str, project_root: Path | None = None) -> LimitPreset:
    path = preset_path(name, project_root)
    if not path.is_file():
        raise ConfigError(f"limit preset {name!r} not found ({path})",
                          hint=f"presets shipped with edgebuild: {', '.join(available_presets())}; "
                               "or give the path of a preset file")
    try:
        parsed = _PresetFile.model_validate(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_problems(exc)}") from None
    limits, gpu = parsed.limits, parsed.gpu
    memory = parse_size(limits.memory)
    swap = parse_size(limits.memory_swap) if limits.memory_swap else memory
    if swap < memory:
        raise ConfigError(f"{path}: limits.memory_swap ({limits.memory_swap}) is RAM plus swap and cannot be "
                          f"less than limits.memory ({limits.memory})")
    preset = LimitPreset(
        name=path.stem, module=parsed.module, description=parsed.description, source=str(path), memory=memory,
        memory_swap=swap, cpus=limits.cpus, cpuset=limits.cpuset, pids=limits.pids,
        tensorrt_workspace=parse_size(gpu.tensorrt_workspace),
        engine_device_memory_max=parse_size(gpu.engine_device_memory_max))
    if preset.tensorrt_workspace > preset.engine_device_memory_max:
        raise ConfigError(f"{path}: gpu.tensorrt_workspace ({gpu.tensorrt_workspace}) is larger than "
                          f"gpu.engine_device_memory_max ({gpu.engine_device_memory_max})")
    return preset
