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
from tests.support.runtime_artifacts import SHAPES, TARGET, recipe_for, write_artifact

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


def test_a_deferred_folder_shows_what_the_device_will_build(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    recipe_for(folder, TARGET, placement_reason="TensorRT is not installed on this host").save(folder)
    digest = sha256_file(folder / "model.onnx")
    info, = inspect_path(folder)
    assert info.deferred is not None and info.deferred.onnx.matches and info.deferred.intact
    text = render_engines([info])
    for shown in ("matches recipe.json: yes", "deferred build ({})".format(folder / "recipe.json"),
                  "TensorRT            10.3.0.30", "compute capability  8.7",
                  "orin-nano-8gb@6.2 (module Jetson Orin Nano 8GB (orin-nano-8gb), JetPack 6.2, L4T 36.4.3",
                  "precision           fp32 (candidate fp32, kept in FP32: none)",
                  "images min [1, 3, 8, 8] opt [2, 3, 16, 16] max [4, 3, 32, 32]",
                  "ONNX                model.onnx, sha256 " + digest,
                  "placement deferred: TensorRT is not installed on this host"):
        assert shown in text, shown
    deferred = engines_json([info])["engines"][0]["deferred"]
    json.dumps(deferred)
    assert deferred["builds_on"] == "first_boot" and "at first start" in deferred["where"]
    assert (deferred["tensorrt_version"], deferred["jetpack"], deferred["l4t"]) == ("10.3.0.30", "6.2", "36.4.3")
    assert deferred["module"] == "orin-nano-8gb" and deferred["compute_capability"] == "8.7"
    assert deferred["onnx"] == {"file": "model.onnx", "sha256": digest, "found_sha256": digest, "matches": True}
    assert deferred["shapes"]["images"] == dict(zip(("min", "opt", "max"), SHAPES))
    assert (deferred["precision"], deferred["candidate"], deferred["intact"]) == ("fp32", "fp32", True)


def test_a_changed_or_missing_onnx_in_a_deferred_folder_is_shown_as_not_matching(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    recorded = sha256_file(folder / "model.onnx")
    (folder / "model.onnx").write_bytes(b"tampered")
    info, = inspect_path(folder)
    text = render_engines([info])
    assert "matches recipe.json: NO: the ONNX is not the one recipe.json names" in text
    assert "ONNX file: model.onnx, sha256 " + sha256_file(folder / "model.onnx") in text
    assert "ONNX                model.onnx, sha256 " + recorded in text  # what the recipe expects
    onnx = engines_json([info])["engines"][0]["deferred"]["onnx"]
    assert onnx["matches"] is False and onnx["sha256"] == recorded and onnx["found_sha256"] != recorded
    assert engines_json([info])["engines"][0]["deferred"]["intact"] is False
    (folder / "model.onnx").unlink()
    info, = inspect_path(folder)
    assert "matches recipe.json: NO: the ONNX is missing" in render_engines([info])
    assert engines_json([info])["engines"][0]["deferred"]["onnx"]["found_sha256"] is None


def test_a_deferred_folder_checks_its_fallback_and_says_where_a_build_device_builds(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    write_artifact(folder / "fallback")
    recipe_for(folder, TARGET, placement="ssh://nvidia@jet", fallback="fallback",
               fallback_sha256=sha256_file(folder / "fallback" / "recipe.json")).save(folder)
    info, = inspect_path(folder)
    assert "on the build device ssh://nvidia@jet" in info.note
    assert "fallback/: fp32 (candidate fp32); recipe.json intact, ONNX intact" in render_engines([info])
    data = engines_json([info])["engines"][0]["deferred"]
    assert data["builds_on"] == "build_device" and data["fallback"]["onnx"]["matches"] is True
    (folder / "fallback" / "model.onnx").write_bytes(b"tampered")
    info, = inspect_path(folder)
    assert "recipe.json intact, ONNX NOT INTACT: sha256" in render_engines([info])
    assert not info.deferred.intact


def test_an_unreadable_recipe_is_said_not_raised(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    (folder / "recipe.json").write_text(json.dumps({"schema": "edgebuild.recipe/0"}))
    info, = inspect_path(folder)
    assert info.deferred is None and "recipe.json does not read" in info.note and "schema" in info.note


def test_a_built_engine_shows_no_deferred_build(tmp_path: Path) -> None:
    folder = _built(tmp_path / "yard")
    info, = inspect_path(folder)
    assert info.deferred is None and "deferred build" not in render_engines([info])
    entry = engines_json([info])["engines"][0]
    assert entry.pop("deferred") is None
    assert list(entry) == ["name", "plan", "engine_json", "provenance", "unknown", "plan_bytes", "plan_sha256",
                           "sha256_matches", "header", "note"]


def test_a_group_folder_lists_every_model(tmp_path: Path) -> None:
    group = tmp_path / "groups" / "yard"
    _built(group / "models" / "tiny")
    GroupManifest(group="yard", target=TARGET, fleet="fleet.toml", version="1.0.0",
                  models=[GroupModel("tiny", "tiny", "models/tiny", "0.3.0", "fp32")], memory_plan={}).save(group)
    info, = inspect_path(group)
    assert info.name == "tiny" and info.sha256_matches
    assert [i.name for i in inspect_path(tmp_path / "groups")] == ["tiny"]  # a folder of group folders
    write_artifact(group / "models" / "wide")  # a deferred model beside the built one
    GroupManifest(group="yard", target=TARGET, fleet="fleet.toml", version="1.0.0",
                  models=[GroupModel("tiny", "tiny", "models/tiny", "0.3.0", "fp32"),
                          GroupModel("wide", "wide", "models/wide", "0.3.0", "fp32")], memory_plan={}).save(group)
    built, deferred = inspect_path(group)
    assert built.deferred is None and deferred.name == "wide" and deferred.deferred.onnx.matches


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
    deferred = write_artifact(tmp_path / "later")
    assert cli.main(["inspect", str(deferred)]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["inspect"]["engines"][0]["deferred"]["tensorrt_version"] == "10.3.0.30"
    assert "matches recipe.json: yes" in err


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
    deferred = write_artifact(tmp_path / "later")
    text = CliRunner().invoke(main, ["inspect", str(deferred)])
    assert text.exit_code == 0 and "deferred build" in text.output and "JetPack 6.2" in text.output
    as_json = CliRunner().invoke(main, ["inspect", str(deferred), "--json"])
    assert json.loads(as_json.output)["engines"][0]["deferred"]["onnx"]["matches"] is True
    (tmp_path / "empty").mkdir()
    refused = CliRunner().invoke(main, ["inspect", str(tmp_path / "empty")])
    assert refused.exit_code != 0 and "neither a group folder" in refused.output  # a user error, no traceback
    assert "Traceback" not in refused.output
