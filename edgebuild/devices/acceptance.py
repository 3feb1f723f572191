"""Accept: a shipping engine measured where it runs, and replaced when it loses accuracy there.

The host's gate chose a candidate on ONNX Runtime; what ships is a TensorRT engine built on a
device. ``build_and_accept`` builds the group's engine (``devices.engines.place_and_build_engine``) and,
when it ships (``local``, ``ssh://``), runs it over the validation set on its device and judges
the retention with the gate's accuracy policy. A refused engine is replaced by the next
candidate of ``devices.placement.candidate_order``. Measurements are stored by build key, so a
second run measures nothing and a refused engine is not built again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from edgebuild.content import digest, file_sha256
from edgebuild.devices.engines import (
    Acceptance,
    EngineRecord,
    EngineState,
    EngineStateStore,
    engine_build_key,
    engine_kept,
    place_and_build_engine,
)
from edgebuild.devices.placement import candidate_order, decide_placement, shippable
from edgebuild.devices.recipes import acceptance_payload, builder_settings
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_bytes
from edgebuild.runtime.base.recipe import ENGINE_JSON, Recipe, RecipeAcceptance
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.accuracy.evaluate import Evaluation, ValidationSet
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.device import DeviceFacts
    from edgebuild.targets.profiles import Module, SelectedGroup

__all__ = ["build_and_accept", "device_needed", "validation_key"]


def build_and_accept(project: Project, group: SelectedGroup, gate: GateResult, *, host: DeviceFacts,
                     build_on: str | None = None, force: bool = False,
                     acceptance: Callable[[str], bytes] | None = None,
                     evaluate_remote: Callable[..., tuple[Evaluation, object]] | None = None,
                     evaluate_local: Callable[[Project, Path, ValidationSet], Evaluation] | None = None,
                     trt: ModuleType | None = None, progress: Progress = lambda _: None) -> EngineRecord:
    """The group's engine (``place_and_build_engine``), measured on its device when it ships, with fallback.

    An engine built on a device (``local``, ``ssh://``) is run over the validation set there
    (``accuracy.device_images`` caps it) and compared with the gate's FP32 reference. One below
    the gate's accuracy policy is refused and the next candidate of ``candidate_order`` is built
    and measured, until one passes; when none does the record has no ``accepted`` and the
    stage's verdict stops the group (exit 11) with the numbers. Measurements are stored by build
    key (``EngineState``): a second run measures nothing, and a refused engine is not rebuilt.
    ``acceptance`` maps a candidate to its ``acceptance_payload`` (made once per compile);
    ``evaluate_remote`` / ``evaluate_local`` are injectable for tests.
    """
    policy = gate.policy
    store = EngineStateStore.of(project, group.name)
    state = store.read()
    validation = validation_key(project)
    refused_keys = set() if force else state.refused(policy, validation)
    payload = acceptance or (lambda name: acceptance_payload(project, gate, name))
    refused: list[Acceptance] = []
    record = None
    for candidate in candidate_order(gate, group.accelerator):
        expected_key = _expected_build_key(project, group, gate, candidate, host, build_on, state)
        if expected_key in refused_keys:  # refused by an earlier run: its measurement stands, nothing is built
            refused.append(state.measured[expected_key])
            progress(f"accept: {group.name}: the {candidate} engine was refused before on its device "
                     f"(retention {state.measured[expected_key].retention:.3f}); trying the next candidate")
            continue
        record = place_and_build_engine(project, group, gate, host=host, build_on=build_on, candidate=candidate,
                                        force=force and not refused, acceptance=payload(candidate), trt=trt,
                                        progress=progress)
        if not record.needs_acceptance:
            return replace(record, refused=tuple(refused))
        measured = _measure(project, record, gate, store, validation, remeasure=force,
                            evaluate_remote=evaluate_remote, evaluate_local=evaluate_local, progress=progress)
        if not policy.refuses(measured.retention):  # the gate off: measured, not judged
            _record_acceptance(project.build_dir / record.folder, measured)
            return replace(record, accepted=measured, refused=tuple(refused))
        refused.append(measured)
        progress(f"accept: {group.name}: REFUSED the {candidate} engine: retention {measured.retention:.3f} < "
                 f"{policy.min_retention} on {record.placement}; building the next candidate of the gate")
    if record is None:
        raise AssertionError("build_and_accept needs a gate that selected a candidate")
    return replace(record, refused=tuple(refused))


def validation_key(project: Project) -> str:
    """What a stored device measurement was taken on: the validation set and ``accuracy.device_images``."""
    from edgebuild.datasets.project_data import validation_digest

    return digest([validation_digest(project), project.accuracy.device_images])


def device_needed(project: Project, group: SelectedGroup, gate: GateResult, host: DeviceFacts) -> bool:
    """Whether ``build_and_accept`` on a build device would use the device: not when the folder holds
    the engine of the first candidate not refused before, and its measurement is stored and passes
    (a farm group then reserves no board)."""

    state = EngineStateStore.of(project, group.name).read()
    built = state.built
    if built is None or not shippable(built.placement):
        return True
    validation = validation_key(project)
    refused = state.refused(gate.policy, validation)
    folder = BuildLayout.of(project).engine(group.name)
    for candidate in candidate_order(gate, group.accelerator):
        key = _expected_build_key(project, group, gate, candidate, host, built.placement, state)
        if key in refused:
            continue
        if not engine_kept(state, folder, key):
            return True
        stored = state.measurement(key, built.plan_sha256, validation)
        return stored is None or gate.policy.refuses(stored.retention)
    return True


@dataclass(frozen=True)
class _ExpectedBuildInputs:
    """What ``engine_build_key`` reads of the recipe ``place_and_build_engine`` would write
    (``devices.engines.BuildInputs``)."""

    onnx_sha256: str
    module: Module
    l4t: str
    tensorrt: str
    precision: str
    profiles: dict[str, list[list[int]]]
    workspace_bytes: int
    dla_core: int | None


def _expected_build_key(project: Project, group: SelectedGroup, gate: GateResult, candidate: str,
                        host: DeviceFacts, build_on: str | None, state: EngineState) -> str:
    """The ``engine_build_key`` ``place_and_build_engine`` would give ``candidate``, without writing or
    building anything."""
    target, chosen = group.target, gate.candidate(candidate)
    placement = decide_placement(target, host, build_on or group.build_on)[0]
    if not shippable(placement) and state.built is not None and shippable(state.built.placement):
        placement = state.built.placement  # place_and_build_engine keeps a device-built engine (its key says so)
    inputs = _ExpectedBuildInputs(onnx_sha256=file_sha256(gate.folder / chosen.onnx), module=target.module,
                                  l4t=target.release.l4t, tensorrt=target.release.tensorrt,
                                  **builder_settings(project, group, candidate))
    return engine_build_key(inputs, placement, host)


def _measure(project: Project, record: EngineRecord, gate: GateResult, store: EngineStateStore, validation: str, *,
             remeasure: bool, evaluate_remote: Callable[..., tuple[Evaluation, object]] | None,
             evaluate_local: Callable[[Project, Path, ValidationSet], Evaluation] | None,
             progress: Progress) -> Acceptance:
    """The engine's metric on its device: the stored measurement of this engine file, else measured now."""
    folder = project.build_dir / record.folder
    # place_and_build_engine has just checked (kept) or hashed (built) the engine file and recorded it: not read again
    state = store.read()
    assert state.built is not None, "place_and_build_engine has just recorded the engine it kept or built"
    engine_sha256 = state.built.plan_sha256
    stored = None if remeasure else state.measurement(record.build_key, engine_sha256, validation)
    if stored is not None:
        progress(f"accept: {record.group}: the {record.candidate} engine was measured before on {stored.where}: "
                 f"{stored.metric} {stored.value:.4f}, retention {stored.retention:.3f} (stored)")
        return stored
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    data = ValidationSet(project, limit=project.accuracy.device_images)
    reference = gate.reference_value
    if project.accuracy.device_images and len(data) < gate.images:  # FP32 on the same images, here
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        fp32 = OnnxRuntimeRunner(gate.folder / gate.candidate("fp32").onnx)
        reference = evaluate(project, fp32, data=data, progress=False).value
        progress(f"accept: FP32 {gate.metric} on {len(data)} validation images spread over the set "
                 f"(accuracy.device_images): {reference:.4f} [{fp32.backend}]")
    if record.placement.startswith("ssh://"):
        from edgebuild.devices.evaluation import evaluate_on_device

        # the engine itself, on TensorRT: a number from another backend would not be the engine's
        evaluation, _ = (evaluate_remote or evaluate_on_device)(project, folder, record.placement, data=data,
                                                                backend="tensorrt", progress=progress)
    else:
        evaluation = (evaluate_local or _evaluate_here)(project, folder, data)
    measured = Acceptance(
        candidate=record.candidate, build_key=record.build_key, plan_sha256=engine_sha256, validation=validation,
        where=record.placement, backend=evaluation.backend, metric=evaluation.metric,
        value=round(evaluation.value, 6), images=evaluation.images, reference=round(reference, 6),
        retention=round(gate.policy.retention(evaluation.value, reference), 6))
    store.add_measurement(measured)
    progress(f"accept: {record.group}: {measured.metric} {measured.value:.4f}, retention {measured.retention:.3f} "
             f"[{measured.backend} on {measured.where}]")
    return measured


def _record_acceptance(folder: Path, measured: Acceptance) -> None:
    """The accepted measurement into the folder's ``engine.json`` and recipe (the engine file is untouched)."""
    shown = measured.shown()
    described = json.loads((folder / ENGINE_JSON).read_text())
    if described.get("accepted") != shown:
        described["accepted"] = shown
        atomic_write_bytes(folder / ENGINE_JSON, json.dumps(described, indent=2, default=str).encode())
    recipe, accepted = Recipe.load(folder), RecipeAcceptance.from_dict(shown)
    if recipe.accepted != accepted:
        replace(recipe, accepted=accepted).save(folder)


def _evaluate_here(project: Project, folder: Path, data: ValidationSet) -> Evaluation:
    from edgebuild.accuracy.evaluate import evaluate
    from edgebuild.runtime.engines.backends.select import load_backend

    runner, _ = load_backend(folder, "tensorrt")
    return evaluate(project, runner, data=data, progress=False)
