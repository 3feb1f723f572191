"""The compile's stages: what each one reads (its key), what it does, what its record holds.

Each stage calls one domain module's public entry point; the protocol that runs them, skips
what is up to date and stores the records is ``edgebuild.pipeline.runner``. Order matters: a stage
comes after every stage it reads.

    model ─► reference
      └────► export ─► preflight (per group) ─┐
                 └───► gate ──────────────────┴─► engine (+ accept) ─► container ─► package
                                                  (per group from preflight on)
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgebuild.content import digest, file_sha256, tool_versions, tree_sha256
from edgebuild.errors import AccuracyGateError, PreflightError
from edgebuild.pipeline.runner import CompileReport, Plan, Stage, StageInputs, run_stages


def _torch_runner(inputs: StageInputs) -> Any:
    """The project's PyTorch model, loaded once per compile and only by a stage that runs."""
    if "torch_runner" not in inputs.shared:
        from edgebuild.sources.model import TorchRunner

        inputs.shared["torch_runner"] = TorchRunner(inputs.project)
    return inputs.shared["torch_runner"]


# -- model -------------------------------------------------------------------------------------

def _model_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.sources.model import model_key_parts
    from edgebuild.sources.task_outputs import task_outputs_key

    return {**model_key_parts(inputs.project), "tools": digest(tool_versions("torch")),
            "task_outputs": task_outputs_key(inputs.project)}


def _model_run(inputs: StageInputs) -> Any:
    from edgebuild.sources.model import check_model

    return check_model(inputs.project, _torch_runner(inputs))


def _model_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.sources.model import ModelRecord

    return ModelRecord(**data)


def _model_describe(record: Any) -> str:
    return (f"{record.entry_point} ({record.parameters:,} parameters), forward at min/opt/max shapes "
            f"in {record.seconds:.1f} s")


# -- reference ---------------------------------------------------------------------------------

def _reference_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.datasets.project_data import validation_digest
    from edgebuild.sources.model import model_key_parts

    project = inputs.project
    return {**model_key_parts(project), "validation": validation_digest(project),
            "task": digest(project.task.model_dump()), "metric": project.metric,
            "tools": digest(tool_versions("torch", "faster-coco-eval"))}


def _reference_run(inputs: StageInputs) -> Any:
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    data = ValidationSet(inputs.project)
    if not inputs.options.progress:  # no bar: one line when the long step starts
        inputs.report(f"reference: evaluating the PyTorch model on {len(data)} validation images [torch-cpu]")
    return evaluate(inputs.project, _torch_runner(inputs), data=data, progress=inputs.options.progress)


def _reference_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.accuracy.evaluate import Evaluation

    return Evaluation(**data)


def _reference_describe(record: Any) -> str:
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
    return f"FP32 {metrics} on {record.images} validation images [backend {record.backend}]"


# -- export ------------------------------------------------------------------------------------

def _opset(inputs: StageInputs) -> tuple[int, str]:
    from edgebuild.sources.export import choose_opset

    return choose_opset(inputs.project, inputs.plan.releases)


def _export_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.sources.export import cache_key_parts

    return cache_key_parts(inputs.project, _opset(inputs)[0])


def _export_run(inputs: StageInputs) -> Any:
    from edgebuild.sources.export import export_model

    opset, reason = _opset(inputs)
    return export_model(inputs.project, opset, reason, report=inputs.report,
                        torch_runner=inputs.shared.get("torch_runner"), groups=inputs.plan.groups)


def _export_outputs(inputs: StageInputs, record: Any) -> list[Path]:
    return [record.onnx_path.parent]


def _export_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.sources.export import ExportRecord, export_dir

    return ExportRecord.from_dict(data, export_dir(inputs.project, int(data["opset"])))


def _export_describe(record: Any) -> str:
    worst = max(record.parity, key=lambda p: p.max_abs)
    return (f"opset {record.opset}, {record.exporter} exporter, parity ok at {len({p.shape for p in record.parity})} "
            f"shapes (max abs error {worst.max_abs:.2g}) -> {record.onnx_path.parent.name}/{record.onnx_path.name}")


# -- preflight (per group) ---------------------------------------------------------------------

def _preflight_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.targets.preflight import rules_digest

    group = inputs.group
    return {"onnx": inputs.records["export"].content_sha256, "target": group.target.id, "use_dla": str(group.use_dla),
            "parser_tables": rules_digest()}


def _preflight_run(inputs: StageInputs) -> Any:
    from edgebuild.targets.preflight import check_target, load_graph

    onnx_path = inputs.records["export"].onnx_path
    graphs = inputs.shared.setdefault("onnx_graphs", {})
    if onnx_path not in graphs:
        graphs[onnx_path] = load_graph(onnx_path)
    return check_target(graphs[onnx_path], inputs.group)


def _preflight_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.targets.preflight import TargetPreflight

    return TargetPreflight.from_dict(data)


def _preflight_describe(record: Any) -> str:
    if record.blocking:
        return f"{len(record.blocking)} blocking problem(s) (TensorRT {record.tensorrt})"
    return f"clean for TensorRT {record.tensorrt}, {len(record.findings)} warning(s)"


def _preflight_verdict(inputs: StageInputs, record: Any) -> PreflightError | None:
    from edgebuild.targets.preflight import preflight_text

    if not record.blocking:
        return None
    return PreflightError(
        f"{inputs.records['export'].onnx_path.name}: blocking problems for {record.group} = {record.target}\n"
        + preflight_text(inputs.records["export"].onnx_path, [record]),
        hint="each listed node needs the suggested fix, or drop that target")


# -- gate --------------------------------------------------------------------------------------

def _gate_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.accuracy.gate import decision_settings, measurement_key_parts
    from edgebuild.targets.preflight import rules_digest

    return {**measurement_key_parts(inputs.project, inputs.records["export"]),
            "decision": digest(decision_settings(inputs.project)),
            # every candidate is checked against the TensorRT parsers of the groups preflight passed
            "targets": digest(sorted(g.target.id for g in _cleared_groups(inputs))),
            "parser_tables": rules_digest()}


def _cleared_groups(inputs: StageInputs) -> tuple[Any, ...]:
    """The selected groups whose preflight passed (a blocked group is skipped, not the whole fleet)."""
    cleared = inputs.records["preflight"]
    return tuple(g for g in inputs.plan.groups if g.name in cleared)


def _gate_run(inputs: StageInputs) -> Any:
    from edgebuild.accuracy.gate import run_gate

    return run_gate(inputs.project, inputs.records["export"], groups=_cleared_groups(inputs), force=inputs.forced,
                    progress=inputs.options.progress, report=inputs.report)


def _gate_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.accuracy.gate import GateResult, gate_dir

    return GateResult.from_dict(data, gate_dir(inputs.project))


def _gate_describe(result: Any) -> str:
    summary = ", ".join(f"{c.precision} {c.retention:.3f}{'' if c.passed else ' FAIL'}" for c in result.candidates)
    chosen = f"selected {result.selected}" if result.selected else "nothing passes"
    return (f"FP32 {result.metric} {result.reference_value:.4f}; retention {summary}; {chosen} "
            f"[{result.backend}; {result.measured} measured, {result.stored} stored]")


def _gate_verdict(inputs: StageInputs, result: Any) -> AccuracyGateError | None:
    from edgebuild.accuracy.gate import verdict

    return verdict(inputs.project, result)


# -- engine (per group) ------------------------------------------------------------------------

def _host(inputs: StageInputs) -> Any:
    if "host" not in inputs.shared:
        from edgebuild.runtime.device import probe

        inputs.shared["host"] = probe()
    return inputs.shared["host"]


def _engine_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.datasets.project_data import validation_digest
    from edgebuild.devices.engine import EngineState, candidate_order, decide_placement

    project, group, gate = inputs.project, inputs.group, inputs.records["gate"]
    order = [gate.candidate(name) for name in candidate_order(gate)]
    state = EngineState(project, group.name)
    build_on = inputs.options.build_on or group.build_on or _farm_placement(inputs)
    # what the accept step reads matters only where an engine is (or was) measured on a device
    measured = bool(state.measured) or decide_placement(group.target, _host(inputs), build_on)[0] not in (
        "deferred", "host-check")
    return {
        # every candidate the accept step may fall back to, and the engines refused before
        "candidates": digest([[c.precision, c.kept_fp32, c.retention, c.backend, file_sha256(gate.folder / c.onnx)]
                              for c in order]),
        "refused": digest(sorted(state.measured)),
        "model": digest([project.project.name, project.ota.version, project.runtime.model_dump(),
                         [s.model_dump() for s in project.model.inputs]]),
        "first_boot_fallback": str(project.accuracy.first_boot_fallback),
        "accept": digest([project.accuracy.min_retention, project.accuracy.device_images,
                          validation_digest(project)] if measured else None),
        "target": group.target.id,
        "use_dla": str(group.use_dla),
        "limits": digest(group.limits.as_dict()),
        "build_on": build_on or "",
        "host": digest(_host(inputs).as_dict()),
    }


def _farm_placement(inputs: StageInputs) -> str | None:
    """``farm:module=...,jetpack=...`` for a group the device farm builds: the key names the
    profile, not the board, which changes from run to run."""
    if inputs.options.farm is None:
        return None
    from edgebuild.devices.farm import target_tags

    return "farm:" + ",".join(f"{k}={v}" for k, v in target_tags(inputs.group).items())


def _engine_run(inputs: StageInputs) -> Any:
    from dataclasses import replace

    from edgebuild.devices.engine import EngineState, acceptance_payload, build_and_accept, device_needed

    project, group, gate = inputs.project, inputs.group, inputs.records["gate"]
    payloads = inputs.shared.setdefault("acceptance", {})  # one per candidate, the same for every group
    lock = inputs.shared.setdefault("acceptance_lock", threading.Lock())  # groups may run at once

    def payload(candidate: str) -> bytes:
        with lock:
            if candidate not in payloads:
                payloads[candidate] = acceptance_payload(project, gate, candidate)
            return payloads[candidate]

    def build(build_on: str | None) -> Any:
        return build_and_accept(project, group, gate, host=_host(inputs), build_on=build_on, force=inputs.forced,
                                acceptance=payload, report=inputs.report)

    farm = inputs.options.farm
    if farm is None or inputs.options.build_on or group.build_on:
        return build(inputs.options.build_on)
    if not inputs.forced and not device_needed(project, group, gate, _host(inputs)):
        inputs.report(f"engine: {group.name}: the engine a farm board built is current and accepted; no board needed")
        return build(EngineState(project, group.name).built["placement"])
    from edgebuild.devices.farm import run_on_board, target_tags

    outcome = run_on_board(farm, group.name, target_tags(group), lambda board: build(board.url))
    if outcome.error is not None:
        raise outcome.error
    return replace(outcome.result, board=outcome.board)


def _engine_outputs(inputs: StageInputs, record: Any) -> list[Path]:
    return [inputs.project.build_dir / record.folder]


def _engine_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.devices.engine import EngineRecord

    return EngineRecord.from_dict(data)


def _engine_describe(record: Any) -> str:
    refused = "".join(f"; {r['candidate']} REFUSED on the device (retention {r['retention']:.3f})"
                      for r in record.refused)
    if not record.built:
        fallback = f", first-boot fallback {record.fallback}" if record.fallback else ""
        return f"{record.placement} ({record.candidate}{fallback}){refused}"
    built = f"{record.placement}, {record.candidate} engine {'kept' if record.kept else 'built'}"
    if record.accepted:
        a = record.accepted
        built += (f"; accepted: {a['metric']} {a['value']:.4f} on {a['images']} images, retention "
                  f"{a['retention']:.3f} [{a['backend']}]")
    return built + refused


def _engine_verdict(inputs: StageInputs, record: Any) -> AccuracyGateError | None:
    if not record.needs_acceptance or record.accepted is not None:
        return None
    project, gate = inputs.project, inputs.records["gate"]
    tried = "; ".join(f"{r['candidate']}: {r['metric']} {r['value']:.4f}, retention {r['retention']:.3f} "
                      f"[{r['backend']}]" for r in record.refused)
    return AccuracyGateError(
        f"{record.group}: no engine built {record.placement} keeps accuracy.min_retention "
        f"{project.accuracy.min_retention} of the FP32 {gate.metric} ({gate.reference_value:.4f}) on the device "
        f"({tried}); nothing is packaged for this group",
        hint="the device's TensorRT loses accuracy the host's measurement did not see: keep more layers in "
             "float (quantize.max_kept_layers), add fp16/fp32 to quantize.precisions, or check the device's "
             "JetPack")


# -- container (per group) ---------------------------------------------------------------------

def _model_folder_key(inputs: StageInputs) -> dict[str, str]:
    """The sha256 of every file of the group's model folder (recipe, ONNX, acceptance set, engine where built)."""
    from edgebuild.runtime.recipe import Recipe

    folder = inputs.project.build_dir / inputs.records["engine"].folder
    return Recipe.load(folder).file_hashes(folder)


def _folder_key(folder: Path) -> dict[str, str]:
    """The sha256 of every file directly in ``folder``."""
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def _container_key(inputs: StageInputs) -> dict[str, str]:
    from edgebuild.datafiles import data_dir

    return {"model_folder": digest(_model_folder_key(inputs)), "templates": tree_sha256(data_dir("docker"), "*"),
            "device_tool": tree_sha256(Path(__file__).resolve().parents[1] / "runtime"),
            "flavor": inputs.options.container_flavor, "base_image": inputs.options.base_image or "",
            "server": inputs.project.runtime.server, "triton_releases": tree_sha256(data_dir("profiles") / "triton",
                                                                                 "*.toml")}


def _container_run(inputs: StageInputs) -> Any:
    from edgebuild.shipping.container import write_group_container

    return write_group_container(inputs.project, inputs.group, flavor=inputs.options.container_flavor,
                                 base_image=inputs.options.base_image, report=inputs.report)


def _container_outputs(inputs: StageInputs, record: Any) -> list[Path]:
    build = inputs.project.build_dir
    return [build / record.context] + ([build / Path(record.triton["repository"]).parent] if record.triton else [])


def _container_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.shipping.container import ContainerRecord

    return ContainerRecord.from_dict(data)


def _container_describe(record: Any) -> str:
    return (f"FROM {record.base_image} ({'engine' if record.ships_engine else 'recipe'}, limits "
            f"{record.limits['name']}{', systemd unit' if record.systemd_unit else ''}"
            + (f"; Triton {record.triton['platform']} repository" if record.triton else "") + ")")


# -- package (per group) -----------------------------------------------------------------------

def _package_key(inputs: StageInputs) -> dict[str, str]:
    project = inputs.project
    ota = project.ota
    key = project.path(ota.signing_key) if ota.signing_key else None
    since = inputs.options.package_since
    return {"model_folder": digest(_model_folder_key(inputs)), "gate": str(project.accuracy.gate),
            "ship_ungated": str(inputs.options.ship_ungated),
            "run_specs": digest(_folder_key(project.build_dir / inputs.records["container"].context)),
            "ota": digest(ota.model_dump(exclude={"signing_key"})), "project": project.project.name,
            "signing_key": file_sha256(key) if key and key.is_file() else "none",
            "since": (file_sha256(since) if since.is_file() else tree_sha256(since, "*")) if since else ""}


def _package_run(inputs: StageInputs) -> Any:
    from edgebuild.shipping.ota import package_group

    if not inputs.project.accuracy.gate and not inputs.options.ship_ungated:
        raise AccuracyGateError(
            f"{inputs.group.name}: not packaged: the candidate was selected with the gate off (--no-gate, "
            "accuracy.gate = false), so nothing says it keeps the model's accuracy",
            hint="train the model and compile with the gate on, or pass --ship-ungated to package it anyway")

    accepted = inputs.records["engine"].accepted
    shown = ("candidate", "where", "backend", "metric", "value", "retention", "images")
    accepted = {k: v for k, v in accepted.items() if k in shown} if accepted else None
    return package_group(inputs.project, inputs.group, since=inputs.options.package_since, accepted=accepted,
                         report=inputs.report)


def _package_outputs(inputs: StageInputs, record: Any) -> list[Path]:
    root = inputs.project.root
    return [root / record.bundle["path"], root / record.mender["path"]]


def _package_load(inputs: StageInputs, data: dict[str, Any]) -> Any:
    from edgebuild.shipping.ota import PackageRecord

    return PackageRecord.from_dict(data)


def _package_describe(record: Any) -> str:
    return (f"{record.bundle['size']} bytes{'' if record.signed else ' UNSIGNED'}"
            + (f", delta over {record.delta_over}" if record.delta_over else ""))


def _dump(record: Any) -> dict[str, Any]:
    return record.as_dict() if hasattr(record, "as_dict") else asdict(record)


STAGES: tuple[Stage, ...] = (
    Stage("model", 2, "load the entry point and weights, run forward at the min/opt/max shapes", (), False,
          _model_key, _model_run, lambda i, r: [], _dump, _model_load, _model_describe),
    Stage("reference", 1, "FP32 accuracy of the PyTorch model on the validation set", ("model",), False,
          _reference_key, _reference_run, lambda i, r: [], _dump, _reference_load, _reference_describe,
          needs_data=True),
    Stage("export", 1, "ONNX export with dynamic axes and a parity check against PyTorch", ("model",), False,
          _export_key, _export_run, _export_outputs, _dump, _export_load, _export_describe),
    Stage("preflight", 1, "every ONNX node checked against the group's TensorRT parser (types and attributes "
                          "too)", ("export",), True,
          _preflight_key, _preflight_run, lambda i, r: [], _dump, _preflight_load, _preflight_describe,
          verdict=_preflight_verdict),
    Stage("gate", 4, "FP16 and calibrated INT8 (Q/DQ) candidates, accuracy retention against FP32, INT8 fallback, "
                     "selection (measurements stored apart from the decision)", ("export", "preflight"), False,
          _gate_key, _gate_run, lambda i, r: r.files, _dump, _gate_load, _gate_describe, verdict=_gate_verdict,
          needs_data=True),
    Stage("engine", 6, "TensorRT engine per JetPack profile: built here (local, host-check), on a build device "
                       "over SSH, or deferred to the device with its recipe (and an FP16 fallback); an engine "
                       "built on a device is measured there (accept) and, below the threshold, replaced by the "
                       "next passing candidate", ("gate", "preflight"), True,
          _engine_key, _engine_run, _engine_outputs, _dump, _engine_load, _engine_describe,
          verdict=_engine_verdict, needs_data=True, concurrent=True),
    Stage("container", 3, "runtime container build context and cgroup-limited run specs (docker run, compose, "
                          "systemd)", ("engine",), True,
          _container_key, _container_run, _container_outputs, _dump, _container_load, _container_describe),
    Stage("package", 5, "signed OTA bundle and Mender artifact, fleet manifest", ("engine", "container"), True,
          _package_key, _package_run, _package_outputs, _dump, _package_load, _package_describe),
)


def stage_names() -> list[str]:
    return [s.name for s in STAGES]


def compile_plan(plan: Plan, **options: Any) -> CompileReport:
    """Run the compile's stages for ``plan`` (``until``, ``options``, ``report``, ``on_stage`` as run_stages)."""
    return run_stages(plan, STAGES, **options)
