"""What identifies the project's model: every Python file under model.python_path, nothing imported."""

from __future__ import annotations

from pathlib import Path

from edgebuild.config import load_project
from edgebuild.model import model_key_parts, model_source_digest


def test_a_sibling_module_the_entry_point_imports_changes_the_model_key(tiny_project: Path) -> None:
    project = load_project(tiny_project)
    before = model_source_digest(project)
    (tiny_project / "blocks.py").write_text("WIDTH = 6\n")  # outside the entry point's package
    after = model_source_digest(project)
    assert before != after
    (tiny_project / "build" / "export").mkdir(parents=True)
    (tiny_project / "build" / "export" / "generated.py").write_text("x = 1\n")
    (tiny_project / ".venv" / "lib").mkdir(parents=True)
    (tiny_project / ".venv" / "lib" / "site.py").write_text("x = 1\n")
    assert model_source_digest(project) == after  # build outputs and environments are not the model
    assert model_key_parts(project)["model_code"] == after
    assert not any(p.suffix == ".pyc" for p in tiny_project.rglob("*"))  # found without importing
