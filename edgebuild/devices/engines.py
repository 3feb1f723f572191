"""Engine builds and what the build folder remembers of them.

``place_and_build_engine`` writes a group's recipe (``devices.recipes``), decides where its engine is built
(``devices.placement``) and builds it: here with the device-side builder, or on a build device
over SSH (``build_over_ssh``). An engine already in the folder is kept while what it depends on
(``engine_build_key``) is unchanged and its engine file is intact. ``EngineStateStore`` keeps, beside
the folder, which build key the folder's engine came from and every device measurement of an
engine (``Acceptance``), so a decision is re-made from them without building or measuring again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from edgebuild.content import digest, file_sha256
from edgebuild.devices.placement import chosen_candidate, decide_placement, fallback_candidate, shippable
from edgebuild.devices.recipes import acceptance_payload, check_engine_memory, write_recipe
from edgebuild.errors import RemoteError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_bytes
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, RECIPE_FILE, Recipe
from edgebuild.runtime.engines.device import DeviceFacts, build_from_recipe, require_match
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.accuracy.policy import AccuracyPolicy
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["EngineRecord", "EngineStateStore"]


@dataclass(frozen=True)
class Acceptance:
    """One device-built engine measured on its device over the validation set (stored by build key)."""

    candidate: str  # the gate candidate the engine was built from
    build_key: str
    plan_sha256: str
    validation: str  # what it was measured on (devices.acceptance.validation_key)
    where: str
    backend: str
    metric: str
    value: float
    images: int
    reference: float  # FP32's metric on the same images (the gate's, unless accuracy.device_images caps them)
    retention: float

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> Acceptance:
        return cls(**data)

    def shown(self) -> JsonObject:
        """What the recipe, engine.json and the bundle's manifest say of it (not the keys it is stored by)."""
        return {k: v for k, v in self.as_dict().items() if k not in ("build_key", "validation")}


@dataclass(frozen=True)
class EngineRecord:
    """The engine stage's result for one fleet group: where its engine was built, and its acceptance."""

    group: str
    target: str
    placement: str  # local, ssh://..., host-check or deferred
    reason: str
    folder: str  # the model folder, relative to the build folder
    build_key: str  # what the engine depends on (engine_build_key)
    built: bool  # engine.plan and engine.json are in the folder
    kept: bool  # the engine of an earlier run was kept: nothing it depends on changed
    host: DeviceFacts  # the build host, as the placement decision saw it
    candidate: str = ""  # the gate candidate in the folder
    #: the shipping engine's metric measured on its device (local, ssh://) and found good enough
    accepted: Acceptance | None = None
    #: engines measured on their device and refused by the accuracy policy, in the order tried
    refused: tuple[Acceptance, ...] = ()
    fallback: str | None = None  # the candidate a first-boot device falls back to (deferred placement)
    board: str | None = None  # the device farm's place that built and accepted it

    @property
    def needs_acceptance(self) -> bool:
        """An engine that ships: it is measured on its device before it is packaged."""
        return self.built and shippable(self.placement)

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["refused"] = [r.as_dict() for r in self.refused]
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> EngineRecord:
        data = dict(data)
        data["host"] = DeviceFacts.from_dict(data["host"])
        data["accepted"] = Acceptance.from_dict(data["accepted"]) if data.get("accepted") else None
        data["refused"] = tuple(Acceptance.from_dict(r) for r in data.get("refused") or ())
        return cls(**data)


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


class BuildInputs(Protocol):
    """What ``engine_build_key`` reads: a ``Recipe``, or what the one ``place_and_build_engine`` would write
    will hold (``devices.acceptance``, which asks for a key before anything is written)."""

    @property
    def onnx_sha256(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def profiles(self) -> Mapping[str, list[list[int]]]: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def dla_core(self) -> int | None: ...
    @property
    def module(self) -> _Identified: ...
    @property
    def l4t(self) -> str: ...
    @property
    def tensorrt(self) -> str: ...


def engine_build_key(recipe: BuildInputs, placement: str, host: DeviceFacts | None = None) -> str:
    """What a built engine depends on: the ONNX, the builder settings, module, L4T and TensorRT.

    Not the model version, the runtime settings or the limits beyond the memory pool: changing
    those rewrites the recipe and keeps the engine. A host-check engine also depends on the
    host's own TensorRT and GPU, which built it.
    """
    ships = shippable(placement)
    return digest({"onnx": recipe.onnx_sha256, "precision": recipe.precision, "profiles": recipe.profiles,
                   "workspace": recipe.workspace_bytes, "dla_core": recipe.dla_core, "module": recipe.module.id,
                   "l4t": recipe.l4t, "tensorrt": recipe.tensorrt, "shippable": ships,
                   **({} if ships or host is None else {"host_tensorrt": host.tensorrt,
                                                       "host_gpu": host.compute_capability})})


# -- what the folder holds, kept beside it ------------------------------------------------------

@dataclass(frozen=True)
class BuiltEngine:
    """Which build the group's folder holds (written after the engine lands, removed before it is dropped)."""

    build_key: str
    plan_sha256: str
    placement: str
    reason: str


@dataclass(frozen=True)
class EngineState:
    """A snapshot of ``build/engines/.state/<group>.json``: the engine in the folder and every device
    measurement by build key (a decision is re-made from them; a refused engine is not built again)."""

    built: BuiltEngine | None = None
    measured: dict[str, Acceptance] = field(default_factory=dict)

    def measurement(self, build_key: str, plan_sha256: str, validation: str) -> Acceptance | None:
        stored = self.measured.get(build_key)
        if stored and stored.plan_sha256 == plan_sha256 and stored.validation == validation:
            return stored
        return None

    def refused(self, policy: AccuracyPolicy, validation: str) -> set[str]:
        """Build keys whose engine the policy refused on this validation set."""
        return {key for key, m in self.measured.items() if m.validation == validation and policy.refuses(m.retention)}


@dataclass(frozen=True)
class EngineStateStore:
    """The file behind ``EngineState``: read, and changed by one read-modify-write at a time."""

    path: Path

    @classmethod
    def of(cls, project: Project, group: str) -> EngineStateStore:
        return cls(BuildLayout.of(project).engine_state(group))

    def read(self) -> EngineState:
        try:
            data = json.loads(self.path.read_text())
            built = BuiltEngine(**data["built"]) if data.get("built") else None
            measured = {k: Acceptance.from_dict(v) for k, v in data.get("measured", {}).items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return EngineState()  # none yet, or written by another edgebuild: nothing is trusted
        return EngineState(built, measured)

    def _write(self, state: EngineState) -> EngineState:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"built": asdict(state.built) if state.built else None,
                "measured": {k: m.as_dict() for k, m in state.measured.items()}}
        atomic_write_bytes(self.path, json.dumps(data, indent=2).encode())
        return state

    def set_built(self, built: BuiltEngine | None) -> EngineState:
        # re-read first: another holder (a concurrent group) may have written since
        return self._write(replace(self.read(), built=built))

    def add_measurement(self, measured: Acceptance) -> EngineState:
        state = self.read()
        return self._write(replace(state, measured={**state.measured, measured.build_key: measured}))


def build_over_ssh(recipe_path: Path, url: str, *, progress: Progress = lambda _: None,
                   timeout_s: float = 3 * 3600) -> Path:
    """Build a recipe's engine on the Jetson at ``url``; returns the local ``engine.json``.

    Nothing is copied before the device has shown (over SSH) that it is the recipe's module on its
    L4T release; every fetched file is checked against the hash the device computed.
    """
    from edgebuild.devices.ssh import SshDevice

    recipe = Recipe.load(recipe_path)
    folder = recipe_path.parent
    device = SshDevice(url)
    facts = DeviceFacts.from_dict(device.device_tool(["probe"], timeout_s=120)["device"])
    require_match(facts, recipe, where=url)
    progress(f"engine: {url} is {facts.describe()}")
    remote = f"builds/{recipe.group}-{recipe.onnx_sha256[:12]}"
    cache_name = f"timing-caches/{recipe.timing_cache}"
    local_cache = folder.parent / cache_name
    files: dict[str, Path] = {f"{remote}/{RECIPE_FILE}": recipe_path, f"{remote}/{recipe.onnx}": folder / recipe.onnx}
    if local_cache.is_file():
        files[cache_name] = local_cache
    device.put(files, ".")
    progress(f"engine: building {recipe.target} on {url} (this can take minutes)")
    answer = device.device_tool(["build-engine", f"{remote}/{RECIPE_FILE}", "--timing-cache-dir", "timing-caches"],
                                timeout_s=timeout_s)
    expected = {f"{remote}/{name}": sha for name, sha in answer["files"].items()}
    if answer.get("timing_cache_sha256"):
        expected[cache_name] = answer["timing_cache_sha256"]
    fetched = device.fetch(expected)
    for name, data in fetched.items():
        if hashlib.sha256(data).hexdigest() != expected[name]:
            raise RemoteError(f"{url}: {name} arrived with another sha256 than the device computed; "
                              "the transfer was corrupted or the file changed", hint="run the compile again")
    engine_json = json.loads(fetched[f"{remote}/{ENGINE_JSON}"])
    engine = fetched[f"{remote}/{ENGINE_FILE}"]
    if hashlib.sha256(engine).hexdigest() != engine_json.get("plan_sha256"):
        raise RemoteError(f"{url}: the fetched engine.plan does not match the plan_sha256 of its engine.json")
    atomic_write_bytes(folder / ENGINE_FILE, engine)
    atomic_write_bytes(folder / ENGINE_JSON, fetched[f"{remote}/{ENGINE_JSON}"])
    if cache_name in fetched:
        atomic_write_bytes(local_cache, fetched[cache_name])
    progress(f"engine: fetched {ENGINE_FILE} ({len(engine)} bytes) and {ENGINE_JSON} from {url}, hashes checked")
    return folder / ENGINE_JSON


def _intact_engine_sha256(folder: Path) -> str | None:
    """The engine's sha256 when engine.plan and engine.json are present and the engine is the one
    engine.json describes, else None (the engine is read once: it can be hundreds of MB)."""
    engine, described = folder / ENGINE_FILE, folder / ENGINE_JSON
    if not (engine.is_file() and described.is_file()):
        return None
    try:
        expected = json.loads(described.read_text()).get("plan_sha256")
    except ValueError:
        return None
    found = file_sha256(engine)
    return found if found == expected else None


def _drop_engine(folder: Path, store: EngineStateStore) -> None:
    if store.read().built is not None:
        store.set_built(None)
    for name in (ENGINE_FILE, ENGINE_JSON):
        (folder / name).unlink(missing_ok=True)


def engine_kept(state: EngineState, folder: Path, key: str) -> bool:
    """Whether the folder holds, intact, the engine ``state`` says was built from ``key``."""
    built = state.built
    if built is None or built.build_key != key:
        return False
    engine_sha256 = _intact_engine_sha256(folder)
    return engine_sha256 is not None and engine_sha256 == built.plan_sha256


def place_and_build_engine(project: Project, group: SelectedGroup, gate: GateResult, *, host: DeviceFacts,
                           build_on: str | None = None, candidate: str | None = None, force: bool = False,
                           acceptance: bytes | None = None, trt: ModuleType | None = None,
                           progress: Progress = lambda _: None) -> EngineRecord:
    """Write the group's recipe for ``candidate`` (default: the gate's selection), decide where its
    engine is built, and build it unless deferred.

    An engine already in the folder (built by any earlier run, here or on a device) is kept while
    ``engine_build_key`` is unchanged and its files are intact, unless ``force``; one a device
    built stays even when this run names no build device. ``build_on`` (from ``--build-on``)
    overrides the group's own build device. ``acceptance`` is the candidate's ``acceptance_payload``
    when the caller made it already.
    """
    candidate = chosen_candidate(gate, candidate, group.accelerator)
    limits = group.limits
    assert limits is not None, "select_work resolves every group's limit preset"
    acceptance = acceptance if acceptance is not None else acceptance_payload(project, gate, candidate)
    store = EngineStateStore.of(project, group.name)
    state = store.read()
    placement, why = decide_placement(group.target, host, build_on or group.build_on)
    built = state.built
    if not force and built is not None and shippable(built.placement) and not shippable(placement):
        # an engine a device built stays, even when this run names no build device (a later
        # `package`, or a compile without --build-on), while nothing it depends on changed
        folder = write_recipe(project, group, gate, built.placement, built.reason, acceptance, candidate).parent
        if engine_kept(state, folder, engine_build_key(Recipe.load(folder), built.placement, host)):
            placement, why = built.placement, built.reason
    recipe_path = write_recipe(project, group, gate, placement, why, acceptance, candidate)
    folder = recipe_path.parent
    recipe = Recipe.load(folder)
    key = engine_build_key(recipe, placement, host)
    record = EngineRecord(group=group.name, target=group.target.id, placement=placement, reason=why,
                          folder=str(folder.relative_to(project.build_dir)), build_key=key, built=False, kept=False,
                          host=host, candidate=candidate, fallback=fallback_candidate(
                              project, gate, candidate, group.accelerator) if recipe.fallback else None)
    if placement == "deferred":
        _drop_engine(folder, store)
        return record
    if not force and engine_kept(state, folder, key):
        progress(f"engine: {group.name}: kept the {candidate} engine built {placement} (ONNX, builder settings, "
                 "module, L4T and TensorRT unchanged)")
        check_engine_memory(folder / ENGINE_JSON, limits)  # the budget may have changed since
        return replace(record, built=True, kept=True)
    _drop_engine(folder, store)
    if placement.startswith("ssh://"):
        engine_json = build_over_ssh(recipe_path, placement, progress=progress)
    else:
        progress(f"engine: building {group.target.id} ({placement}, {candidate})")
        engine_json = build_from_recipe(recipe_path, host, verify_device=placement == "local", trt=trt,
                                        progress=progress)
    store.set_built(BuiltEngine(key, file_sha256(folder / ENGINE_FILE), placement, why))
    check_engine_memory(Path(engine_json), limits)
    return replace(record, built=True)
