"""The build report of the last compile, for people and for CI (``edgebuild report``).

``write_report(build_dir)`` reads ``build/.records/last-compile.json`` (what every compile
writes, failed or not) and writes ``build/report/``:

- ``index.html``: one self-contained page (inline CSS and SVG, PNGs as data URIs; nothing is
  fetched, so it opens from a CI artifact or an e-mail as it is): the fleet, each stage's
  outcome and time per group, the gate's candidates with retention bars against the threshold,
  kept layers, preflight findings per target, placement and device acceptance per group, and
  bench results when ``build/bench/*.json`` exist;
- ``summary.md``: the same, concise, as Markdown tables (a CI job summary, a merge request comment);
- ``junit.xml``: one test case per check, so CI shows pass/fail per target (``checks``).

The checks (JUnit test suites) are:

- ``preflight``: one case per target group, failing with its blocking findings;
- ``gate``: one case per target group, failing when the gate selected nothing (every group
  fails: one candidate ships to the whole fleet) or when the group's device refused every
  engine it built (accuracy.min_retention measured on the device); candidates are in its output;
- ``stages``: one case per run of every other stage (``export``, ``engine/<group>``, ...),
  failing where that stage failed, skipped where it did not run.

A compile that failed always has at least one failing case. Everything comes from the last
compile's own outcome; a stored stage record (``build/.records``) fills in only a record that
outcome lacks, so the report never mixes in the result of an earlier compile.
"""

from __future__ import annotations

import base64
import html
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebuild.errors import ConfigError, EdgebuildError

REPORT_DIR = "report"
#: the largest bench PNG embedded in index.html (a data URI makes the page that much bigger)
MAX_EMBEDDED_PNG = 4 * 1024 * 1024
SUITES = ("preflight", "gate", "stages")


# -- the last compile, typed ----------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One run of a stage in the last compile: for the project (group None) or one group."""

    stage: str
    group: str | None
    status: str  # ran, reused, failed, not run
    detail: str
    why: str
    seconds: float
    error: str | None
    record: Any  # the stage's typed record where it has one (preflight, gate, engine, ...), else its dict


@dataclass(frozen=True)
class Check:
    """One JUnit test case."""

    suite: str
    name: str
    status: str  # passed, failed, skipped
    message: str = ""
    text: str = ""
    seconds: float = 0.0
    group: str | None = None  # the fleet group it checks, where it checks one


@dataclass(frozen=True)
class BuildReport:
    project: str
    project_file: str
    selector: str
    finished: str
    exit_code: int
    error: str | None
    units: tuple[dict[str, Any], ...]  # the fleet groups (SelectedGroup.describe())
    stages: tuple[tuple[str, tuple[Run, ...]], ...]  # stage name -> its runs, in compile order
    bench: tuple[dict[str, Any], ...] = ()  # build/bench/<name>.json results (edgebuild.bench/1)
    fleet_bench: dict[str, Any] | None = None  # build/bench/fleet.json (bench --farm)
    bench_pngs: tuple[tuple[str, bytes], ...] = ()  # build/bench/*.png

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def groups(self) -> list[str]:
        return [u["group"] for u in self.units]

    def runs(self, stage: str) -> tuple[Run, ...]:
        return next((runs for name, runs in self.stages if name == stage), ())

    def run(self, stage: str, group: str | None = None) -> Run | None:
        runs = self.runs(stage)
        return next((r for r in runs if r.group == group), None) or (runs[0] if runs and runs[0].group is None
                                                                     else None)

    @property
    def gate(self) -> Any:
        """The gate's GateResult, if the gate ran (or was reused) in the last compile."""
        run = self.run("gate")
        return run.record if run and not isinstance(run.record, dict) else None

    @property
    def checks(self) -> list[Check]:
        return checks(self)


def _typed(stage: str, data: dict[str, Any]) -> Any:
    """A stage record's typed form (the classes the stages write), or the dict if it does not read as one."""
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.devices.engine import EngineRecord
    from edgebuild.shipping.container import ContainerRecord
    from edgebuild.shipping.ota import PackageRecord
    from edgebuild.targets.preflight import TargetPreflight

    loaders = {"preflight": TargetPreflight.from_dict, "engine": EngineRecord.from_dict,
               "container": ContainerRecord.from_dict, "package": PackageRecord.from_dict,
               "gate": lambda d: GateResult.from_dict(d, Path(d.get("folder", "")))}
    try:
        return loaders[stage](data) if stage in loaders else data
    except (TypeError, KeyError, ValueError):
        return data  # written by another edgebuild: shown as far as its fields allow


def from_compile(data: dict[str, Any], build_dir: Path | None = None) -> BuildReport:
    """The report of a ``last-compile.json`` (its dict); ``build_dir`` adds stored records and bench results."""
    stages = []
    for stage in data.get("stages", []):
        runs = []
        for r in stage.get("runs", []):
            record = r.get("record")
            if record is None and build_dir is not None and r.get("status") in ("ran", "reused"):
                record = _stored_record(build_dir, stage["name"], r.get("group"), data.get("project", ""))
            runs.append(Run(stage["name"], r.get("group"), r.get("status", "not run"), r.get("detail", ""),
                            r.get("why", ""), float(r.get("seconds") or 0.0), r.get("error"),
                            _typed(stage["name"], record) if isinstance(record, dict) else None))
        stages.append((stage["name"], tuple(runs)))
    bench, fleet, pngs = _bench(build_dir) if build_dir is not None else ((), None, ())
    return BuildReport(data.get("project", "?"), data.get("project_file", ""), data.get("selector", ""),
                       data.get("finished", ""), int(data.get("exit_code") or 0), data.get("error"),
                       tuple(data.get("units", [])), tuple(stages), bench, fleet, pngs)


def load(build_dir: Path) -> BuildReport:
    """The report of ``build_dir``'s last compile; a ConfigError when there was none."""
    from edgebuild.pipeline.records import RECORDS_DIR
    from edgebuild.pipeline.runner import LAST_COMPILE

    path = Path(build_dir) / RECORDS_DIR / LAST_COMPILE
    if not path.is_file():
        raise ConfigError(f"{path}: no compile recorded in {build_dir}",
                          hint="run `edgebuild compile` first; every compile, failed or not, records its outcome "
                               "there")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable as JSON ({exc})", hint="run `edgebuild compile` again") from None
    return from_compile(data, Path(build_dir))


def _stored_record(build_dir: Path, stage: str, group: str | None, project: str) -> dict[str, Any] | None:
    from edgebuild.pipeline.records import load_stage_record

    stored, _ = load_stage_record(build_dir, f"{stage}/{group}" if group else stage, project)
    return stored.result if stored is not None else None


def _bench(build_dir: Path) -> tuple[tuple[dict[str, Any], ...], dict[str, Any] | None, tuple]:
    from edgebuild.runtime.bench import SCHEMA

    folder = build_dir / "bench"
    results, fleet = [], None
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            results.append(data)
        elif isinstance(data, dict) and data.get("schema") == "edgebuild.bench-fleet/1":
            fleet = data
    pngs = tuple((p.name, p.read_bytes()) for p in sorted(folder.glob("*.png"))
                 if folder.is_dir() and p.stat().st_size <= MAX_EMBEDDED_PNG)
    return tuple(results), fleet, pngs


def write_report(build_dir: Path) -> dict[str, Path]:
    """Write ``build/report/index.html``, ``summary.md`` and ``junit.xml`` from the last compile.

    Returns the paths by kind (``html``, ``markdown``, ``junit``). Raises ConfigError when the
    build folder has no compile recorded.
    """
    from edgebuild.runtime.files import atomic_write_text

    report = load(Path(build_dir))
    out = Path(build_dir) / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "index.html", "markdown": out / "summary.md", "junit": out / "junit.xml"}
    atomic_write_text(paths["html"], to_html(report))
    atomic_write_text(paths["markdown"], to_markdown(report))
    atomic_write_text(paths["junit"], to_junit(report))
    return paths


# -- checks (JUnit) -------------------------------------------------------------------------------

def checks(report: BuildReport) -> list[Check]:
    """Every check of the compile, by suite (see the module docstring)."""
    found = [*_preflight_checks(report), *_gate_checks(report), *_stage_checks(report)]
    if not report.ok and not any(c.status == "failed" for c in found):
        # a compile that failed before any stage ran (or in a way no stage records) still fails in CI
        found.append(Check("stages", "compile", "failed", _first_line(report.error or "compile failed"),
                           report.error or ""))
    return found


def _preflight_checks(report: BuildReport) -> list[Check]:
    found = []
    for unit in report.units:
        name = f"{unit['group']} ({unit['target']})"
        run = report.run("preflight", unit["group"])
        if run is None or run.status == "not run":
            found.append(Check("preflight", name, "skipped", run.why if run else "preflight did not run",
                               group=unit["group"]))
            continue
        record = run.record
        blocking = list(getattr(record, "blocking", []) or [])
        if run.status == "failed":
            text = "\n".join(f"{f.node} ({f.op_type}): {f.problem}; fix: {f.fix}" for f in blocking) or run.error or ""
            message = (f"{len(blocking)} blocking problem(s) for TensorRT {record.tensorrt}" if blocking
                       else _first_line(run.error or run.detail))
            found.append(Check("preflight", name, "failed", message, text, run.seconds, unit["group"]))
        else:
            found.append(Check("preflight", name, "passed", run.detail, seconds=run.seconds, group=unit["group"]))
    return found


def _gate_checks(report: BuildReport) -> list[Check]:
    gate_run, gate = report.run("gate"), report.gate
    found = []
    for unit in report.units:
        name = f"{unit['group']} ({unit['target']})"
        engine = report.run("engine", unit["group"])
        if gate_run is None or gate_run.status == "not run":
            found.append(Check("gate", name, "skipped", gate_run.why if gate_run else "the gate did not run",
                               group=unit["group"]))
        elif gate_run.status == "failed":
            found.append(Check("gate", name, "failed", _first_line(gate_run.error or gate_run.detail),
                               (gate_run.error or "") + "\n\n" + _candidates_text(gate), gate_run.seconds,
                               unit["group"]))
        elif engine is not None and _refused_on_device(engine):
            found.append(Check("gate", name, "failed", f"every engine built {engine.record.placement} was refused "
                               f"on the device", engine.error or _refusals_text(engine.record), engine.seconds,
                               unit["group"]))
        else:
            selected = f"selected {gate.selected}" if gate else gate_run.detail
            accepted = getattr(engine.record, "accepted", None) if engine else None
            if accepted:
                selected += (f"; accepted on the device: {accepted['metric']} {accepted['value']:.4f}, "
                             f"retention {accepted['retention']:.3f}")
            found.append(Check("gate", name, "passed", selected, _candidates_text(gate), gate_run.seconds,
                               unit["group"]))
    return found


def _stage_checks(report: BuildReport) -> list[Check]:
    found = []
    for stage, runs in report.stages:
        if stage in ("preflight", "gate"):
            continue
        for run in runs:
            name = f"{stage}/{run.group}" if run.group else stage
            if run.status == "not run":
                found.append(Check("stages", name, "skipped", run.why or run.detail))
            elif run.status == "failed" and stage == "engine" and _refused_on_device(run):
                found.append(Check("stages", name, "skipped", "refused on the device: counted in the gate suite"))
            elif run.status == "failed":
                found.append(Check("stages", name, "failed", _first_line(run.error or run.detail),
                                   run.error or run.detail, run.seconds))
            else:
                found.append(Check("stages", name, "passed", run.detail, seconds=run.seconds))
    return found


def _refused_on_device(run: Run) -> bool:
    """An engine run that failed because its device refused every engine it built (the engine verdict)."""
    record = run.record
    return (run.status == "failed" and getattr(record, "needs_acceptance", False)
            and getattr(record, "accepted", True) is None)


def _refusals_text(record: Any) -> str:
    return "\n".join(f"{r['candidate']}: {r['metric']} {r['value']:.4f}, retention {r['retention']:.3f} "
                     f"[{r['backend']}]" for r in record.refused)


def _candidates_text(gate: Any) -> str:
    if gate is None:
        return ""
    lines = [f"FP32 {gate.metric} {gate.reference_value:.4f} on {gate.images} images [{gate.backend}], "
             f"threshold {gate.threshold}"]
    lines += [f"{c.precision}: {c.metric} {c.value:.4f}, retention {c.retention:.3f}, "
              f"{'passes' if c.passed else 'FAILS'}{'' if c.selectable else ', not selectable'}"
              for c in gate.candidates]
    return "\n".join(lines)


def to_junit(report: BuildReport) -> str:
    """JUnit XML: a testsuite per kind of check (``SUITES``), one testcase per check."""
    found = checks(report)
    root = ET.Element("testsuites", name=f"edgebuild compile {report.project}")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in SUITES:
        cases = [c for c in found if c.suite == suite]
        counts = {"tests": len(cases), "failures": sum(c.status == "failed" for c in cases),
                  "skipped": sum(c.status == "skipped" for c in cases)}
        # every gate case shares the gate's one run: its time counts once
        seconds = max((c.seconds for c in cases), default=0.0) if suite == "gate" else sum(c.seconds for c in cases)
        element = ET.SubElement(root, "testsuite", name=suite, errors="0", timestamp=report.finished,
                                time=f"{seconds:.3f}", **{k: str(v) for k, v in counts.items()})
        for case in cases:
            item = ET.SubElement(element, "testcase", classname=f"edgebuild.{suite}", name=case.name,
                                 time=f"{case.seconds:.3f}")
            if case.status == "failed":
                ET.SubElement(item, "failure", message=_xml_safe(case.message)).text = _xml_safe(case.text)
            elif case.status == "skipped":
                ET.SubElement(item, "skipped", message=_xml_safe(case.message))
            elif case.message or case.text:
                ET.SubElement(item, "system-out").text = _xml_safe("\n".join(filter(None, [case.message, case.text])))
        for key in totals:
            totals[key] += counts[key]
    root.attrib.update({k: str(v) for k, v in totals.items()}, errors="0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub("", text)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""


def error_kind(exit_code: int) -> str:
    """The kind of error an exit code stands for ("accuracy gate" for 11)."""
    todo, kinds = [EdgebuildError], {}
    while todo:
        cls = todo.pop()
        kinds.setdefault(cls.exit_code, cls.kind)
        todo.extend(cls.__subclasses__())
    return kinds.get(exit_code, "error")


# -- what both renderings show --------------------------------------------------------------------

def _group_summary(report: BuildReport, group: str) -> dict[str, str]:
    """One fleet row's outcome columns: preflight, gate and placement of ``group``."""
    by_check = {(c.suite, c.group): c for c in checks(report) if c.group is not None}
    engine = report.run("engine", group)
    record = engine.record if engine else None
    placement = getattr(record, "placement", "") or (engine.status if engine else "")
    if record is not None and getattr(record, "candidate", ""):
        placement += f" ({record.candidate})"
    return {"preflight": by_check.get(("preflight", group), Check("", "", "skipped")).status,
            "gate": by_check.get(("gate", group), Check("", "", "skipped")).status, "placement": placement}


def _bench_rows(report: BuildReport) -> list[list[str]]:
    """group, board/where, backend, precision, batch, concurrency, p50, p99, throughput: one row per configuration."""
    rows = []
    for r in report.bench:
        art = r.get("artifact", {})
        for c in r.get("configs", []):
            lat = c.get("latency", {})
            rows.append([art.get("group", "?"), r.get("ran_on", "?"), r.get("backend", "?"), art.get("precision", "?"),
                         str(c.get("batch")), str(c.get("concurrency")), f"{lat.get('p50_ms', 0):.3f}",
                         f"{lat.get('p99_ms', 0):.3f}", f"{c.get('throughput_ips', 0):.1f}"])
    if report.fleet_bench and not rows:  # the per-group results carry the same; the fleet file only when alone
        for g in report.fleet_bench.get("groups", []):
            if g.get("error"):
                rows.append([g["group"], g.get("board") or "-", "FAILED: " + _first_line(g["error"]), "", "", "", "",
                             "", ""])
            for c in g.get("configs", []) if not g.get("error") else []:
                rows.append([g["group"], g.get("board") or "?", g.get("backend", "?"), g.get("precision", "?"),
                             str(c["batch"]), str(c["concurrency"]), f"{c['p50_ms']:.3f}", f"{c['p99_ms']:.3f}",
                             f"{c['throughput_ips']:.1f}"])
    return rows


BENCH_HEADERS = ["group", "ran on", "backend", "precision", "batch", "conc", "p50 ms", "p99 ms", "img/s"]


def _status_line(report: BuildReport) -> str:
    if report.ok:
        return "passed"
    return f"FAILED (exit {report.exit_code}, {error_kind(report.exit_code)})"


# -- Markdown -------------------------------------------------------------------------------------

def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


_MARK = {"passed": "✅ pass", "failed": "❌ FAIL", "skipped": "⏭ not run", "ran": "ran", "reused": "reused",
         "not run": "not run"}


def to_markdown(report: BuildReport) -> str:
    """The report as Markdown: status, fleet, stages, gate, preflight findings, placement, bench."""
    lines = [f"## edgebuild compile `{report.project}`: {_status_line(report)}", "",
             f"target `{report.selector}`, finished {report.finished}", ""]
    if not report.ok:
        lines += ["**The compile failed**:", "", "```", (report.error or "").strip(), "```", ""]
    lines += ["### Fleet", ""]
    rows = []
    for u in report.units:
        s = _group_summary(report, u["group"])
        rows.append([u["group"], u["target"], u.get("module", ""), u.get("jetpack", ""), u.get("l4t", ""),
                     u.get("tensorrt", ""), _MARK[s["preflight"]], _MARK[s["gate"]], s["placement"]])
    lines += _md_table(["group", "target", "module", "JetPack", "L4T", "TensorRT", "preflight", "gate", "placement"],
                       rows)
    lines += ["### Stages", ""]
    stage_rows = []
    for name, runs in report.stages:
        whole = runs[0] if runs and runs[0].group is None else None  # a stage run once for the project
        stage_rows.append([name, _md_run(whole) if whole else "·",
                           *("·" if whole else _md_run(report.run(name, g)) for g in report.groups)])
    lines += _md_table(["stage", "project", *report.groups], stage_rows)
    lines += _md_gate(report)
    lines += _md_preflight(report)
    lines += _md_placement(report)
    bench = _bench_rows(report)
    if bench:
        lines += ["### Bench", "", *_md_table(BENCH_HEADERS, bench)]
    return "\n".join(lines).rstrip() + "\n"


def _md_run(run: Run | None) -> str:
    if run is None:
        return "-"
    return f"{_MARK.get(run.status, run.status)} {run.seconds:.2f} s" if run.status != "not run" else "not run"


def _md_gate(report: BuildReport) -> list[str]:
    gate = report.gate
    if gate is None:
        run = report.run("gate")
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
    lines += [f"- {note}" for note in gate.notes] + [f"- next: {step}" for step in gate.next_steps]
    return lines + ([""] if gate.notes or gate.next_steps else [])


def _md_preflight(report: BuildReport) -> list[str]:
    rows = []
    for run in report.runs("preflight"):
        for f in getattr(run.record, "findings", ()) or ():
            rows.append([run.group, f.severity, f.node, f.op_type, f.problem, f.fix])
    if not rows:
        ran = [r for r in report.runs("preflight") if r.status in ("ran", "reused")]
        return ["### Preflight", "", f"no findings ({len(ran)} of {len(report.units)} targets checked)", ""]
    return ["### Preflight", "", *_md_table(["group", "severity", "node", "op", "problem", "fix"], rows)]


def _md_placement(report: BuildReport) -> list[str]:
    rows = []
    for group in report.groups:
        run = report.run("engine", group)
        record = run.record if run else None
        if record is None or isinstance(record, dict):
            rows.append([group, run.status if run else "-", "", "", "", "", ""])
            continue
        rows.append([group, record.placement, record.candidate, _engine_state(record), _acceptance(record),
                     ", ".join(f"{r['candidate']} ({r['retention']:.3f})" for r in record.refused) or "-",
                     record.fallback or "-"])
    return ["### Placement", "", *_md_table(["group", "placement", "candidate", "engine", "accepted on device",
                                             "refused", "fallback"], rows)]


def _engine_state(record: Any) -> str:
    if not record.built:
        return "built on the device at first start" if record.placement == "deferred" else "not built"
    return ("kept" if record.kept else "built") + (f" on board {record.board}" if record.board else "")


def _acceptance(record: Any) -> str:
    a = record.accepted
    if not a:
        return "-"
    return f"{a['metric']} {a['value']:.4f} on {a['images']} images, retention {a['retention']:.3f} [{a['backend']}]"


# -- HTML -----------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.meta{color:#5a6270;font-size:13px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0 12px;width:100%}
th,td{border:1px solid #d8dce3;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.passed,.ran{background:#2e7d32}.reused{background:#1565c0}.failed{background:#c62828}
.skipped,.not-run{background:#8a909a}
.small{font-size:12px;color:#5a6270}
.failure{border:2px solid #c62828;background:#fdecea;padding:12px 16px;margin:16px 0;border-radius:6px}
.failure h2{border:none;color:#c62828;margin:0 0 8px}
pre{white-space:pre-wrap;font-size:12px;background:#fff;border:1px solid #d8dce3;padding:8px;margin:6px 0}
.status{font-size:20px;vertical-align:middle;margin-left:8px}
svg text{font-family:system-ui,sans-serif}
footer{margin-top:32px;font-size:12px;color:#8a909a}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _badge(status: str) -> str:
    return f'<span class="badge {_e(status.replace(" ", "-"))}">{_e(status)}</span>'


def _html_table(headers: list[str], rows: list[list[str]], numeric: frozenset[int] | set[int] = frozenset()) -> str:
    """``rows`` hold HTML already escaped."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: BuildReport) -> str:
    """One self-contained page: no scripts, no fonts, no request leaves the file."""
    status = "passed" if report.ok else "failed"
    parts = [f"<h1>edgebuild compile: {_e(report.project)}<span class='status'>{_badge(status)}</span></h1>",
             f"<div class='meta'>target <code>{_e(report.selector)}</code> &middot; finished {_e(report.finished)}"
             f" &middot; {_e(report.project_file)}</div>"]
    if not report.ok:
        parts.append(f"<section class='failure' id='failure'><h2>Compile failed: exit {report.exit_code} "
                     f"({_e(error_kind(report.exit_code))})</h2>"
                     f"<pre>{_e((report.error or '').strip())}</pre></section>")
    parts += [_html_fleet(report), _html_stages(report), _html_gate(report), _html_preflight(report),
              _html_placement(report), _html_bench(report), _html_checks(report)]
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>edgebuild: {_e(report.project)} ({_e(_status_line(report))})</title>"
            f"<style>{_CSS}</style></head><body><main>{''.join(parts)}"
            "<footer>Generated by edgebuild from build/.records/last-compile.json (<code>edgebuild report</code> "
            "rebuilds it). Self-contained: nothing on this page is loaded from anywhere.</footer>"
            "</main></body></html>\n")


def _html_fleet(report: BuildReport) -> str:
    rows = []
    for u in report.units:
        s = _group_summary(report, u["group"])
        rows.append([f"<b>{_e(u['group'])}</b>", _e(u["target"]), _e(u.get("module", "")),
                     _e(u.get("compute_capability", "")), _e(u.get("jetpack", "")), _e(u.get("l4t", "")),
                     _e(u.get("tensorrt", "")), _e(u.get("cuda", "")), "yes" if u.get("use_dla") else "no",
                     _e(u.get("limits", "-")), _badge(s["preflight"]), _badge(s["gate"]), _e(s["placement"])])
    return "<h2>Fleet</h2>" + _html_table(["group", "target", "module", "CC", "JetPack", "L4T", "TensorRT", "CUDA",
                                           "DLA", "limits", "preflight", "gate", "placement"], rows)


def _html_stages(report: BuildReport) -> str:
    groups = report.groups
    rows = []
    for name, runs in report.stages:
        def cell(run: Run | None) -> str:
            if run is None:
                return "-"
            return (f"{_badge(run.status)} <span class='small'>{run.seconds:.2f} s</span>"
                    f"<div class='small'>{_e(run.detail)}</div>")
        if runs and runs[0].group is None:
            rows.append(f"<tr><th>{_e(name)}</th><td colspan='{max(1, len(groups))}'>{cell(runs[0])}</td></tr>")
        else:
            rows.append(f"<tr><th>{_e(name)}</th>" + "".join(f"<td>{cell(report.run(name, g))}</td>" for g in groups)
                        + "</tr>")
    head = "<tr><th>stage</th>" + "".join(f"<th>{_e(g)}</th>" for g in groups) + "</tr>"
    times = [(name, sum(r.seconds for r in runs), _COLOURS[_worst(runs)]) for name, runs in report.stages]
    return (f"<h2>Stages</h2><table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"
            f"<h3>Time per stage (all groups)</h3>{_svg_bars(times, unit='s')}")


def _worst(runs: tuple[Run, ...]) -> str:
    statuses = {r.status for r in runs}
    return next((s for s in ("failed", "ran", "reused") if s in statuses), "not run")


_COLOURS = {"passed": "#2e7d32", "ran": "#2e7d32", "reused": "#1565c0", "failed": "#c62828", "not run": "#8a909a",
            "unselectable": "#8a909a"}


def _svg_bars(items: list[tuple[str, float, str]], *, unit: str) -> str:
    """Horizontal bars from zero: (label, value, colour) each."""
    if not items:
        return ""
    width, label_w, row = 760, 130, 22
    top = max((v for _, v, _ in items), default=0) or 1.0
    span = width - label_w - 80
    out = [f'<svg width="{width}" height="{row * len(items) + 8}" role="img">']
    for i, (label, value, colour) in enumerate(items):
        y, w = 4 + i * row, max(1.0, value / top * span)
        out.append(f'<text x="{label_w - 8}" y="{y + 15}" font-size="12" text-anchor="end">{_e(label)}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" '
                   f'fill="{colour}"/>'
                   f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="12">{value:.2f} {unit}</text>')
    return "".join(out) + "</svg>"


def _svg_retention(gate: Any) -> str:
    """One bar per candidate, retention on an axis zoomed to where they and the threshold are, the threshold a line."""
    values = [c.retention for c in gate.candidates] + [gate.threshold]
    low = max(0.0, int((min(values) - 0.02) * 20) / 20)  # down to a 0.05 step
    high = max(1.0, max(values))
    width, label_w, row, axis_h = 760, 130, 30, 34
    span = width - label_w - 150
    height = row * len(gate.candidates) + axis_h + 10

    def x(value: float) -> float:
        return label_w + (value - low) / (high - low) * span

    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'aria-label="retention per candidate">']
    for i, c in enumerate(gate.candidates):
        y = 8 + i * row
        status = ("passed" if c.passed else "failed") if c.selectable else "unselectable"
        stroke = ' stroke="#1d2330" stroke-width="2"' if c.precision == gate.selected else ""
        out.append(f'<text x="{label_w - 8}" y="{y + 17}" font-size="13" text-anchor="end">{_e(c.precision)}</text>'
                   f'<rect x="{label_w}" y="{y + 4}" width="{max(1.0, x(c.retention) - label_w):.1f}" '
                   f'height="{row - 10}" fill="{_COLOURS[status]}"{stroke}/>'
                   f'<text x="{x(c.retention) + 6:.1f}" y="{y + 17}" font-size="12">{c.retention:.4f}'
                   f'{" selected" if c.precision == gate.selected else ""}'
                   f'{"" if c.selectable else " (not selectable)"}</text>')
    base = 8 + row * len(gate.candidates)
    tick, ticks = low, []
    while tick <= high + 1e-9:
        ticks.append(f'<line x1="{x(tick):.1f}" y1="{base}" x2="{x(tick):.1f}" y2="{base + 5}" stroke="#5a6270"/>'
                     f'<text x="{x(tick):.1f}" y="{base + 18}" font-size="11" text-anchor="middle">{tick:.2f}</text>')
        tick = round(tick + (0.05 if high - low > 0.2 else 0.01), 4)
    out.append(f'<line x1="{label_w}" y1="{base}" x2="{x(high):.1f}" y2="{base}" stroke="#5a6270"/>{"".join(ticks)}')
    tx = x(gate.threshold)
    out.append(f'<line x1="{tx:.1f}" y1="2" x2="{tx:.1f}" y2="{base}" stroke="#c62828" stroke-width="2" '
               f'stroke-dasharray="6 4"/><text x="{tx + 4:.1f}" y="{base + 30}" font-size="11" fill="#c62828">'
               f'min_retention {gate.threshold}</text>')
    return "".join(out) + "</svg>"


def _html_gate(report: BuildReport) -> str:
    gate, run = report.gate, report.run("gate")
    if gate is None:
        why = (run.error or run.why or run.detail) if run else "the gate did not run"
        return f"<h2>Accuracy gate</h2><p>not measured: {_e(why)}</p>"
    facts = (f"<p>FP32 {_e(gate.metric)} <b>{gate.reference_value:.4f}</b> on {gate.images} images "
             f"[{_e(gate.backend)}]; threshold retention &ge; <b>{gate.threshold}</b>; selected "
             f"<b>{_e(gate.selected or 'nothing')}</b> {_badge('passed' if gate.selected else 'failed')}</p>"
             f"<p class='small'>selection rule: {_e(gate.selection_rule)}; {gate.measured} measured, "
             f"{gate.stored} stored, {gate.seconds:.2f} s</p>")
    rows = [[f"<b>{_e(c.precision)}</b>" + (" &#9733;" if c.precision == gate.selected else ""), f"{c.value:.4f}",
             f"{c.retention:.4f}", _badge("passed" if c.passed else "failed"), "yes" if c.selectable else "no",
             f"{c.latency_ms:.3f}", _e(", ".join(c.kept_fp32) or "-"), _e(c.note),
             _e("; ".join(c.rejected_by) or "-")] for c in gate.candidates]
    table_html = _html_table(["candidate", gate.metric, "retention", "passes", "selectable", "latency ms (host)",
                              "kept in float", "note", "rejected by"], rows, numeric={1, 2, 5})
    extra = ""
    if gate.sensitivity:
        ranked = [[str(i + 1), _e(s.get("layer", "?")), f"{s.get('sqnr_db', 0):.2f}"]
                  for i, s in enumerate(gate.sensitivity[:12])]
        extra += ("<h3>Layer sensitivity (lowest SQNR first: the first kept in float)</h3>"
                  + _html_table(["rank", "layer", "SQNR dB"], ranked, numeric={0, 2}))
    notes = [*gate.notes, *(f"next: {s}" for s in gate.next_steps)]
    if notes:
        extra += "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"
    return f"<h2>Accuracy gate</h2>{facts}{_svg_retention(gate)}{table_html}{extra}"


def _html_preflight(report: BuildReport) -> str:
    parts = ["<h2>Preflight per target</h2>"]
    for run in report.runs("preflight"):
        record = run.record
        if record is None or isinstance(record, dict):
            parts.append(f"<h3>{_e(run.group)} {_badge(run.status)}</h3>"
                         f"<p>{_e(run.error or run.why or run.detail)}</p>")
            continue
        head = (f"<h3>{_e(record.group)} = {_e(record.target)} {_badge(run.status)}</h3>"
                f"<p class='small'>TensorRT {_e(record.tensorrt)}, parser table {_e(record.parser_table)}</p>")
        if not record.findings:
            parts.append(head + "<p>clean: every node is supported</p>")
            continue
        rows = [[_badge("failed") if f.severity == "blocking" else _e(f.severity), _e(f.node), _e(f.op_type),
                 _e(f.problem), _e(f.fix)] for f in record.findings]
        parts.append(head + _html_table(["severity", "node", "op", "problem", "fix"], rows))
    if len(parts) == 1:
        parts.append("<p>preflight did not run</p>")
    return "".join(parts)


def _html_placement(report: BuildReport) -> str:
    rows = []
    for group in report.groups:
        run = report.run("engine", group)
        record = run.record if run else None
        if record is None or isinstance(record, dict):
            rows.append([_e(group), _badge(run.status) if run else "-", _e(run.why if run else ""), "", "", "", "", ""])
            continue
        refused = "<br>".join(_e(f"{r['candidate']}: {r['metric']} {r['value']:.4f}, retention {r['retention']:.3f} "
                                 f"[{r['backend']}]") for r in record.refused) or "-"
        rows.append([f"<b>{_e(group)}</b> {_badge(run.status)}", _e(record.placement),
                     f"<span class='small'>{_e(record.reason)}</span>", _e(record.candidate), _e(_engine_state(record)),
                     _e(_acceptance(record)), refused, _e(record.fallback or "-")])
    packaged = _html_packaged(report)
    return ("<h2>Placement per group</h2>"
            + _html_table(["group", "placement", "why", "candidate", "engine", "accepted on the device", "refused",
                           "first-boot fallback"], rows) + packaged)


def _html_packaged(report: BuildReport) -> str:
    rows = []
    for group in report.groups:
        container, package = report.run("container", group), report.run("package", group)
        c = container.record if container and not isinstance(container.record, dict) else None
        p = package.record if package and not isinstance(package.record, dict) else None
        if c is None and p is None:
            continue
        rows.append([_e(group), _e(c.image if c else "-"), _e(c.base_image if c else "-"),
                     _e(f"{p.bundle.get('path', '?')} ({p.bundle.get('size', '?')} bytes)" if p else "-"),
                     ("signed" if p.signed else "UNSIGNED") if p else "-"])
    if not rows:
        return ""
    return "<h3>Container and package</h3>" + _html_table(["group", "image", "FROM", "bundle", "signature"], rows)


def _html_bench(report: BuildReport) -> str:
    rows = _bench_rows(report)
    if not rows and not report.bench_pngs:
        return ""
    numeric = {4, 5, 6, 7, 8}
    parts = ["<h2>Bench</h2>", _html_table(BENCH_HEADERS, [[_e(c) for c in r] for r in rows], numeric)]
    points = [(f"{r[0]} b{r[4]} c{r[5]} p{q}", float(r[i]), "#1565c0" if q == 50 else "#ef6c00")
              for r in rows if r[6] for q, i in ((50, 6), (99, 7))]
    if points:
        parts.append("<h3>Latency per group and configuration (ms)</h3>" + _svg_bars(points, unit="ms"))
    for name, data in report.bench_pngs:
        parts.append(f"<h3>{_e(name)}</h3><img alt='{_e(name)}' style='max-width:100%' "
                     f"src='data:image/png;base64,{base64.b64encode(data).decode()}'>")
    return "".join(parts)


def _html_checks(report: BuildReport) -> str:
    found = checks(report)
    rows = [[_e(c.suite), _e(c.name), _badge(c.status), _e(c.message)] for c in found]
    failed = sum(c.status == "failed" for c in found)
    return (f"<h2>Checks (junit.xml): {failed} failing of {len(found)}</h2>"
            + _html_table(["suite", "check", "result", "message"], rows))
