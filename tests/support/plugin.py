"""The suite's pytest plugin: resource markers and shared fixtures (registered by tests/conftest.py).

A test marked with a resource (gpu, jetson, container, ssh, cgroup, mender, perf_analyzer, ...) is
skipped only when its resource is missing (tests/support/resources.py), and says why. Listing the
resource in EDGEBUILD_REQUIRE (comma-separated, e.g. ``gpu,container``) turns that skip into a
failure, so a CI machine that should have the resource cannot silently pass without it.

Helpers that tests import live beside it: tests.support.project (a tiny project, REPO, EXAMPLES),
tests.support.jetson (a loopback "Jetson" over SSH), tests.support.compiled (an example compiled once per
run, copied for each test), tests.support.runtime_artifacts (a compiled
model folder and an HTTP client for the server).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.compiled import compiled_copy
from tests.support.jetson import LoopbackJetson
from tests.support.project import EXAMPLES, write_tiny_project
from tests.support.resources import RESOURCES, required_resources


def pytest_runtest_setup(item: pytest.Item) -> None:
    required = required_resources()
    for marker in item.iter_markers():
        probe = RESOURCES.get(marker.name)
        if probe is None:
            continue
        available, reason = probe()
        if available:
            continue
        if marker.name in required:
            pytest.fail(f"EDGEBUILD_REQUIRE includes {marker.name!r}, but {reason}", pytrace=False)
        pytest.skip(f"{marker.name}: {reason}")


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A valid detection project with a tiny model and four images; returns its folder."""
    write_tiny_project(tmp_path)
    return tmp_path


@pytest.fixture
def example_copy(tmp_path: Path):
    """Copy a bundled example into tmp_path and return the copy: its sources, not what it generates
    (the build folder, and the data ``data.prepare`` writes, which a `make demo` leaves in the
    source tree), so a test sees the example as a fresh clone has it."""

    def copy(name: str) -> Path:
        source = EXAMPLES / name
        if not (source / "edgebuild.toml").is_file():
            pytest.fail(f"{source}/edgebuild.toml is missing")
        target = tmp_path / name
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
        return target

    return copy


@pytest.fixture
def compiled_example(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """A fresh copy of a bundled example compiled for a target, the compile shared by the whole run
    (tests/support/compiled.py): ``compiled_example("shapes-detector", "yard-cams")``. For a test
    that compiles the example to read what the compile leaves, or changes one thing and compiles
    again; not for one that needs a stage of the pristine example to run."""
    return lambda name, target: compiled_copy(tmp_path_factory, name, target, tmp_path / "compiled")


@pytest.fixture
def loopback_jetson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Start a LoopbackJetson for a profile: ``loopback_jetson("orin-nano-4gb@6.2")``."""
    started: list[LoopbackJetson] = []

    def start(profile: str, extra_pythonpath: Path | None = None) -> LoopbackJetson:
        jetson = LoopbackJetson(tmp_path / f"jetson-{len(started)}", profile, extra_pythonpath)
        started.append(jetson)
        monkeypatch.setenv("EDGEBUILD_SSH_CONFIG", str(jetson.client_config))
        return jetson

    yield start
    for jetson in started:
        jetson.stop()
