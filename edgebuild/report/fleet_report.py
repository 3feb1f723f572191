"""The build report of a fleet file's compile: per group its models, their candidates and the memory plan.

``write_fleet_report(build_dir)`` reads ``build/fleet.json`` (what the fleet's compile writes,
failed groups included) and writes ``build/report/index.html`` and ``summary.md``; each model's
own report (its stages, gate, preflight and placement) is in ``build/models/<name>/report/``,
linked from the fleet's page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from edgebuild.devices.memory_plan import MemoryPlan
from edgebuild.errors import ConfigError
from edgebuild.jsontypes import JsonObject
from edgebuild.latency.budget import PredictedLatency
from edgebuild.project.layout import BuildLayout
from edgebuild.report.build_report import LATENCY_HEADERS, latency_rows
from edgebuild.report.html import _CSS, _badge, _e, _html_table
from edgebuild.targets.presets import human_size

__all__ = ["FleetGroupRecord", "FleetRecord", "write_fleet_report"]
#: what a shipped group wrote (paths from the fleet file's folder; ``signed`` whether its bundle is)
WRITTEN = ("folder", "container", "bundle", "mender", "signed")


@dataclass(frozen=True)
class FleetGroupRecord:
    """A fleet group in ``build/fleet.json``: its models' candidates, memory plan, what was written, or why not."""

    group: str
    target: str
    models: tuple[str, ...]
    candidates: dict[str, str] = field(default_factory=dict)  # model -> selected candidate
    memory_plan: MemoryPlan | None = None
    written: dict[str, str | bool] = field(default_factory=dict)  # WRITTEN keys
    error: str | None = None
    latency: PredictedLatency | None = None  # each model's predicted latency per candidate precision

    def as_dict(self) -> JsonObject:
        return {"group": self.group, "target": self.target, "models": list(self.models), "candidates": self.candidates,
                "memory_plan": self.memory_plan.as_dict() if self.memory_plan else None, **self.written,
                "predicted_latency": self.latency.as_dict() if self.latency else None, "error": self.error}

    @classmethod
    def from_dict(cls, data: JsonObject) -> FleetGroupRecord:
        plan = data.get("memory_plan")
        latency = data.get("predicted_latency")
        return cls(data["group"], data["target"], tuple(data["models"]), dict(data.get("candidates") or {}),
                   MemoryPlan.from_dict(plan) if plan else None, {k: data[k] for k in WRITTEN if data.get(k)},
                   data.get("error"), PredictedLatency.from_dict(latency) if latency else None)


@dataclass(frozen=True)
class FleetRecord:
    """``build/fleet.json``: what a fleet file's compile did per group (failed groups included)."""

    fleet: str
    groups: tuple[FleetGroupRecord, ...]
    finished: str = ""

    def as_dict(self) -> JsonObject:
        return {"fleet": self.fleet, "finished": self.finished, "groups": [g.as_dict() for g in self.groups]}

    @classmethod
    def load(cls, path: Path) -> FleetRecord:
        data = json.loads(path.read_text())
        return cls(data["fleet"], tuple(FleetGroupRecord.from_dict(g) for g in data["groups"]),
                   data.get("finished", ""))


def write_fleet_report(build_dir: Path) -> dict[str, Path]:
    from edgebuild.runtime.base.files import atomic_write_text

    layout = BuildLayout(Path(build_dir))
    path = layout.fleet_record
    if not path.is_file():
        raise ConfigError(f"{path}: no fleet compile recorded here", hint="run `edgebuild compile` of the fleet file")
    record = FleetRecord.load(path)
    out = layout.report
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "index.html", "markdown": out / "summary.md"}
    measured = _measured(Path(build_dir))
    atomic_write_text(paths["html"], _fleet_html(record).replace("<footer>", measured[0] + "<footer>", 1))
    atomic_write_text(paths["markdown"], _fleet_markdown(record) + measured[1])
    return paths


def _measured(build_dir: Path) -> tuple[str, str]:
    """(HTML, Markdown) of what devices measured next to the latency plan's prediction (latency.measured)."""
    from edgebuild.latency.measured import CHECK_HEADERS, check_rows, latency_checks

    rows = check_rows(latency_checks(build_dir))
    if not rows:
        return "", ""
    markdown = ["", "## Predicted vs measured latency", "", "| " + " | ".join(CHECK_HEADERS) + " |",
                "|" + "---|" * len(CHECK_HEADERS)] + ["| " + " | ".join(r) + " |" for r in rows]
    return ("<h2>Predicted vs measured latency</h2>" + _html_table(CHECK_HEADERS, [[_e(c) for c in r] for r in rows]),
            "\n".join(markdown) + "\n")


def _plan_rows(plan: MemoryPlan) -> list[list[str]]:
    rows = [["runtime (one server, one CUDA context)", "", "", "", human_size(plan.runtime), ""]]
    for m in plan.models:
        rows.append([m.model, m.precision, human_size(m.weights), human_size(m.activations),
                     human_size(m.workspace) + ("" if m.built_on_device else " (built elsewhere)"), m.source])
    return rows


_PLAN_HEADERS = ["what", "precision", "weights", "activations", "workspace / size", "from"]


def _fleet_html(record: FleetRecord) -> str:
    ok = all(g.error is None for g in record.groups)
    parts = [f"<h1>edgebuild compile: fleet {_e(record.fleet)}<span class='status'>"
             f"{_badge('passed' if ok else 'failed')}</span></h1>",
             f"<div class='meta'>finished {_e(record.finished)}</div>"]
    rows = [[f"<b>{_e(g.group)}</b>", _e(g.target),
             "<br>".join(f"{_e(m)}: {_e(g.candidates.get(m, '-'))} (<a href='../models/{_e(m)}/report/index.html'>"
                         "report</a>)" for m in g.models),
             _e(f"{human_size(g.memory_plan.total)} of {human_size(g.memory_plan.budget)}")
             if g.memory_plan else "-", _badge("failed" if g.error else "passed")] for g in record.groups]
    parts.append("<h2>Groups</h2>" + _html_table(["group", "target", "models and candidates", "memory", "status"],
                                                 rows))
    for g in record.groups:
        parts.append(f"<h2>{_e(g.group)}</h2>")
        plan = g.memory_plan
        if plan:
            parts.append(f"<h3>Memory plan (preset {_e(plan.preset)}: budget {_e(human_size(plan.budget))}, "
                         f"total {_e(human_size(plan.total))}{'' if plan.fits else ', DOES NOT FIT'})</h3>")
            parts.append(_html_table(_PLAN_HEADERS, [[_e(c) for c in row] for row in _plan_rows(plan)]))
        if g.latency and g.latency.groups:
            parts.append(f"<h3>Predicted latency ({_e(g.latency.groups[0].source)})</h3>")
            parts.append(_html_table(LATENCY_HEADERS, [[_e(c) for c in row] for row in latency_rows(g.latency)]))
        if g.latency and (g.latency.notes or g.latency.warnings()):
            parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in [*g.latency.warnings(), *g.latency.notes])
                         + "</ul>")
        written = [f"<li>{_e(k)}: <code>{_e(g.written[k])}</code></li>" for k in ("folder", "container", "bundle",
                                                                                  "mender") if g.written.get(k)]
        if written:
            parts.append("<ul>" + "".join(written) + "</ul>")
        if g.error:
            parts.append(f"<section class='failure'><pre>{_e(g.error)}</pre></section>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>edgebuild: fleet {_e(record.fleet)}</title><style>{_CSS}</style></head><body><main>"
            f"{''.join(parts)}<footer>Generated by edgebuild from build/fleet.json. Self-contained: nothing on "
            "this page is loaded from anywhere.</footer></main></body></html>\n")


def _fleet_markdown(record: FleetRecord) -> str:
    lines = [f"# edgebuild compile: fleet {record.fleet}", "", "| group | target | models and candidates | memory "
             "| status |", "|---|---|---|---|---|"]
    for g in record.groups:
        plan = g.memory_plan
        memory = f"{human_size(plan.total)} of {human_size(plan.budget)}" if plan else "-"
        models = "; ".join(f"{m}: {g.candidates.get(m, '-')}" for m in g.models)
        lines.append(f"| {g.group} | {g.target} | {models} | {memory} | {'FAILED' if g.error else 'ok'} |")
    for g in record.groups:
        plan = g.memory_plan
        if plan:
            lines += ["", f"## {g.group}: memory plan (preset {plan.preset})", "",
                      "| " + " | ".join(_PLAN_HEADERS) + " |", "|" + "---|" * len(_PLAN_HEADERS)]
            lines += ["| " + " | ".join(row) + " |" for row in _plan_rows(plan)]
        if g.latency and g.latency.groups:
            lines += ["", f"## {g.group}: predicted latency ({g.latency.groups[0].source})", "",
                      "| " + " | ".join(LATENCY_HEADERS) + " |", "|" + "---|" * len(LATENCY_HEADERS)]
            lines += ["| " + " | ".join(row) + " |" for row in latency_rows(g.latency)]
        if g.latency:
            lines += [f"- {n}" for n in [*g.latency.warnings(), *g.latency.notes]]
        if g.error:
            lines += ["", f"**{g.group} failed:** " + g.error.splitlines()[0]]
    return "\n".join(lines) + "\n"
