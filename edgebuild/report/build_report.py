"""The build report's content: the last compile, typed, and the checks CI counts (the suites are
described in ``edgebuild.report``).

``load(build_dir)`` reads ``build/.records/last-compile.json``, which every compile writes,
failed or not. Each run's record is read by its stage's own loader (``edgebuild.stages``).
Everything comes from the last compile's own outcome; a stored stage record
(``build/.records``) fills in only a record that outcome lacks, so the report never mixes in
the result of an earlier compile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from edgebuild.devices.bench_records import FLEET_SCHEMA, FleetBenchSummary
from edgebuild.errors import ConfigError, EdgebuildError
from edgebuild.jsontypes import JsonObject
from edgebuild.latency.budget import PredictedLatency
from edgebuild.latency.measured import LatencyCheck, latency_checks
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.bench.bench_result import BenchResult
from edgebuild.stages.budget import BUDGET
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.gate import GATE
from edgebuild.stages.preflight import PREFLIGHT
from edgebuild.targets.profiles import GroupFacts

if TYPE_CHECKING:
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.devices.engines import EngineRecord
    from edgebuild.pipeline.runner import Stage

R = TypeVar("R")

__all__ = ["load"]

#: the largest bench PNG embedded in index.html (a data URI makes the page that much bigger)
MAX_EMBEDDED_PNG = 4 * 1024 * 1024
SUITES = ("preflight", "gate", "stages")


# -- the last compile, typed ----------------------------------------------------------------------

@dataclass(frozen=True)
class Run(Generic[R]):
    """One run of a stage in the last compile: for the project (group None) or one group."""

    stage: str
    group: str | None
    status: str  # ran, reused, failed, not run
    detail: str
    why: str
    seconds: float
    error: str | None
    record: R | None  # the stage's typed record (its Stage.record), None when there is none or it does not read


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
    units: tuple[GroupFacts, ...]  # the fleet groups (SelectedGroup.describe())
    stages: tuple[tuple[str, tuple[Run, ...]], ...]  # stage name -> its runs, in compile order
    bench: tuple[BenchResult, ...] = ()  # build/bench/<name>.json results (edgebuild.bench/1)
    fleet_bench: FleetBenchSummary | None = None  # build/bench/fleet.json (bench --farm)
    bench_pngs: tuple[tuple[str, bytes], ...] = ()  # build/bench/*.png
    latency: PredictedLatency | None = None  # the budget stage's predicted latency per group
    measured: tuple[LatencyCheck, ...] = ()  # build/latency/<group>.json: device measurements and predictions

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def groups(self) -> list[str]:
        return [u.group for u in self.units]

    def runs(self, stage: Stage[R]) -> tuple[Run[R], ...]:
        """The runs of ``stage`` in the last compile (one per group for a per-group stage)."""
        return next((runs for name, runs in self.stages if name == stage.name), ())

    def run(self, stage: Stage[R], group: str | None = None) -> Run[R] | None:
        """The run of ``stage`` for ``group`` (a once-per-project stage: its one run)."""
        return run_for(self.runs(stage), group)

    @property
    def gate(self) -> GateResult | None:
        """The gate's GateResult, if the gate ran (or was reused) in the last compile."""
        run = self.run(GATE)
        return run.record if run else None

    @property
    def checks(self) -> list[Check]:
        return checks(self)


def run_for(runs: tuple[Run[R], ...], group: str | None) -> Run[R] | None:
    """Of one stage's ``runs``, the one for ``group``; a once-per-project stage's one run for any group."""
    return next((r for r in runs if r.group == group), None) or (runs[0] if runs and runs[0].group is None
                                                                 else None)


def _typed(stage: str, data: JsonObject) -> object:
    """A stage record's typed form, read by the stage's own loader (``edgebuild.stages``); None when
    it does not read as one (written by another edgebuild: the run is shown without it)."""
    from edgebuild.stages import STAGES

    loader = next((s for s in STAGES if s.name == stage), None)
    try:
        return loader.load(data) if loader is not None else None
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def from_compile(data: JsonObject, build_dir: Path | None = None) -> BuildReport:
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
    predicted = [r.record for name, runs in stages if name == BUDGET.name for r in runs
                 if isinstance(r.record, PredictedLatency)]
    latency = PredictedLatency.merged(predicted) if predicted else None
    return BuildReport(data.get("project", "?"), data.get("project_file", ""), data.get("selector", ""),
                       data.get("finished", ""), int(data.get("exit_code") or 0), data.get("error"),
                       tuple(GroupFacts.from_dict(u) for u in data.get("units", [])), tuple(stages), bench, fleet,
                       pngs, latency,
                       tuple(latency_checks(build_dir)) if build_dir is not None else ())


def load(build_dir: Path) -> BuildReport:
    """The report of ``build_dir``'s last compile; a ConfigError when there was none."""
    path = BuildLayout(Path(build_dir)).last_compile
    if not path.is_file():
        raise ConfigError(f"{path}: no compile recorded in {build_dir}",
                          hint="run `edgebuild compile` first; every compile, failed or not, records its outcome "
                               "there")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable as JSON ({exc})", hint="run `edgebuild compile` again") from None
    return from_compile(data, Path(build_dir))


def _stored_record(build_dir: Path, stage: str, group: str | None, project: str) -> JsonObject | None:
    from edgebuild.pipeline.records import load_stage_record

    stored, _ = load_stage_record(build_dir, f"{stage}/{group}" if group else stage, project)
    return stored.result if stored is not None else None


def _bench(build_dir: Path) -> tuple[tuple[BenchResult, ...], FleetBenchSummary | None, tuple]:
    from edgebuild.runtime.bench.schema import SCHEMA

    folder = BuildLayout(build_dir).bench
    results, fleet = [], None
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            try:
                results.append(BenchResult.from_dict(data))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a broken result file: not a bench result to show
        elif isinstance(data, dict) and data.get("schema") == FLEET_SCHEMA:
            fleet = FleetBenchSummary.from_dict(data)
    pngs = tuple((p.name, p.read_bytes()) for p in sorted(folder.glob("*.png"))
                 if folder.is_dir() and p.stat().st_size <= MAX_EMBEDDED_PNG)
    return tuple(results), fleet, pngs


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
        name = f"{unit.group} ({unit.target})"
        run = report.run(PREFLIGHT, unit.group)
        if run is None or run.status == "not run":
            found.append(Check("preflight", name, "skipped", run.why if run else "preflight did not run",
                               group=unit.group))
            continue
        record = run.record
        blocking = list(getattr(record, "blocking", []) or [])
        if run.status == "failed":
            text = "\n".join(f"{f.node} ({f.op_type}): {f.problem}; fix: {f.fix}" for f in blocking) or run.error or ""
            message = (f"{len(blocking)} blocking problem(s) for TensorRT {record.tensorrt}"
                       if blocking and record is not None else _first_line(run.error or run.detail))
            found.append(Check("preflight", name, "failed", message, text, run.seconds, unit.group))
        else:
            found.append(Check("preflight", name, "passed", run.detail, seconds=run.seconds, group=unit.group))
    return found


def _gate_checks(report: BuildReport) -> list[Check]:
    gate_run, gate = report.run(GATE), report.gate
    found = []
    for unit in report.units:
        name = f"{unit.group} ({unit.target})"
        engine = report.run(ENGINE, unit.group)
        if gate_run is None or gate_run.status == "not run":
            found.append(Check("gate", name, "skipped", gate_run.why if gate_run else "the gate did not run",
                               group=unit.group))
        elif gate_run.status == "failed":
            found.append(Check("gate", name, "failed", _first_line(gate_run.error or gate_run.detail),
                               (gate_run.error or "") + "\n\n" + _candidates_text(gate), gate_run.seconds,
                               unit.group))
        elif engine is not None and engine.record is not None and _refused_on_device(engine):
            found.append(Check("gate", name, "failed", f"every engine built {engine.record.placement} was refused "
                               f"on the device", engine.error or _refusals_text(engine.record), engine.seconds,
                               unit.group))
        else:
            selected = f"selected {gate.selected}" if gate else gate_run.detail
            accepted = getattr(engine.record, "accepted", None) if engine else None
            if accepted:
                selected += (f"; accepted on the device: {accepted.metric} {accepted.value:.4f}, "
                             f"retention {accepted.retention:.3f}")
            found.append(Check("gate", name, "passed", selected, _candidates_text(gate), gate_run.seconds,
                               unit.group))
    return found


def _stage_checks(report: BuildReport) -> list[Check]:
    found = []
    for stage, runs in report.stages:
        if stage in (PREFLIGHT.name, GATE.name):
            continue
        for run in runs:
            name = f"{stage}/{run.group}" if run.group else stage
            if run.status == "not run":
                found.append(Check("stages", name, "skipped", run.why or run.detail))
            elif run.status == "failed" and stage == ENGINE.name and _refused_on_device(run):
                found.append(Check("stages", name, "skipped", "refused on the device: counted in the gate suite"))
            elif run.status == "failed":
                found.append(Check("stages", name, "failed", _first_line(run.error or run.detail),
                                   run.error or run.detail, run.seconds))
            else:
                found.append(Check("stages", name, "passed", run.detail, seconds=run.seconds))
    return found


def _refused_on_device(run: Run[R]) -> bool:
    """An engine run that failed because its device refused every engine it built (the engine verdict)."""
    record = run.record
    return (run.status == "failed" and getattr(record, "needs_acceptance", False)
            and getattr(record, "accepted", True) is None)


def _refusals_text(record: EngineRecord) -> str:
    return "\n".join(f"{r.candidate}: {r.metric} {r.value:.4f}, retention {r.retention:.3f} [{r.backend}]"
                     for r in record.refused)


def _candidates_text(gate: GateResult | None) -> str:
    if gate is None:
        return ""
    lines = [f"FP32 {gate.metric} {gate.reference_value:.4f} on {gate.images} images [{gate.backend}], "
             f"threshold {gate.threshold}"]
    lines += [f"{c.precision}: {c.metric} {c.value:.4f}, retention {c.retention:.3f}, "
              f"{'passes' if c.passed else 'FAILS'}{'' if c.selectable else ', not selectable'}"
              for c in gate.candidates]
    if gate.baseline is not None:
        lines.append(gate.baseline.line())
    if gate.tracking is not None:
        lines.append(gate.tracking.heading())
        lines += [f"{r.precision}: HOTA {r.HOTA:.4f}, IDF1 {r.IDF1:.4f}, MOTA {r.MOTA:.4f}, {gate.tracking.metric} "
                  f"retention {r.retention:.3f}, {'passes' if r.passed else 'FAILS'}" for r in gate.tracking.rows]
    return "\n".join(lines)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""


def error_kind(exit_code: int) -> str:
    """The kind of error an exit code stands for ("accuracy gate" for 11)."""
    todo: list[type[EdgebuildError]] = [EdgebuildError]
    kinds: dict[int, str] = {}
    while todo:
        cls = todo.pop()
        kinds.setdefault(cls.exit_code, cls.kind)
        todo.extend(cls.__subclasses__())
    return kinds.get(exit_code, "error")


# -- what both renderings show --------------------------------------------------------------------

def group_summary(report: BuildReport, group: str) -> dict[str, str]:
    """One fleet row's outcome columns: preflight, gate and placement of ``group``."""
    by_check = {(c.suite, c.group): c for c in checks(report) if c.group is not None}
    engine = report.run(ENGINE, group)
    record = engine.record if engine else None
    placement = getattr(record, "placement", "") or (engine.status if engine else "")
    if record is not None and record.candidate:
        placement += f" ({record.candidate})"
    return {"preflight": by_check.get(("preflight", group), Check("", "", "skipped")).status,
            "gate": by_check.get(("gate", group), Check("", "", "skipped")).status, "placement": placement}


def bench_rows(report: BuildReport) -> list[list[str]]:
    """group, board/where, backend, precision, batch, concurrency, p50, p99, throughput: one row per configuration."""
    rows = []
    for r in report.bench:
        art = r.artifact
        for config in r.configs:
            lat = config.latency
            rows.append([art.group, r.ran_on or "?", r.backend, art.precision, str(config.batch),
                         str(config.concurrency), f"{lat.p50_ms:.3f}", f"{lat.p99_ms:.3f}",
                         f"{config.throughput_ips:.1f}"])
    if report.fleet_bench and not rows:  # the per-group results carry the same; the fleet file only when alone
        for g in report.fleet_bench.groups:
            if g.error:
                rows.append([g.group, g.board or "-", "FAILED: " + _first_line(g.error), "", "", "", "", "", ""])
            for c in g.configs or [] if not g.error else []:
                rows.append([g.group, g.board or "?", g.backend or "?", g.precision or "?", str(c.batch),
                             str(c.concurrency), f"{c.p50_ms:.3f}", f"{c.p99_ms:.3f}", f"{c.throughput_ips:.1f}"])
    return rows


BENCH_HEADERS = ["group", "ran on", "backend", "precision", "batch", "conc", "p50 ms", "p99 ms", "img/s"]


LATENCY_HEADERS = ["group", "module, power mode", "precision", "predicted p50 ms", "band ms", "budget ms", "verdict"]


def latency_rows(latency: PredictedLatency) -> list[list[str]]:
    """Per group (and model) and candidate precision: the predicted p50, its band, the budget's verdict."""
    return [[g.group + (f" ({g.model})" if g.model else ""),
             f"{g.module} {g.power_mode}" + (" (assumed: the fastest)" if g.power_mode_assumed else ""),
             c.precision, f"{c.latency_ms:.2f}", f"{c.low_ms:.2f}-{c.high_ms:.2f}",
             f"{g.budget_ms:g}" if g.budget_ms is not None else "-", c.verdict]
            for g in latency.groups for c in g.candidates]


def status_line(report: BuildReport) -> str:
    if report.ok:
        return "passed"
    return f"FAILED (exit {report.exit_code}, {error_kind(report.exit_code)})"


def engine_state_text(record: EngineRecord) -> str:
    if not record.built:
        return "built on the device at first start" if record.placement == "deferred" else "not built"
    return ("kept" if record.kept else "built") + (f" on board {record.board}" if record.board else "")


def acceptance_text(record: EngineRecord) -> str:
    a = record.accepted
    if not a:
        return "-"
    return f"{a.metric} {a.value:.4f} on {a.images} images, retention {a.retention:.3f} [{a.backend}]"
