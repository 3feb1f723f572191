"""The build folder is spelled in one place: ``edgebuild/project/layout.py`` (``BuildLayout``)."""

from __future__ import annotations

import re
from pathlib import Path

import edgebuild
from edgebuild.project.layout import BuildLayout

PACKAGE = Path(edgebuild.__file__).parent
#: a path joined onto a build folder, the default build folder's name, or a file only the layout names
SPELLED = re.compile(r"""build_dir\)?\s*/\s*["']|/ ["']build["']|["'](fleet\.json|\.records|last-compile\.json|"""
                     r"""decoded-images\.json)["']""")


def spelled_outside_the_layout(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{n}: {line.strip()}"
            for path in sorted(root.rglob("*.py")) if path != root / "project" / "layout.py"
            for n, line in enumerate(path.read_text().splitlines(), 1) if SPELLED.search(line)]


def test_no_module_but_the_layout_spells_a_path_under_the_build_folder() -> None:
    found = spelled_outside_the_layout(PACKAGE)
    assert not found, "use a BuildLayout property instead:\n" + "\n".join(found)


def test_the_check_finds_a_path_spelled_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "fleet.py").write_text('record = fleet.build_dir / "fleet.json"\n')
    assert spelled_outside_the_layout(tmp_path) == ['fleet.py:1: record = fleet.build_dir / "fleet.json"']


def test_a_fleets_folders_are_the_layouts(tmp_path: Path) -> None:
    layout = BuildLayout.default(tmp_path)
    assert layout.root == tmp_path / "build"
    assert layout.fleet_record == tmp_path / "build" / "fleet.json"
    assert layout.fleet_model("detector") == tmp_path / "build" / "models" / "detector"
    assert layout.fleet_group("yard") == tmp_path / "build" / "groups" / "yard"
    assert layout.bench_summary == tmp_path / "build" / "bench" / "fleet.json"
    assert layout.fleet_manifest == tmp_path / "build" / "packages" / "fleet.json"
