"""Where a group's model runs: ``accelerator`` (gpu, dla0, dla1, dla), a fleet file's per-model ``placement``,
and the deprecated ``use_dla``; impossible placements refused with the key, the reason and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from edgebuild.project.fleet_file import load_fleet
from edgebuild.targets.dla import accelerator_problem, build_core, dla_support
from edgebuild.targets.profiles import GroupFacts, load_catalog, select_groups
from tests.support.project import TINY_TOML, write_tiny_project

#: TINY_TOML's dock group (AGX Orin 64GB, 2 DLA cores, JetPack 5.1.2 = TensorRT 8.5), unbatched at one shape
DOCK = 'name = "dock"\nmodule = "agx-orin-64gb"\njetpack = "5.1.2"'
STATIC = TINY_TOML.replace("opt_shape = [2, 3, 64, 64]", "opt_shape = [1, 3, 64, 64]")


def _dock(extra: str, module: str = "agx-orin-64gb", jetpack: str = "5.1.2", toml: str = STATIC) -> str:
    return toml.replace(DOCK, f'name = "dock"\nmodule = "{module}"\njetpack = "{jetpack}"\n{extra}')


def _problem(tmp_path: Path, text: str) -> str:
    write_tiny_project(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path)
    return caught.value.message


@pytest.mark.parametrize("accelerator, core", [("dla0", 0), ("dla1", 1), ("dla", 0), ("gpu", None)])
def test_each_accelerator_is_read_and_selected(tmp_path: Path, accelerator: str, core: int | None) -> None:
    write_tiny_project(tmp_path, _dock(f'accelerator = "{accelerator}"'))
    project = load_project(tmp_path)
    group = next(g for g in select_groups("all", project.fleet, load_catalog()) if g.name == "dock")
    assert group.accelerator == accelerator and group.use_dla == (accelerator != "gpu")
    assert build_core(accelerator) == core
    facts = group.describe()
    assert GroupFacts.from_dict(facts.as_dict()) == facts
    assert ("accelerator" in facts.as_dict()) == (accelerator != "gpu")


def test_use_dla_is_the_deprecated_spelling_of_dla0(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, _dock("use_dla = true"))
    assert load_project(tmp_path).group("dock").accelerator == "dla0"
    checked = CliRunner().invoke(main, ["check", "-p", str(tmp_path)])
    assert checked.exit_code == 0, checked.output
    assert 'fleet[1].use_dla: deprecated: the old spelling of accelerator = "dla0"' in checked.output
    assert "dla0" in checked.output.split("runs on")[1]  # the fleet table's column
    assert "contradicts" in _problem(tmp_path, _dock('use_dla = true\naccelerator = "gpu"'))
    # an older record's use_dla reads back as the placement it was
    assert GroupFacts.from_dict({"group": "dock", "target": "t", "use_dla": True}).accelerator == "dla0"


@pytest.mark.parametrize("extra, module, jetpack, key, words", [
    ('accelerator = "dla0"', "orin-nano-8gb", "6.2", "fleet[1].accelerator", "has no DLA cores"),
    ("use_dla = true", "agx-thor", "7.2.2", "fleet[1].use_dla", "deprecated spelling"),
    ('accelerator = "dla1"', "orin-nx-8gb", "6.2", "fleet[1].accelerator", "1 DLA core (dla_cores unconfirmed"),
    ('accelerator = "dla"', "agx-orin-64gb", "7.2", "fleet[1].accelerator", "UNCONFIRMED"),
    ('accelerator = "dla0"', "agx-orin-64gb", "6.2", None, None),
    ('accelerator = "dla1"', "agx-orin-64gb", "7.2.2", None, None),
    ('accelerator = "dla1"', "agx-xavier", "5.1.2", None, None),
    ('accelerator = "dla2"', "agx-orin-64gb", "6.2", "fleet[1].accelerator", "'gpu', 'dla0', 'dla1' or 'dla'"),
])
def test_a_placement_the_module_or_its_tensorrt_cannot_run_is_refused(tmp_path: Path, extra, module, jetpack, key,
                                                                      words) -> None:
    text = _dock(extra, module, jetpack)
    if key is None:
        write_tiny_project(tmp_path, text)
        assert load_project(tmp_path).group("dock").accelerator == extra.split('"')[1]
        return
    message = _problem(tmp_path, text)
    assert key in message and words in message, message


def test_the_tensorrt_releases_with_and_without_the_dla_say_so_with_their_sources() -> None:
    assert dla_support("8.5.2.2").available and dla_support("10.3.0.30").available
    assert dla_support("8.2.1.8").available  # Xavier, JetPack 4.6
    later = dla_support("10.16.2.10")
    assert not later.available and later.unconfirmed and "10.7" in later.why
    assert not dla_support("11.3.0").available and not dla_support("11.4.0.106").available
    restored = dla_support("11.4.1")
    assert restored.available and restored.modules == ("agx-orin-64gb", "agx-orin-32gb")
    assert not dla_support("11.5.0").available
    assert all(s.startswith("https://") for s in restored.sources)
    catalog = load_catalog()
    thor = accelerator_problem("dla0", catalog.modules["agx-thor"], catalog.releases["7.2.2"])
    assert thor is not None and "no DLA cores" in thor
    for release in ("6.2", "5.1.2", "7.2.2"):
        assert accelerator_problem("dla0", catalog.modules["agx-orin-32gb"], catalog.releases[release]) is None


@pytest.mark.parametrize("edit, words", [
    (lambda t: t, "opt_shape [2, 3, 64, 64] (batch 2)"),
    (lambda t: t.replace("opt_shape = [2, 3, 64, 64]", "opt_shape = [1, 3, 64, 64]") + "\n[runtime]\nmax_batch_size"
     " = 4\n", "runtime.max_batch_size = 4"),
])
def test_a_dla_placement_needs_one_static_unbatched_shape(tmp_path: Path, edit, words) -> None:
    message = _problem(tmp_path, edit(_dock('accelerator = "dla0"', toml=TINY_TOML)))
    assert "fleet[1].accelerator" in message and "static shape" in message and words in message


def test_placement_is_a_fleet_file_key(tmp_path: Path) -> None:
    message = _problem(tmp_path, _dock('placement = { tiny = "dla0" }'))
    assert "placement" in message and "fleet file" in message


FLEET = """\
[project]
name = "box"

[models]
detector = "det"
other = "other"

[[fleet]]
name = "dock"
module = "agx-orin-64gb"
jetpack = "5.1.2"
models = ["detector", "other"]
accelerator = "dla"
{placement}

[runtime]
max_batch_size = 1
"""


def _fleet(tmp_path: Path, placement: str) -> Path:
    for name in ("det", "other"):
        write_tiny_project(tmp_path / name, STATIC.replace('name = "tiny"', f'name = "{name}"'))
    (tmp_path / "edgebuild.toml").write_text(FLEET.format(placement=placement))
    return tmp_path


def test_a_fleet_file_places_each_model_of_a_group(tmp_path: Path) -> None:
    fleet = load_fleet(_fleet(tmp_path, 'placement = { detector = "dla1", other = "gpu" }'))
    assert [g.accelerator for g in fleet.model_project("detector").fleet] == ["dla1"]
    assert [g.accelerator for g in fleet.model_project("other").fleet] == ["gpu"]
    fleet = load_fleet(_fleet(tmp_path, ""))  # the group's accelerator for every model it does not place
    assert [g.accelerator for g in fleet.model_project("other").fleet] == ["dla"]


@pytest.mark.parametrize("placement, words", [
    ('placement = { tracker = "dla0" }', "fleet group 'dock' places 'tracker', which it does not run"),
    ('placement = { detector = "dla3" }', "'gpu', 'dla0', 'dla1' or 'dla'"),
])
def test_a_fleet_files_bad_placement_is_named(tmp_path: Path, placement: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_fleet(_fleet(tmp_path, placement))
    assert words in caught.value.message


def test_a_fleet_files_placement_is_checked_against_the_module_and_the_models_shapes(tmp_path: Path) -> None:
    root = _fleet(tmp_path, 'placement = { detector = "dla0" }')
    text = (root / "edgebuild.toml").read_text()
    (root / "edgebuild.toml").write_text(text.replace("agx-orin-64gb", "orin-nano-8gb").replace(
        'accelerator = "dla"', 'accelerator = "gpu"'))
    with pytest.raises(ConfigError) as caught:
        load_fleet(root)
    assert "fleet[0].placement.detector: Jetson Orin Nano 8GB has no DLA cores" in caught.value.message
    (root / "edgebuild.toml").write_text(text.replace("max_batch_size = 1", "max_batch_size = 2"))
    with pytest.raises(ConfigError) as caught:
        load_fleet(root)
    assert "fleet[0].placement.detector (detector): a DLA placement runs one static shape" in caught.value.message
