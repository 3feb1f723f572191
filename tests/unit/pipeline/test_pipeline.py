"""The stage protocol: reuse, --force propagation, untrusted records, interrupted runs, the lock.

The runner is exercised with two small stages that write real files, so each behaviour is
checked by what the stages actually did (how often they ran, what they wrote).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgebuild.content import digest, file_sha256
from edgebuild.errors import BuildLocked, ModelError
from edgebuild.pipeline.records import record_path
from edgebuild.pipeline.runner import Options, Stage, build_lock, run_stages
from edgebuild.project.config import load_project
from edgebuild.workflows.work import select_work


@dataclass(frozen=True)
class _Counted:
    value: str


@dataclass(frozen=True)
class _Copied:
    file: str


class _Toy:
    """A project stage "count" (writes a setting to a file) and a per-group stage "copy" after it."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.setting = "one"
        self.fail_for: str | None = None
        self.interrupt = False

    def stages(self) -> tuple[Stage, ...]:
        def count_run(inputs):
            self.runs.append("count")
            out = inputs.project.build_dir / "count.txt"
            out.write_text(self.setting)
            if self.interrupt:
                raise KeyboardInterrupt  # killed after writing its output, before its record
            return _Counted(self.setting)

        def copy_key(inputs):
            return {"count": file_sha256(inputs.project.build_dir / "count.txt")}

        def copy_run(inputs):
            self.runs.append(f"copy/{inputs.group.name}")
            if inputs.group.name == self.fail_for:
                raise ModelError(f"{inputs.group.name} cannot be copied")
            out = inputs.project.build_dir / f"copy-{inputs.group.name}.txt"
            out.write_text(inputs.record(count).value)
            return _Copied(out.name)

        build = lambda i: i.project.build_dir  # noqa: E731
        count = Stage(name="count", version=1, summary="", record=_Counted,
                      key=lambda i: {"setting": self.setting}, run=count_run,
                      outputs=lambda i, r: [build(i) / "count.txt"], describe=lambda r: r.value)
        copy = Stage(name="copy", version=1, summary="", record=_Copied, after=("count",), per_group=True,
                     key=copy_key, run=copy_run, outputs=lambda i, r: [build(i) / r.file], describe=lambda r: r.file)
        return count, copy


@pytest.fixture
def toy(tiny_project: Path):
    stages = _Toy()
    work = select_work(load_project(tiny_project), "yard-cams,dock")

    def run(**options):
        messages: list[str] = []
        stages.runs.clear()
        report = run_stages(work, stages.stages(), options=Options(**options), progress=messages.append)
        return report, messages

    stages.run = run
    stages.work = work
    return stages


def _statuses(report) -> dict[str, str]:
    return {f"{o.stage.name}/{u.group}" if u.group else o.stage.name: u.status for o in report.stages for u in o.units}


def test_a_second_run_reuses_every_stage_and_says_so(toy) -> None:
    first, _ = toy.run()
    assert toy.runs == ["count", "copy/yard-cams", "copy/dock"]
    assert set(_statuses(first).values()) == {"ran"}
    again, messages = toy.run()
    assert toy.runs == []
    assert set(_statuses(again).values()) == {"reused"}
    assert "count: didn't change, reusing" in messages


def test_a_changed_input_reruns_that_stage_and_what_reads_its_output(toy) -> None:
    toy.run()
    toy.setting = "two"
    report, messages = toy.run()
    assert toy.runs == ["count", "copy/yard-cams", "copy/dock"]
    assert "count: changed since the last run: setting" in messages
    assert "copy/dock: changed since the last run: count" in messages
    assert (toy.work.project.build_dir / "copy-dock.txt").read_text() == "two"


def test_force_a_stage_reruns_it_and_its_dependents_only(toy) -> None:
    toy.run()
    toy.run(force=frozenset({"copy"}))
    assert toy.runs == ["copy/yard-cams", "copy/dock"]
    toy.run(force=frozenset({"count"}))
    assert toy.runs == ["count", "copy/yard-cams", "copy/dock"]


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2]), "unreadable"),
    (lambda p: p.write_text(p.read_text().replace('"value": "one"', '"value": "forged"')), "modified outside"),
    (lambda p: _rewrite(p, edgebuild="0.0.1"), "written by edgebuild 0.0.1"),
    (lambda p: _rewrite(p, project="another"), "for project 'another'"),
    (lambda p: p.write_text(json.dumps({"format": "something/9", "body": {}, "sha256": ""})), "format"),
])
def test_an_untrusted_record_is_never_reused(toy, damage, why) -> None:
    toy.run()
    damage(record_path(toy.work.project.build_dir, "count"))
    report, messages = toy.run()
    assert "count" in toy.runs
    assert any(m.startswith("count: ") and why in m for m in messages), messages
    assert (toy.work.project.build_dir / "count.txt").read_text() == "one"


def _rewrite(path: Path, **changes: str) -> None:
    """A record edited consistently (checksum recomputed), as another edgebuild or project would write it."""
    stored = json.loads(path.read_text())
    stored["body"].update(changes)
    stored["sha256"] = digest(stored["body"])
    path.write_text(json.dumps(stored))


def test_an_output_changed_after_the_run_is_rebuilt(toy) -> None:
    toy.run()
    (toy.work.project.build_dir / "copy-dock.txt").write_text("edited")
    report, messages = toy.run()
    assert toy.runs == ["copy/dock"]
    assert "copy/dock: output files missing or modified: copy-dock.txt" in messages


def test_a_run_killed_mid_stage_leaves_the_previous_record_valid(toy) -> None:
    toy.run()
    record = record_path(toy.work.project.build_dir, "count")
    before = record.read_bytes()
    toy.setting, toy.interrupt = "two", True
    with pytest.raises(KeyboardInterrupt):
        toy.run()
    assert record.read_bytes() == before  # nothing half-written
    toy.setting, toy.interrupt = "one", False  # the old record's key again, but its output was overwritten
    report, messages = toy.run()
    assert toy.runs[0] == "count" and "count: output files missing or modified: count.txt" in messages
    assert (toy.work.project.build_dir / "count.txt").read_text() == "one"


def test_a_failed_group_stops_only_that_groups_later_stages(toy, monkeypatch) -> None:
    toy.fail_for = "dock"
    report, _ = toy.run()
    statuses = _statuses(report)
    assert statuses == {"count": "ran", "copy/yard-cams": "ran", "copy/dock": "failed"}
    assert "dock cannot be copied" in str(report.error)
    toy.fail_for = None
    report, _ = toy.run()
    assert toy.runs == ["copy/dock"]  # the failed run wrote no record; the good ones are reused


def test_two_compiles_of_one_project_are_refused(toy) -> None:
    with build_lock(toy.work.project.build_dir):
        with pytest.raises(BuildLocked, match="another edgebuild .*pid .* is building this project"):
            toy.run()
    toy.run()  # released
    assert toy.runs


def test_unknown_stage_in_force_is_refused(toy) -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        toy.run(force=frozenset({"nope"}))


def test_moving_an_image_to_another_class_folder_changes_the_validation_identity(example_copy) -> None:
    from edgebuild.datasets.project_data import prepare_data, validation_digest

    project = load_project(example_copy("digits-classifier"))
    prepare_data(project)
    before = validation_digest(project)
    images = project.path(project.data.validation.images)
    first, second = sorted(p for p in images.iterdir() if p.is_dir())[:2]
    moved = sorted(first.iterdir())[0]
    moved.rename(second / moved.name)  # same names, same bytes, another label
    assert validation_digest(project) != before


def test_a_verdict_refusing_a_group_stops_its_later_stages_in_the_same_run(toy) -> None:
    """The budget stage's shape: a valid per-group record whose verdict refuses one group; one walk, no second run."""
    ran: list[str] = []

    def judge_run(inputs):
        ran.append(f"judge/{inputs.group.name}")
        return _Counted(inputs.group.name)

    def copy_run(inputs):
        ran.append(f"copy/{inputs.group.name}")
        return _Copied(inputs.record(judge).value)

    judge = Stage(name="judge", version=1, summary="", record=_Counted, per_group=True, key=lambda i: {},
                  run=judge_run, describe=lambda r: r.value,
                  verdict=lambda i, r: ModelError(f"{r.value} refused") if r.value == "dock" else None)
    copy = Stage(name="copy", version=1, summary="", record=_Copied, after=("judge",), per_group=True,
                 key=lambda i: {}, run=copy_run, describe=lambda r: r.file)
    for done in ("ran", "reused"):  # the refusal stands when the judge's record is reused
        report = run_stages(toy.work, (judge, copy))
        assert _statuses(report) == {"judge/yard-cams": done, "judge/dock": "failed", "copy/yard-cams": done,
                                     "copy/dock": "not run"}
        assert report.outcome(copy).units[1].why == "judge did not succeed for dock"
        assert report.record(judge, "dock") == _Counted("dock")  # the refused group's record is kept
        assert "dock refused" in str(report.error)
    assert ran == ["judge/yard-cams", "judge/dock", "copy/yard-cams"]  # the second walk ran nothing
