"""The build report of the last compile, for people and for CI (``edgebuild report``).

``write_report(build_dir)`` reads ``build/.records/last-compile.json`` (what every compile
writes, failed or not) and writes ``build/report/``:

- ``index.html``: one self-contained page (inline CSS and SVG, PNGs as data URIs; nothing is
  fetched, so it opens from a CI artifact or an e-mail as it is): the fleet, each stage's
  outcome and time per group, the gate's candidates with retention bars against the threshold,
  kept layers, preflight findings per target, placement and device acceptance per group, and
  bench results when ``build/bench/*.json`` exist;
- ``summary.md``: the same, concise, as Markdown tables (a CI job summary, a merge request comment);
- ``junit.xml``: one test case per check, so CI shows pass/fail per target (``checks``).

The checks (JUnit test suites) are:

- ``preflight``: one case per target group, failing with its blocking findings;
- ``gate``: one case per target group, failing when the gate selected nothing (every group
  fails: one candidate ships to the whole fleet) or when the group's device refused every
  engine it built (accuracy.min_retention measured on the device); candidates are in its output;
- ``stages``: one case per run of every other stage (``export``, ``engine/<group>``, ...),
  failing where that stage failed, skipped where it did not run.

A compile that failed always has at least one failing case. ``report.model`` reads the last
compile and makes the checks; ``report.html``, ``report.markdown`` and ``report.junit`` render them.
"""

from __future__ import annotations

from pathlib import Path

from edgebuild.project.layout import BuildLayout
from edgebuild.report.build_report import load
from edgebuild.report.html import to_html
from edgebuild.report.junit import to_junit
from edgebuild.report.markdown import to_markdown

__all__ = ["write_report"]


def write_report(build_dir: Path) -> dict[str, Path]:
    """Write ``build/report/index.html``, ``summary.md`` and ``junit.xml`` from the last compile.

    Returns the paths by kind (``html``, ``markdown``, ``junit``). Raises ConfigError when the
    build folder has no compile recorded.
    """
    from edgebuild.runtime.base.files import atomic_write_text

    report = load(Path(build_dir))
    out = BuildLayout(Path(build_dir)).report
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "index.html", "markdown": out / "summary.md", "junit": out / "junit.xml"}
    # rebuilt from the compile's records on every compile (and by `edgebuild report`): not fsynced
    atomic_write_text(paths["html"], to_html(report), durable=False)
    atomic_write_text(paths["markdown"], to_markdown(report), durable=False)
    atomic_write_text(paths["junit"], to_junit(report), durable=False)
    return paths
