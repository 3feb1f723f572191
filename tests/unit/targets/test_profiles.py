"""profiles/: the data files agree with the researched reference, and targets resolve."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.datafiles import data_dir
from edgebuild.errors import TargetError
from edgebuild.project.config import load_project
from edgebuild.targets.profiles import load_catalog, select_groups

REFERENCE = data_dir("profiles") / "reference" / "jetpack_matrix.json"


def _leading_version(text: str) -> str:
    match = re.match(r"R?(\d+(?:\.\d+)*)", text.strip())
    assert match, text
    return match.group(1)


def _agree(profile_value: str, reference_text: str) -> bool:
    ref = _leading_version(reference_text)
    return profile_value.startswith(ref) or ref.startswith(profile_value)


def _reference_releases() -> dict[str, dict]:
    """Reference entries by JetPack id; a range entry such as '4.6.2-4.6.6' covers each release."""
    entries = {}
    for entry in json.loads(REFERENCE.read_text())["jetpack_releases"]:
        name = entry["jetpack"]
        if "-" in name:
            first, last = name.split("-")
            prefix, lo = first.rsplit(".", 1)
            hi = last.rsplit(".", 1)[1]
            l4ts = [_leading_version(x) for x in entry["l4t"].split("/")]
            for i, patch in enumerate(range(int(lo), int(hi) + 1)):
                entries[f"{prefix}.{patch}"] = {**entry, "l4t": l4ts[i]}
        else:
            entries[name] = entry
    return entries


def test_profiles_cover_every_reference_release() -> None:
    assert set(load_catalog().releases) == set(_reference_releases())


@pytest.mark.parametrize("jetpack", sorted(_reference_releases()))
def test_release_agrees_with_reference_on_l4t_cuda_tensorrt(jetpack: str) -> None:
    ref = _reference_releases()[jetpack]
    profile = load_catalog().releases[jetpack]
    assert _agree(profile.l4t, ref["l4t"]), (profile.l4t, ref["l4t"])
    assert _agree(profile.cuda, ref["cuda"]), (profile.cuda, ref["cuda"])
    assert _agree(profile.tensorrt, ref["tensorrt"]), (profile.tensorrt, ref["tensorrt"])
    assert profile.ubuntu == ref["ubuntu"] and profile.python == ref["python"]
    assert profile.cgroup == ref["cgroup"].split()[0]
    assert profile.sources, "every release carries its sources"


def test_cli_profiles_list_json_agrees_with_reference() -> None:
    result = CliRunner().invoke(main, ["profiles", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = {r["jetpack"]: r for r in json.loads(result.output)["jetpack"]}
    for jetpack, ref in _reference_releases().items():
        assert _agree(listed[jetpack]["l4t"], ref["l4t"])
        assert _agree(listed[jetpack]["tensorrt"], ref["tensorrt"])
        assert _agree(listed[jetpack]["cuda"], ref["cuda"])


def test_max_opset_follows_the_tensorrt_parser() -> None:
    releases = load_catalog().releases
    assert releases["4.6.1"].max_onnx_opset == 13
    assert releases["5.1.2"].max_onnx_opset == 17
    assert releases["6.0"].max_onnx_opset == 17
    assert releases["6.2"].max_onnx_opset == 20
    assert "max_onnx_opset" in releases["7.2"].unconfirmed


def test_modules_match_reference_compute_capability_and_dla() -> None:
    ref = {m["module"]: m for m in json.loads(REFERENCE.read_text())["modules"]}
    modules = load_catalog().modules
    assert len(modules) == len(ref) == 10
    for module in modules.values():
        entry = ref[next(k for k in ref if module.name.endswith(k) or k in module.name)]
        assert entry["sm"].startswith(module.compute_capability)
        assert str(entry["dla"]).startswith(str(module.dla_cores))
        assert module.sources


def test_unconfirmed_facts_stay_marked() -> None:
    modules = load_catalog().modules
    assert "cuda_cores" in modules["agx-orin-32gb"].unconfirmed
    assert "dla_cores" in modules["orin-nx-16gb"].unconfirmed


def test_target_resolution_and_errors() -> None:
    catalog = load_catalog()
    target = catalog.parse_target("orin-nano-8gb@6.2")
    assert (target.module.compute_capability, target.release.tensorrt) == ("8.7", "10.3.0.30")
    with pytest.raises(TargetError, match="does not run JetPack") as caught:
        catalog.parse_target("agx-xavier@6.2")
    assert "5.1.2" in str(caught.value)  # the valid choices are listed
    with pytest.raises(TargetError, match="unknown module") as caught:
        catalog.parse_target("orin-nano-9gb@6.2")
    assert "orin-nano-8gb" in str(caught.value)


def test_select_groups_by_family_module_pair_and_name(tiny_project: Path) -> None:
    project = load_project(tiny_project)
    catalog = load_catalog()

    def names(selector: str) -> list[str]:
        return [g.name for g in select_groups(selector, project.fleet, catalog)]

    assert names("orin") == ["yard-cams", "dock"]
    assert names("all") == ["yard-cams", "dock", "legacy"]
    assert names("xavier-nx") == ["legacy"]
    assert names("agx-orin-64gb@5.1.2") == ["dock"]
    assert names("dock,yard-cams") == ["yard-cams", "dock"]
    adhoc = select_groups("orin-nx-16gb@6.1", project.fleet, catalog)
    assert [(g.name, g.in_fleet) for g in adhoc] == [("orin-nx-16gb@6.1", False)]
    with pytest.raises(TargetError, match="no fleet group matches family 'thor'"):
        names("thor")
    with pytest.raises(TargetError, match="unknown target 'orion'") as caught:
        names("orion")
    assert "yard-cams" in str(caught.value) and "orin" in str(caught.value)


def test_profiles_show_prints_sources_and_unconfirmed_marks() -> None:
    result = CliRunner().invoke(main, ["profiles", "show", "agx-orin-32gb@5.1.2"])
    assert result.exit_code == 0, result.output
    assert "(unconfirmed)" in result.output and "sources:" in result.output
    assert "8.5.2" in result.output
    bad = CliRunner().invoke(main, ["profiles", "show", "nano@6.2"])
    assert bad.exit_code == 4 and "Traceback" not in bad.output


def test_release_opset_never_exceeds_its_parser_table() -> None:
    from edgebuild.targets.preflight import parser_table

    for release in load_catalog().releases.values():
        table = parser_table(release.tensorrt)
        assert table["min_opset"] <= release.max_onnx_opset <= table["max_opset"], release.jetpack
        assert len(table["operators"]) >= 100
