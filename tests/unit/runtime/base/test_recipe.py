"""The model folder's recipe: one typed record, checked once, refused clearly when it is broken."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, RECIPE_FILE, RECIPE_SCHEMA, Recipe
from edgebuild.runtime.engines.device import DeviceFacts, mismatches
from edgebuild.targets.presets import LimitPreset, load_preset
from tests.support.runtime_artifacts import TARGET, write_artifact


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_artifact(tmp_path / "yard")


def _edit(folder: Path, change) -> Path:
    data = json.loads((folder / RECIPE_FILE).read_text())
    change(data)
    (folder / RECIPE_FILE).write_text(json.dumps(data))
    return folder / RECIPE_FILE


def test_a_recipe_round_trips_through_its_file(folder: Path) -> None:
    recipe = Recipe.load(folder)
    assert Recipe.load(folder / RECIPE_FILE) == recipe
    assert recipe.target == TARGET and recipe.runtime.port == 8000 and recipe.module.compatible[-1] == "nvidia,tegra234"
    data = json.loads((folder / RECIPE_FILE).read_text())
    assert next(iter(data)) == "schema" and data["schema"] == RECIPE_SCHEMA
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    # the limits it carries are the preset the engine stage used, typed again on the build side
    assert LimitPreset.from_dict(dataclasses.asdict(recipe.limits)) == load_preset("orin-nano-8gb")


def test_the_folder_lists_its_files(folder: Path) -> None:
    recipe = Recipe.load(folder)
    assert recipe.file_names() == [RECIPE_FILE, "model.onnx", ENGINE_FILE, ENGINE_JSON]
    assert recipe.file_names(engine=False) == [RECIPE_FILE, "model.onnx"]
    assert set(recipe.model_files(folder)) == {RECIPE_FILE, "model.onnx"} and not Recipe.has_engine(folder)
    (folder / ENGINE_FILE).write_bytes(b"plan")
    (folder / ENGINE_JSON).write_text("{}")
    assert set(recipe.model_files(folder)) == {RECIPE_FILE, "model.onnx", ENGINE_FILE, ENGINE_JSON}
    assert Recipe.has_engine(folder)
    assert recipe.compatibility() == {"module": {"id": "orin-nano-8gb", "name": recipe.module.name,
                                                 "compatible": recipe.module.compatible},
                                      "l4t_accepted": recipe.l4t_accepted, "jetpack": "6.2"}


def test_a_folder_without_a_recipe(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{tmp_path}: no recipe.json here") as caught:
        Recipe.load(tmp_path)
    assert "edgebuild compile" in caught.value.hint
    with pytest.raises(ConfigError, match="no recipe.json here") as caught:
        Recipe.load(tmp_path / "missing", hint="run it first")
    assert caught.value.hint == "run it first"


def test_a_truncated_recipe_names_the_file(folder: Path) -> None:
    path = folder / RECIPE_FILE
    path.write_text(path.read_text()[:200])
    with pytest.raises(ConfigError, match=f"{path}: not valid JSON") as caught:
        Recipe.load(folder)
    assert "--force" in caught.value.hint
    path.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ConfigError, match=f"{path}: not a text file"):
        Recipe.load(folder)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=f"{path}: not a recipe"):
        Recipe.load(folder)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(precision="int4"), "field 'precision' is 'int4', not one of fp32, fp16, int8"),
    (lambda d: d["runtime"].update(port="8000"), "field 'runtime.port' must be a whole number, not \"8000\""),
    (lambda d: d.update(shippable_engine=1), "field 'shippable_engine' must be true or false"),
    (lambda d: d.update(retention="high"), "field 'retention' must be a number"),
    (lambda d: d["profiles"].update(images=[[1, 3, 8, 8], [2, 3, 16, 16]]),
     "field 'profiles.images' must be [min_shape, opt_shape, max_shape]"),
    (lambda d: d["profiles"].update(images=[[1, 3, 8, 8], [2, 3, 4, 16], [4, 3, 32, 32]]),
     "field 'profiles.images': every dimension needs 1 <= min <= opt <= max"),
    (lambda d: d["profiles"]["images"][0].__setitem__(1, 3.5), "field 'profiles.images[0][1]' must be a whole"),
    (lambda d: d["module"].update(compatible="nvidia,tegra234"), "field 'module.compatible' must be a list"),
    (lambda d: d.update(dla_core="0"), "field 'dla_core' must be a whole number"),
    (lambda d: d.update(placment="deferred"), "unknown field 'placment'"),
    (lambda d: d.update(accelerator="dla2", dla_core=0), "field 'accelerator' is 'dla2', not one of gpu, dla0"),
    (lambda d: d.update(accelerator="dla1", dla_core=None), "field 'accelerator' is 'dla1' but 'dla_core' is null"),
    (lambda d: d.update(accelerator="dla1", dla_core=0), "field 'accelerator' is 'dla1' but 'dla_core' is 0"),
])
def test_a_hand_edited_recipe_names_the_field(folder: Path, change, message) -> None:
    path = _edit(folder, change)
    with pytest.raises(ConfigError) as caught:
        Recipe.load(folder)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("field", "shown"), [("onnx_sha256", "'onnx_sha256'"), ("limits", "'limits'"),
                                              ("module.compatible", "'module.compatible'"),
                                              ("runtime.max_batch_size", "'runtime.max_batch_size'")])
def test_a_missing_field_is_named(folder: Path, field: str, shown: str) -> None:
    def drop(data: dict) -> None:
        *parents, last = field.split(".")
        for name in parents:
            data = data[name]
        del data[last]

    path = _edit(folder, drop)
    with pytest.raises(ConfigError, match=f"{path}: field {shown} is missing"):
        Recipe.load(folder)


def test_a_recipe_of_another_edgebuild_is_refused(folder: Path) -> None:
    path = _edit(folder, lambda d: d.update(schema="edgebuild.recipe/2"))
    with pytest.raises(ConfigError, match=f"{path}: the recipe is schema 'edgebuild.recipe/2'; this edgebuild reads "
                                          f"'{RECIPE_SCHEMA}'") as caught:
        Recipe.load(folder)
    assert "edgebuild-device.pyz" in caught.value.hint
    _edit(folder, lambda d: d.pop("schema"))
    with pytest.raises(ConfigError, match="has no schema field"):
        Recipe.load(folder)


def test_save_refuses_a_record_no_reader_would_take(folder: Path) -> None:
    import dataclasses

    bad = dataclasses.replace(Recipe.load(folder), precision="int4")
    before = (folder / RECIPE_FILE).read_bytes()
    with pytest.raises(ConfigError, match="field 'precision'"):
        bad.save(folder)
    assert (folder / RECIPE_FILE).read_bytes() == before


def test_the_device_check_reads_the_typed_recipe(folder: Path) -> None:
    recipe = Recipe.load(folder)
    other = DeviceFacts(tensorrt="8.5.2", tensorrt_problem="", compute_capability="8.7", l4t="35.4.1",
                        compatible=("nvidia,p3701-0005", "nvidia,tegra234"))
    problems = mismatches(other, recipe)
    assert len(problems) == 3 and "not a Jetson Orin Nano 8GB" in problems[0]
    assert mismatches(other, recipe.to_dict()) == problems  # callers holding the JSON get the same check


@pytest.mark.parametrize(("written", "runs_on"), [({"accelerator": "dla", "dla_core": 0}, "dla"),
                                                   ({"accelerator": "dla1", "dla_core": 1}, "dla1"),
                                                   ({"dla_core": 0}, "dla0"),  # written before placements
                                                   ({}, "gpu")])
def test_a_recipe_says_where_its_model_runs(folder: Path, written: dict, runs_on: str) -> None:
    _edit(folder, lambda d: d.update(written))
    recipe = Recipe.load(folder)
    assert recipe.runs_on == runs_on
    # a GPU recipe (and one from before placements) is written as it was: no accelerator key
    assert ("accelerator" in recipe.to_dict()) == ("accelerator" in written)

