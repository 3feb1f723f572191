"""Where each target's TensorRT engine is built, and the recipe it is built from.

A TensorRT plan is tied to the TensorRT version and the GPU's compute capability and cannot be
cross-built for a Jetson on x86. So every target gets a placement:

- ``local``: this host is a Jetson of the target's module on the target's L4T release, with
  TensorRT: the engine is built here and is shippable;
- ``ssh://user@host``: the fleet group names a build device (``build_on``); edgebuild checks over
  SSH that it is the target's module and L4T, copies the recipe there, runs its device-side
  builder, fetches the plan, ``engine.json`` and timing cache and checks their hashes; shippable;
- ``host-check``: this host has TensorRT and a GPU but is not the target: the engine is built to
  catch parser and builder failures, and is never packaged for a Jetson;
- ``deferred``: no suitable builder: the recipe (ONNX + build settings) goes to the device, which
  builds the engine once at first start with the same builder; an INT8 recipe also carries the
  FP16 candidate (``fallback/``), served when the INT8 engine fails its acceptance set there.

An engine that ships (``local``, ``ssh://``) is accepted before it is packaged: measured where it
was built over the validation set (``build_and_accept``); one that loses the gate's margin is
replaced by the next passing candidate of the gate (``candidate_order``). What the folder holds
and every measurement live beside it in ``EngineState``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.content import digest, file_sha256
from edgebuild.errors import LimitError, RemoteError
from edgebuild.runtime.acceptance import ACCEPTANCE_FILE
from edgebuild.runtime.device import DeviceFacts, build_from_recipe, module_matches, require_match
from edgebuild.runtime.files import atomic_write_bytes, atomic_writer
from edgebuild.runtime.recipe import (
    ENGINE_FILE,
    ENGINE_JSON,
    FALLBACK_FOLDER,
    ONNX_FILE,
    RECIPE_FILE,
    Recipe,
    RecipeModule,
    RuntimeSettings,
    TensorSpec,
)
from edgebuild.targets.limits import LimitPreset, human_size

if TYPE_CHECKING:
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup, Target


def decide_placement(target: Target, host: DeviceFacts, build_on: str | None = None) -> tuple[str, str]:
    """(placement, why) for one target on this host; ``build_on`` is the group's ssh:// build device."""
    release, module = target.release, target.module
    if build_on:
        return build_on, f"built on {build_on} after checking over SSH that it is a {module.name} on L4T R{release.l4t}"
    if host.tensorrt is not None:
        same_trt = host.tensorrt.split(".")[:3] == release.tensorrt.split(".")[:3]
        same_l4t = host.l4t in (release.l4t, *release.l4t_aliases)
        if host.l4t and same_trt and same_l4t and module_matches(host, module.compatible):
            return "local", f"this host is a {module.name} on L4T R{host.l4t} with TensorRT {host.tensorrt}"
    if host.tensorrt is None or host.compute_capability is None:
        problem = host.tensorrt_problem if host.tensorrt else \
            f"TensorRT is not installed on this host ({host.tensorrt_problem})"
        return "deferred", (f"{problem}; the device builds the engine from the recipe at first start "
                            "(or name a build device with `build_on = \"ssh://user@host\"` in the fleet group)")
    return "host-check", (
        f"this host (TensorRT {host.tensorrt}, sm {host.compute_capability}"
        + (f", L4T R{host.l4t}" if host.l4t else ", not a Jetson")
        + f") is not {target.id} (TensorRT {release.tensorrt}, sm {module.compute_capability}): the engine "
        "checks the build and is never packaged")


def candidate_order(gate: GateResult) -> list[str]:
    """The gate's candidates an engine may be built from, in the order they are tried for a target.

    The selected one first, then every other passing, selectable candidate that keeps more of the
    model in float (``PRECISION_ORDER``: int8, int8-mixed, fp16, fp32): what the accept step falls
    back to when an engine loses the gate's margin on its device.
    """
    from edgebuild.accuracy.gate import PRECISION_ORDER

    if gate.selected is None:
        return []
    after = PRECISION_ORDER.index(gate.selected)
    rest = sorted((c for c in gate.candidates if c.passed and c.selectable and c.precision != gate.selected
                   and PRECISION_ORDER.index(c.precision) > after), key=lambda c: PRECISION_ORDER.index(c.precision))
    return [gate.selected, *(c.precision for c in rest)]


def fallback_candidate(project: Project, gate: GateResult, candidate: str) -> str | None:
    """The FP16 (else FP32) candidate a first-boot device falls back to when its INT8 engine fails acceptance.

    Only for an INT8 candidate, and only with ``accuracy.first_boot_fallback``; None otherwise.
    """
    if not project.accuracy.first_boot_fallback or not candidate.startswith("int8"):
        return None
    return next((c for c in candidate_order(gate) if not c.startswith("int8")), None)


def write_recipe(project: Project, group: SelectedGroup, gate: GateResult, placement: str, why: str,
                 acceptance: bytes, candidate: str | None = None, folder: Path | None = None) -> Path:
    """The engine recipe of one fleet group: the ``candidate``'s ONNX (default: the gate's
    selection), the builder settings, its limits and its acceptance set (``acceptance_payload``).

    Written into ``build/engines/<group>/`` (or ``folder``) file by file (each atomically): an
    engine already in the folder stays, and ``plan_engine`` decides whether it still fits.
    """
    target, limits = group.target, group.limits
    chosen = gate.candidate(candidate or gate.selected)
    folder = folder or project.build_dir / "engines" / group.name
    folder.mkdir(parents=True, exist_ok=True)
    source, onnx_path = gate.folder / chosen.onnx, folder / ONNX_FILE
    onnx_sha256 = file_sha256(source)
    if not onnx_path.is_file() or file_sha256(onnx_path) != onnx_sha256:
        with atomic_writer(onnx_path) as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out)
    acceptance_sha256 = hashlib.sha256(acceptance).hexdigest()
    if not (folder / ACCEPTANCE_FILE).is_file() or file_sha256(folder / ACCEPTANCE_FILE) != acceptance_sha256:
        atomic_write_bytes(folder / ACCEPTANCE_FILE, acceptance)
    fallback = None if placement != "deferred" or folder.name == FALLBACK_FOLDER \
        else fallback_candidate(project, gate, chosen.precision)
    fallback_sha256 = None
    if fallback is not None:
        written = write_recipe(project, group, gate, placement, why, acceptance_payload(project, gate, fallback),
                               fallback, folder / FALLBACK_FOLDER)
        fallback_sha256 = file_sha256(written)
    elif (folder / FALLBACK_FOLDER).is_dir():
        shutil.rmtree(folder / FALLBACK_FOLDER)
    Recipe(
        group=group.name,
        model_name=project.project.name,
        model_version=project.ota.version,
        runtime=RuntimeSettings(**project.runtime.model_dump(include={"warmup_budget_s", "port", "max_batch_size",
                                                                      "max_queue_delay_ms"})),
        target=target.id,
        placement=placement,
        placement_reason=why,
        shippable_engine=_shippable(placement),
        onnx=ONNX_FILE,
        onnx_sha256=onnx_sha256,
        candidate=chosen.precision,
        kept_fp32=list(chosen.kept_fp32),
        retention=chosen.retention,
        accuracy_backend=chosen.backend,
        limits=limits.as_dict(),
        **_builder_settings(project, group, chosen.precision),
        timing_cache=f"{target.module.id}-trt{target.release.tensorrt}.cache",
        module=RecipeModule(**_module_facts(target)),
        jetpack=target.release.jetpack,
        l4t=target.release.l4t,
        l4t_accepted=[target.release.l4t, *target.release.l4t_aliases],
        tensorrt=target.release.tensorrt,
        acceptance=ACCEPTANCE_FILE,
        acceptance_sha256=acceptance_sha256,
        fallback=FALLBACK_FOLDER if fallback is not None else None,
        fallback_sha256=fallback_sha256,
        outputs=onnx_outputs(onnx_path),
    ).save(folder)
    return folder / RECIPE_FILE


#: ONNX tensor element types as KServe v2 datatypes
V2_DATATYPES = {1: "FP32", 10: "FP16", 11: "FP64", 7: "INT64", 6: "INT32", 3: "INT8", 2: "UINT8", 9: "BOOL"}


def onnx_outputs(path: Path) -> dict[str, TensorSpec]:
    """The graph outputs of an ONNX file: v2 datatype and shape (-1 for a symbolic or unknown axis)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found = {}
    for output in graph.output:
        tensor = output.type.tensor_type
        found[output.name] = TensorSpec(
            datatype=V2_DATATYPES.get(tensor.elem_type, onnx.TensorProto.DataType.Name(tensor.elem_type)),
            shape=[d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim])
    return found


def _builder_settings(project: Project, group: SelectedGroup, candidate: str) -> dict[str, Any]:
    """The recipe's TensorRT builder settings for a candidate (what ``engine_build_key`` reads besides the ONNX)."""
    return {"precision": "int8" if candidate.startswith("int8") else candidate,
            "profiles": {s.name: [list(s.min_shape), list(s.opt_shape), list(s.max_shape)]
                         for s in project.model.inputs},
            "workspace_bytes": group.limits.tensorrt_workspace,  # the preset's TensorRT memory-pool limit
            "dla_core": 0 if group.use_dla else None}


def acceptance_payload(project: Project, gate: GateResult, candidate_name: str | None = None) -> bytes:
    """``acceptance.npz`` for a candidate (default: the gate's selection; ``accuracy.evaluate.acceptance_set``).

    The same for every group; kept beside the candidate's measurement, whose folder is keyed by
    the model, data and task it is made from, so it is made once per candidate, not per compile.
    """
    from edgebuild.accuracy.evaluate import ACCEPTANCE_IMAGES, ACCEPTANCE_VERSION, ValidationSet, acceptance_set

    candidate = gate.folder / gate.candidate(candidate_name or gate.selected).onnx
    stored = candidate.parent / f"acceptance-{ACCEPTANCE_VERSION}.npz"
    if stored.is_file():
        return stored.read_bytes()
    data = ValidationSet(project, limit=ACCEPTANCE_IMAGES)
    payload, _ = acceptance_set(project, data, gate.folder / gate.candidate("fp32").onnx, candidate)
    atomic_write_bytes(stored, payload)
    return payload


def check_engine_memory(engine_json: Path, limits: LimitPreset) -> None:
    """Refuse an engine whose activations need more device memory than the group's preset allows.

    CUDA memory on a Jetson is probably not charged to the container's cgroup, so this check, and
    the memory-pool limit the engine was built with, are what bound it.
    """
    size = json.loads(engine_json.read_text()).get("device_memory_size")
    if size is not None and int(size) > limits.engine_device_memory_max:
        raise LimitError(
            f"{engine_json.parent / ENGINE_FILE}: the engine needs {human_size(int(size))} of device memory, more "
            f"than the {human_size(limits.engine_device_memory_max)} preset {limits.name} allows "
            "(gpu.engine_device_memory_max)",
            hint="lower the max shape of the optimization profile, or use a preset with a larger engine budget")


def _module_facts(target: Target) -> dict[str, Any]:
    module = target.module
    return {"id": module.id, "name": module.name, "compute_capability": module.compute_capability,
            "compatible": module.compatible}


def build_over_ssh(recipe_path: Path, url: str, *, report: Any = lambda _: None,
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
    report(f"engine: {url} is {facts.describe()}")
    remote = f"builds/{recipe.group}-{recipe.onnx_sha256[:12]}"
    cache_name = f"timing-caches/{recipe.timing_cache}"
    local_cache = folder.parent / cache_name
    files: dict[str, Path] = {f"{remote}/{RECIPE_FILE}": recipe_path, f"{remote}/{recipe.onnx}": folder / recipe.onnx}
    if local_cache.is_file():
        files[cache_name] = local_cache
    device.put(files, ".")
    report(f"engine: building {recipe.target} on {url} (this can take minutes)")
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
    plan = fetched[f"{remote}/{ENGINE_FILE}"]
    if hashlib.sha256(plan).hexdigest() != engine_json.get("plan_sha256"):
        raise RemoteError(f"{url}: the fetched engine.plan does not match the plan_sha256 of its engine.json")
    atomic_write_bytes(folder / ENGINE_FILE, plan)
    atomic_write_bytes(folder / ENGINE_JSON, fetched[f"{remote}/{ENGINE_JSON}"])
    if cache_name in fetched:
        atomic_write_bytes(local_cache, fetched[cache_name])
    report(f"engine: fetched {ENGINE_FILE} ({len(plan)} bytes) and {ENGINE_JSON} from {url}, hashes checked")
    return folder / ENGINE_JSON


@dataclass(frozen=True)
class Acceptance:
    """One device-built engine measured on its device over the validation set (stored by build key)."""

    candidate: str  # the gate candidate the engine was built from
    build_key: str
    plan_sha256: str
    validation: str  # edgebuild.datasets.project_data.validation_digest of the set it was measured on
    where: str
    backend: str
    metric: str
    value: float
    images: int
    reference: float  # FP32's metric on the same images (the gate's, unless accuracy.device_images caps them)
    retention: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    host: dict[str, Any]
    candidate: str = ""  # the gate candidate in the folder
    #: the shipping engine's metric measured on its device (local, ssh://) and found good enough
    accepted: dict[str, Any] | None = None
    #: engines measured on their device and refused (below accuracy.min_retention), in the order tried
    refused: list[dict[str, Any]] = field(default_factory=list)
    fallback: str | None = None  # the candidate a first-boot device falls back to (deferred placement)
    board: str | None = None  # the device farm's place that built and accepted it

    @property
    def needs_acceptance(self) -> bool:
        """An engine that ships: it is measured on its device before it is packaged."""
        return self.built and _shippable(self.placement)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineRecord:
        return cls(**data)


def engine_build_key(recipe: Any, placement: str, host: DeviceFacts | None = None) -> str:
    """What a built engine depends on: the ONNX, the builder settings, module, L4T and TensorRT.

    Not the model version, the runtime settings or the limits beyond the memory pool: changing
    those rewrites the recipe and keeps the engine. A host-check engine also depends on the
    host's own TensorRT and GPU, which built it.
    """
    shippable = _shippable(placement)
    return digest({"onnx": recipe.onnx_sha256, "precision": recipe.precision, "profiles": recipe.profiles,
                   "workspace": recipe.workspace_bytes, "dla_core": recipe.dla_core, "module": recipe.module.id,
                   "l4t": recipe.l4t, "tensorrt": recipe.tensorrt, "shippable": shippable,
                   **({} if shippable or host is None else {"host_tensorrt": host.tensorrt,
                                                            "host_gpu": host.compute_capability})})


def _shippable(placement: str) -> bool:
    return placement == "local" or placement.startswith("ssh://")


# -- what the folder holds, kept beside it ------------------------------------------------------

class EngineState:
    """``build/engines/.state/<group>.json``: the engine in the group's folder and the acceptance measurements.

    ``built`` says which build key the folder's engine was built from (written after the engine
    lands, removed before it is dropped), so an engine is kept whatever run or stage built it.
    ``measured`` holds every device measurement by build key: a decision (min_retention, the
    fallback order) is re-made from them without measuring again, and an engine refused once is
    not built again while its key holds.
    """

    def __init__(self, project: Project, group: str) -> None:
        self.path = project.build_dir / "engines" / ".state" / f"{group}.json"
        self._read()

    def _read(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.built: dict[str, Any] | None = data.get("built")
        self.measured: dict[str, dict[str, Any]] = data.get("measured", {})

    def _update(self, change: Callable[[EngineState], None]) -> None:
        """Re-read the file, apply ``change`` to this state, write it back atomically (another holder
        may have written since it was read)."""
        self._read()
        change(self)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path, json.dumps({"built": self.built, "measured": self.measured},
                                                 indent=2).encode())

    def set_built(self, build_key: str | None, folder: Path | None = None, placement: str = "",
                  reason: str = "") -> None:
        built = None if build_key is None else {
            "build_key": build_key, "plan_sha256": file_sha256(folder / ENGINE_FILE), "placement": placement,
            "reason": reason}
        self._update(lambda state: setattr(state, "built", built))

    def add_measurement(self, measured: Acceptance) -> None:
        self._update(lambda state: state.measured.__setitem__(measured.build_key, measured.as_dict()))

    def measurement(self, build_key: str, plan_sha256: str, validation: str) -> Acceptance | None:
        stored = self.measured.get(build_key)
        if stored and stored.get("plan_sha256") == plan_sha256 and stored.get("validation") == validation:
            try:
                return Acceptance(**stored)
            except TypeError:
                return None
        return None

    def refused(self, min_retention: float, validation: str) -> set[str]:
        """Build keys whose engine was measured below ``min_retention`` on this validation set."""
        return {key for key, m in self.measured.items()
                if m.get("validation") == validation and float(m.get("retention", 0.0)) < min_retention}


def _intact_plan_sha256(folder: Path) -> str | None:
    """The plan's sha256 when engine.plan and engine.json are present and the plan is the one
    engine.json describes, else None (the plan is read once: it can be hundreds of MB)."""
    plan, described = folder / ENGINE_FILE, folder / ENGINE_JSON
    if not (plan.is_file() and described.is_file()):
        return None
    try:
        expected = json.loads(described.read_text()).get("plan_sha256")
    except ValueError:
        return None
    found = file_sha256(plan)
    return found if found == expected else None


def _drop_engine(folder: Path, state: EngineState) -> None:
    if state.built is not None:
        state.set_built(None)
    for name in (ENGINE_FILE, ENGINE_JSON):
        (folder / name).unlink(missing_ok=True)


def _kept(state: EngineState, folder: Path, key: str) -> bool:
    built = state.built
    if built is None or built.get("build_key") != key:
        return False
    plan_sha256 = _intact_plan_sha256(folder)
    return plan_sha256 is not None and plan_sha256 == built.get("plan_sha256")


def plan_engine(project: Project, group: SelectedGroup, gate: GateResult, *, host: DeviceFacts,
                build_on: str | None = None, candidate: str | None = None, force: bool = False,
                acceptance: bytes | None = None, trt: Any = None, report: Any = lambda _: None) -> EngineRecord:
    """Write the group's recipe for ``candidate`` (default: the gate's selection), decide where its
    engine is built, and build it unless deferred.

    An engine already in the folder (built by any earlier run, here or on a device) is kept while
    ``engine_build_key`` is unchanged and its files are intact, unless ``force``; one a device
    built stays even when this run names no build device. ``build_on`` (from ``--build-on``)
    overrides the group's own build device. ``acceptance`` is the candidate's ``acceptance_payload``
    when the caller made it already.
    """
    candidate = candidate or gate.selected
    acceptance = acceptance if acceptance is not None else acceptance_payload(project, gate, candidate)
    state = EngineState(project, group.name)
    placement, why = decide_placement(group.target, host, build_on or group.build_on)
    built = state.built or {}
    if not force and _shippable(built.get("placement", "")) and not _shippable(placement):
        # an engine a device built stays, even when this run names no build device (a later
        # `package`, or a compile without --build-on), while nothing it depends on changed
        folder = write_recipe(project, group, gate, built["placement"], built["reason"], acceptance, candidate).parent
        if _kept(state, folder, engine_build_key(Recipe.load(folder), built["placement"], host)):
            placement, why = built["placement"], built["reason"]
    recipe_path = write_recipe(project, group, gate, placement, why, acceptance, candidate)
    folder = recipe_path.parent
    recipe = Recipe.load(folder)
    key = engine_build_key(recipe, placement, host)
    record = EngineRecord(group=group.name, target=group.target.id, placement=placement, reason=why,
                          folder=str(folder.relative_to(project.build_dir)), build_key=key, built=False, kept=False,
                          host=host.as_dict(), candidate=candidate,
                          fallback=fallback_candidate(project, gate, candidate) if recipe.fallback else None)
    if placement == "deferred":
        _drop_engine(folder, state)
        return record
    if not force and _kept(state, folder, key):
        report(f"engine: {group.name}: kept the {candidate} engine built {placement} (ONNX, builder settings, "
               "module, L4T and TensorRT unchanged)")
        check_engine_memory(folder / ENGINE_JSON, group.limits)  # the budget may have changed since
        return replace(record, built=True, kept=True)
    _drop_engine(folder, state)
    if placement.startswith("ssh://"):
        engine_json = build_over_ssh(recipe_path, placement, report=report)
    else:
        report(f"engine: building {group.target.id} ({placement}, {candidate})")
        engine_json = build_from_recipe(recipe_path, host, verify_device=placement == "local", trt=trt, report=report)
    state.set_built(key, folder, placement, why)
    check_engine_memory(Path(engine_json), group.limits)
    return replace(record, built=True)


# -- accept: the shipping engine measured where it runs ------------------------------------------

def build_and_accept(project: Project, group: SelectedGroup, gate: GateResult, *, host: DeviceFacts,
                     build_on: str | None = None, force: bool = False, acceptance: Any = None,
                     evaluate_remote: Any = None, evaluate_local: Any = None, trt: Any = None,
                     report: Any = lambda _: None) -> EngineRecord:
    """The group's engine (``plan_engine``), measured on its device when it ships, with fallback.

    An engine built on a device (``local``, ``ssh://``) is run over the validation set there
    (``accuracy.device_images`` caps it) and compared with the gate's FP32 reference. One below
    ``accuracy.min_retention`` is refused and the next candidate of ``candidate_order`` is built
    and measured, until one passes; when none does the record has no ``accepted`` and the
    stage's verdict stops the group (exit 11) with the numbers. Measurements are stored by build
    key (``EngineState``): a second run measures nothing, and a refused engine is not rebuilt.
    ``acceptance`` maps a candidate to its ``acceptance_payload`` (made once per compile);
    ``evaluate_remote`` / ``evaluate_local`` are injectable for tests.
    """

    min_retention = project.accuracy.min_retention
    state = EngineState(project, group.name)
    validation = _validation_key(project)
    refused_keys = set() if force else state.refused(min_retention, validation)
    payload = acceptance or (lambda name: acceptance_payload(project, gate, name))
    refused: list[dict[str, Any]] = []
    record = None
    for candidate in candidate_order(gate):
        planned = _planned_key(project, group, gate, candidate, host, build_on, state)
        if planned in refused_keys:  # refused by an earlier run: its measurement stands, nothing is built
            refused.append(state.measured[planned])
            report(f"accept: {group.name}: the {candidate} engine was refused before on its device "
                   f"(retention {state.measured[planned]['retention']:.3f}); trying the next candidate")
            continue
        record = plan_engine(project, group, gate, host=host, build_on=build_on, candidate=candidate,
                             force=force and not refused, acceptance=payload(candidate), trt=trt, report=report)
        if not record.needs_acceptance:
            return replace(record, refused=refused)
        measured = _measure(project, record, gate, state, validation, remeasure=force,
                            evaluate_remote=evaluate_remote, evaluate_local=evaluate_local, report=report)
        if measured.retention >= min_retention or not project.accuracy.gate:  # gate off: measured, not judged
            _record_acceptance(project.build_dir / record.folder, measured)
            return replace(record, accepted=measured.as_dict(), refused=refused)
        refused.append(measured.as_dict())
        report(f"accept: {group.name}: REFUSED the {candidate} engine: retention {measured.retention:.3f} < "
               f"{min_retention} on {record.placement}; building the next candidate of the gate")
    if record is None:
        raise AssertionError("build_and_accept needs a gate that selected a candidate")
    return replace(record, refused=refused)


def _validation_key(project: Project) -> str:
    """What a stored device measurement was taken on: the validation set and ``accuracy.device_images``."""
    from edgebuild.datasets.project_data import validation_digest

    return digest([validation_digest(project), project.accuracy.device_images])


def device_needed(project: Project, group: SelectedGroup, gate: GateResult, host: DeviceFacts) -> bool:
    """Whether ``build_and_accept`` on a build device would use the device: not when the folder holds
    the engine of the first candidate not refused before, and its measurement is stored and passes
    (a farm group then reserves no board)."""

    state = EngineState(project, group.name)
    built = state.built or {}
    if not _shippable(built.get("placement", "")):
        return True
    validation = _validation_key(project)
    refused = state.refused(project.accuracy.min_retention, validation)
    folder = project.build_dir / "engines" / group.name
    for candidate in candidate_order(gate):
        key = _planned_key(project, group, gate, candidate, host, built["placement"], state)
        if key in refused:
            continue
        if not _kept(state, folder, key):
            return True
        stored = state.measurement(key, built["plan_sha256"], validation)
        return stored is None or stored.retention < project.accuracy.min_retention
    return True


def _planned_key(project: Project, group: SelectedGroup, gate: GateResult, candidate: str, host: DeviceFacts,
                 build_on: str | None, state: EngineState) -> str:
    """The ``engine_build_key`` ``plan_engine`` would give ``candidate``, without writing or building anything."""
    from types import SimpleNamespace

    target, chosen = group.target, gate.candidate(candidate)
    placement = decide_placement(target, host, build_on or group.build_on)[0]
    if not _shippable(placement) and _shippable((state.built or {}).get("placement", "")):
        placement = state.built["placement"]  # plan_engine keeps a device-built engine (its key says so)
    recipe = SimpleNamespace(onnx_sha256=file_sha256(gate.folder / chosen.onnx), module=target.module,
                             l4t=target.release.l4t, tensorrt=target.release.tensorrt,
                             **_builder_settings(project, group, candidate))
    return engine_build_key(recipe, placement, host)


def _measure(project: Project, record: EngineRecord, gate: GateResult, state: EngineState, validation: str, *,
             remeasure: bool, evaluate_remote: Any, evaluate_local: Any, report: Any) -> Acceptance:
    """The engine's metric on its device: the stored measurement of this plan, else measured now."""
    folder = project.build_dir / record.folder
    # plan_engine has just checked (kept) or hashed (built) the plan and recorded it: not read again
    plan_sha256 = EngineState(project, record.group).built["plan_sha256"]
    stored = None if remeasure else state.measurement(record.build_key, plan_sha256, validation)
    if stored is not None:
        report(f"accept: {record.group}: the {record.candidate} engine was measured before on {stored.where}: "
               f"{stored.metric} {stored.value:.4f}, retention {stored.retention:.3f} (stored)")
        return stored
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    data = ValidationSet(project, limit=project.accuracy.device_images)
    reference = gate.reference_value
    if project.accuracy.device_images and len(data) < gate.images:  # FP32 on the same images, here
        from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

        fp32 = OnnxRuntimeRunner(gate.folder / gate.candidate("fp32").onnx)
        reference = evaluate(project, fp32, data=data, progress=False).value
        report(f"accept: FP32 {gate.metric} on the first {len(data)} validation images (accuracy.device_images): "
               f"{reference:.4f} [{fp32.backend}]")
    if record.placement.startswith("ssh://"):
        from edgebuild.accuracy.evaluate import evaluate_on_device

        # the engine itself, on TensorRT: a number from another backend would not be the engine's
        evaluation, _ = (evaluate_remote or evaluate_on_device)(project, folder, record.placement, data=data,
                                                                backend="tensorrt", report=report)
    else:
        evaluation = (evaluate_local or _evaluate_here)(project, folder, data)
    measured = Acceptance(
        candidate=record.candidate, build_key=record.build_key, plan_sha256=plan_sha256, validation=validation,
        where=record.placement, backend=evaluation.backend, metric=evaluation.metric,
        value=round(evaluation.value, 6), images=evaluation.images, reference=round(reference, 6),
        retention=round(evaluation.value / reference, 6) if reference else 0.0)
    state.add_measurement(measured)
    report(f"accept: {record.group}: {measured.metric} {measured.value:.4f}, retention {measured.retention:.3f} "
           f"[{measured.backend} on {measured.where}]")
    return measured


def _record_acceptance(folder: Path, measured: Acceptance) -> None:
    """The accepted measurement into the folder's ``engine.json`` and recipe (the plan is untouched)."""
    shown = {k: v for k, v in measured.as_dict().items() if k not in ("build_key", "validation")}
    described = json.loads((folder / ENGINE_JSON).read_text())
    if described.get("accepted") != shown:
        described["accepted"] = shown
        atomic_write_bytes(folder / ENGINE_JSON, json.dumps(described, indent=2, default=str).encode())
    recipe = Recipe.load(folder)
    if recipe.accepted != shown:
        replace(recipe, accepted=shown).save(folder)


def _evaluate_here(project: Project, folder: Path, data: Any) -> Any:
    from edgebuild.accuracy.evaluate import evaluate
    from edgebuild.runtime.backends.select import load_backend

    runner, _ = load_backend(folder, "tensorrt")
    return evaluate(project, runner, data=data, progress=False)
