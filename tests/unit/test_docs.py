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


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs' toc (and GitHub) make it: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _section(page: Path, anchor: str) -> str:
    """The text under the heading whose anchor is ``anchor``, up to the next heading of its level or above."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for start, line in enumerate(lines):
        heading = re.match(r"(#+) (.*)", line)
        if heading and _slug(heading.group(2)) == anchor:
            level = len(heading.group(1))
            end = next((i for i in range(start + 1, len(lines))
                        if (m := re.match(r"(#+) ", lines[i])) and len(m.group(1)) <= level), len(lines))
            return "\n".join(lines[start:end])
    raise AssertionError(f"{page.name} has no heading #{anchor}")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def test_the_docs_home_leads_to_the_best_pt_route_in_one_click() -> None:
    """A link on the home page lands on a section that shows `init --model best.pt --trust-checkpoint`."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    landed = []
    for page, anchor in re.findall(r"\]\(([\w-]+\.md)#([\w-]+)\)", index):
        section = _section(DOCS / page, anchor)
        if "init --model best.pt" in section and "--trust-checkpoint" in section:
            landed.append(f"{page}#{anchor}")
    assert landed, "docs/index.md links to no section that shows the best.pt route (init --model best.pt)"


def test_the_nav_names_the_checkpoint_among_the_model_sources() -> None:
    titles = {page: title for entry in _mkdocs_config()["nav"] for section in entry.values()
              if isinstance(section, list) for item in section if isinstance(item, dict)
              for title, page in item.items()}
    assert "best.pt" in titles["model-sources.md"], f"the nav hides best.pt: {titles['model-sources.md']!r}"


def test_readme_shows_the_checkpoint_route_next_to_onnx() -> None:
    text = README.read_text(encoding="utf-8")
    commands = "\n".join(body for _, body in _fenced_blocks(text))
    assert re.search(r"edgebuild init --model best\.pt .*--trust-checkpoint", commands), "README: no best.pt route"
    assert "edgebuild init --model best.onnx" in commands, "README: no ONNX route next to the best.pt one"
    assert "pip install ultralytics" in text and "AGPL" in text, "the README says what the best.pt route needs"


def test_diagrams_are_mermaid_and_mermaid_is_rendered() -> None:
    """Box-drawing diagrams in code blocks are cut off on a narrow page: diagrams are Mermaid, which fits the page."""
    uses_mermaid = False
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        for info, body in _fenced_blocks(page.read_text(encoding="utf-8")):
            uses_mermaid |= info == "mermaid"
            assert not re.search(r"[─│┌┐└┘├┤┬┴►▼]", body), f"{page.name}: an ASCII diagram; draw it as ```mermaid"
    if uses_mermaid:
        extensions = _mkdocs_config()["markdown_extensions"]
        fences = next(e["pymdownx.superfences"] for e in extensions
                      if isinstance(e, dict) and "pymdownx.superfences" in e)
        assert any(f["name"] == "mermaid" and f["class"] == "mermaid" for f in fences["custom_fences"])


def test_the_architecture_page_names_every_layer_folder() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    folders = sorted(p.parent.name for p in (ROOT / "edgebuild").glob("*/__init__.py"))
    missing = [f for f in folders if f"`{f}/`" not in text]
    assert not missing, f"docs/architecture.md's layer list lacks {missing}"
