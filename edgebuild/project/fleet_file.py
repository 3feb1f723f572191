"""A fleet of several models: an ``edgebuild.toml`` whose ``[models]`` names model projects.

A device group rarely runs one model. A fleet file composes model projects (each a folder with
its own ``edgebuild.toml``: model, task, data, accuracy) and says which fleet group runs which::

    [project]
    name = "camera-box"

    [models]
    detector = "../shapes-detector"       # a folder holding a model project
    classifier = "../digits-classifier"

    [[fleet]]
    name = "yard-cams"
    module = "orin-nano-8gb"
    jetpack = "6.2"
    models = ["detector", "classifier"]

    [[fleet]]
    name = "dock"
    module = "agx-orin-64gb"
    jetpack = "6.2"
    models = ["detector", "classifier"]
    placement = { detector = "dla0", classifier = "gpu" }   # the rest: the group's accelerator

The fleet file owns what is shared by a group's models: ``[[fleet]]``, ``[runtime]``, ``[ota]``
(the group's version, key and device types) and ``[farm]``; each model keeps its own version (its
project's ``[ota] version``). :func:`load_fleet` loads every model project and gives each the view the compile
runs it with (:meth:`Fleet.model_project`): the fleet's groups that run it, the fleet's runtime
and OTA settings, and a build folder of its own under the fleet's (``build/models/<name>/``).
A model project's own ``[[fleet]]`` may name a group the fleet file names too, but then with the
same module and JetPack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from edgebuild._compat import tomllib
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from edgebuild.project.groups import check_groups, check_precisions, static_shape_problems
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import (
    NAME_PATTERN,
    PROJECT_FILE,
    FarmSection,
    FleetGroup,
    OtaSection,
    Project,
    ProjectSection,
    RuntimeSection,
    _Section,
)
from edgebuild.project.toml_file import find_project_file, format_problems, format_validation_error, read_toml
from edgebuild.targets.profiles import load_catalog

__all__ = ["Fleet", "is_fleet_file", "load_fleet"]

#: the key that makes an edgebuild.toml a fleet file
MODELS_KEY = "models"


class FleetFile(_Section):
    """A validated fleet file (``edgebuild.toml`` with ``[models]``)."""

    project: ProjectSection
    models: dict[str, str] = Field(min_length=1)
    fleet: list[FleetGroup] = Field(min_length=1)
    runtime: RuntimeSection = RuntimeSection()
    ota: OtaSection = OtaSection()
    farm: FarmSection = FarmSection()

    @field_validator("models")
    @classmethod
    def _model_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not NAME_PATTERN.match(name)]
        if bad:
            raise ValueError(f"model names must be lower-case letters, digits, '-' or '_', found {bad}")
        return value

    @model_validator(mode="after")
    def _groups_name_models(self) -> FleetFile:
        problems = []
        for group in self.fleet:
            if not group.models:
                problems.append(f"fleet group {group.name!r} names no models (models = [...], from: "
                                f"{', '.join(self.models)})")
                continue
            unknown = [m for m in group.models if m not in self.models]
            if unknown:
                problems.append(f"fleet group {group.name!r} runs {', '.join(map(repr, unknown))}, which [models] "
                                f"does not define (it defines {', '.join(self.models)})")
            twice = sorted({m for m in group.models if group.models.count(m) > 1})
            if twice:
                problems.append(f"fleet group {group.name!r} names {', '.join(twice)} more than once")
            placed = [m for m in group.placement or {} if m not in group.models]
            if placed:
                problems.append(f"fleet group {group.name!r} places {', '.join(map(repr, placed))}, which it does not "
                                f"run (its models: {', '.join(group.models)})")
        names = [g.name for g in self.fleet]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            problems.append(f"fleet group name(s) {', '.join(duplicated)} used more than once")
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass(frozen=True)
class Fleet:
    """A loaded fleet file and its model projects, as the compile runs them."""

    file: FleetFile
    root: Path  # the folder of the fleet file
    source: Path
    #: model name -> its project as written (its own folder, fleet and build folder)
    models: dict[str, Project]

    @property
    def name(self) -> str:
        return self.file.project.name

    @property
    def build_dir(self) -> Path:
        return (self.root / self.file.project.build_dir).resolve()

    def groups_running(self, model: str) -> list[FleetGroup]:
        return [g for g in self.file.fleet if model in (g.models or [])]

    def model_build_dir(self, model: str) -> Path:
        return BuildLayout(self.build_dir).fleet_model(model)

    def model_project(self, model: str) -> Project:
        """The model's project as the fleet compiles it: the fleet's groups that run it (without their
        ``models`` list), the fleet's runtime, OTA and farm settings, and its own build folder here."""
        project = self.models[model]
        groups = [g.model_copy(update={"models": None, "placement": None, "use_dla": False,
                                       "accelerator": self.accelerator(g, model),
                                       "cgroup_preset": self._preset(g.cgroup_preset)})
                  for g in self.groups_running(model)]
        runtime = self.file.runtime.model_copy(update={"cgroup_preset": self._preset(self.file.runtime.cgroup_preset)})
        section = project.project.model_copy(update={"build_dir": str(self.model_build_dir(model))})
        # the model keeps its own version (its project's [ota] version): a group's update carries each model's
        # version, and a model that did not change keeps its files byte for byte (a delta leaves them out)
        ota = self.file.ota.model_copy(update={"version": project.ota.version})
        return project.model_copy(update={"project": section, "fleet": groups, "runtime": runtime, "ota": ota,
                                          "farm": self.file.farm})

    @staticmethod
    def accelerator(group: FleetGroup, model: str) -> str:
        """Where ``group`` runs ``model``: its ``placement`` for the model, else the group's ``accelerator``."""
        return (group.placement or {}).get(model, group.accelerator)

    def _preset(self, name: str | None) -> str | None:
        """A preset given as a file path is the fleet file's, not the model project's (absolute from here)."""
        if name is None or not (name.endswith(".toml") or "/" in name) or Path(name).is_absolute():
            return name
        return str((self.root / name).resolve())


def is_fleet_file(location: str | Path) -> bool:
    """Whether the edgebuild.toml at ``location`` (a folder or the file) composes models (``[models]``)."""
    path = Path(location)
    path = path / PROJECT_FILE if path.is_dir() else path
    try:
        return MODELS_KEY in tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # load_project says what is wrong with it


def load_fleet(location: str | Path = ".") -> Fleet:
    """Read and check a fleet file and every model project it names; every problem at once."""
    source = find_project_file(location)
    raw = read_toml(source)
    try:
        file = FleetFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc, raw, FleetFile)) from None
    root = source.parent.resolve()
    # modules, releases, DLA, device types, the preset name: as a model project's
    problems = check_groups(file.fleet, file.ota, file.runtime, load_catalog())
    models: dict[str, Project] = {}
    for name, folder in file.models.items():
        path = (root / folder).resolve()
        if not (path / PROJECT_FILE).is_file() and not (path.is_file() and path.name == PROJECT_FILE):
            problems.append(f"models.{name}: {folder!r} is not a model project (no {PROJECT_FILE} in {path})")
            continue
        if is_fleet_file(path):
            problems.append(f"models.{name}: {folder!r} is a fleet file itself; name model projects")
            continue
        try:
            models[name] = load_project(path)
        except ConfigError as exc:
            problems.append(f"models.{name}: {exc.message}")
    problems += _check_models(file, models)
    problems += _check_dla_shapes(file, models)
    if problems:
        raise ConfigError(format_problems(source, problems))
    return Fleet(file, root, source, models)


def _check_models(file: FleetFile, models: dict[str, Project]) -> list[str]:
    """Two models one KServe name, a model no group runs, a model whose own fleet says otherwise."""
    problems = []
    by_served: dict[str, list[str]] = {}
    for name, project in models.items():
        by_served.setdefault(project.project.name, []).append(name)
    for served, names in by_served.items():
        if len(names) > 1:
            problems.append(f"models {', '.join(names)} are all the project {served!r}: a device serves models by "
                            "project name, so two of them would answer to one name; rename one [project] name")
    ran = {m for g in file.fleet for m in g.models or []}
    for name in models:
        if name not in ran:
            problems.append(f"models.{name}: no fleet group runs it (add it to a group's models, or remove it)")
    groups = {g.name: g for g in file.fleet}
    catalog = load_catalog()
    for name, project in models.items():
        running = [g for g in file.fleet if name in (g.models or [])]
        problems += check_precisions(project.quantize.precisions, running, catalog,
                                     f"models.{name}: quantize.precisions")
        for own in project.fleet:
            fleet_group = groups.get(own.name)
            if fleet_group is not None and fleet_group.target_id != own.target_id:
                problems.append(f"models.{name}: its own fleet group {own.name!r} is {own.target_id}, the fleet file's "
                                f"is {fleet_group.target_id}: the two disagree on the group's target; make them "
                                "agree (the fleet file's is what the compile builds)")
    return problems


def _check_dla_shapes(file: FleetFile, models: dict[str, Project]) -> list[str]:
    """Each model a group places on a DLA core must fit one static shape with the fleet's runtime."""
    problems = []
    for i, group in enumerate(file.fleet):
        for model in group.models or []:
            accelerator = Fleet.accelerator(group, model)
            if accelerator == "gpu" or model not in models:
                continue
            key = f"fleet[{i}].placement.{model}" if model in (group.placement or {}) \
                else f"fleet[{i}].{group.accelerator_key}"
            problems += static_shape_problems(f"{key} ({model})", models[model].model.inputs, file.runtime)
    return problems

