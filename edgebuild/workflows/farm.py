"""``edgebuild farm status``: the farm's places, and which of the project's fleet groups each can serve.

The fan-out both ``validate --farm`` and ``bench --farm`` run is ``devices.farm.fan_out_groups``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress

__all__ = ["FarmStatus", "farm_status"]


@dataclass(frozen=True)
class FarmPlace:
    """One place of the farm, as ``farm status`` shows it."""

    place: str
    tags: dict[str, str]
    serves: list[str]  # the project's fleet groups a board of these tags can serve
    held_by: str | None  # HOST/USER holding it
    reservation: str | None

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> FarmPlace:
        return cls(**data)


@dataclass(frozen=True)
class FarmStatus:
    coordinator: str
    places: list[FarmPlace]
    unserved: dict[str, dict[str, str]]  # fleet groups no place can serve -> the tags a board for them needs


def farm_status(project_dir: Path, address: str | None = None, *, progress: Progress = lambda _: None) -> FarmStatus:
    from edgebuild.devices.farm import open_farm, target_tags
    from edgebuild.project.config import load_project
    from edgebuild.workflows.work import select_work

    project = load_project(project_dir)
    farm = open_farm(project, address, progress=progress)
    groups = select_work(project, "all").groups
    try:
        places = farm.places()
    finally:
        farm.disconnect()
    records = [FarmPlace(p.name, p.tags, [g.name for g in groups if p.has_tags(target_tags(g))], p.acquired,
                         p.reservation) for p in places]
    unserved = {g.name: target_tags(g) for g in groups if not any(g.name in r.serves for r in records)}
    return FarmStatus(farm.coordinator, records, unserved)
