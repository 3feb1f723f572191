"""The engine stage (per group): where the group's TensorRT engine is built, and whether it ships.

Reads: the gate's result (its candidates, in the order they may be tried, and its accuracy
policy), the group's target, limits and build device (``build_on``, ``--build-on``, or a board
of the device farm), and this host's facts. It runs for a group only when the budget stage passed
it (a group whose every candidate misses its latency budget gets no engine). Writes the group's model folder
``build/engines/<group>/`` (recipe, ONNX, acceptance set, engine where built) and its state
beside it; its record is an ``EngineRecord``.

Where the decisions live: placement in ``devices.placement``, the build in
``devices.engines.place_and_build_engine``, acceptance on the device (and the fallback to the next
candidate) in ``devices.acceptance.build_and_accept``. This module says what the stage reads,
asks for a farm board where the group needs one, and turns a refused group into an error.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from edgebuild.accuracy.gate import GateResult
from edgebuild.content import digest, file_sha256
from edgebuild.devices.engines import EngineRecord, EngineStateStore
from edgebuild.devices.recipes import recipe_streams
from edgebuild.errors import AccuracyGateError
from edgebuild.pipeline.runner import Stage
from edgebuild.stages.gate import GATE
from edgebuild.stages.session import CompileInputs

__all__ = ["ENGINE"]


def _build_on(inputs: CompileInputs) -> str | None:
    """The build device: ``--build-on``, the group's ``build_on``, or ``farm:module=...,jetpack=...`` for
    a group the device farm builds (the key names the profile, not the board, which changes from run to run)."""
    if inputs.session.settings.build_on or inputs.unit.build_on:
        return inputs.session.settings.build_on or inputs.unit.build_on
    if inputs.session.settings.farm is None:
        return None
    from edgebuild.devices.farm import target_tags

    return "farm:" + ",".join(f"{k}={v}" for k, v in target_tags(inputs.unit).items())


def _key(inputs: CompileInputs) -> dict[str, str]:
    from edgebuild.devices.acceptance import validation_key
    from edgebuild.devices.placement import candidate_order, decide_placement

    project, group, gate = inputs.project, inputs.unit, inputs.record(GATE)
    session = inputs.session
    assert group.limits is not None, "select_work resolves every group's limit preset"
    order = [gate.candidate(name) for name in candidate_order(gate, group.accelerator)]
    implicit = [c.dla_int8.as_dict() for c in order if c.dla_int8 is not None] if group.use_dla else []
    state = EngineStateStore.of(project, group.name).read()
    build_on = _build_on(inputs)
    # what the accept step reads matters only where an engine is (or was) measured on a device
    measured = bool(state.measured) or decide_placement(group.target, session.host(), build_on)[0] not in (
        "deferred", "host-check")
    key = {
        # every candidate the accept step may fall back to, and the engines refused before
        "candidates": digest([[c.precision, c.kept_fp32, c.retention, c.backend, file_sha256(gate.folder / c.onnx)]
                              for c in order]),
        "refused": digest(sorted(state.measured)),
        "model": digest([project.project.name, project.ota.version, project.runtime.model_dump(exclude={"tracking"}),
                         [s.model_dump() for s in project.model.inputs]]),
        "first_boot_fallback": str(project.accuracy.first_boot_fallback),
        "accept": digest([gate.policy.as_dict(), validation_key(project)] if measured else None),
        "target": group.target.id,
        "use_dla": str(group.use_dla),
        **({"accelerator": group.accelerator} if group.use_dla else {}),  # a GPU group's key stays as it was
        **({"dla_int8": digest(implicit)} if implicit else {}),  # INT8 on the DLA: its ranges and layouts
        "limits": digest(group.limits.as_dict()),
        "build_on": build_on or "",
        "host": digest(session.host().as_dict()),
    }
    streams = recipe_streams(project, group.name)
    if streams is not None:  # a key only where the group tracks: the other groups' keys stay as they were
        regions = project.runtime.tracking.regions if project.runtime.tracking else None
        key["streams"] = digest([asdict(streams), file_sha256(project.path(regions)) if regions else None])
    return key


def _run(inputs: CompileInputs) -> EngineRecord:
    from edgebuild.devices.acceptance import build_and_accept, device_needed

    project, group, gate = inputs.project, inputs.unit, inputs.record(GATE)
    session = inputs.session
    if group.use_dla:
        _say_dla(inputs, gate)

    def build(build_on: str | None) -> EngineRecord:
        return build_and_accept(project, group, gate, host=session.host(), build_on=build_on, force=inputs.forced,
                                acceptance=lambda name: session.acceptance_payload(project, gate, name),
                                progress=inputs.progress)

    farm = inputs.session.settings.farm
    if farm is None or inputs.session.settings.build_on or group.build_on:
        return build(inputs.session.settings.build_on)
    if not inputs.forced and not device_needed(project, group, gate, session.host()):
        inputs.progress(f"engine: {group.name}: the engine a farm board built is current and accepted; no board needed")
        built = EngineStateStore.of(project, group.name).read().built
        assert built is not None, "device_needed is False only where the folder holds a built engine"
        return build(built.placement)
    from edgebuild.devices.farm import run_on_board, target_tags

    outcome = run_on_board(farm, group.name, target_tags(group), lambda board: build(board.url))
    if outcome.error is not None:
        raise outcome.error
    return replace(outcome.result, board=outcome.board)


def _say_dla(inputs: CompileInputs, gate: GateResult) -> None:
    """A DLA group's engine: which candidate the DLA runs and why the others are not, and its one static shape; a
    group whose every passing candidate the DLA cannot run stops here, with why."""
    from edgebuild.devices.placement import candidate_order
    from edgebuild.targets.dla import build_core

    group = inputs.unit
    refused = "; ".join(f"{c.precision}: {c.dla_refused}" for c in gate.candidates if c.passed and c.dla_refused)
    order = candidate_order(gate, group.accelerator)
    if not order:
        raise AccuracyGateError(
            f"{group.name} runs on {group.accelerator}, but no candidate that passes the gate runs on the DLA "
            f"({refused or 'none passed'})",
            hint="add fp16 to quantize.precisions (the DLA's FP16 layout is the fp16 candidate), or place the group "
                 "on the GPU (accelerator = \"gpu\")")
    shapes = ", ".join(f"{s.name} {s.opt_shape}" for s in inputs.project.model.inputs)
    inputs.progress(f"engine: {group.name}: {group.accelerator} (built for DLA core {build_core(group.accelerator)}, "
                    f"GPU fallback), {order[0]}, one static shape min = opt = max = {shapes} (the DLA runs no dynamic "
                    "shapes)" + (f"; not on the DLA: {refused}" if refused and order[0] != gate.selected else ""))


def _describe(record: EngineRecord) -> str:
    refused = "".join(f"; {r.candidate} REFUSED on the device (retention {r.retention:.3f})" for r in record.refused)
    if not record.built:
        fallback = f", first-boot fallback {record.fallback}" if record.fallback else ""
        return f"{record.placement} ({record.candidate}{fallback}){refused}"
    built = f"{record.placement}, {record.candidate} engine {'kept' if record.kept else 'built'}"
    if record.accepted:
        a = record.accepted
        built += f"; accepted: {a.metric} {a.value:.4f} on {a.images} images, retention {a.retention:.3f} [{a.backend}]"
    return built + refused


def refusal(record: EngineRecord, gate: GateResult) -> AccuracyGateError | None:
    """The group's error when every engine built on its device was refused (nothing ships), else None."""
    if not record.needs_acceptance or record.accepted is not None:
        return None
    tried = "; ".join(f"{r.candidate}: {r.metric} {r.value:.4f}, retention {r.retention:.3f} [{r.backend}]"
                      for r in record.refused)
    return AccuracyGateError(
        f"{record.group}: no engine built {record.placement} keeps accuracy.min_retention "
        f"{gate.policy.min_retention} of the FP32 {gate.metric} ({gate.reference_value:.4f}) on the device "
        f"({tried}); nothing is packaged for this group",
        hint="the device's TensorRT loses accuracy the host's measurement did not see: keep more layers in "
             "float (quantize.max_kept_layers), add fp16/fp32 to quantize.precisions, or check the device's "
             "JetPack")


ENGINE = Stage(
    name="engine", version=8,
    summary="TensorRT engine per JetPack profile: built here (local, host-check), on a build device over SSH, "
            "or deferred to the device with its recipe (and an FP16 fallback); an engine built on a device is "
            "measured there (accept) and, below the threshold, replaced by the next passing candidate",
    record=EngineRecord, after=("gate", "preflight", "budget"), per_group=True, key=_key, run=_run,
    outputs=lambda inputs, r: [inputs.project.build_dir / r.folder], describe=_describe,
    verdict=lambda inputs, record: refusal(record, inputs.record(GATE)), concurrent=True)


def model_folder(inputs: CompileInputs) -> Path:
    """The group's model folder, as the engine stage's record names it (what later stages read)."""
    return inputs.project.build_dir / inputs.record(ENGINE).folder
