"""``inspect``: the engines under a group folder, a model folder or an engine file, with their provenance,
engine header and integrity (the engine built by the TensorRT test double into tmp_path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgebuild.errors import ConfigError
from edgebuild.runtime import cli
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.group import GroupManifest, GroupModel
from edgebuild.runtime.engines.device import DeviceFacts, build_from_recipe
from edgebuild.runtime.engines.engine_info import engines_json, inspect_path, render_engines
from tests.fakes.tensorrt_double import make_tensorrt
from tests.support.jetson import JETSON_FILES
from tests.support.runtime_artifacts import TARGET, write_artifact

BOARD = tuple(s for s in JETSON_FILES[TARGET][1].decode().split("\0") if s)


def _built(folder: Path) -> Path:
    write_artifact(folder)
    build_from_recipe(folder / "recipe.json", DeviceFacts("10.3.0", "", "8.7", "36.4.3", BOARD),
                      trt=make_tensorrt("10.3.0"))
    return folder


def test_a_model_folder_shows_provenance_header_and_integrity(tmp_path: Path) -> None:
    folder = _built(tmp_path / "yard")
    info, = inspect_path(folder)
    assert info.engine_file == str(folder / "engine.plan") and info.record_file == str(folder / "engine.json")
    assert info.sha256_matches is True and info.plan_sha256 == sha256_file(folder / "engine.plan")
    assert info.provenance.tensorrt_version == "10.3.0" and info.provenance.unknown() == []
    assert not info.header.is_engine  # the double's engine bytes are not a TensorRT engine, and inspect says so
    text = render_engines([info])
    assert "matches engine.json: yes" in text and "does not start with the magic 'ftrt'" in text
    assert "TensorRT                10.3.0" in text and "L4T R36.4.3" in text
    data = engines_json([info])
    assert data["schema"] == "edgebuild.inspect/1" and data["engines"][0]["provenance"]["module"] == "orin-nano-8gb"
    json.dumps(data)
    # the engine file and the engine.json name the same engine
    assert inspect_path(folder / "engine.plan")[0].provenance == info.provenance
    assert inspect_path(folder / "engine.json")[0].engine_file == info.engine_file


def test_a_changed_plan_is_shown_as_not_matching(tmp_path: Path) -> None:
    folder = _built(tmp_path / "yard")
    (folder / "engine.plan").write_bytes(b"replaced")
    info, = inspect_path(folder)
    assert info.sha256_matches is False
    assert "NO: the engine is not the one engine.json describes" in render_engines([info])


def test_a_deferred_folder_says_the_device_builds_its_engine(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    info, = inspect_path(folder)
    assert info.engine_file is None and "placement deferred" in info.note and "at first start" in info.note
    cached = folder / "engine-cache" / "trt10.3.0-sm87-fp32-abc"
    _built(cached)
    infos = inspect_path(folder)
    assert [i.engine_file for i in infos] == [None, str(cached / "engine.plan")] and infos[1].sha256_matches


def test_a_group_folder_lists_every_model(tmp_path: Path) -> None:
    group = tmp_path / "groups" / "yard"
    _built(group / "models" / "tiny")
    GroupManifest(group="yard", target=TARGET, fleet="fleet.toml", version="1.0.0",
                  models=[GroupModel("tiny", "tiny", "models/tiny", "0.3.0", "fp32")], memory_plan={}).save(group)
    info, = inspect_path(group)
    assert info.name == "tiny" and info.sha256_matches
    assert [i.name for i in inspect_path(tmp_path / "groups")] == ["tiny"]  # a folder of group folders


def test_an_older_engine_json_shows_what_it_does_not_say(tmp_path: Path) -> None:
    (tmp_path / "engine.plan").write_bytes(b"plan")
    (tmp_path / "engine.json").write_text(json.dumps({"tensorrt_version": "8.5.2.2", "compute_capability": "8.7"}))
    info, = inspect_path(tmp_path / "engine.plan")
    assert info.sha256_matches is None
    text = render_engines([info])
    assert "builder flags           unknown" in text and "not recorded by the edgebuild that built it" in text


def test_nothing_to_inspect_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or folder"):
        inspect_path(tmp_path / "missing")
    with pytest.raises(ConfigError, match="neither a group folder"):
        inspect_path(tmp_path)


def test_the_device_cli_inspects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _built(tmp_path / "yard")
    assert cli.main(["inspect", str(folder)]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["ok"] and answer["inspect"]["engines"][0]["sha256_matches"] is True
    assert "matches engine.json: yes" in err


def test_the_build_host_cli_inspects(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from edgebuild.cli import main

    folder = _built(tmp_path / "yard")
    text = CliRunner().invoke(main, ["inspect", str(folder)])
    assert text.exit_code == 0 and "matches engine.json: yes" in text.output and "TensorRT" in text.output
    as_json = CliRunner().invoke(main, ["inspect", str(folder / "engine.plan"), "--json"])
    engine, = json.loads(as_json.output)["engines"]
    assert engine["provenance"]["tensorrt_version"] == "10.3.0"
    # the --json keys are engine.json's: "plan" is the engine file (EngineInfo.engine_file)
    assert engine["plan"] == str(folder / "engine.plan")
    assert engine["plan_sha256"] == sha256_file(folder / "engine.plan")
    (tmp_path / "empty").mkdir()
    refused = CliRunner().invoke(main, ["inspect", str(tmp_path / "empty")])
    assert refused.exit_code != 0 and "neither a group folder" in refused.output  # a user error, no traceback
    assert "Traceback" not in refused.output
