"""What ships to a fleet group that runs several models: one folder, one container, one bundle.

``ship_group`` writes ``build/groups/<group>/`` (``edgebuild.runtime.base.group``: ``group.json`` and a
copy of every model's folder under ``models/<name>/``), then the group's container build context
and run specs (one server for every model, the group's limit preset for the set) and its signed
bundle and Mender artifact carrying every model, through the same writers a one-model project
uses (``shipping.container``, ``shipping.ota``), which take a group folder where they take a model
folder. The fleet file's ``[ota]`` and ``[runtime]`` apply: :class:`FleetShipping` is the view of the
fleet those writers read.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import atomic_output_dir
from edgebuild.errors import AccuracyGateError
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.group import GROUP_FILE, MODELS_DIR, GroupManifest, GroupModel
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.shipping.container import write_group_container
from edgebuild.shipping.ota import package_group
from edgebuild.shipping.shipped import FleetShipping
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.devices.memory_plan import MemoryPlan
    from edgebuild.project.fleet_file import Fleet
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["ship_group"]


def write_group_folder(fleet: Fleet, group: str, target: str, folders: dict[str, Path], memory: MemoryPlan) -> Path:
    """``build/groups/<group>/``: ``group.json`` and every model's folder, written as one unit."""
    out = BuildLayout(fleet.build_dir).fleet_group(group)
    models = []
    with atomic_output_dir(out) as staging:
        for name, folder in folders.items():
            recipe = Recipe.load(folder)
            target_dir = staging / MODELS_DIR / name
            for file_name in recipe.file_names(engine=Recipe.has_engine(folder)):
                source = folder / file_name
                if source.is_file():
                    (target_dir / file_name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target_dir / file_name)
            models.append(GroupModel(name=name, served_as=recipe.model_name, folder=f"{MODELS_DIR}/{name}",
                                     version=recipe.model_version, precision=recipe.precision))
        GroupManifest(group=group, target=target, fleet=fleet.name, version=fleet.file.ota.version, models=models,
                      memory_plan=memory.as_dict()).save(staging)
    assert (out / GROUP_FILE).is_file()
    return out


def ship_group(fleet: Fleet, group: SelectedGroup, folders: dict[str, Path], memory: MemoryPlan, *,
               flavor: str = "jetson", base_image: str | None = None, package_since: Path | None = None,
               ship_ungated: bool = False, progress: Progress,
               ungated: tuple[str, ...] = ()) -> dict[str, str | bool]:
    """The group folder, its container and its bundle; returns what was written (paths from the fleet).
    ``ungated``: models whose candidate was selected with the gate off (not packaged without ``ship_ungated``,
    --ship-ungated); ``package_since`` an earlier bundle the group's is a delta over."""
    view = FleetShipping(fleet)
    folder = write_group_folder(fleet, group.name, group.target.id, folders, memory)
    progress(f"{group.name}: wrote {folder.relative_to(fleet.root)} ({', '.join(folders)})")
    container = write_group_container(view, group, folder, flavor=flavor,
                                      base_image=base_image, progress=progress)
    if ungated and not ship_ungated:
        raise AccuracyGateError(f"{group.name}: not packaged: {', '.join(ungated)} selected with the gate off",
                                hint="compile with the gate on, or pass --ship-ungated")
    package = package_group(view, group, model_folder=folder, context=fleet.build_dir / container.context,
                            since=package_since, progress=progress)
    return {"folder": str(folder.relative_to(fleet.root)),
            "container": str((fleet.build_dir / container.context).relative_to(fleet.root)),
            "bundle": package.bundle.path, "mender": package.mender.path, "signed": package.signed}
