"""A bundled example compiled once per test session, and a fresh copy of it for each test that asks.

Compiling the shapes example takes about a minute on the 2-core CI machine, and a dozen tests
compile it only to get at what a compile leaves (a model folder to serve, a recipe, a bench) or to
change one setting and compile again. They share one pristine compile per (example, target)
instead: the first test that needs it compiles a copy under the session's temporary root, which
every xdist worker of the run shares, under a file lock, so a second worker waits for that compile
instead of running its own; each test then gets its own copy (``shutil.copytree``). A copy is an
independent project: the build records are re-rooted when a project moves (a stage's
``relocate``) and file dates are kept, so a compile of the copy reuses every stage whose inputs
the test did not change and runs the rest. A test that asserts that a stage ran on the pristine
example, or that nothing was built yet, must not use it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild._compat import tomllib
from tests.support.project import EXAMPLES


def example_folders(name: str) -> list[str]:
    """The example and, for a fleet file, the sibling examples its [models] names as ``../<name>``."""
    models = tomllib.loads((EXAMPLES / name / "edgebuild.toml").read_text()).get("models", {})
    return [Path(path).name for path in models.values()] + [name]


def copy_sources(names: list[str], into: Path) -> None:
    """The examples' sources into ``into``, as a fresh clone has them (no build, no prepared data)."""
    for name in names:
        shutil.copytree(EXAMPLES / name, into / name, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's basetemp is popen-gwN inside this run's folder, which they share
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "compiled-examples"


def _pristine(tmp_path_factory: pytest.TempPathFactory, name: str, target: str) -> Path:
    from edgebuild.cli import main

    root = _shared_root(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    pristine, done = root / f"{name}@{target}", root / f"{name}@{target}.done"
    with open(root / f"{name}@{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compile per run; the other worker waits for it
        if not done.is_file():
            shutil.rmtree(pristine, ignore_errors=True)  # a compile that failed before: tried again
            copy_sources(example_folders(name), pristine)
            result = CliRunner().invoke(main, ["compile", "-p", str(pristine / name), "--target", target,
                                               "--no-progress"])
            if result.exit_code != 0:
                pytest.fail(f"compiling the shared {name} for {target} failed:\n{result.output}")
            done.touch()
    return pristine


def compiled_copy(tmp_path_factory: pytest.TempPathFactory, name: str, target: str, into: Path) -> Path:
    """A fresh copy, under ``into``, of example ``name`` compiled for ``--target target`` (once per run);
    returns the copy's project folder (its siblings beside it, for a fleet file)."""
    shutil.copytree(_pristine(tmp_path_factory, name, target), into, dirs_exist_ok=True)
    return into / name
