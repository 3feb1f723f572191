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
  builds the engine once at first start with the same builder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.cache import digest, file_sha256
from edgebuild.errors import LimitError, RemoteError
from edgebuild.limits import LimitPreset, human_size
from edgebuild.runtime.acceptance import ACCEPTANCE_FILE
from edgebuild.runtime.device import DeviceFacts, build_from_recipe, module_matches, require_match
from edgebuild.runtime.files import atomic_write_bytes, atomic_writer
from edgebuild.runtime.recipe import (
    ENGINE_FILE,
    ENGINE_JSON,
    ONNX_FILE,
    RECIPE_FILE,
    Recipe,
    RecipeModule,
    RuntimeSettings,
)

if TYPE_CHECKING:
    from edgebuild.config import Project
    from edgebuild.gate import GateResult
    from edgebuild.profiles import SelectedGroup, Target


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


def write_recipe(project: Project, group: SelectedGroup, gate: GateResult, placement: str, why: str,
                 acceptance: bytes) -> Path:
    """The engine recipe of one fleet group: the selected ONNX, the builder settings, its limits and
    its acceptance set (``acceptance_payload``).

    Written into ``build/engines/<group>/`` file by file (each atomically): an engine already in
    the folder stays, and ``plan_engine`` decides whether it still fits.
    """
    target, limits = group.target, group.limits
    chosen = gate.candidate(gate.selected)
    precision = "int8" if chosen.precision.startswith("int8") else chosen.precision
    folder = project.build_dir / "engines" / group.name
    folder.mkdir(parents=True, exist_ok=True)
    source, onnx_path = gate.folder / chosen.onnx, folder / ONNX_FILE
    onnx_sha256 = file_sha256(source)
    if not onnx_path.is_file() or file_sha256(onnx_path) != onnx_sha256:
        with atomic_writer(onnx_path) as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out)
    acceptance_sha256 = hashlib.sha256(acceptance).hexdigest()
    if not (folder / ACCEPTANCE_FILE).is_file() or file_sha256(folder / ACCEPTANCE_FILE) != acceptance_sha256:
        atomic_write_bytes(folder / ACCEPTANCE_FILE, acceptance)
    Recipe(
        group=group.name,
        model_name=project.project.name,
        model_version=project.ota.version,
        runtime=RuntimeSettings(**project.runtime.model_dump(include={"warmup_budget_s", "port", "max_batch_size",
                                                                      "max_queue_delay_ms"})),
        target=target.id,
        placement=placement,
        placement_reason=why,
        shippable_engine=placement == "local" or placement.startswith("ssh://"),
        onnx=ONNX_FILE,
        onnx_sha256=onnx_sha256,
        precision=precision,
        candidate=chosen.precision,
        kept_fp32=list(chosen.kept_fp32),
        retention=chosen.retention,
        accuracy_backend=chosen.backend,
        profiles={s.name: [list(s.min_shape), list(s.opt_shape), list(s.max_shape)] for s in project.model.inputs},
        workspace_bytes=limits.tensorrt_workspace,  # the preset's TensorRT memory-pool limit
        limits=limits.as_dict(),
        dla_core=0 if group.use_dla else None,
        timing_cache=f"{target.module.id}-trt{target.release.tensorrt}.cache",
        module=RecipeModule(**_module_facts(target)),
        jetpack=target.release.jetpack,
        l4t=target.release.l4t,
        l4t_accepted=[target.release.l4t, *target.release.l4t_aliases],
        tensorrt=target.release.tensorrt,
        acceptance=ACCEPTANCE_FILE,
        acceptance_sha256=acceptance_sha256,
    ).save(folder)
    return folder / RECIPE_FILE


def acceptance_payload(project: Project, gate: GateResult) -> bytes:
    """``acceptance.npz`` for the gate's selected candidate (``edgebuild.evaluate.acceptance_set``).

    The same for every group; kept beside the candidate's measurement, whose folder is keyed by
    the model, data and task it is made from, so it is made once per candidate, not per compile.
    """
    from edgebuild.evaluate import ACCEPTANCE_IMAGES, ACCEPTANCE_VERSION, ValidationSet, acceptance_set

    candidate = gate.folder / gate.candidate(gate.selected).onnx
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
    from edgebuild.remote import SshDevice

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
class EngineRecord:
    """The engine stage's result for one fleet group."""

    group: str
    target: str
    placement: str  # local, ssh://..., host-check or deferred
    reason: str
    folder: str  # the model folder, relative to the build folder
    build_key: str  # what the engine depends on (engine_build_key)
    built: bool  # engine.plan and engine.json are in the folder
    kept: bool  # the engine of an earlier run was kept: nothing it depends on changed
    host: dict[str, Any]

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


def _engine_intact(folder: Path) -> bool:
    """engine.plan and engine.json present, and the plan is the one engine.json describes."""
    plan, described = folder / ENGINE_FILE, folder / ENGINE_JSON
    if not (plan.is_file() and described.is_file()):
        return False
    try:
        return json.loads(described.read_text()).get("plan_sha256") == file_sha256(plan)
    except ValueError:
        return False


def _drop_engine(folder: Path) -> None:
    for name in (ENGINE_FILE, ENGINE_JSON):
        (folder / name).unlink(missing_ok=True)


def _keep(project: Project, group: SelectedGroup, gate: GateResult, previous: EngineRecord, host: DeviceFacts,
          acceptance: bytes, report: Any) -> EngineRecord | None:
    """The previous run's engine, if its build key still holds and its files are intact (else None)."""
    recipe_path = write_recipe(project, group, gate, previous.placement, previous.reason, acceptance)
    folder = recipe_path.parent
    key = engine_build_key(Recipe.load(folder), previous.placement, host)
    if key != previous.build_key or not _engine_intact(folder):
        return None
    report(f"engine: {group.name}: kept the engine built {previous.placement} (ONNX, builder settings, module, "
           "L4T and TensorRT unchanged)")
    check_engine_memory(folder / ENGINE_JSON, group.limits)  # the budget may have changed since
    return replace(previous, target=group.target.id, kept=True, host=host.as_dict())


def plan_engine(project: Project, group: SelectedGroup, gate: GateResult, *, host: DeviceFacts,
                build_on: str | None = None, previous: EngineRecord | None = None, force: bool = False,
                acceptance: bytes | None = None, trt: Any = None, report: Any = lambda _: None) -> EngineRecord:
    """Write the group's recipe, decide where its engine is built, and build it unless deferred.

    An engine an earlier run built (here or on a device) is kept while ``engine_build_key`` is
    unchanged and its files are intact, unless ``force``. ``build_on`` (from ``--build-on``)
    overrides the group's own build device. ``acceptance`` is the ``acceptance_payload`` when the
    caller made it already (one for every group of a compile).
    """
    acceptance = acceptance if acceptance is not None else acceptance_payload(project, gate)
    placement, why = decide_placement(group.target, host, build_on or group.build_on)
    if not force and previous is not None and previous.built and _shippable(previous.placement) \
            and not _shippable(placement):
        # an engine a device built stays, even when this run names no build device (a later
        # `package`, or a compile without --build-on), while nothing it depends on changed
        kept = _keep(project, group, gate, previous, host, acceptance, report)
        if kept is not None:
            return kept
    recipe_path = write_recipe(project, group, gate, placement, why, acceptance)
    folder = recipe_path.parent
    key = engine_build_key(Recipe.load(folder), placement, host)
    record = EngineRecord(group=group.name, target=group.target.id, placement=placement, reason=why,
                          folder=str(folder.relative_to(project.build_dir)), build_key=key, built=False, kept=False,
                          host=host.as_dict())
    if placement == "deferred":
        _drop_engine(folder)
        return record
    if not force and previous is not None and previous.built and previous.build_key == key:
        kept = _keep(project, group, gate, previous, host, acceptance, report)
        if kept is not None:
            return kept
    _drop_engine(folder)
    if placement.startswith("ssh://"):
        engine_json = build_over_ssh(recipe_path, placement, report=report)
    else:
        report(f"engine: building {group.target.id} ({placement})")
        engine_json = build_from_recipe(recipe_path, host, verify_device=placement == "local", trt=trt, report=report)
    check_engine_memory(Path(engine_json), group.limits)
    return replace(record, built=True)


@dataclass(frozen=True)
class AcceptRecord:
    """The accept stage's result: the shipping engine's metric, measured where it was built."""

    group: str
    applicable: bool
    reason: str
    where: str = ""
    backend: str = ""
    metric: str = ""
    value: float = 0.0
    retention: float = 0.0  # against the gate's FP32 reference; the stage's verdict applies min_retention
    images: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def accept_engine(project: Project, engine: EngineRecord, gate: GateResult, *, evaluate_remote: Any = None,
                  evaluate_local: Any = None, report: Any = lambda _: None) -> AcceptRecord:
    """Measure a device-built engine on its device over the validation set, against the gate's FP32.

    Only engines that ship (``local``, ``ssh://``) are measured; a deferred group is not
    applicable here (the device builds its engine at first boot). ``evaluate_remote`` /
    ``evaluate_local`` are injectable for tests; by default the device evaluation over SSH
    (``edgebuild.evaluate.evaluate_on_device``) and the folder's backend here.
    """
    if not engine.built or not _shippable(engine.placement):
        why = ("deferred: the device builds the engine at first start (its acceptance there is not built yet)"
               if not engine.built else f"{engine.placement}: a host-check engine is never packaged")
        return AcceptRecord(engine.group, False, why)
    folder = project.build_dir / engine.folder
    if engine.placement.startswith("ssh://"):
        from edgebuild.evaluate import evaluate_on_device

        evaluation, _ = (evaluate_remote or evaluate_on_device)(project, folder, engine.placement, report=report)
    else:
        evaluation = (evaluate_local or _evaluate_here)(project, folder)
    retention = evaluation.value / gate.reference_value
    report(f"accept: {engine.group}: {evaluation.metric} {evaluation.value:.4f}, retention {retention:.3f} "
           f"[{evaluation.backend} on {engine.placement}]")
    return AcceptRecord(engine.group, True, "built on a device", where=engine.placement, backend=evaluation.backend,
                        metric=evaluation.metric, value=round(evaluation.value, 6), retention=round(retention, 6),
                        images=evaluation.images)


def _evaluate_here(project: Project, folder: Path) -> Any:
    from edgebuild.evaluate import evaluate
    from edgebuild.runtime.backends.select import load_backend

    runner, _ = load_backend(folder, "tensorrt")
    return evaluate(project, runner, progress=False)
