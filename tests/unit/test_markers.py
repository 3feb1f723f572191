"""Resource markers skip only when the resource is missing, and EDGEBUILD_REQUIRE makes that fail."""

from __future__ import annotations

import os

import pytest

from tests.support.project import REPO

pytest_plugins = ["pytester"]

CONFTEST = REPO / "tests" / "conftest.py"  # registers tests.support.plugin, where the markers' logic is


@pytest.fixture
def marked_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A suite outside this repository that registers the plugin as tests/conftest.py does."""
    pytester.makeconftest(CONFTEST.read_text())
    # the suite's subprocess imports tests.support.plugin from this checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.makeini("[pytest]\naddopts = --strict-markers -ra\nmarkers =\n    gpu: x\n    jetson: x\n"
                     "    container: x\n    slow: x\n")
    pytester.makepyfile(test_needs_gpu="""
import pytest

@pytest.mark.gpu
def test_on_gpu():
    pass

@pytest.mark.jetson
def test_on_jetson():
    pass
""")
    return pytester


def test_missing_resource_is_a_skip_with_its_reason(marked_suite: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.delenv("EDGEBUILD_REQUIRE", raising=False)
    result = marked_suite.runpytest_subprocess()
    if "2 passed" in result.stdout.str():
        pytest.skip("this host has a GPU with TensorRT and is a Jetson")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*gpu: *", "*jetson: not a Jetson*"])


def test_required_resource_that_is_missing_fails(marked_suite: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("EDGEBUILD_REQUIRE", "gpu,jetson")
    result = marked_suite.runpytest_subprocess()
    if "2 passed" in result.stdout.str():
        pytest.skip("this host has a GPU with TensorRT and is a Jetson")
    result.assert_outcomes(errors=2)  # failing in setup is an error: the run exits non-zero
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*EDGEBUILD_REQUIRE includes 'gpu'*"])


def test_unknown_marker_is_rejected(marked_suite: pytest.Pytester) -> None:
    marked_suite.makepyfile(test_typo="import pytest\n\n@pytest.mark.gpuu\ndef test_x():\n    pass\n")
    result = marked_suite.runpytest_subprocess("test_typo.py")
    assert result.ret != 0 and "gpuu" in result.stdout.str() + result.stderr.str()


def test_every_resource_is_a_registered_marker_in_the_testing_docs() -> None:
    from tests.support.resources import RESOURCES

    pyproject, testing = (REPO / "pyproject.toml").read_text(), (REPO / "docs" / "testing.md").read_text()
    assert [r for r in RESOURCES if f'"{r}: needs ' not in pyproject] == []
    assert [r for r in RESOURCES if f"| `{r}` |" not in testing] == []


def test_a_perf_analyzer_that_cannot_load_its_libraries_is_missing_and_says_why(tmp_path, monkeypatch) -> None:
    from tests.support import resources

    fake = tmp_path / "perf_analyzer"
    fake.write_text("#!/bin/sh\necho \"$0: error while loading shared libraries: libb64.so.0d: cannot open shared "
                    "object file: No such file or directory\" >&2\nexit 127\n")
    fake.chmod(0o755)
    monkeypatch.setenv(resources.PERF_ANALYZER_ENV, str(fake))
    resources._perf_analyzer.cache_clear()
    try:
        available, reason = resources._perf_analyzer()
    finally:
        resources._perf_analyzer.cache_clear()
    assert not available
    assert f"{fake} does not run: " in reason and "libb64.so.0d" in reason and "libb64-0d" in reason
    assert resources.perf_analyzer_path() == str(fake)  # the variable wins over PATH
