"""The README stays short and points into docs/; every docs page is in the site's nav; LICENSE is Apache 2.0.

The strict site build itself (broken links, anchors, pages left out of the nav) is ``make docs``;
these checks need no MkDocs and run everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from edgebuild._compat import tomllib

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300


def _nav_pages(entries: list) -> set[str]:
    """Every page a MkDocs nav names, at any depth (``- Title: page.md``, ``- page.md``, sections)."""
    pages: set[str] = set()
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            if isinstance(value, list):
                pages |= _nav_pages(value)
            elif isinstance(value, str) and value.endswith(".md"):
                pages.add(value)
    return pages


def _mkdocs_config() -> dict:
    # mkdocs.yml may hold !!python/name tags (pymdownx options): a loader that ignores unknown tags
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move reference text into docs/"


def test_readme_states_the_two_command_quick_start() -> None:
    text = README.read_text(encoding="utf-8")
    assert re.search(r"```\nmake demo\nmake test\n```", text), "the quick start is `make demo` then `make test`"


def test_readme_links_into_docs_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", text)
    assert links, "README.md should point into docs/"
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, f"README.md links to missing pages: {missing}"


def test_every_docs_page_is_in_the_nav() -> None:
    config = _mkdocs_config()
    assert config["theme"]["name"] == "material"
    nav = _nav_pages(config["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"


def test_license_is_apache_2() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    for line in ("Apache License", "Version 2.0, January 2004",
                 "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
                 "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS",
                 "APPENDIX: How to apply the Apache License to your work."):
        assert line in license_text, f"LICENSE lacks {line!r}: not the full Apache License 2.0 text"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
