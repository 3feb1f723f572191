"""The build report as Markdown (``summary.md``): a CI job summary, a merge request comment."""

from __future__ import annotations

from edgebuild.latency.measured import CHECK_HEADERS, check_rows
from edgebuild.report.build_report import (
    BENCH_HEADERS,
    LATENCY_HEADERS,
    BuildReport,
    Run,
    acceptance_text,
    bench_rows,
    engine_state_text,
    group_summary,
    latency_rows,
    run_for,
    status_line,
)
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.gate import GATE
from edgebuild.stages.preflight import PREFLIGHT

__all__ = ["to_markdown"]


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


_MARK = {"passed": "✅ pass", "failed": "❌ FAIL", "skipped": "⏭ not run", "ran": "ran", "reused": "reused",
         "not run": "not run"}


def to_markdown(report: BuildReport) -> str:
    """The report as Markdown: status, fleet, stages, gate, preflight findings, placement, bench."""
    lines = [f"## edgebuild compile `{report.project}`: {status_line(report)}", "",
             f"target `{report.selector}`, finished {report.finished}", ""]
    if not report.ok:
        lines += ["**The compile failed**:", "", "```", (report.error or "").strip(), "```", ""]
    lines += ["### Fleet", ""]
    rows = []
    for u in report.units:
        s = group_summary(report, u.group)
        rows.append([u.group, u.target, u.module, u.jetpack, u.l4t, u.tensorrt, _MARK[s["preflight"]],
                     _MARK[s["gate"]], s["placement"]])
    lines += _md_table(["group", "target", "module", "JetPack", "L4T", "TensorRT", "preflight", "gate", "placement"],
                       rows)
    lines += ["### Stages", ""]
    stage_rows = []
    for name, runs in report.stages:
        whole = runs[0] if runs and runs[0].group is None else None  # a stage run once for the project
        stage_rows.append([name, _md_run(whole) if whole else "·",
                           *("·" if whole else _md_run(run_for(runs, g)) for g in report.groups)])
    lines += _md_table(["stage", "project", *report.groups], stage_rows)
    lines += _md_gate(report)
    lines += _md_preflight(report)
    lines += _md_placement(report)
    lines += _md_latency(report)
    bench = bench_rows(report)
    if bench:
        lines += ["### Bench", "", *_md_table(BENCH_HEADERS, bench)]
    if report.measured:  # what devices measured next to the latency plan's prediction (latency.measured)
        lines += ["### Predicted vs measured latency", "", *_md_table(CHECK_HEADERS, check_rows(list(report.measured)))]
    return "\n".join(lines).rstrip() + "\n"


def _md_run(run: Run | None) -> str:
    if run is None:
        return "-"
    return f"{_MARK.get(run.status, run.status)} {run.seconds:.2f} s" if run.status != "not run" else "not run"


def _md_gate(report: BuildReport) -> list[str]:
    gate = report.gate
    if gate is None:
        run = report.run(GATE)
        return ["### Accuracy gate", "", f"not measured: {run.why or run.detail}" if run else "did not run", ""]
    lines = ["### Accuracy gate", "",
             f"FP32 {gate.metric} **{gate.reference_value:.4f}** on {gate.images} images [{gate.backend}]; "
             f"threshold: retention ≥ **{gate.threshold}**; selected: **{gate.selected or 'nothing'}**", "",
             f"selection rule: {gate.selection_rule}", ""]
    rows = [[c.precision + (" ⭐" if c.precision == gate.selected else ""), f"{c.value:.4f}", f"{c.retention:.3f}",
             "yes" if c.passed else "**no**", "yes" if c.selectable else "no", f"{c.latency_ms:.3f}",
             ", ".join(c.kept_fp32) or "-", c.note] for c in gate.candidates]
    lines += _md_table(["candidate", gate.metric, "retention", "passes", "selectable", "latency ms", "kept in float",
                        "note"], rows)
    if gate.baseline is not None:
        lines += ["", gate.baseline.line()]
        lines += [f"- likely cause {n}: {c}" for n, c in enumerate(gate.baseline.causes, 1)]
    if gate.tracking is not None:
        lines += ["", gate.tracking.heading(), ""]
        lines += _md_table(gate.tracking.columns(), gate.tracking.table_rows())
    choice = gate.int8_choice
    if choice and len(choice.variants) > 1:
        lines += ["", f"INT8 variant: **{choice.variant}**, {choice.why}", ""]
        lines += _md_table(["range method, bias correction", "output SQNR dB", gate.metric, "retention"],
                           [[v.variant, "-" if v.sqnr_db is None else f"{v.sqnr_db:.1f}",
                             "-" if v.value is None else f"{v.value:.4f}",
                             "-" if v.retention is None else f"{v.retention:.3f}"] for v in choice.variants])
    lines += [f"- {note}" for note in gate.notes] + [f"- next: {step}" for step in gate.next_steps]
    return lines + ([""] if gate.notes or gate.next_steps or (choice and choice.variants) else [])


def _md_preflight(report: BuildReport) -> list[str]:
    rows = []
    for run in report.runs(PREFLIGHT):
        for f in getattr(run.record, "findings", ()) or ():
            rows.append([run.group, f.severity, f.node, f.op_type, f.problem, f.fix])
    if not rows:
        ran = [r for r in report.runs(PREFLIGHT) if r.status in ("ran", "reused")]
        return ["### Preflight", "", f"no findings ({len(ran)} of {len(report.units)} targets checked)", ""]
    return ["### Preflight", "", *_md_table(["group", "severity", "node", "op", "problem", "fix"], rows)]


def _md_placement(report: BuildReport) -> list[str]:
    rows = []
    for group in report.groups:
        run = report.run(ENGINE, group)
        record = run.record if run else None
        if record is None:
            rows.append([group, run.status if run else "-", "", "", "", "", ""])
            continue
        rows.append([group, record.placement, record.candidate, engine_state_text(record), acceptance_text(record),
                     ", ".join(f"{r.candidate} ({r.retention:.3f})" for r in record.refused) or "-",
                     record.fallback or "-"])
    return ["### Placement", "", *_md_table(["group", "placement", "candidate", "engine", "accepted on device",
                                             "refused", "fallback"], rows)]


def _md_latency(report: BuildReport) -> list[str]:
    latency = report.latency
    if latency is None or not (latency.groups or latency.notes):
        return []
    lines = ["### Predicted latency", ""]
    if latency.groups:
        lines += [f"p50 GPU compute time at batch 1 from the {latency.groups[0].source}; the band held every "
                  "published figure left out of the fit.", ""]
        lines += _md_table(LATENCY_HEADERS, latency_rows(latency))
    lines += [f"- ⚠️ {w}" for w in latency.warnings()]
    lines += [f"- ❌ {e.message.splitlines()[0]}" for e in latency.refusals().values()]
    lines += [f"- {note}" for note in latency.notes]
    return lines + [""]
