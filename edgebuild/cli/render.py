"""Every result the commands print, as text: tables, the compile summary, the gate's verdict.

Pure functions of the results the workflows return: nothing here decides or reads files, and
nothing heavy is imported, so ``edgebuild --help`` stays fast. (Results a lower layer renders
itself, such as preflight findings and bench tables, are printed with that layer's function.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.accuracy.policy import AccuracyPolicy
from edgebuild.jsontypes import JsonObject
from edgebuild.text import table

if TYPE_CHECKING:
    from edgebuild.accuracy.baseline import BaselineCheck
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.devices.engines import EngineRecord
    from edgebuild.devices.farm import JobResult
    from edgebuild.latency.budget import PredictedLatency
    from edgebuild.latency.calibration import CalibrationRun
    from edgebuild.latency.plan import LatencyPlan
    from edgebuild.pipeline.runner import CompileReport, StageOutcome, UnitOutcome
    from edgebuild.targets.profiles import GroupFacts
    from edgebuild.workflows.build import Exported
    from edgebuild.workflows.doctor import Check
    from edgebuild.workflows.farm import FarmStatus
    from edgebuild.workflows.fleet_compile import FleetCompiled
    from edgebuild.workflows.plan import FleetGroupPlan
    from edgebuild.workflows.project import Checked
    from edgebuild.workflows.validate import DeviceValidation, GroupOnDevice
    from edgebuild.workflows.work import CompileWork

__all__ = []


def as_json(data: Any) -> str:  # JSON in: anything json.dumps takes
    return json.dumps(data, indent=2, default=str)


# -- the project ----------------------------------------------------------------------------------

def fleet_table(units: list[GroupFacts]) -> str:
    rows = [[u.group + ("" if u.in_fleet else " (not in fleet)"), u.target, u.jetpack, "R" + u.l4t, u.tensorrt,
             u.cuda, f"sm {u.compute_capability}", str(u.max_onnx_opset), u.accelerator, u.limits or "-"]
            for u in units]
    return table(rows, ["group", "target", "JetPack", "L4T", "TensorRT", "CUDA", "GPU", "max opset", "runs on",
                        "limits"])


def check_text(checked: Checked) -> str:
    project = checked.project
    lines = [f"{project.source}: valid ({project.task.kind}, {len(project.task.classes)} classes, "
             f"metric {project.metric}, min retention {AccuracyPolicy.of(project).min_retention})"]
    lines += [f"  {finding}" for finding in checked.findings]
    if checked.to_prepare:
        lines.append(f"data: {', '.join(checked.to_prepare)} not there yet; data.prepare ({project.data.prepare}) "
                     "makes it on the first compile or validate, or now with `edgebuild data prepare`")
    lines.append(fleet_table(checked.fleet))
    return "\n".join(lines)


def catalog_text(catalog: dict[str, list[JsonObject]]) -> str:
    rows = [[r["jetpack"], "R" + r["l4t"], r["ubuntu"], r["cuda"], r["tensorrt"], r["python"], r["cgroup"],
             str(r["max_onnx_opset"]), ", ".join(r["modules"])] for r in catalog["jetpack"]]
    releases = table(rows, ["JetPack", "L4T", "Ubuntu", "CUDA", "TensorRT", "Python", "cgroup", "opset", "modules"])
    rows = [[m["id"], m["name"], m["family"], f"sm {m['compute_capability']}", str(m["dla_cores"]),
             f"{m['memory_gb']} GB", ", ".join(m["jetpack"])] for m in catalog["modules"]]
    modules = table(rows, ["module", "name", "family", "GPU", "DLA", "memory", "JetPack"])
    return (f"{releases}\n\n{modules}\n"
            "\na target is MODULE@JETPACK, e.g. orin-nano-8gb@6.2; `edgebuild profiles show TARGET` for details")


def profile_text(kind: str, record: dict) -> str:
    title = record["name"] if kind == "module" else f"JetPack {record['jetpack']}"
    unconfirmed = set(record.get("unconfirmed", []))
    lines = [title]
    for key, value in record.items():
        if key in ("sources", "unconfirmed", "notes", "name"):
            continue
        if key == "power_modes":
            value = ", ".join(f"{m['id']} {m['name']}" if m["id"] is not None else m["name"] for m in value)
        elif key == "performance":  # the latency plan's peaks per power mode (docs/latency-plan.md)
            value = "; ".join(
                f"{p['power_mode']} {p['gpu_mhz']} MHz {p['memory_bandwidth_gbps']} GB/s FP32 {p['fp32_tflops']} "
                f"FP16 {p['fp16_tflops']} TFLOPS INT8 {p['int8_tops'] or '-'} TOPS"
                + (f" (unconfirmed: {', '.join(p['unconfirmed'])})" if p["unconfirmed"] else "") for p in value) or "-"
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        flag = "  (unconfirmed)" if key in unconfirmed else ""
        lines.append(f"  {key:<22} {value}{flag}")
    for key, text in record.get("notes", {}).items():
        lines.append(f"  note on {key}: {text}")
    lines.append("  sources:")
    lines += [f"    - {s}" for s in record["sources"]]
    return "\n".join(lines) + "\n"


def doctor_text(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{'ok ' if c.ok else '-- '} {c.name:<16} {c.found}")
        if not c.ok:
            lines.append(f"    {'':<16} missing: {c.enables}")
    return "\n".join(lines)


# -- the compile ----------------------------------------------------------------------------------

def compile_header(work: CompileWork) -> str:
    project = work.project
    return (f"edgebuild compile: {project.project.name} ({project.source})\n"
            f"target {work.selector!r}: {len(work.groups)} of {len(project.fleet)} fleet group(s)\n\n"
            + fleet_table([g.describe() for g in work.groups]) + "\nstages:")


def stage_line(outcome: StageOutcome) -> str:
    return f"  {outcome.stage.name:<10} {outcome.status:<8} {outcome.detail}"


def compile_summary(report: CompileReport, latency: PredictedLatency | None = None) -> str:
    from edgebuild.stages.engine import ENGINE
    from edgebuild.stages.gate import GATE

    lines = []
    gate = report.record(GATE)
    policy = gate.policy if gate is not None else AccuracyPolicy.of(report.work.project)
    if not policy.gated:
        lines.append("\n*** GATE OFF (--no-gate / accuracy.gate = false): a dry run; no candidate's accuracy was "
                     "checked, and package refuses it unless --ship-ungated ***")
    if gate is not None:
        lines += ["", *baseline_lines(gate)]
    if latency is not None:
        lines += ["", *predicted_latency_lines(latency)]
    engine = report.outcome(ENGINE)
    if engine is not None:
        lines.append("\nengines:")
        for unit in engine.units:
            lines += _engine_lines(unit)
    lines.append("")
    for status, label in (("ran", "ran"), ("reused", "reused (up to date)"), ("failed", "failed"),
                          ("not run", "not run")):
        names = [o.stage.name for o in report.stages if o.status == status]
        if names:
            lines.append(f"{label}: {', '.join(names)}")
    return "\n".join(lines)


def predicted_latency_lines(latency: PredictedLatency) -> list[str]:
    """Per group (and model) and candidate precision: predicted p50, its band, the budget's verdict."""
    if not latency.groups and not latency.notes:
        return []
    rows = [[g.group + (f" {g.model}" if g.model else ""), f"{g.module} {g.power_mode}"
             + ("*" if g.power_mode_assumed else ""), c.precision, f"{c.latency_ms:.2f}",
             f"{c.low_ms:.2f}-{c.high_ms:.2f}", f"{g.budget_ms:g}" if g.budget_ms is not None else "-",
             c.verdict] for g in latency.groups for c in g.candidates]
    lines = ["predicted latency (p50 GPU compute, batch 1; not measured):"]
    if rows:
        lines += ["  " + line for line in table(rows, ["group", "module, power mode", "precision", "p50 ms",
                                                        "band ms", "budget ms", "verdict"]).splitlines()]
        lines.append(f"  from the {latency.groups[0].source} (docs/latency-plan.md)")
    if any(g.power_mode_assumed for g in latency.groups):
        lines.append("  * the group names no power_mode: its module's fastest mode with a known clock")
    lines += [f"  WARNING: {w}" for w in latency.warnings()]
    lines += [f"  REFUSED: {g}: {e.message.splitlines()[0]}" for g, e in latency.refusals().items()]
    lines += [f"  {note}" for note in latency.notes]
    return lines


def _engine_lines(unit: UnitOutcome[EngineRecord]) -> list[str]:
    record = unit.record
    if record is None:
        shown = "FAILED" if unit.status == "failed" else unit.status
        return [f"  {unit.group:<12} {shown}: {unit.detail}"]
    outcome = ("deferred" if not record.built else "kept" if record.kept else "built")
    lines = [f"  {record.group:<12} {record.target:<22} {record.placement:<12} {outcome} {record.candidate}"
             + (f" (first-boot fallback {record.fallback})" if record.fallback else ""),
             f"  {'':<12} {record.reason}"]
    if record.board:
        lines.append(f"  {'':<12} built and accepted on farm board {record.board} ({record.placement})")
    for tried in record.refused:
        lines.append(f"  {'':<12} REFUSED {tried.candidate} on {tried.where}: {tried.metric} "
                     f"{tried.value:.4f}, retention {tried.retention:.3f} [{tried.backend}]")
    if record.accepted:
        a = record.accepted
        lines.append(f"  {'':<12} accepted {a.candidate} on {a.where}: {a.metric} {a.value:.4f} "
                     f"on {a.images} images, retention {a.retention:.3f} [{a.backend}]")
    elif unit.status == "failed":
        lines.append(f"  {'':<12} FAILED: {unit.detail}")
    return lines


def report_line(written: dict[str, Path]) -> str:
    return f"report: {written['html']} (and {written['markdown'].name}, {written['junit'].name})"


def written_text(written: dict[str, Path]) -> str:
    """``<kind>: <path>`` per file written."""
    return "\n".join(f"{kind}: {path}" for kind, path in written.items())


# -- a fleet file's compile -----------------------------------------------------------------------

def fleet_compile_text(done: FleetCompiled) -> str:
    """Each model's compile summary, the fleet's per group, and where its record and report are."""
    from edgebuild.project.layout import BuildLayout

    lines: list[str] = []
    for name, report in done.models.items():
        lines += [f"\nmodel {name}:", compile_summary(report)]
    lines += ["\n" + fleet_summary(done),
              f"fleet record: {done.record}; report: {BuildLayout(done.fleet.build_dir).report / 'index.html'}"]
    return "\n".join(lines)


def fleet_summary(compiled: FleetCompiled) -> str:
    """Per group: its models and their candidates, the memory plan, what was written or why not."""
    lines = [f"fleet {compiled.fleet.name}:"]
    for group in compiled.groups:
        lines.append(f"  {group.name} ({group.target}): " + ", ".join(
            f"{m} {group.candidates.get(m, '-')}" for m in group.models))
        if group.memory is not None:
            plan = group.memory
            lines.append(f"    memory {plan.total / (1 << 20):.0f} MiB of {plan.budget / (1 << 20):.0f} MiB "
                         f"({plan.preset})" + ("" if plan.fits else ": DOES NOT FIT"))
        if group.latency is not None:
            lines += ["  " + line for line in predicted_latency_lines(group.latency)]
        for key in ("folder", "container", "bundle", "mender"):
            if key in group.written:
                lines.append(f"    {key}: {group.written[key]}")
        if group.error is not None:
            lines.append(f"    FAILED: {group.error.message.splitlines()[0]}")
    return "\n".join(lines)


# -- single stages --------------------------------------------------------------------------------

def export_text(exported: Exported) -> str:
    record = exported.record
    rows = [[p.shape, " ".join(f"{n}{s}" for n, s in p.input_shapes.items()), p.output, f"{p.max_abs:.3g}",
             f"{p.max_rel:.3g}", "ok" if p.ok else "MISMATCH"] for p in record.parity]
    return "\n".join([
        f"{record.onnx_path} ({'reused, nothing changed' if exported.reused else 'exported'})",
        f"  opset {record.opset}: {record.opset_reason}",
        f"  exporter: {record.exporter_note}",
        f"  simplify: {record.simplify_note}",
        f"  dynamic axes: {record.dynamic_axes}",
        f"  sha256 {record.sha256}" + ("  (weights in external data)" if record.external_data else ""),
        *([f"\nparity vs PyTorch [onnxruntime-cpu] (atol {record.atol} x each output's largest |value| "
           f"(at least 1), rtol {record.rtol}):",
           table(rows, ["shape", "inputs", "output", "max abs err", "max rel err", ""])] if record.parity else
          ["  (an imported model file: no PyTorch to compare with; the checks run are the exporter line's)"]),
    ])


def container_text(records: dict[str, JsonObject]) -> str:
    rows = [[r["group"], r["target"], r["base_image"], r["limits"]["name"], "engine" if r["ships_engine"] else "recipe",
             r["context"] + (f" -> {r['built']}" if r.get("built") else "")] for r in records.values()]
    lines = [table(rows, ["group", "target", "FROM", "limits", "ships", "context"])]
    lines += [f"{r['group']}: {note}" for r in records.values() for note in r["notes"]]
    return "\n".join(lines)


def package_text(fleet: JsonObject) -> str:
    rows = [[g, d["target"], d["bundle"]["path"], str(d["bundle"]["size"]), "yes" if d["signed"] else "NO",
             d["delta_over"] or "-"] for g, d in fleet["groups"].items()]
    lines = [table(rows, ["group", "target", "bundle", "bytes", "signed", "delta over"])]
    lines += [f"note: {note}" for note in fleet["notes"]]
    return "\n".join(lines)


# -- accuracy -------------------------------------------------------------------------------------

def gate_text(result: GateResult, groups: list[str], reused: bool) -> str:
    stored = f"; {result.measured} measurement(s) taken, {result.stored} stored"
    lines = [f"accuracy gate for {', '.join(groups)}: {result.metric}, min retention {result.threshold} "
             f"of FP32 {result.reference_value:.4f}, {result.images} validation images"
             + (" (reused, nothing changed)" if reused else stored)]
    rows = [[c.precision, f"{c.value:.4f}", f"{c.retention:.3f}",
             ("pass" if c.passed else "FAIL") + ("" if c.selectable else " (rejected)" if c.rejected_by
                                                  else " (not allowed)"),
             f"{c.latency_ms:.2f}", c.backend, ", ".join(c.kept_fp32) or c.note] for c in result.candidates]
    lines.append(table(rows, ["precision", result.metric, "retention", "gate", "latency ms", "backend", "notes"]))
    lines += baseline_lines(result)
    if result.tracking is not None:
        lines.append(result.tracking.heading())
        lines.append(table(result.tracking.table_rows(), result.tracking.columns()))
        lines += [f"{c.precision}: refused: {c.refused}" for c in result.candidates if c.refused]
    for c in result.candidates:
        for rejection in c.rejected_by:
            lines.append(f"{c.precision}: TensorRT would reject it: {rejection}")
    lines += result.notes
    choice = result.int8_choice
    if choice and len(choice.variants) > 1:
        looked = ", ".join(f"{v.variant} {v.sqnr_db:.1f} dB" + (f" -> {v.retention:.3f}" if v.retention
                                                                 is not None else "")
                           for v in sorted(choice.variants, key=lambda v: -(v.sqnr_db or -1e9))
                           if v.sqnr_db is not None)
        lines.append(f"int8: {choice.variant}, {choice.why} (output SQNR -> retention: {looked})")
    if result.sensitivity:
        worst = ", ".join(f"{s.layer} ({s.sqnr_db:.1f} dB)" for s in result.sensitivity[:5])
        lines.append(f"layers whose INT8 inputs lose most (per-channel SQNR, worst first): {worst}")
    if result.selected:
        lines.append(f"selected: {result.selected} ({result.selection_rule})")
    else:
        lines.append("selected: nothing passes. Try:")
        lines += [f"  - {step}" for step in result.next_steps]
    return "\n".join(lines)


def failed_jobs_text(jobs: list[JobResult]) -> str:
    return "\n".join(f"{job.group}: FAILED: {job.error}" for job in jobs)


def device_validation_text(done: DeviceValidation, *, farm: bool = False) -> str:
    """``validate --device`` / ``--farm``: what was measured where, and a row per group."""
    gate, policy = done.gate, done.gate.policy
    against = (f"min retention {policy.min_retention} of FP32 {gate.reference_value:.4f} [{gate.backend}], "
               f"{done.images} validation images")
    if farm:
        head = (f"on the farm at {done.where}: {gate.metric} of each group's model folder on a board of its "
                f"profile, {against} (jobs: {done.jobs_file})")
    else:
        facts = done.records[0].device if done.records else None
        board = facts.compatible[0] if facts is not None and facts.compatible else "no device tree"
        head = (f"on {done.where} ({board}, "
                f"L4T {facts and facts.l4t or '-'}, TensorRT {facts and facts.tensorrt or 'none'}): {gate.metric} "
                f"of each group's model folder, {against}")
    lines = [head, evaluation_table(done.records, gate.metric, boards=farm), *baseline_lines(gate)]
    lines += [f"{j.group}: {j.retried_from} stopped answering; ran on {j.board or 'no board'}"
              for j in done.jobs if j.retried_from]
    return "\n".join(lines)


def evaluation_table(records: list[GroupOnDevice], metric: str, boards: bool = False) -> str:
    rows = [([r.group] + ([r.board or ""] if boards else []) +
             [r.candidate, f"{r.value:.4f}", f"{r.retention:.3f}", "pass" if r.passed else "FAIL",
              r.backend, f"{r.inference_s:.2f}"]) for r in records]
    lines = [table(rows, ["group"] + (["board"] if boards else []) +
                   ["candidate", metric, "retention", "gate", "backend", "inference s"])]
    lines += [f"{r.group}: {r.backend_reason}" for r in records if not r.backend.startswith("tensorrt")]
    return "\n".join(lines)


# -- the farm -------------------------------------------------------------------------------------

def farm_status_text(status: FarmStatus) -> str:
    rows = [[p.place, " ".join(f"{k}={v}" for k, v in sorted(p.tags.items())) or "-",
             ", ".join(p.serves) or "-", p.held_by or "free"] for p in status.places]
    lines = [f"farm at {status.coordinator}: {len(status.places)} place(s)",
             table(rows, ["place", "tags", "fleet groups", "held by"])]
    lines += [f"{name}: no place tagged {' '.join(f'{k}={v}' for k, v in tags.items())}"
              for name, tags in status.unserved.items()]
    return "\n".join(lines)


def baseline_lines(gate: GateResult) -> list[str]:
    """The FP32 baseline check beside the gate table: its line, and what is wrong with it where something is."""
    check: BaselineCheck | None = getattr(gate, "baseline", None)
    if check is None:
        return ["baseline: not judged (a gate record written before edgebuild judged the FP32 baseline; the next "
                "compile or validate judges it)"]
    lines = [check.line()]
    if check.finding:
        lines.append(f"  the FP32 baseline {check.finding}; likely causes, most likely first:")
        lines += [f"    {n}. {c}" for n, c in enumerate(check.causes, 1)]
    return lines


# -- the latency plan ---------------------------------------------------------------------------

def _counted(names: tuple[str, ...]) -> str:
    """``("A", "B", "A")`` -> ``"A x2, B"``."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name + (f" x{n}" if n > 1 else "") for name, n in counts.items())


def device_plans_text(plans: list[FleetGroupPlan]) -> str:
    """``plan`` of a fleet file: per group, which core runs which model, and why a model is not on a DLA core."""
    parts = []
    for group in plans:
        if group.plan is None:
            parts.append(f"group {group.group} ({group.target}): no plan: {group.error}")
            continue
        plan = group.plan
        budget = [f"latency budget {plan.budget_ms:g} ms" if plan.budget_ms else "",
                  f"min {plan.min_fps:g} frames/s" if plan.min_fps else ""]
        verdict = (f"; {' and '.join(b for b in budget if b)}: "
                   f"{'meets it' if plan.meets else 'misses it'} (headroom {plan.headroom:.2f}x)"
                   if plan.headroom is not None else "")
        lines = [f"group {group.group} ({group.target}, {plan.power_mode}){verdict}", plan.table()]
        lines += [f"  {note}" for note in plan.notes]
        parts.append("\n".join(lines))
    parts.append("predicted, not measured: each model's time from the latency model; the sharing of the cores and "
                 "of DRAM is an assumption (docs/latency-plan.md, 'Several models on one module'); `edgebuild bench` "
                 "measures each model alone and all together on a device")
    return "\n\n".join(parts)


def latency_plan_text(plan: LatencyPlan) -> str:
    from edgebuild.targets.presets import human_size

    size = f"{plan.input_hw[0]}x{plan.input_hw[1]}" if plan.input_hw else "its input shape"
    lines = [f"{plan.model}: {plan.gflops:.2f} GFLOP at {size}, batch {plan.batch}, {plan.layers} fused layers"
             + (f" ({plan.unknown_shapes} nodes with estimated shapes)" if plan.unknown_shapes else ""), ""]
    budget = any(r.meets_budget is not None for r in plan.rows)
    groups = any(r.group for r in plan.rows)
    e2e = any(r.end_to_end_ms is not None for r in plan.rows)
    memory = any(r.engine_memory_bytes is not None for r in plan.rows)
    rows = [([r.group or "", str(r.batch)] if groups else [])
            + [r.module + ("*" if r.extrapolated else ""), r.power_mode, r.jetpack,
               f"{r.dla_mhz if r.accelerator == 'dla' else r.gpu_mhz}", r.precision, r.accelerator,
               f"{r.latency_ms:.2f}", f"{r.low_ms:.2f}-{r.high_ms:.2f}", f"{r.fps:.0f}"]
            + ([f"{r.end_to_end_ms:.2f}" if r.end_to_end_ms is not None else "-"] if e2e else [])
            + ([human_size(r.engine_memory_bytes) if r.engine_memory_bytes is not None else "-"] if memory else [])
            + ([{True: "yes", False: "no", None: "-"}[r.meets_budget]] if budget else []) for r in plan.rows]
    dla = plan.accelerator == "dla"
    headers = (["group", "batch"] if groups else []) + ["module", "power mode", "jetpack",
                                                          "DLA MHz" if dla else "GPU MHz", "precision", "accel",
                                                          "p50 ms", "band ms", "fps"]
    lines.append(table(rows, headers + (["end to end ms"] if e2e else []) + (["engine memory"] if memory else [])
                       + (["meets"] if budget else [])))
    if plan.budget_ms is not None and not groups:
        lines += ["", f"cheapest module and power mode with p50 within {plan.budget_ms:.2f} ms:"]
        for precision, row in plan.cheapest.items():
            lines.append(f"  {precision}: " + (
                f"{row.module} {row.power_mode} ({row.latency_ms:.2f} ms, up to {row.high_ms:.2f} ms in the band)"
                if row else "none of the selected modules"))
    fit = plan.fit
    low, high = plan.band
    if dla:
        lines += ["", "p50 on one DLA core: its layers, the layers it cannot run on the GPU and two GPU<->DLA "
                      "hand-overs per DLA subgraph, no host transfers; band: what held every published DLA figure when "
                      f"its model was left out of the fit (x{low:.2f} to x{high:.2f}); fitted on "
                      + "; ".join(fit.fitted_on) + " (docs/latency-plan.md#the-dla)"]
        fallback = next((r.fallback_ops for r in plan.rows if r.fallback_ops is not None), None)
        if fallback is not None:
            lines.append("falls back to the GPU: " + (f"{len(fallback)} layers ({_counted(fallback)})" if fallback
                                                      else "nothing, the whole graph runs on the DLA"))
    else:
        lines += ["", "p50 GPU compute time, no transfers; band: what held every published figure when its model or "
                      f"module was left out of the fit (x{low:.2f} to x{high:.2f}); fitted on "
                      + "; ".join(fit.fitted_on) + " (docs/latency-plan.md)"]
    if e2e:
        lines.append("end to end: + the input's upload and the outputs' download at the module's memory bandwidth "
                     "(CPU and GPU share one DRAM) and the runtime's numpy preprocessing, an estimate not fitted to "
                     "any measurement (docs/latency-plan.md#end-to-end)")
    if memory:
        lines.append("engine memory: weights + activations at the input profile's largest shape, the memory plan's "
                     "estimate from the ONNX before any engine is built (docs/fleets.md)")
    if any(r.extrapolated for r in plan.rows):
        lines.append("* no published figure of this GPU architecture was fitted: the band is not known to hold")
    lines += [f"not predicted: {s}" for s in plan.skipped]
    return "\n".join(lines)


# -- plan --calibrate ---------------------------------------------------------------------------

def calibration_dict(done: CalibrationRun) -> JsonObject:
    c = done.calibration
    return {"model": str(done.model_path), "measurements": str(done.measurements_path), "new": done.new,
            "kept": done.kept, "weight": c.weight, "skipped": list(done.skipped),
            "fit": {"compute_efficiency": c.model.compute_efficiency, "memory_efficiency": c.model.memory_efficiency,
                    "layer_overhead_us": c.model.layer_overhead_us, "band": [c.model.band_low, c.model.band_high],
                    "fitted_on": list(c.model.fitted_on)},
            "yours": [{"model": s.row.model, "module": s.row.module, "power_mode": s.row.power_mode,
                       "precision": s.row.precision, "batch": s.row.batch, "measured_ms": s.row.latency_ms,
                       "before_ms": round(before, 4), "after_ms": round(after, 4),
                       "error_before": round(c.error(s.row.latency_ms, before), 4),
                       "error_after": round(c.error(s.row.latency_ms, after), 4)} for s, before, after in c.yours],
            "published_leave_one_model_out": {"before": list(c.published_before), "after": list(c.published_after)}}


def calibration_text(done: CalibrationRun) -> str:
    c = done.calibration
    rows = [[s.row.model, s.row.module, s.row.power_mode, s.row.precision, str(s.row.batch), f"{s.row.latency_ms:.3f}",
             f"{before:.3f}", f"{c.error(s.row.latency_ms, before):.0%}", f"{after:.3f}",
             f"{c.error(s.row.latency_ms, after):.0%}"] for s, before, after in c.yours]
    errors = [(c.error(s.row.latency_ms, b), c.error(s.row.latency_ms, a)) for s, b, a in c.yours]
    lines = [f"your measurements: {done.new} new, {done.kept} kept from earlier runs; each counts as {c.weight:g} "
             "published figures", "",
             table(rows, ["model", "module", "power mode", "precision", "batch", "measured ms", "published fit ms",
                          "error", "refit ms", "error"]),
             "", "error before: the published fit, which never saw them; after: a fit of the published figures and "
                 "your other measurements (each left out in turn)",
             f"your measurements: median error {sorted(e[0] for e in errors)[len(errors) // 2]:.1%} before, "
             f"{sorted(e[1] for e in errors)[len(errors) // 2]:.1%} after" if errors else "",
             f"published figures, leave one model out: median {c.published_before[0]:.1%} (max "
             f"{c.published_before[1]:.1%}) before, {c.published_after[0]:.1%} (max {c.published_after[1]:.1%}) after",
             f"band: x{c.model.band_low:.2f} to x{c.model.band_high:.2f}; " + "; ".join(c.model.fitted_on),
             f"wrote {done.model_path} (edgebuild plan in this project uses it) and {done.measurements_path}"]
    lines += [f"skipped: {why}" for why in done.skipped]
    return "\n".join(lines)

