"""A group folder: every model a fleet group runs, as one unit the device serves and updates.

A fleet file's compile (``edgebuild.workflows.fleet_compile``) writes ``build/groups/<group>/``::

    group.json              this manifest: the group, its target, its models and their folders,
                            the memory plan the compile made for them
    models/<name>/          each model's folder as the engine stage wrote it (recipe.json, the
                            ONNX, acceptance set, engine where built)

The server, the OTA health check, the bench and the bundle take either form: a model folder
(``recipe.json``) or a group folder (``group.json``); :func:`model_folders` is the one place that
tells them apart. A group folder's models share the target and the runtime settings (the fleet
file owns them) and switch together: one bundle, one ``current`` link, one health check that
every model must pass.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Union

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.runtime.base.recipe import RECIPE_FILE, Recipe

__all__ = ["GROUP_FILE", "GroupManifest", "GroupModel", "is_group_folder", "model_folders"]

GROUP_FILE = "group.json"
GROUP_SCHEMA = "edgebuild.group/1"
MODELS_DIR = "models"


@dataclass(frozen=True)
class GroupModel:
    name: str  # the model's name in the fleet file
    served_as: str  # the name the server answers to (the model project's name, the recipe's model_name)
    folder: str  # relative to the group folder
    version: str
    precision: str


@dataclass(frozen=True)
class GroupManifest:
    group: str
    target: str
    fleet: str
    version: str
    models: List[GroupModel]
    memory_plan: Dict[str, Any]
    schema: str = GROUP_SCHEMA

    def save(self, folder: Union[str, Path]) -> Path:
        path = Path(folder) / GROUP_FILE
        atomic_write_text(path, json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "GroupManifest":
        path = Path(folder) / GROUP_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError("{}: cannot read the group manifest ({})".format(path, exc),
                              hint="rebuild it: `edgebuild compile` of the fleet file") from None
        if not isinstance(data, dict) or data.get("schema") != GROUP_SCHEMA:
            raise ConfigError("{}: not a group manifest of this edgebuild (schema {!r}, this one reads {!r})".format(
                path, data.get("schema") if isinstance(data, dict) else None, GROUP_SCHEMA),
                hint="rebuild it: `edgebuild compile` of the fleet file")
        try:
            models = [GroupModel(**m) for m in data["models"]]
            return cls(data["group"], data["target"], data["fleet"], data["version"], models, data["memory_plan"])
        except (KeyError, TypeError) as exc:
            raise ConfigError("{}: a field is missing or wrong ({})".format(path, exc),
                              hint="rebuild it: `edgebuild compile` of the fleet file") from None


def is_group_folder(folder: Union[str, Path]) -> bool:
    return (Path(folder) / GROUP_FILE).is_file() and not (Path(folder) / RECIPE_FILE).is_file()


def model_folders(folder: Union[str, Path]) -> Dict[str, Path]:
    """The model folders in ``folder`` by the name each is served as: itself for a model folder, every
    model's for a group folder (checked: each exists and its recipe names the group's target)."""
    folder = Path(folder)
    if not is_group_folder(folder):
        return {Recipe.load(folder).model_name: folder}
    manifest = GroupManifest.load(folder)
    found = {}
    for model in manifest.models:
        path = folder / model.folder
        recipe = Recipe.load(path, hint="the group folder {} lacks model {}: rebuild it".format(folder, model.name))
        if recipe.target != manifest.target:
            raise ConfigError("{}: model {} is built for {}, the group for {}".format(
                folder, model.name, recipe.target, manifest.target), hint="rebuild the group folder")
        found[model.served_as] = path
    return found
