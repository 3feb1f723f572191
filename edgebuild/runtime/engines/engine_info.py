"""What ``edgebuild inspect PATH`` and ``edgebuild-device inspect PATH`` show of the engines under a path.

PATH is a fleet group folder (``build/groups/<group>``), a model folder (``build/engines/<group>``),
a folder of model folders (``build/engines``), an ``engine.json`` or an engine file. For every engine
found: its provenance (``engine.json`` read as :class:`EngineProvenance`, missing fields "unknown"),
what the engine's own header says (:mod:`edgebuild.runtime.engines.engine_header`), and whether the engine's
sha256 is the one ``engine.json`` records. A model folder without an engine (a deferred placement:
no TensorRT on the build host) shows what will be built from its ``recipe.json`` instead
(:class:`DeferredBuild`): where (the device at first start, or a build device), for which TensorRT,
JetPack/L4T and module, at which precision and profile shapes, from which ONNX, and whether the
ONNX (and the acceptance set and FP16 fallback) in the folder are still the ones the recipe
records; engines a device built into a model folder's ``engine-cache/`` are listed too.

Python 3.8, standard library only: it runs on the device as well.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.group import is_group_folder, model_folders
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, RECIPE_FILE, Recipe
from edgebuild.runtime.engines.engine_header import EngineHeader, read_header_file
from edgebuild.runtime.engines.provenance import EngineProvenance

__all__ = ["engines_json", "inspect_path", "render_engines"]

INSPECT_SCHEMA = "edgebuild.inspect/1"
ENGINE_CACHE = "engine-cache"
#: ``DeferredBuild.builds_on``: where the engine of a folder without one will be built
FIRST_BOOT, BUILD_DEVICE, BUILD_HOST = "first_boot", "build_device", "build_host"


@dataclass(frozen=True)
class FileCheck:
    """A file of the folder against the sha256 the recipe records for it."""

    file: str
    expected_sha256: Optional[str]
    found_sha256: Optional[str]  # None: the file is missing

    @property
    def matches(self) -> bool:
        return self.found_sha256 is not None and self.found_sha256 == self.expected_sha256

    def as_dict(self) -> Dict[str, Any]:
        return {"file": self.file, "sha256": self.expected_sha256, "found_sha256": self.found_sha256,
                "matches": self.matches}

    def verdict(self) -> str:
        if self.matches:
            return "intact"
        if self.found_sha256 is None:
            return "NOT INTACT: missing"
        return "NOT INTACT: sha256 {}, not the recorded {}".format(self.found_sha256, self.expected_sha256)


def _check(folder: Path, name: str, expected: Optional[str]) -> FileCheck:
    path = folder / name
    return FileCheck(name, expected, sha256_file(path) if path.is_file() else None)


@dataclass(frozen=True)
class DeferredBuild:
    """What a model folder without an engine will build, read from its ``recipe.json``, and whether the
    files it builds from are still the ones the recipe records (the device refuses to build otherwise)."""

    recipe_file: str
    recipe: Recipe
    onnx: FileCheck
    acceptance: Optional[FileCheck]
    #: the FP16 fallback's recipe.json against ``fallback_sha256``, its recipe and its ONNX check
    fallback: Optional[FileCheck]
    fallback_recipe: Optional[Recipe]
    fallback_onnx: Optional[FileCheck]

    @property
    def builds_on(self) -> str:
        placement = self.recipe.placement
        if placement.startswith("ssh://"):
            return BUILD_DEVICE
        if placement == "local":
            return BUILD_HOST
        return FIRST_BOOT  # deferred, or a host-check folder whose engine is not packaged

    def where(self) -> str:
        """Where and when the engine gets built, in words."""
        if self.builds_on == BUILD_DEVICE:
            return "built on the build device {} by `edgebuild compile` (not built yet, or its build " \
                   "failed)".format(self.recipe.placement)
        if self.builds_on == BUILD_HOST:
            return "built on the build host by `edgebuild compile` (not built yet, or its build failed)"
        return "the device builds it from the recipe at first start (into {}/, once per TensorRT version " \
               "and GPU)".format(ENGINE_CACHE)

    @property
    def intact(self) -> bool:
        """Every file the device builds from is the one the recipe records."""
        checks = [self.onnx, self.acceptance, self.fallback, self.fallback_onnx]
        return all(check.matches for check in checks if check is not None)

    def as_dict(self) -> Dict[str, Any]:
        recipe, module = self.recipe, self.recipe.module
        fallback = None
        if self.fallback is not None:
            fallback = dict(self.fallback.as_dict(),
                            precision=self.fallback_recipe.precision if self.fallback_recipe else None,
                            candidate=self.fallback_recipe.candidate if self.fallback_recipe else None,
                            onnx=self.fallback_onnx.as_dict() if self.fallback_onnx else None)
        return {
            "recipe": self.recipe_file, "placement": recipe.placement, "placement_reason": recipe.placement_reason,
            "builds_on": self.builds_on, "where": self.where(),
            "target": recipe.target, "tensorrt_version": recipe.tensorrt, "jetpack": recipe.jetpack,
            "l4t": recipe.l4t, "l4t_accepted": list(recipe.l4t_accepted),
            "module": module.id, "module_name": module.name, "compute_capability": module.compute_capability,
            "precision": recipe.precision, "candidate": recipe.candidate, "kept_fp32": list(recipe.kept_fp32),
            "dla_core": recipe.dla_core, "workspace_bytes": recipe.workspace_bytes,
            "timing_cache": recipe.timing_cache, "shapes": _shapes(recipe),
            "model": recipe.model_name, "model_version": recipe.model_version,
            "onnx": self.onnx.as_dict(), "acceptance": self.acceptance.as_dict() if self.acceptance else None,
            "fallback": fallback, "intact": self.intact,
        }

    def lines(self) -> List[Tuple[str, str]]:
        """(label, value) pairs for a terminal, labelled as a built engine's provenance is."""
        recipe, module = self.recipe, self.recipe.module
        kept = ", ".join(recipe.kept_fp32) or "none"
        shapes = "; ".join("{} min {} opt {} max {}".format(name, s["min"], s["opt"], s["max"])
                           for name, s in _shapes(recipe).items())
        out = [
            ("why", "placement {}: {}".format(recipe.placement, recipe.placement_reason)),
            ("TensorRT", recipe.tensorrt),
            ("compute capability", module.compute_capability),
            ("target", "{} (module {} ({}), JetPack {}, L4T {}; accepts L4T {})".format(
                recipe.target, module.name, module.id, recipe.jetpack, recipe.l4t,
                ", ".join(recipe.l4t_accepted) or "none")),
            ("precision", "{} (candidate {}, kept in FP32: {})".format(recipe.precision, recipe.candidate, kept)),
            ("workspace", "{} bytes".format(recipe.workspace_bytes)),
            ("profile shapes", shapes),
            ("timing cache", recipe.timing_cache),
            ("DLA core", "none" if recipe.dla_core is None else str(recipe.dla_core)),
            ("model", "{} {}".format(recipe.model_name, recipe.model_version)),
            ("ONNX", "{}, sha256 {}".format(self.onnx.file, recipe.onnx_sha256)),
        ]
        if self.acceptance is not None:
            out.append(("acceptance set", "{}: {}".format(self.acceptance.file, self.acceptance.verdict())))
        if self.fallback is not None:
            fallback = self.fallback_recipe
            what = "{} (candidate {})".format(fallback.precision, fallback.candidate) if fallback else "unreadable"
            onnx = self.fallback_onnx.verdict() if self.fallback_onnx else "not checked"
            out.append(("fallback", "{}/: {}; {} {}, ONNX {}".format(
                recipe.fallback, what, RECIPE_FILE, self.fallback.verdict(), onnx)))
        return out


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
    #: a model folder without an engine: what its recipe will build (None for a built engine)
    deferred: Optional[DeferredBuild] = None

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "plan": self.engine_file, "engine_json": self.record_file,
                "provenance": self.provenance.as_dict() if self.provenance else None,
                "unknown": self.provenance.unknown() if self.provenance else None,
                "plan_bytes": self.plan_bytes, "plan_sha256": self.plan_sha256,
                "sha256_matches": self.sha256_matches,
                "header": self.header.as_dict() if self.header else None, "note": self.note,
                "deferred": self.deferred.as_dict() if self.deferred else None}

    def lines(self) -> List[str]:
        out = ["{}: {}".format(self.name, self.engine_file or "no engine")]
        if self.note:
            out.append("  " + self.note)
        if self.deferred is not None:
            out += self._deferred_lines(self.deferred)
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


    @staticmethod
    def _deferred_lines(deferred: DeferredBuild) -> List[str]:
        onnx = deferred.onnx
        out = ["  ONNX file: {}, sha256 {}".format(onnx.file, onnx.found_sha256 or "(missing)"),
               "  matches recipe.json: " + ("yes" if onnx.matches else
                                            "NO: the ONNX is not the one recipe.json names (changed after the recipe "
                                            "was written); the device refuses to build from it" if onnx.found_sha256
                                            else "NO: the ONNX is missing; the device cannot build the engine"),
               "  deferred build ({}):".format(deferred.recipe_file)]
        pairs = deferred.lines()
        width = max(len(label) for label, _ in pairs)
        return out + ["    {:<{}}  {}".format(label, width, value) for label, value in pairs]


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
        why, deferred = "no engine.plan in {}".format(folder), None
        if (folder / RECIPE_FILE).is_file():
            try:
                deferred = _deferred(folder)
                why += ": placement {}; {}".format(deferred.recipe.placement, deferred.where())
            except ConfigError as exc:  # a recipe another edgebuild wrote, or a damaged one: say so, go on
                why += "; its {} does not read: {}".format(RECIPE_FILE, exc)
        infos.append(EngineInfo(name, None, note=why, deferred=deferred))
    for engine in sorted((folder / ENGINE_CACHE).glob("*/" + ENGINE_FILE)):
        infos.append(_engine("{} (built on the device, {})".format(name, engine.parent.name), engine,
                             engine.parent / ENGINE_JSON))
    return infos


def _deferred(folder: Path) -> DeferredBuild:
    """What ``folder``'s recipe builds, with its files checked against the recipe's digests."""
    recipe = Recipe.load(folder)
    fallback = fallback_recipe = fallback_onnx = None
    if recipe.fallback:
        fallback = _check(folder, "{}/{}".format(recipe.fallback, RECIPE_FILE), recipe.fallback_sha256)
        if fallback.found_sha256 is not None:
            try:
                fallback_recipe = Recipe.load(folder / recipe.fallback)
                fallback_onnx = _check(folder / recipe.fallback, fallback_recipe.onnx, fallback_recipe.onnx_sha256)
            except ConfigError:
                fallback_recipe = None
    return DeferredBuild(
        str(folder / RECIPE_FILE), recipe, _check(folder, recipe.onnx, recipe.onnx_sha256),
        _check(folder, recipe.acceptance, recipe.acceptance_sha256) if recipe.acceptance else None,
        fallback, fallback_recipe, fallback_onnx)


def _shapes(recipe: Recipe) -> Dict[str, Dict[str, List[int]]]:
    """The recipe's profiles as ``engine.json``'s ``shapes`` are written: input -> min/opt/max."""
    return {name: {"min": list(low), "opt": list(opt), "max": list(high)}
            for name, (low, opt, high) in recipe.profiles.items()}


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
