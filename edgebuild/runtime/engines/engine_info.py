"""What ``edgebuild inspect PATH`` and ``edgebuild-device inspect PATH`` show of the engines under a path.

PATH is a fleet group folder (``build/groups/<group>``), a model folder (``build/engines/<group>``),
a folder of model folders (``build/engines``), an ``engine.json`` or an engine file. For every engine
found: its provenance (``engine.json`` read as :class:`EngineProvenance`, missing fields "unknown"),
what the engine's own header says (:mod:`edgebuild.runtime.engines.engine_header`), and whether the engine's
sha256 is the one ``engine.json`` records. A model folder without an engine says why (a deferred
placement builds it on the device at first start); engines a device built into a model folder's
``engine-cache/`` are listed too.

Python 3.8, standard library only: it runs on the device as well.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.group import is_group_folder, model_folders
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, RECIPE_FILE, Recipe
from edgebuild.runtime.engines.engine_header import EngineHeader, read_header_file
from edgebuild.runtime.engines.provenance import EngineProvenance

__all__ = ["engines_json", "inspect_path", "render_engines"]

INSPECT_SCHEMA = "edgebuild.inspect/1"
ENGINE_CACHE = "engine-cache"


@dataclass(frozen=True)
class EngineInfo:
    """One engine (or a model folder's missing one) as inspect reports it."""

    name: str
    engine_file: Optional[str]  # None: no engine file here (its --json key is "plan", as in engine.json)
    record_file: Optional[str] = None
    provenance: Optional[EngineProvenance] = None
    plan_bytes: Optional[int] = None
    plan_sha256: Optional[str] = None
    #: the engine file's sha256 is engine.json's plan_sha256 (None: no record, or it has none)
    sha256_matches: Optional[bool] = None
    header: Optional[EngineHeader] = None
    note: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "plan": self.engine_file, "engine_json": self.record_file,
                "provenance": self.provenance.as_dict() if self.provenance else None,
                "unknown": self.provenance.unknown() if self.provenance else None,
                "plan_bytes": self.plan_bytes, "plan_sha256": self.plan_sha256,
                "sha256_matches": self.sha256_matches,
                "header": self.header.as_dict() if self.header else None, "note": self.note}

    def lines(self) -> List[str]:
        out = ["{}: {}".format(self.name, self.engine_file or "no engine")]
        if self.note:
            out.append("  " + self.note)
        if self.engine_file is None:
            return out
        out.append("  engine file: {} bytes, sha256 {}".format(self.plan_bytes, self.plan_sha256))
        if self.sha256_matches is not None:
            out.append("  matches engine.json: " + ("yes" if self.sha256_matches else
                                                    "NO: the engine is not the one engine.json describes"))
        if self.header is not None:
            out.append("  engine header: " + self.header.describe())
        if self.provenance is None:
            out.append("  provenance: no engine.json beside the engine")
            return out
        out.append("  provenance ({}):".format(self.record_file))
        width = max(len(label) for label, _ in self.provenance.lines())
        out += ["    {:<{}}  {}".format(label, width, value) for label, value in self.provenance.lines()]
        unknown = self.provenance.unknown()
        if unknown:
            out.append("    (not recorded by the edgebuild that built it: {})".format(", ".join(unknown)))
        return out


def inspect_path(path: Union[str, Path]) -> List[EngineInfo]:
    """Every engine under ``path`` (see the module's docstring for what ``path`` may be)."""
    path = Path(path)
    if path.is_file():
        if path.name == RECIPE_FILE:
            return _model_folder(path.parent.name, path.parent)
        if path.name == ENGINE_JSON:
            return [_engine(path.parent.name, _engine_file_of(path), path)]
        beside = path.parent / ENGINE_JSON
        described = beside.is_file() and _engine_file_of(beside).name == path.name
        return [_engine(path.name, path, beside if described else None)]
    if not path.is_dir():
        raise ConfigError("{}: no such file or folder".format(path),
                          hint="give a group folder (build/groups/<group>), a model folder (build/engines/<group>) "
                               "or an engine file")
    if is_group_folder(path):
        return [info for name, folder in model_folders(path).items() for info in _model_folder(name, folder)]
    if (path / RECIPE_FILE).is_file() or (path / ENGINE_FILE).is_file():
        return _model_folder(path.name, path)
    found = [info for sub in sorted(p for p in path.iterdir() if p.is_dir())
             if (sub / RECIPE_FILE).is_file() or is_group_folder(sub) for info in inspect_path(sub)]
    if not found:
        raise ConfigError("{}: neither a group folder (group.json), a model folder (recipe.json, engine.plan) nor a "
                          "folder of them".format(path),
                          hint="give build/groups/<group>, build/engines/<group> or an engine file")
    return found


def render_engines(infos: List[EngineInfo]) -> str:
    """The terminal text for :func:`inspect_path`'s result."""
    return "\n\n".join("\n".join(info.lines()) for info in infos)


def engines_json(infos: List[EngineInfo]) -> Dict[str, Any]:
    """The `--json` form: schema and one object per engine."""
    return {"schema": INSPECT_SCHEMA, "engines": [info.as_dict() for info in infos]}


def _engine_file_of(engine_json: Path) -> Path:
    """The engine file an engine.json names (relative to it since edgebuild 0.1; absolute before), else engine.plan."""
    try:
        named = json.loads(engine_json.read_text()).get("plan")
    except (ValueError, AttributeError):
        named = None
    return engine_json.parent / (Path(named).name if named else ENGINE_FILE)


def _model_folder(name: str, folder: Path) -> List[EngineInfo]:
    infos = []
    if (folder / ENGINE_FILE).is_file():
        infos.append(_engine(name, folder / ENGINE_FILE, folder / ENGINE_JSON))
    else:
        why = "no engine.plan in {}".format(folder)
        if (folder / RECIPE_FILE).is_file():
            recipe = Recipe.load(folder)
            why += ": placement {} ({})".format(recipe.placement, recipe.placement_reason)
            if recipe.placement == "deferred":
                why += "; the device builds it from the recipe at first start"
        infos.append(EngineInfo(name, None, note=why))
    for engine in sorted((folder / ENGINE_CACHE).glob("*/" + ENGINE_FILE)):
        infos.append(_engine("{} (built on the device, {})".format(name, engine.parent.name), engine,
                             engine.parent / ENGINE_JSON))
    return infos


def _engine(name: str, engine: Path, record_file: Optional[Path]) -> EngineInfo:
    record, note = None, ""
    if record_file is not None and record_file.is_file():
        try:
            data = json.loads(record_file.read_text())
            record = EngineProvenance.from_engine_json(data) if isinstance(data, dict) else None
            note = "" if record else "{} is not a JSON object".format(record_file)
        except ValueError as exc:
            note = "{} is not JSON ({})".format(record_file, exc)
    recorded = str(record_file) if record is not None else None
    if not engine.is_file():
        return EngineInfo(name, None, recorded, record, note=(note + "; " if note else "")
                          + "the engine file {} is missing".format(engine))
    digest = sha256_file(engine)
    matches = None if record is None or not record.plan_sha256 else record.plan_sha256 == digest
    return EngineInfo(name, str(engine), recorded, record, engine.stat().st_size, digest, matches,
                      read_header_file(engine), note)
