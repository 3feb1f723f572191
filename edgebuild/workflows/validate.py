"""``edgebuild validate``: the accuracy gate on this host, or each group's model folder measured on
a device (``--device ssh://``) or on a board of its profile reserved from the farm (``--farm``).

On a device, each group's model folder is measured over the validation set and scored here with
the gate's code; retention and pass/fail are the gate result's ``policy`` (``accuracy.policy``),
against the gate's FP32 reference. The results carry their refusal (``error``), which the
caller raises after showing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.engines.device import DeviceFacts
from edgebuild.stages.engine import ENGINE
from edgebuild.stages.gate import GATE
from edgebuild.text import Progress
from edgebuild.workflows.work import CompileWork, load_work, ran, run_until

if TYPE_CHECKING:
    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.devices.farm import JobResult
    from edgebuild.errors import EdgebuildError
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["DeviceValidation", "GroupOnDevice"]



# -- on this host: the gate ----------------------------------------------------------------------

@dataclass(frozen=True)
class GateRun:
    work: CompileWork
    result: GateResult
    reused: bool  # nothing changed since the gate last decided
    error: EdgebuildError | None  # the gate's refusal (nothing selectable passes), raised after it is shown


def validate_here(project_dir: Path, selector: str, *, force: bool = False, backend: str | None = None,
                  progress: bool = False, say: Progress = lambda _: None) -> GateRun:
    """The gate's candidates measured on this host (``backend`` overrides accuracy.backend)."""
    work = load_work(project_dir, selector)
    if backend:
        work = replace(work, project=work.project.with_accuracy_backend(backend))
    outcome = ran(run_until(work, GATE, force=force, progress=progress, say=say), GATE)
    result = outcome.record()
    if result is None:
        assert outcome.error is not None, "the gate neither decided nor failed"
        raise outcome.error
    return GateRun(work, result, outcome.status == "reused", outcome.error)


# -- on devices ---------------------------------------------------------------------------------

#: a --farm row's keys, after the measurement's: absent from a --device row
_ON_FARM = ("board", "retried_from")


@dataclass(frozen=True)
class GroupOnDevice:
    """One group's model folder measured on a device: the row ``validate --device`` and ``--farm`` show."""

    group: str
    candidate: str
    metric: str
    value: float
    retention: float
    passed: bool
    backend: str
    backend_reason: str
    images: int
    inference_s: float
    device: DeviceFacts | None  # what the device said of itself
    sent: list[str]  # what was copied to it (nothing: it had the model folder and inputs)
    url: str
    #: --farm: the board it ran on (None: a --device row, and the two keys are left out of the JSON)
    board: str | None = None
    retried_from: str | None = None  # --farm: the board that stopped answering first

    def as_dict(self) -> JsonObject:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _ON_FARM}
        data["device"] = self.device.as_dict() if self.device is not None else None
        if self.board is not None:
            data.update(board=self.board, retried_from=self.retried_from)
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> GroupOnDevice:
        device = data.get("device")
        return cls(**{**data, "device": DeviceFacts.from_dict(device) if device is not None else None})


@dataclass(frozen=True)
class DeviceValidation:
    """Each group's model folder measured on a device (``records``: one row per group)."""

    where: str  # the device's ssh:// URL, or the farm's coordinator
    gate: GateResult  # the FP32 reference and the policy every row was judged by
    images: int  # validation images
    records: list[GroupOnDevice]
    jobs: list[JobResult] = field(default_factory=list)  # --farm: every job, failed ones included
    jobs_file: Path | None = None  # --farm: build/farm/validate.json

    @property
    def failed_jobs(self) -> list[JobResult]:
        return [j for j in self.jobs if j.error is not None]

    @property
    def error(self) -> EdgebuildError | None:
        """The first job that failed, else the refusal of every group the policy refuses."""
        if self.failed_jobs:
            return self.failed_jobs[0].error
        from edgebuild.errors import AccuracyGateError

        refused = [r for r in self.records if self.gate.policy.refuses(r.retention)]
        if not refused:
            return None
        return AccuracyGateError("; ".join(
            f"{r.group} keeps {r.retention:.3f} of the FP32 {r.metric} on {r.url} [{r.backend}]" for r in refused),
            hint="the engine loses more on the device than the gate allowed: try fp16 for that group")


def evaluate_group(project: Project, gate: GateResult, group: SelectedGroup, folder: Path, url: str,
                   data: ValidationSet, progress: Progress = lambda _: None) -> GroupOnDevice:
    """One group's model folder measured on the device at ``url``: the row ``validate --device`` shows."""
    from edgebuild.devices.evaluation import evaluate_on_device
    from edgebuild.runtime.base.recipe import Recipe

    recipe = Recipe.load(folder)
    evaluation, answer = evaluate_on_device(project, folder, url, data=data, progress=progress)
    retention = gate.policy.retention(evaluation.value, gate.reference_value)
    device = answer["device"]
    return GroupOnDevice(group.name, recipe.candidate, evaluation.metric, evaluation.value, retention,
                         gate.policy.passes(retention), evaluation.backend, answer["backend_reason"], evaluation.images,
                         answer["inference_s"], DeviceFacts.from_dict(device) if device is not None else None,
                         answer["sent"], url)


def _engines(work: CompileWork, progress: Progress) -> tuple[GateResult, dict[str, Path], ValidationSet]:
    """The engine stage run as needed: the gate's result, each group's model folder, the validation set."""
    from edgebuild.accuracy.evaluate import ValidationSet

    done = run_until(work, ENGINE, say=progress)
    engines = {u.group: u.record for u in ran(done, ENGINE).units}
    failed = next((u.error for u in ran(done, ENGINE).units if u.record is None and u.error), None)
    if failed is not None:  # a group with no model folder to measure
        raise failed
    gate = done.record(GATE)
    assert gate is not None, "the engine stage ran without the gate"
    build = work.project.build_dir
    folders = {g.name: build / engine.folder for g in work.groups if (engine := engines.get(g.name)) is not None}
    return gate, folders, ValidationSet(work.project)


def validate_on_device(project_dir: Path, selector: str, url: str, *,
                       progress: Progress = lambda _: None) -> DeviceValidation:
    """``validate --device``: each group's model folder measured on the device at ``url``."""
    from edgebuild.devices.remote_bench import check_remote_url

    work = load_work(project_dir, selector)
    url = check_remote_url(url)
    gate, folders, data = _engines(work, progress)
    records = [evaluate_group(work.project, gate, g, folders[g.name], url, data, progress) for g in work.groups]
    return DeviceValidation(url, gate, len(data), records)


def validate_on_farm(project_dir: Path, selector: str, address: str | None, *, jobs: int | None = None,
                     timeout_s: float | None = None, progress: Progress = lambda _: None) -> DeviceValidation:
    """``validate --farm``: each group's model folder measured on a board of its profile, in parallel;
    the jobs and rows are written to ``build/farm/validate.json``."""
    from edgebuild.devices.farm import fan_out_groups, open_farm, write_jobs_file
    from edgebuild.project.layout import BuildLayout

    work = load_work(project_dir, selector)
    project = work.project
    farm = open_farm(project, address, timeout_s, progress=progress)
    gate, folders, data = _engines(work, progress)
    for _ in data.batches():  # preprocessed once, before the jobs share it
        pass
    results = fan_out_groups(farm, work.groups, lambda g, board: evaluate_group(
        project, gate, g, folders[g.name], board.url, data, progress), max_jobs=jobs or project.farm.jobs)
    records = [replace(r.result, board=r.board, retried_from=r.retried_from) for r in results if r.error is None]
    path = write_jobs_file(BuildLayout.of(project).farm_jobs("validate"), results,
                           {"reference_value": gate.reference_value, "groups": [r.as_dict() for r in records],
                            "baseline": gate.baseline.as_dict() if gate.baseline else None})
    return DeviceValidation(farm.coordinator, gate, len(data), records, results, path)
