"""The build report of a real compile of the digits example: passed, failed at the gate, and rendered.

The compile writes build/.records/last-compile.json itself; ``write_report`` turns it into
build/report/. The rendering test opens index.html in headless Chromium with the network
blocked and Chromium's own network log on, and fails on any request the page makes; a control
page with one remote image shows the log would have caught it.
"""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from junitparser import JUnitXml

from edgebuild.cli import main
from edgebuild.report import write_report

pytestmark = pytest.mark.slow  # each compiles the example (about 10 s)

GROUPS = {"sorters": "orin-nano-4gb@6.2", "line-cams": "xavier-nx@5.1.2"}
#: INT8 with no layer to quantize is "not applicable", and FP32 is not allowed: the gate refuses (exit 11).
#: (min_retention = 1.0 with INT8 alone would pass here: the digits model keeps all of its top-1 in INT8.)
FAILING_GATE = '[quantize]\nop_types = ["ConvInteger"]\nprecisions = ["int8"]\n\n[accuracy]'


def _compile(root: Path) -> object:
    return CliRunner().invoke(main, ["compile", "-p", str(root)])


def _failing(example_copy) -> Path:
    root = example_copy("digits-classifier")
    toml = root / "edgebuild.toml"
    toml.write_text(toml.read_text().replace("[accuracy]", FAILING_GATE, 1))
    return root


class _References(HTMLParser):
    """Every attribute that makes a browser fetch something, and the CSS that could."""

    FETCHING = {"src", "href", "srcset", "action", "poster", "data", "xlink:href", "background", "formaction"}

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.tags: set[str] = set()
        self._in_style = False
        self.css = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in_style = tag == "style"
        self.found += [f"{tag} {name}={value}" for name, value in attrs
                       if name in self.FETCHING and value and not value.startswith(("data:", "#"))]
        self.found += [f"{tag} style={value}" for name, value in attrs if name == "style" and value and "url(" in value]

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.css += data

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False


def external_references(page: str) -> list[str]:
    parser = _References()
    parser.feed(page)
    found = list(parser.found)
    if "url(" in parser.css or "@import" in parser.css:
        found.append("CSS url() or @import")
    found += [f"<{tag}>" for tag in ("script", "link", "iframe", "object", "embed") if tag in parser.tags]
    return found


def test_report_of_a_compile_that_passed(example_copy) -> None:
    root = example_copy("digits-classifier")
    result = _compile(root)
    assert result.exit_code == 0, result.output
    bench = CliRunner().invoke(main, ["bench", str(root / "build/engines/sorters"), "--iterations", "20",
                                      "--warmup", "2", "--json", str(root / "build/bench/sorters.json")])
    assert bench.exit_code == 0, bench.output

    paths = write_report(root / "build")
    assert paths == {"html": root / "build/report/index.html", "markdown": root / "build/report/summary.md",
                     "junit": root / "build/report/junit.xml"}

    summary = paths["markdown"].read_text()
    assert summary.startswith("## edgebuild compile `digits-classifier`: passed")
    assert "| group | target | module | JetPack | L4T | TensorRT | preflight | gate | placement |" in summary
    for group, target in GROUPS.items():
        assert f"| {group} | {target} |" in summary
    assert "| candidate | top-1 | retention | passes | selectable | latency ms | kept in float | note |" in summary
    stages = json.loads((root / "build/.records/last-compile.json").read_text())["stages"]
    gate = next(s for s in stages if s["name"] == "gate")["runs"][0]["record"]
    for candidate in gate["candidates"]:
        star = " ⭐" if candidate["precision"] == gate["selected"] else ""
        row = f"| {candidate['precision']}{star} | {candidate['value']:.4f} | {candidate['retention']:.3f} |"
        assert row in summary
    assert "| sorters | this host | onnxruntime-cpu" in summary  # the bench table

    suites = {s.name: s for s in JUnitXml.fromfile(str(paths["junit"]))}
    assert set(suites) == {"preflight", "gate", "stages"}
    assert sum(s.failures for s in suites.values()) == 0 and sum(s.errors for s in suites.values()) == 0
    assert sorted(c.name for c in suites["gate"]) == sorted(f"{g} ({t})" for g, t in GROUPS.items())
    assert sorted(c.name for c in suites["preflight"]) == sorted(f"{g} ({t})" for g, t in GROUPS.items())
    assert {c.name for c in suites["stages"]} >= {"export", "engine/sorters", "package/line-cams"}

    page = paths["html"].read_text()
    assert external_references(page) == []
    assert "min_retention 0.92" in page and "stroke-dasharray" in page  # the threshold line of the retention bars
    assert "Compile failed" not in page


def test_a_compile_the_gate_refused_still_reports_the_failure(example_copy) -> None:
    root = _failing(example_copy)
    result = _compile(root)
    assert result.exit_code == 11, result.output

    paths = write_report(root / "build")
    page = paths["html"].read_text()
    assert "Compile failed: exit 11 (accuracy gate)" in page
    assert "no candidate keeps 92% of the FP32 top-1" in page
    assert "INT8 not applicable" in page and external_references(page) == []
    summary = paths["markdown"].read_text()
    assert summary.startswith("## edgebuild compile `digits-classifier`: FAILED (exit 11, accuracy gate)")
    assert "no candidate keeps 92% of the FP32 top-1" in summary

    xml = JUnitXml.fromfile(str(paths["junit"]))
    failing = [(suite.name, case.name) for suite in xml for case in suite if not case.is_passed and not case.is_skipped]
    # one candidate ships to the whole fleet: when the gate refuses, every target's gate check fails, and nothing else
    assert sorted(failing) == sorted(("gate", f"{g} ({t})") for g, t in GROUPS.items())
    assert xml.failures == len(failing) == sum(s.failures for s in xml) == 2
    skipped = {case.name for suite in xml for case in suite if case.is_skipped}
    assert skipped == {f"{stage}/{group}" for stage in ("engine", "container", "package") for group in GROUPS}


def _chromium(page: Path, png: Path, netlog: Path) -> subprocess.CompletedProcess:
    """Render ``page`` headless with every way out closed; Chromium logs each request it tries to ``netlog``."""
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={png.parent / (png.stem + '-profile')}", f"--log-net-log={netlog}",
         f"--screenshot={png}", "--window-size=1280,2000", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)


def _page_requests(netlog: Path) -> list[str]:
    """The URLs of requests made on behalf of a file:// page (Chromium's own background ones are not)."""
    text = netlog.read_text()
    try:
        log = json.loads(text)
    except ValueError:  # Chromium leaves the list open when it does not shut down cleanly
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    found = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event["type"] == start_job and "file://" in (params.get("network_isolation_key", "")
                                                        + params.get("site_for_cookies", "")):
            found.append(params["url"])
    return found


@pytest.mark.chromium
def test_index_html_renders_in_chromium_and_no_request_leaves_the_file(example_copy, tmp_path: Path) -> None:
    from PIL import Image

    root = example_copy("digits-classifier")
    assert _compile(root).exit_code == 0
    page = write_report(root / "build")["html"]

    control = tmp_path / "control.html"
    control.write_text("<html><body><img src='http://report-control.invalid/x.png'></body></html>")
    done = _chromium(control, tmp_path / "control.png", tmp_path / "control-netlog.json")
    assert done.returncode == 0, done.stderr
    assert _page_requests(tmp_path / "control-netlog.json") == ["http://report-control.invalid/x.png"]

    png, netlog = tmp_path / "report.png", tmp_path / "report-netlog.json"
    done = _chromium(page, png, netlog)
    assert done.returncode == 0, done.stderr
    assert _page_requests(netlog) == []
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 2000)
    colours = dict((c, n) for n, c in image.getcolors(maxcolors=1 << 20))
    assert len(colours) > 50, "the screenshot is (nearly) blank"
    # the stage time and retention bars (inline SVG) drawn in the report's green
    assert colours.get((0x2E, 0x7D, 0x32), 0) > 10_000
