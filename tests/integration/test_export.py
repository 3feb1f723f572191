"""Real torch -> ONNX -> ONNX Runtime export, parity, caching and failure handling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ExportError, ModelError
from edgebuild.pipeline.runner import Options
from edgebuild.project.config import load_project
from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
from edgebuild.sources.entry_point import load_model
from edgebuild.sources.export.checks import ParityError, verify_onnx
from edgebuild.sources.export.onnx_export import choose_opset, export_dir, export_model
from edgebuild.stages import compile_work
from edgebuild.stages.export import EXPORT
from edgebuild.targets.profiles import load_catalog
from edgebuild.workflows.work import select_work
from tests.support.project import TINY_TOML, write_tiny_project

TORCHSCRIPT = TINY_TOML.replace("[accuracy]", '[export]\nexporter = "torchscript"\n\n[accuracy]')
DYNAMO = TORCHSCRIPT.replace('exporter = "torchscript"', 'exporter = "dynamo"')


def _export(project_dir: Path, opset: int = 17, **kwargs):
    return export_model(load_project(project_dir), opset, "test", **kwargs)


def _leftovers(project_dir: Path) -> list[str]:
    root = project_dir / "build" / "export"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _count_exports(monkeypatch) -> list[str]:
    """The exporters export_model calls, in order."""
    import edgebuild.sources.export.onnx_export as export

    calls: list[str] = []
    for name in ("_export_dynamo", "_export_torchscript"):
        original = getattr(export, name)
        monkeypatch.setattr(export, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    return calls


def test_auto_tries_the_torchscript_exporter_first_and_keeps_its_valid_model(tiny_project: Path,
                                                                           monkeypatch) -> None:
    """TorchScript is the faster exporter (docs/benchmarks.md#exporter-speed): no dynamo run when its model passes."""
    calls = _count_exports(monkeypatch)
    record = _export(tiny_project, opset=17)
    assert calls == ["_export_torchscript"]
    assert record.exporter == "torchscript" and record.failed_attempts == []
    assert record.exporter_note == 'TorchScript exporter (export.exporter = "auto" tries it first: the faster exporter)'
    assert all(p.ok for p in record.parity) and {p.shape for p in record.parity} == {"min_shape", "opt_shape",
                                                                                       "max_shape"}


def _count_onnxruntime_sessions(monkeypatch) -> list[str]:
    from edgebuild.runtime.engines.backends import onnxruntime

    sessions: list[str] = []
    original = onnxruntime.OnnxRuntimeRunner.__init__
    monkeypatch.setattr(onnxruntime.OnnxRuntimeRunner, "__init__",
                        lambda self, path, *a, **k: sessions.append(Path(path).parent.name) or original(self, path,
                                                                                                        *a, **k))
    return sessions


def test_only_the_model_that_is_kept_runs_in_onnx_runtime(tiny_project: Path, monkeypatch) -> None:
    """onnxslim's model passes every check itself: the exporter's own model is never run."""
    sessions = _count_onnxruntime_sessions(monkeypatch)
    record = _export(tiny_project)
    assert record.simplified and record.simplify_note.startswith("onnxslim: ")
    assert record.simplify_note.endswith(" nodes, passes every check")
    assert sessions == ["simplified"] and all(p.ok for p in record.parity)


def test_when_onnxslim_fails_the_exporters_own_model_is_checked_and_kept(tiny_project: Path, monkeypatch) -> None:
    import onnxslim

    def broken(*args, **kwargs):
        raise RuntimeError("cannot slim this")

    monkeypatch.setattr(onnxslim, "slim", broken)
    sessions = _count_onnxruntime_sessions(monkeypatch)
    record = _export(tiny_project)
    assert not record.simplified and record.simplify_note == "kept unsimplified: RuntimeError: cannot slim this"
    assert len(sessions) == 1 and sessions[0] != "simplified" and all(p.ok for p in record.parity)
    assert sorted(p.name for p in record.onnx_path.parent.iterdir()) == ["export.json", "model.onnx"]


def test_dynamo_export_has_dynamic_axes_and_runs_at_three_shapes(tiny_project: Path) -> None:
    write_tiny_project(tiny_project, DYNAMO)  # export.exporter = "dynamo" forces it
    record = _export(tiny_project, opset=18)
    assert record.exporter == "dynamo" and record.opset == 18
    assert record.exporter_note == 'dynamo exporter with dynamic_shapes (export.exporter = "dynamo")'
    model = onnx.load(str(record.onnx_path))
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, "height", "width"]
    assert [o.name for o in model.graph.output] == ["boxes", "scores"]
    runner = OnnxRuntimeRunner(record.onnx_path)
    for n, side in ((1, 32), (2, 64), (4, 96)):
        out = runner.run({"images": np.zeros((n, 3, side, side), np.float32)})
        assert out["boxes"].shape == (n, (side // 8) ** 2, 4) and out["scores"].shape == (n, (side // 8) ** 2, 2)
    assert {p.shape for p in record.parity} == {"min_shape", "opt_shape", "max_shape"}
    assert all(p.ok and p.max_abs < 1e-4 for p in record.parity)
    stored = json.loads((record.onnx_path.parent / "export.json").read_text())
    assert stored["files"]["model.onnx"] == record.sha256
    assert stored["exporter"] == "dynamo" and stored["versions"]["torch"].startswith("2.")
    assert stored["dynamic_axes"] == {"images": {"0": "batch", "2": "height", "3": "width"}}


def test_opset_comes_from_the_lowest_targeted_parser(tiny_project: Path) -> None:
    project = load_project(tiny_project)
    releases = load_catalog().releases
    assert choose_opset(project, [releases["6.2"]])[0] == 20
    opset, reason = choose_opset(project, [releases["6.2"], releases["5.1.2"]])
    assert opset == 17 and "JetPack 5.1.2" in reason
    write_tiny_project(tiny_project, TINY_TOML.replace("[accuracy]", "[export]\nopset = 19\n\n[accuracy]"))
    with pytest.raises(ExportError, match="export.opset: 19 is above what JetPack 5.1.2"):
        choose_opset(load_project(tiny_project), [releases["6.2"], releases["5.1.2"]])


def test_an_opset_the_forced_dynamo_exporter_cannot_reach_is_an_error_that_names_torchscript(
        tiny_project: Path) -> None:
    assert _export(tiny_project, opset=13).exporter == "torchscript"  # auto: TorchScript writes opset 13
    write_tiny_project(tiny_project, DYNAMO)
    with pytest.raises(ExportError) as caught:
        _export(tiny_project, opset=13, groups=[])
    assert "  - the dynamo exporter produced opset 18, not the requested 13" in caught.value.message
    assert 'export.exporter = "torchscript"' in caught.value.hint


def _export_stage(project_dir: Path) -> tuple[object, str, list[str]]:
    """The export stage through the pipeline: (record, "ran" or "reused", what it said)."""
    messages: list[str] = []
    work = select_work(load_project(project_dir), "orin")
    outcome = compile_work(work, until="export", options=Options(progress=False),
                           progress=messages.append).outcome(EXPORT)
    assert outcome.error is None, outcome.error
    return outcome.record(), outcome.status, [m for m in messages if m.startswith("export: ")]


def test_second_export_is_reused_and_changes_re_export(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TORCHSCRIPT)
    assert _export_stage(tmp_path)[1] == "ran"
    assert _export_stage(tmp_path)[1] == "reused"

    torch.save(load_model(load_project(tmp_path)).state_dict(), tmp_path / "weights.pt")
    with_weights = TORCHSCRIPT.replace('outputs = ["boxes"', 'weights = "weights.pt"\noutputs = ["boxes"')
    write_tiny_project(tmp_path, with_weights)
    _, status, messages = _export_stage(tmp_path)
    assert status == "ran" and "export: changed since the last run: weights" in messages[0]

    write_tiny_project(tmp_path, TORCHSCRIPT.replace("max_shape = [4, 3, 96, 96]", "max_shape = [4, 3, 128, 128]"))
    _, status, messages = _export_stage(tmp_path)
    assert status == "ran" and "io" in messages[0]

    record, _, _ = _export_stage(tmp_path)
    record.onnx_path.write_bytes(record.onnx_path.read_bytes()[:100])  # corrupt the stored export
    _, status, messages = _export_stage(tmp_path)
    assert status == "ran" and "output files missing or modified: export/opset17/model.onnx" in messages[0]


def test_external_data_layout_round_trips(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TORCHSCRIPT.replace('exporter = "torchscript"',
                                                      'exporter = "torchscript"\nexternal_data = true'))
    record, _, _ = _export_stage(tmp_path)
    assert record.external_data and set(record.files) == {"model.onnx", "model.onnx.data"}
    assert OnnxRuntimeRunner(record.onnx_path).run({"images": np.zeros((1, 3, 32, 32), np.float32)})
    assert _export_stage(tmp_path)[1] == "reused"


def test_truncated_onnx_is_a_clear_error(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TORCHSCRIPT)
    record = _export(tmp_path)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(record.onnx_path.read_bytes()[: record.onnx_path.stat().st_size // 2])
    with pytest.raises(ExportError, match="not a valid ONNX model"):
        verify_onnx(broken)
    with pytest.raises(ExportError, match="ONNX Runtime cannot load"):
        OnnxRuntimeRunner(broken)
    result = CliRunner().invoke(main, ["preflight", "-p", str(tmp_path), "--onnx", str(broken)])
    assert result.exit_code == 8 and "not a readable ONNX model" in result.output
    assert "Traceback" not in result.output


RAISING = '''
import torch

class Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        if images.shape[0] > 0:
            raise ValueError("this model cannot run")
        return {"boxes": images, "scores": images}

class Differs(torch.nn.Module):
    """Gives other numbers while being exported than when run eagerly."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        if torch.onnx.is_in_onnx_export():
            y = y + 0.5
        return {"boxes": y[..., :4], "scores": torch.sigmoid(y[..., 4:])}

def raises():
    return Raises()

def differs():
    return Differs()
'''


def test_forward_that_raises_and_missing_entry_point_leave_nothing(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TORCHSCRIPT.replace("tinydet.model:build_model", "tinydet.bad:raises"))
    (tmp_path / "tinydet" / "bad.py").write_text(RAISING)
    with pytest.raises(ModelError, match="raised ValueError: this model cannot run"):
        _export(tmp_path)
    write_tiny_project(tmp_path, TORCHSCRIPT.replace("tinydet.model:build_model", "tinydet.nope:build"))
    with pytest.raises(ModelError, match="cannot import module 'tinydet.nope'"):
        _export(tmp_path)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_parity_mismatch_lists_every_failure_and_leaves_nothing(tmp_path: Path, exporter: str) -> None:
    toml = TORCHSCRIPT.replace("tinydet.model:build_model", "tinydet.bad:differs")
    write_tiny_project(tmp_path, toml.replace('exporter = "torchscript"', f'exporter = "{exporter}"'))
    (tmp_path / "tinydet" / "bad.py").write_text(RAISING)
    with pytest.raises(ParityError) as caught:
        _export(tmp_path, opset=18)
    message = str(caught.value)
    assert "in 6 of 6 checks" in message
    for shape in ("min_shape", "opt_shape", "max_shape"):
        assert f"boxes at {shape}" in message and f"scores at {shape}" in message
    assert "max abs error 0.5" in message
    assert _leftovers(tmp_path) == []
    assert not export_dir(load_project(tmp_path), 18).exists()


def test_cli_export_prints_parity_table(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TORCHSCRIPT)
    result = CliRunner().invoke(main, ["export", "-p", str(tmp_path), "--target", "orin"])
    assert result.exit_code == 0, result.output
    assert "opset 17" in result.output and "limited by JetPack 5.1.2" in result.output
    assert result.output.count(" ok") >= 6 and "parity vs PyTorch [onnxruntime-cpu]" in result.output
    again = CliRunner().invoke(main, ["export", "-p", str(tmp_path), "--target", "orin"])
    assert "reused, nothing changed" in again.output


NEEDS_OPSET_18 = '''
import torch

class Chunked(torch.nn.Module):
    """torch.chunk: the dynamo exporter writes an opset-18 Split (num_outputs) even at opset 17."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 12, 3, stride=8, padding=1)

    def forward(self, images):
        a, b = self.conv(images).chunk(2, dim=1)
        y = (a * torch.sigmoid(b)).flatten(2).transpose(1, 2)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(y[..., 4:])}

class Folded(torch.nn.Module):
    """F.fold (Col2Im) exists only from opset 18: no exporter writes it at 17."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        cols = images.mean(dim=(2, 3)).repeat(1, 4).unsqueeze(-1)  # [N, 12, 1]
        folded = torch.nn.functional.fold(cols, output_size=(2, 2), kernel_size=2)  # [N, 3, 2, 2]
        shift = folded.mean(dim=(1, 2, 3)).reshape(-1, 1, 1)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(y[..., 4:] + shift)}

def chunked():
    return Chunked()

class Differenced(torch.nn.Module):
    """torch.diff: the TorchScript exporter has no symbolic for it; the dynamo exporter decomposes it."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(torch.diff(y[..., 3:], dim=-1))}

def folded():
    return Folded()

def differenced():
    return Differenced()
'''


def _with_model(root: Path, entry: str, toml: str = TINY_TOML) -> Path:
    write_tiny_project(root, toml.replace("tinydet.model:build_model", f"tinydet.ops:{entry}"))
    (root / "tinydet" / "ops.py").write_text(NEEDS_OPSET_18)
    return root


def test_auto_exports_a_yolo_like_chunk_with_torchscript_at_opset_17_without_a_failed_dynamo_attempt(
        tmp_path: Path) -> None:
    """The fleet has JetPack 5.1.2 (opset 17): dynamo's Split keeps opset 18's num_outputs attribute
    (Ultralytics' C2f blocks), TorchScript's does not, and it is tried first."""
    record, status, messages = _export_stage(_with_model(tmp_path, "chunked"))
    assert status == "ran" and record.opset == 17 and record.exporter == "torchscript"
    assert "limited by JetPack 5.1.2 (TensorRT 8.5.2.2)" in record.opset_reason
    assert "JetPack 6.2 (TensorRT 10.3.0.30) would take up to 20" in record.opset_reason
    assert record.failed_attempts == [] and messages[1:] == ["export: trying the torchscript exporter at opset 17",
                                                             "export: simplifying with onnxslim"]
    model = onnx.load(str(record.onnx_path))
    assert [o.version for o in model.opset_import if o.domain == ""] == [17]
    onnx.checker.check_model(model, full_check=True)

    # forced, the dynamo exporter's model is refused by the checker, and the error says why
    _with_model(tmp_path, "chunked", DYNAMO)
    with pytest.raises(ExportError) as caught:
        export_model(load_project(tmp_path), 17, "test", groups=[])
    assert "  - the dynamo exporter wrote a model the ONNX checker refuses (ValidationError: " in caught.value.message
    assert "num_outputs for operator Split" in caught.value.message


def test_auto_falls_back_to_dynamo_when_torchscript_cannot_export_and_records_why(tmp_path: Path) -> None:
    """torch.diff has no TorchScript symbolic; the dynamo exporter decomposes it."""
    record, status, messages = _export_stage(_with_model(tmp_path, "differenced"))
    assert status == "ran" and record.opset == 17 and record.exporter == "dynamo"
    assert len(record.failed_attempts) == 1
    assert record.failed_attempts[0].startswith("the torchscript exporter failed: UnsupportedOperatorError: ")
    assert "diff" in record.failed_attempts[0]
    assert record.exporter_note == "dynamo exporter with dynamic_shapes, because " + record.failed_attempts[0]
    assert ".tmp-" not in record.exporter_note and str(tmp_path) not in record.exporter_note
    assert messages[1:3] == ["export: trying the torchscript exporter at opset 17",
                             f"export: {record.failed_attempts[0]}; falling back"]
    assert messages[3] == "export: trying the dynamo exporter at opset 17"
    stored = json.loads((record.onnx_path.parent / "export.json").read_text())
    assert stored["failed_attempts"] == record.failed_attempts and stored["exporter"] == "dynamo"
    assert all(p.ok for p in record.parity)


def test_each_exporter_is_tried_once_and_dynamos_opset_18_is_refused_before_any_check(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """One attempt per exporter, in order: the opset the file imports is read before anything else is done."""
    calls = _count_exports(monkeypatch)
    with pytest.raises(ExportError) as caught:  # dynamo builds at 18 and cannot convert to 13
        _export(_with_model(tmp_path, "differenced"), opset=13, groups=[])
    assert calls == ["_export_torchscript", "_export_dynamo"]
    lines = [line for line in caught.value.message.splitlines() if line.startswith("  - ")]
    assert lines[0].startswith("  - the torchscript exporter failed: UnsupportedOperatorError: ")
    assert lines[1] == "  - the dynamo exporter produced opset 18, not the requested 13 (its version conversion failed)"


def test_a_model_that_needs_a_higher_opset_names_the_targets_that_cap_it(tmp_path: Path) -> None:
    project = load_project(_with_model(tmp_path, "folded"))
    groups = select_work(project, "all").groups
    opset, reason = choose_opset(project, [g.target.release for g in groups])
    assert opset == 17
    with pytest.raises(ExportError) as caught:
        export_model(project, opset, reason, groups=groups)
    message, hint = caught.value.message, caught.value.hint
    assert "cannot export tinydet.ops:folded to ONNX opset 17:" in message
    assert message.index("  - the torchscript exporter failed: UnsupportedOperatorError: ") \
        < message.index("  - the dynamo exporter produced opset 18, not the requested 17")
    assert "col2im" in message
    assert "at opset 20 it exports (torchscript exporter) and matches PyTorch" in message
    assert "yard-cams = orin-nano-8gb@6.2 (TensorRT 10.3.0.30, up to opset 20)" in message
    assert ("dock = agx-orin-64gb@5.1.2 (TensorRT 8.5.2.2, up to opset 17), "
            "legacy = xavier-nx@5.1.2 (TensorRT 8.5.2.2, up to opset 17) cap the opset at 17") in message
    assert "give dock, legacy their own project" in hint and "(--target yard-cams)" in hint
    assert ".tmp-" not in str(caught.value) and ".probe-" not in str(caught.value)
    assert _leftovers(tmp_path) == []

    # the advice works: the JetPack 6.2 group alone exports at 20
    alone = select_work(project, "yard-cams")
    releases = [g.target.release for g in alone.groups]
    record = export_model(project, *choose_opset(project, releases), groups=alone.groups)
    assert record.opset == 20 and record.exporter == "torchscript" and record.failed_attempts == []


def test_the_cli_error_for_a_model_no_exporter_takes_says_what_to_try(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["export", "-p", str(_with_model(tmp_path, "folded")), "--target", "dock"])
    assert result.exit_code == 8 and "Traceback" not in result.output
    assert "cannot export tinydet.ops:folded to ONNX opset 17" in result.output
    assert "the torchscript exporter failed" in result.output and "hint:" in result.output
    assert ".tmp-" not in result.output
