"""What the export writes: the exporter's own model reaches the disk only when it is the one kept."""

from __future__ import annotations

from pathlib import Path

from edgebuild.project.config import load_project
from edgebuild.sources.export import onnx_export as export
from edgebuild.sources.export.onnx_export import export_model


def test_the_exporters_model_is_checked_from_memory_and_not_written_when_onnxslims_is_kept(
        tiny_project: Path, monkeypatch) -> None:
    seen: list[tuple[bool, bool]] = []
    original = export.simplify

    def spy(project, reference, path, progress, exported=None):
        seen.append((path.exists(), exported is not None))
        return original(project, reference, path, progress, exported)

    monkeypatch.setattr(export, "simplify", spy)
    record = export_model(load_project(tiny_project), 17, "test")
    assert seen == [(False, True)]  # onnxslim gets the model in memory; nothing was written before it
    assert record.simplified and all(p.ok for p in record.parity)
    assert sorted(p.name for p in record.onnx_path.parent.iterdir()) == ["export.json", "model.onnx"]


def test_without_onnxslim_the_exporters_model_is_written_and_run(tiny_project: Path) -> None:
    toml = (tiny_project / "edgebuild.toml").read_text().replace("[accuracy]", "[export]\nsimplify = false\n\n"
                                                                               "[accuracy]")
    (tiny_project / "edgebuild.toml").write_text(toml)
    record = export_model(load_project(tiny_project), 17, "test")
    assert not record.simplified and record.simplify_note == "disabled (export.simplify = false)"
    assert record.onnx_path.is_file() and {p.shape for p in record.parity} == {"min_shape", "opt_shape", "max_shape"}
