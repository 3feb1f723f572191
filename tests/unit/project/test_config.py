"""edgebuild.toml validation: a broken file gives one short error naming the file and the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from tests.support.project import TINY_TOML, write_tiny_project


def _without(text: str, start: str, end: str) -> str:
    """TINY_TOML with the lines from `start` up to (not including) `end` removed."""
    head, rest = text.split(start, 1)
    return head + end + rest.split(end, 1)[1]


# (case id, edit of the valid file, the key the error must name, words the error must contain)
BROKEN = [
    ("missing-section", lambda t: _without(t, "[data]\n", "[accuracy]"), "data", "required key is missing"),
    ("wrong-type", lambda t: t.replace("min_retention = 0.92", 'min_retention = "high"'),
     "accuracy.min_retention", "valid number"),
    ("unknown-key", lambda t: t.replace('name = "tiny"', 'name = "tiny"\ncolour = "red"'),
     "project.colour", "unknown key (allowed here: name, build_dir)"),
    ("unknown-module", lambda t: t.replace('"orin-nano-8gb"', '"orin-nano-9gb"'),
     "fleet[0].module", "unknown module 'orin-nano-9gb'"),
    ("module-jetpack-mismatch", lambda t: t.replace('module = "xavier-nx"\njetpack = "5.1.2"',
                                                     'module = "xavier-nx"\njetpack = "6.2"'),
     "fleet[2]", "not supported by JetPack 6.2"),
    ("unknown-jetpack", lambda t: t.replace('jetpack = "6.2"', 'jetpack = "6.9"'),
     "fleet[0].jetpack", "unknown JetPack release '6.9'"),
    ("bad-entry-point", lambda t: t.replace("tinydet.model:build_model", "tinydet.model.build_model"),
     "model.entry_point", "package.module:function"),
    ("missing-data-path", lambda t: t.replace('calibration_images = "data/calibration"',
                                              'calibration_images = "data/nope"'),
     "data.calibration_images", "path does not exist"),
    ("retention-above-one", lambda t: t.replace("min_retention = 0.92", "min_retention = 1.5"),
     "accuracy.min_retention", "must be in (0, 1]"),
    ("retention-zero", lambda t: t.replace("min_retention = 0.92", "min_retention = 0"),
     "accuracy.min_retention", "must be in (0, 1]"),
    ("min-above-max", lambda t: t.replace("min_shape = [1, 3, 32, 32]", "min_shape = [8, 3, 32, 32]"),
     "model.inputs[0]", "axis 0 needs min <= opt <= max, found 8, 2, 4"),
    ("rank-mismatch", lambda t: t.replace("opt_shape = [2, 3, 64, 64]", "opt_shape = [2, 3, 64]"),
     "model.inputs[0]", "same rank"),
    ("duplicate-group", lambda t: t.replace('name = "legacy"', 'name = "dock"'),
     "fleet[2].name", "duplicate group name 'dock' (also fleet[1])"),
    ("not-toml", lambda t: t.replace("[project]", "[project"), "", "not valid TOML"),
    ("unknown-task-kind", lambda t: t.replace('kind = "detection"', 'kind = "depth"'),
     "task", "'detection', 'classification', 'segmentation', 'pose' or 'obb', found 'depth'"),
    ("output-not-declared", lambda t: t.replace('outputs = ["boxes", "scores"]', 'outputs = ["bbox", "scores"]'),
     "task.postprocess.boxes_output", "'boxes' is not one of model.outputs"),
    ("metric-for-other-task", lambda t: t.replace("min_retention = 0.92", 'metric = "top-1"\nmin_retention = 0.92'),
     "accuracy.metric", "does not apply to detection"),
    ("input-size-outside-profile", lambda t: t.replace("input_size = [64, 64]", "input_size = [128, 128]"),
     "task.preprocess.input_size", "outside the shape range"),
    ("build-on-not-ssh", lambda t: t.replace('jetpack = "6.2"', 'jetpack = "6.2"\nbuild_on = "nvidia@orin-01"'),
     "fleet[0].build_on", "is not an ssh://[user@]host[:port] address"),
    ("dla-without-cores", lambda t: t.replace('jetpack = "6.2"', 'jetpack = "6.2"\nuse_dla = true'),
     "fleet[0].use_dla", "has no DLA cores"),
    ("mean-wrong-length", lambda t: t.replace('resize = "letterbox"', 'resize = "letterbox"\nmean = [0.5]'),
     "task.preprocess", "mean needs 3 value(s)"),
    ("negative-shape", lambda t: t.replace("max_shape = [4, 3, 96, 96]", "max_shape = [4, 3, -96, 96]"),
     "model.inputs[0].max_shape[2]", "greater than 0"),
    ("no-fleet", lambda t: t.split("[[fleet]]")[0], "fleet", "required key is missing"),
    ("unknown-dtype", lambda t: t.replace('dtype = "float32"', 'dtype = "float64"'),
     "model.inputs[0].dtype", "float64"),
    ("mender-device-type-of-unknown-module",
     lambda t: t + '\n[ota]\ndevice_types = {"orin-nano-9gb" = ["jetson-orin-nano-devkit"]}\n',
     "ota.device_types", "'orin-nano-9gb' is not a module id"),
    ("batch-past-the-profile", lambda t: t + "\n[runtime]\nmax_batch_size = 8\n",
     "runtime.max_batch_size", "max_shape is [4, 3, 96, 96]"),
    ("no-instances", lambda t: t + "\n[runtime]\ninstance_count = 0\n",
     "runtime.instance_count", "greater than or equal to 1"),
    ("preferred-past-the-max-batch", lambda t: t + "\n[runtime]\nmax_batch_size = 4\npreferred_batch_size = [2, 8]\n",
     "runtime.preferred_batch_size", "[8] is outside 2 to max_batch_size (4)"),
    ("tracking-metric-not-judged", lambda t: t + '\n[accuracy.tracking]\nmetric = "MOTA"\n',
     "accuracy.tracking.metric", "'HOTA' or 'IDF1'"),
    ("tracking-unknown-tracker", lambda t: t + '\n[accuracy.tracking]\ntracker = "sort"\n',
     "accuracy.tracking.tracker", "'bytetrack' or 'ocsort'"),
    ("tracking-set-twice", lambda t: t + '\n[accuracy.tracking]\nsequences = "mot"\nstreams = 2\n',
     "accuracy.tracking", "sequences names the set, so streams"),
    ("tracking-sequences-missing", lambda t: t + '\n[accuracy.tracking]\nsequences = "mot"\n',
     "accuracy.tracking.sequences", "path does not exist"),
    ("preferred-not-a-number", lambda t: t + '\n[runtime]\npreferred_batch_size = ["four"]\n',
     "runtime.preferred_batch_size[0]", "valid integer"),
]


@pytest.mark.parametrize("case, edit, key, words", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_project_file_names_file_and_key(tmp_path: Path, case, edit, key, words) -> None:
    write_tiny_project(tmp_path, edit(TINY_TOML))
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "edgebuild.toml") + ":")
    assert f"{key}:" in message or f"{key} " in message or not key
    assert words in message
    assert len(message.splitlines()) <= 3, message

    result = CliRunner().invoke(main, ["check", "--project", str(tmp_path)])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert words in result.output


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    text = TINY_TOML.replace("min_retention = 0.92", "min_retention = 7").replace(
        'name = "tiny"', 'name = "tiny"\nextra = 1')
    write_tiny_project(tmp_path, text)
    with pytest.raises(ConfigError, match="2 problems") as caught:
        load_project(tmp_path)
    assert "project.extra" in str(caught.value) and "accuracy.min_retention" in str(caught.value)


def test_valid_project_loads_with_defaults(tiny_project: Path) -> None:
    project = load_project(tiny_project)
    assert project.metric == "mAP50-95"
    assert project.accuracy.min_retention == 0.92
    assert project.model.inputs[0].dynamic_axes == [0, 2, 3]
    assert [g.target_id for g in project.fleet] == ["orin-nano-8gb@6.2", "agx-orin-64gb@5.1.2",
                                                    "xavier-nx@5.1.2"]
    assert project.runtime.port == 8000


def test_unquoted_jetpack_version_is_accepted(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace('jetpack = "6.2"', "jetpack = 6.2"))
    assert load_project(tmp_path).fleet[0].jetpack == "6.2"


def test_missing_project_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="project file not found"):
        load_project(tmp_path)


def _project_with_prepare(tmp_path: Path, body: str) -> Path:
    write_tiny_project(tmp_path, TINY_TOML.replace(
        'calibration_images = "data/calibration"',
        'calibration_images = "data/generated"\nprepare = "tinydet.prep:prepare"'))
    (tmp_path / "tinydet" / "prep.py").write_text("import os\ndef prepare(root):\n" + body)
    return tmp_path


def test_loading_and_checking_a_project_runs_no_user_code(tmp_path: Path) -> None:
    root = _project_with_prepare(tmp_path, "    open(os.path.join(root, 'ran'), 'w').close()\n")
    project = load_project(root)  # the missing data is prepare's to make, not an error here
    result = CliRunner().invoke(main, ["check", "--project", str(root)])
    assert result.exit_code == 0, result.output
    assert "data.calibration_images not there yet" in result.output and "edgebuild data prepare" in result.output
    assert not (root / "ran").exists() and not project.path(project.data.calibration_images).exists()


def test_data_prepare_creates_missing_data_once(tmp_path: Path) -> None:
    root = _project_with_prepare(tmp_path, "    os.makedirs(os.path.join(root, 'data', 'generated'))\n"
                                           "    open(os.path.join(root, 'data', 'generated', '0.png'), 'wb').close()\n")
    first = CliRunner().invoke(main, ["data", "prepare", "--project", str(root)])
    assert first.exit_code == 0 and "prepared by tinydet.prep:prepare" in first.output, first.output
    assert (root / "data" / "generated").is_dir()
    again = CliRunner().invoke(main, ["data", "prepare", "--project", str(root)])
    assert again.exit_code == 0 and "every data path is there" in again.output


def test_data_prepare_that_makes_nothing_is_a_data_error(tmp_path: Path) -> None:
    root = _project_with_prepare(tmp_path, "    pass\n")
    result = CliRunner().invoke(main, ["data", "prepare", "--project", str(root)])
    assert result.exit_code == 5
    assert "data.calibration_images: path does not exist" in result.output and "did not create it" in result.output


def test_cli_error_is_one_line_without_traceback_and_verbose_shows_it(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace("min_retention = 0.92", "min_retention = 2"))
    cmd = [sys.executable, "-m", "edgebuild", "check", "--project", str(tmp_path)]
    plain = subprocess.run(cmd, capture_output=True, text=True)
    assert plain.returncode == 3
    assert re.fullmatch(r"error: config error: .*edgebuild\.toml: accuracy\.min_retention: .*\n", plain.stderr)
    verbose = subprocess.run(cmd[:3] + ["-v"] + cmd[3:], capture_output=True, text=True)
    assert verbose.returncode == 3 and "Traceback" in verbose.stderr


def test_init_writes_a_file_that_parses(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    project = load_project(tmp_path, check_paths=False)
    assert project.task.kind == "detection" and len(project.fleet) == 2
    again = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert again.exit_code == 3 and "already exists" in again.output


# (case id, edit of the valid file, what the error must say): issue 34's words for what is wrong
SAID = [
    ("fleet-as-one-table", lambda t: t.split("[[fleet]]")[0] + "[fleet]" + t.split("[[fleet]]")[1],
     "fleet: written as one table [fleet]; it is a list of tables: write [[fleet]]"),
    ("every-group-as-one-table", lambda t: t.replace("[[fleet]]", "[fleet]"),
     "([fleet] is a list of tables, one per device group: write [[fleet]], two pairs of brackets, above each)"),
    ("inputs-as-one-table", lambda t: t.replace("[[model.inputs]]", "[model.inputs]"),
     "write [[model.inputs]] (two pairs of brackets)"),
    ("task-as-a-list-of-tables", lambda t: t.replace("[task]", "[[task]]"),
     "task: written as a list of tables [[task]]; it is one table: write [task]"),
    ("typo-names-the-close-key", lambda t: t.replace("min_retention", "min_retension"),
     "accuracy.min_retension: unknown key (did you mean 'min_retention'?)"),
    ("top-level-key-of-a-table", lambda t: 'build_dir = "out"\n' + t,
     "build_dir: unknown key (a key of [project]: write it under that table)"),
    ("toml-syntax-names-the-line", lambda t: t.replace("min_retention = 0.92", "min_retention = = 0.92"),
     "not valid TOML: Invalid value"),
    ("toml-key-twice", lambda t: t.replace("min_retention = 0.92", "min_retention = 0.92\nmin_retention = 0.9"),
     "(a key or table written twice: keep one)"),
    ("build-dir-a-file", lambda t: t.replace('name = "tiny"', 'name = "tiny"\nbuild_dir = "notes.txt"'),
     "notes.txt is a file, not a folder"),
    ("signing-key-missing", lambda t: t + '\n[ota]\nsigning_key = "keys/none.pem"\n',
     "ota.signing_key: file not found"),
]


@pytest.mark.parametrize("case, edit, words", SAID, ids=[c[0] for c in SAID])
def test_what_is_wrong_is_said_in_words(tmp_path: Path, case, edit, words) -> None:
    write_tiny_project(tmp_path, edit(TINY_TOML))
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path)
    assert str(caught.value).startswith(str(tmp_path / "edgebuild.toml") + ":")
    assert words in str(caught.value), str(caught.value)


def test_a_toml_syntax_error_shows_the_line_and_column(tmp_path: Path) -> None:
    text = TINY_TOML.replace("min_retention = 0.92", "min_retention = = 0.92")
    write_tiny_project(tmp_path, text)
    number = text.splitlines().index("min_retention = = 0.92") + 1
    with pytest.raises(ConfigError, match=rf"line {number}, column 17: not valid TOML") as caught:
        load_project(tmp_path)
    assert f"{number} | min_retention = = 0.92" in str(caught.value)


def test_a_utf8_bom_is_not_toml_and_is_skipped(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML)
    path = tmp_path / "edgebuild.toml"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_project(tmp_path).project.name == "tiny"


def test_a_folder_as_the_model_or_the_project_file_is_said(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace('entry_point = "tinydet.model:build_model"',
                                                   'source = "weights"'))
    (tmp_path / "weights").mkdir()
    with pytest.raises(ConfigError, match="model.source: .*weights is a folder, not a model file"):
        load_project(tmp_path)
    (tmp_path / "other" / "edgebuild.toml").mkdir(parents=True)
    with pytest.raises(ConfigError, match="edgebuild.toml: a folder, not a project file"):
        load_project(tmp_path / "other")


def test_the_tracking_table_reads_with_its_defaults(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace("min_retention = 0.92", "min_retention = 0.92\n\n"
                                                  "[accuracy.tracking]\nmin_retention = 1.5\nframes = 30"))
    tracking = load_project(tmp_path).accuracy.tracking
    assert tracking is not None and tracking.enabled and tracking.metric == "HOTA" and tracking.tracker == "bytetrack"
    assert (tracking.streams, tracking.frames, tracking.seed, tracking.min_retention) == (4, 30, 0, 1.5)
    write_tiny_project(tmp_path)
    assert load_project(tmp_path).accuracy.tracking is None


def test_the_tracking_gate_is_refused_for_a_task_that_is_not_detection(tmp_path: Path) -> None:
    from tests.support.project import EXAMPLES

    text = (EXAMPLES / "digits-classifier" / "edgebuild.toml").read_text()
    (tmp_path / "edgebuild.toml").write_text(text + "\n[accuracy.tracking]\nstreams = 2\n")
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path, check_paths=False)
    assert "accuracy.tracking: the tracking gate follows a detector's boxes; this task is classification" \
        in str(caught.value)
    (tmp_path / "edgebuild.toml").write_text(text + "\n[accuracy.tracking]\nenabled = false\n")
    assert load_project(tmp_path, check_paths=False).accuracy.tracking is not None
