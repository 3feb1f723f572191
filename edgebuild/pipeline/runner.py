"""The stage protocol: run the stages in order over the units of a compile's work, skip what is up to date.

A :class:`Stage` declares its name and version, the stages whose records it reads, whether it
runs once or once per fleet group, and two functions: ``key`` (the inputs it reads: content
hashes of files, the settings it uses) and ``run`` (which returns the stage's typed record).
The runner adds edgebuild's version and the stage's own to the key, and skips a stage whose
stored record (``edgebuild.pipeline.records``) has the same key and intact outputs; the summary then says
"reused". ``force`` names stages to run again: each forced stage and everything after it that
reads it. Records are written atomically after the stage's outputs, so a compile killed at any
point leaves every earlier record valid; and a lock on the build folder keeps two compiles of
one project from interleaving.

The runner knows nothing of the domain: it runs the stages it is given over the units a
:class:`Work` names (fleet groups, to the compile), with what the caller's stages share
(``session``). What a compile works on (targets, limit presets, data) is decided above it, in
``edgebuild.workflows.work``; the stages themselves (what each one reads and does) are in
``edgebuild.stages``.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

from edgebuild import __version__
from edgebuild.errors import BuildLocked, EdgebuildError
from edgebuild.jsontypes import JsonObject
from edgebuild.pipeline.records import (
    StageRecord,
    load_stage_record,
    stale_because,
    stamp_outputs,
    write_stage_record,
)
from edgebuild.project.config import Project
from edgebuild.project.layout import BuildLayout
from edgebuild.text import Progress

__all__ = ["CompileReport", "Options", "Work", "Stage", "StageInputs", "StageOutcome", "UnitOutcome", "run_stages",
           "write_last_compile"]

R = TypeVar("R")


class UnitFacts(Protocol):
    """What a unit says of itself in ``last-compile.json``'s ``units`` (``GroupFacts``)."""

    def as_dict(self) -> dict[str, object]: ...


class Unit(Protocol):
    """What a per-group stage runs once for (to the compile: a fleet group, ``SelectedGroup``)."""

    @property
    def name(self) -> str: ...

    def describe(self) -> UnitFacts: ...


U = TypeVar("U", bound=Unit)
S = TypeVar("S")  # what the caller's stages share (edgebuild.stages.session.CompileSession)


@dataclass(frozen=True)
class Work(Generic[U]):
    """What a compile works on: the project, the selector as written, and the units it selects.

    Built above the runner (``edgebuild.workflows.work.select_work``), which resolves targets and
    limit presets; the runner only runs each per-group stage once per unit.
    """

    project: Project
    selector: str
    groups: tuple[U, ...]


@dataclass(frozen=True)
class Options:
    """How the runner runs: what to run again, progress bars, how many units at once."""

    force: frozenset[str] = frozenset()  # stage names to run again (with what depends on them)
    progress: bool = True
    jobs: int = 1  # per-group stages marked concurrent run this many groups at once


@dataclass
class StageInputs(Generic[U, S]):
    """What one stage run sees: the work, its group (per-group stages), the records it reads."""

    work: Work[U]
    options: Options
    progress: Progress
    group: U | None
    records: dict[str, object]  # stage name -> typed record (this group's for per-group stages): read with record()
    previous: object = None  # the stage's last record whatever its key (per-group stages: this group's)
    previous_key: dict[str, str] = field(default_factory=dict)  # the key ``previous`` was stored under
    forced: bool = False  # named in --force: also ignore the stage's own stores (measurements, kept engines)
    #: what the compile's stages share (their settings, expensive objects made once): given to run_stages
    #: by the caller, which knows its type (edgebuild.stages.session.CompileSession)
    session: S = None  # type: ignore[assignment]  # a toy run's stages share nothing

    @property
    def project(self) -> Project:
        return self.work.project

    @property
    def unit(self) -> U:
        """The group of a per-group stage (a once-per-project stage has none: a bug to ask)."""
        assert self.group is not None, "a once-per-project stage has no group"
        return self.group

    def record(self, stage: Stage[R]) -> R:
        """The record of ``stage`` (this group's, where both are per group)."""
        return cast(R, self.records[stage.name])

    def group_records(self, stage: Stage[R]) -> dict[str, R]:
        """A once-per-project stage reading a per-group one: the record of every group it succeeded for."""
        return cast("dict[str, R]", self.records[stage.name])


@dataclass(frozen=True, kw_only=True)
class Stage(Generic[R]):
    """One step of the compile: what it reads (``key``), what it does (``run``), what it hands on (``record``).

    ``record`` is the stage's record type: what ``run`` returns, what the stages after it read
    (``StageInputs.record``) and what the build report shows. It is stored with ``as_dict()`` and
    read back with ``from_dict(data)``; ``relocate`` re-roots the paths of a stored record where
    the project may have moved since.
    """

    name: str
    version: int
    summary: str
    record: type[R]
    after: tuple[str, ...] = ()  # the stages whose records this one reads
    per_group: bool = False
    key: Callable[[StageInputs], dict[str, str]]
    run: Callable[[StageInputs], R]
    outputs: Callable[[StageInputs, R], list[Path]] = lambda inputs, record: []  # the files its record vouches for
    describe: Callable[[R], str]
    #: reads a stored dict where ``record.from_dict`` needs more than the dict
    from_dict: Callable[[JsonObject], R] | None = None
    relocate: Callable[[StageInputs, R], R] | None = None
    #: a record can be valid and still stop what comes after (a gate nobody passes, a blocked target):
    #: the record is stored, so the next run re-decides without measuring, and the error is raised
    verdict: Callable[[StageInputs, R], EdgebuildError | None] | None = None
    #: its groups may run at once (``Options.jobs``): each waits on a device, not on this host
    concurrent: bool = False

    def dump(self, record: R) -> JsonObject:
        as_dict = getattr(record, "as_dict", None)
        return cast("JsonObject", as_dict()) if as_dict is not None else asdict(cast(Any, record))

    def load(self, data: JsonObject) -> R:
        """The typed record of a stored dict; raises (TypeError, KeyError, ValueError) when it is not one."""
        loader = self.from_dict or getattr(self.record, "from_dict", None)
        return cast(R, loader(data)) if loader is not None else self.record(**data)


@dataclass(frozen=True)
class UnitOutcome(Generic[R]):
    """One run of a stage: for the project, or for one group."""

    group: str | None
    status: str  # "ran", "reused", "failed", "not run"
    detail: str
    why: str = ""  # why it ran (what changed) or was not run
    record: R | None = None
    error: EdgebuildError | None = None
    seconds: float = 0.0  # wall time of this run (key, reuse check, run, record)


@dataclass(frozen=True)
class StageOutcome(Generic[R]):
    stage: Stage[R]
    units: tuple[UnitOutcome[R], ...]

    @property
    def status(self) -> str:
        statuses = {u.status for u in self.units}
        for status in ("failed", "ran", "reused"):
            if status in statuses:
                return status
        return "not run"

    @property
    def detail(self) -> str:
        if self.stage.per_group:
            return "; ".join(f"{u.group}: {u.status} ({u.detail})" if u.status != "reused" else
                             f"{u.group}: {u.detail}" for u in self.units)
        return self.units[0].detail if self.units else ""

    def record(self, group: str | None = None) -> R | None:
        return next((u.record for u in self.units if u.group == group), None)

    @property
    def error(self) -> EdgebuildError | None:
        return next((u.error for u in self.units if u.error is not None), None)


@dataclass(frozen=True)
class CompileReport:
    work: Work
    stages: tuple[StageOutcome, ...]

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error(self) -> EdgebuildError | None:
        """The error of the first stage that failed, if one did."""
        return next((o.error for o in self.stages if o.error is not None), None)

    def outcome(self, stage: Stage[R]) -> StageOutcome[R] | None:
        """What ``stage`` did in this compile (None when it was not run)."""
        return next((o for o in self.stages if o.stage.name == stage.name), None)

    def record(self, stage: Stage[R], group: str | None = None) -> R | None:
        """The record ``stage`` ran or reused (for ``group``, a per-group stage's), or None."""
        outcome = self.outcome(stage)
        return outcome.record(group) if outcome else None

    def as_dict(self) -> JsonObject:
        project = self.work.project
        return {
            "project": project.project.name,
            "project_file": str(project.source),
            "selector": self.work.selector,
            "units": [g.describe().as_dict() for g in self.work.groups],
            "stages": [
                {"name": o.stage.name, "status": o.status, "detail": o.detail,
                 "runs": [{"group": u.group, "status": u.status, "detail": u.detail, "why": u.why,
                          "seconds": round(u.seconds, 3),
                           **({"record": o.stage.dump(u.record)} if u.record is not None else {}),
                           **({"error": str(u.error)} if u.error else {})} for u in o.units]}
                for o in self.stages
            ],
        }


def write_last_compile(report: CompileReport) -> Path:
    """``build/.records/last-compile.json``: the last compile's outcome per stage and group (status,
    detail, seconds, error, record), what ``edgebuild report`` rebuilds the build report from."""
    import json

    from edgebuild.runtime.base.files import atomic_write_text

    path = BuildLayout.of(report.work.project).last_compile
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**report.as_dict(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "error": str(report.error) if report.error else None,
            "exit_code": report.error.exit_code if report.error else 0}
    atomic_write_text(path, json.dumps(data, indent=2, default=str))
    return path


def dependents(names: set[str], stages: tuple[Stage, ...]) -> set[str]:
    """``names`` and every stage that reads one of them, directly or not."""
    closed = set(names)
    for stage in stages:  # stages are in dependency order
        if closed & set(stage.after):
            closed.add(stage.name)
    return closed


def dependencies(name: str, stages: tuple[Stage, ...]) -> set[str]:
    """``name`` and every stage it reads, directly or not."""
    by_name = {s.name: s for s in stages}
    wanted: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current not in wanted:
            wanted.add(current)
            todo.extend(by_name[current].after)
    return wanted


@contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Hold the build folder for this process; a second compile of the project is refused."""
    build_dir.mkdir(parents=True, exist_ok=True)
    path = BuildLayout(build_dir).lock
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise BuildLocked(f"{build_dir}: another edgebuild ({holder}) is building this project now",
                              hint="wait for it to finish; two builds of one project would overwrite each "
                                   "other's outputs") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock


def run_stages(work: Work[U], stages: tuple[Stage, ...], *, until: str | None = None,
               options: Options = Options(), progress: Progress = lambda _: None,
               on_stage: Callable[[StageOutcome], None] | None = None, session: object = None,
               prepare: Callable[[tuple[Stage, ...]], None] | None = None) -> CompileReport:
    """Run ``stages`` (in dependency order; or ``until`` and what it reads), reusing what is up to date.

    A failed stage stops what reads it: for a per-group stage only that group's later stages.
    ``prepare`` is called once, under the build lock, with the stages that will run, before the
    first of them; an EdgebuildError it raises fails the first stage (the compile passes the data
    preparation, ``edgebuild.stages.compile_work``). The compile's stages are ``edgebuild.stages.STAGES``.
    """
    every = stages
    unknown = set(options.force) - {s.name for s in every} - {"all"}
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(s.name for s in every)}")
    wanted = dependencies(until, every) if until else {s.name for s in every}
    stages = tuple(s for s in every if s.name in wanted)
    # a forced stage and what reads it run again; only the named ones also ignore their own stores
    # (the gate's measurements, a kept engine): the others re-decide from content as usual
    named = {s.name for s in every} if "all" in options.force else set(options.force)
    forced = dependents(named, every)
    project = work.project
    done: list[StageOutcome] = []
    with build_lock(project.build_dir):
        if prepare is not None:
            try:
                prepare(stages)
            except EdgebuildError as exc:
                outcome = StageOutcome(stages[0], (UnitOutcome(None, "failed", exc.message.splitlines()[0],
                                                               error=exc),))
                return CompileReport(work, (outcome,))
        for stage in stages:
            scopes: list[U | None] = list(work.groups) if stage.per_group else [None]
            def unit(scope: U | None, stage: Stage = stage) -> UnitOutcome:
                return _run_unit(stage, scope, work, options, progress, done, session, stage.name in forced,
                                 stage.name in named)

            if stage.concurrent and options.jobs > 1 and len(scopes) > 1:
                with ThreadPoolExecutor(max_workers=min(options.jobs, len(scopes))) as pool:
                    units = tuple(pool.map(unit, scopes))
            else:
                units = tuple(unit(scope) for scope in scopes)
            outcome = StageOutcome(stage, units)
            done.append(outcome)
            if on_stage:
                on_stage(outcome)
    return CompileReport(work, tuple(done))


def _upstream(stage: Stage, group: Unit | None,
              done: list[StageOutcome]) -> tuple[dict[str, object], str]:
    """The records ``stage`` reads for ``group``, or why it cannot run."""
    records: dict[str, object] = {}
    for outcome in done:
        if outcome.stage.name not in stage.after:
            continue
        if outcome.stage.per_group and not stage.per_group:
            # a once-stage reading a per-group one sees the groups that succeeded; a failed group is
            # reported by its own stage and skipped, the others go on
            passed = {u.group: u.record for u in outcome.units if u.status in ("ran", "reused")}
            if not passed:
                return {}, f"{outcome.stage.name} succeeded for no group"
            records[outcome.stage.name] = passed
            continue
        unit = next((u for u in outcome.units if u.group == (group.name if outcome.stage.per_group and group
                                                              else None)), None)
        if unit is None or unit.status not in ("ran", "reused"):
            return {}, f"{outcome.stage.name} did not succeed" + (f" for {group.name}" if group else "")
        records[outcome.stage.name] = unit.record
    return records, ""


def _run_unit(stage: Stage[R], group: U | None, work: Work[U], options: Options, progress: Progress,
              done: list[StageOutcome], session: object, forced: bool, named: bool) -> UnitOutcome[R]:
    started = time.perf_counter()
    outcome = _run_unit_timed(stage, group, work, options, progress, done, session, forced, named)
    return replace(outcome, seconds=time.perf_counter() - started)


def _run_unit_timed(stage: Stage[R], group: U | None, work: Work[U], options: Options, progress: Progress,
                    done: list[StageOutcome], session: object, forced: bool, named: bool) -> UnitOutcome[R]:
    name = group.name if group else None
    records, missing = _upstream(stage, group, done)
    if missing:
        return UnitOutcome(name, "not run", missing, why=missing)
    project = work.project
    record_name = f"{stage.name}/{group.name}" if group else stage.name
    inputs: StageInputs[U, object] = StageInputs(work, options, progress, group, records, forced=named,
                                                 session=session)
    try:
        # the record is read once, before the key (a key may depend on what the last run found): as
        # the previous run (a kept engine, the files an entry point read) and, unless forced, for reuse
        stored, why = load_stage_record(project.build_dir, record_name, project.project.name)
        loaded = _load(stage, inputs, stored) if stored is not None else None
        inputs.previous = loaded
        if stored is not None and inputs.previous is None:
            why = f"record {record_name} no longer reads as a {stage.name} record"
        if stored is not None and inputs.previous is not None:
            inputs.previous_key = dict(stored.key_parts)
        key = {"stage": f"{stage.name}/{stage.version}", "edgebuild": __version__, **stage.key(inputs)}
        if forced:
            why = "forced (--force)" if named else "forced: it reads a stage forced with --force"
        elif stored is not None and inputs.previous is not None:
            why = stale_because(project.build_dir, stored, key) or ""
            if not why:
                progress(f"{record_name}: didn't change, reusing")
                previous = inputs.previous
                return _judged(stage, inputs, UnitOutcome(name, "reused", "reused: " + stage.describe(previous),
                                                          why="up to date", record=previous))
        progress(f"{record_name}: {why}")
        typed = stage.run(inputs)
        outputs = stamp_outputs(project.build_dir, stage.outputs(inputs, typed))
        write_stage_record(project.build_dir, StageRecord(record_name, project.project.name, key, outputs,
                                                          stage.dump(typed)))
        return _judged(stage, inputs, UnitOutcome(name, "ran", stage.describe(typed), why=why, record=typed))
    except EdgebuildError as exc:
        return UnitOutcome(name, "failed", exc.message.splitlines()[0], error=exc)


def _judged(stage: Stage[R], inputs: StageInputs, outcome: UnitOutcome[R]) -> UnitOutcome[R]:
    error = stage.verdict(inputs, cast(R, outcome.record)) if stage.verdict else None
    if error is None:
        return outcome
    return replace(outcome, status="failed", detail=f"{outcome.detail}; {error.message.splitlines()[0]}",
                   error=error)


def _load(stage: Stage[R], inputs: StageInputs, stored: StageRecord) -> R | None:
    """The typed record of a stored run, or None when it no longer reads as one (the stage re-runs)."""
    try:
        record = stage.load(stored.result)
        return stage.relocate(inputs, record) if stage.relocate else record
    except (TypeError, KeyError, ValueError, OSError, EdgebuildError):
        return None
