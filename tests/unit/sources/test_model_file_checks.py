"""What check finds about a model file without exporting it: its bytes against what it is said to be, and a
detector's stride (from Ultralytics' metadata, or its anchor count at the profile's size)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from edgebuild.errors import ModelError
from edgebuild.project.config import load_project
from edgebuild.sources.file_kinds import content_kind
from edgebuild.sources.model_file_checks import raise_for_unreadable
from edgebuild.sources.onnx_checks import UltralyticsSummary, model_stride, raise_for_stride
from tests.support.project import TINY_TOML, write_tiny_project


def _zip(names: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, value in names.items():
            archive.writestr(name, value)
    return buffer.getvalue()


@pytest.mark.parametrize("content, kind, words", [
    (b"", "empty", "is empty (0 bytes)"),
    (b"PK\x03\x04" + bytes(100), "truncated", "truncated or damaged zip archive"),
    (_zip({"model/code/__torch__.py": b"", "model/constants.pkl": b""}), "torchscript", "TorchScript"),
    (_zip({"archive/data.pkl": b"\x80\x02N."}), "zip", "a zip archive"),
    (b"\x80\x04\x95" + bytes(20), "pickle", "a Python pickle"),
    (b"\x08\x08\x12\x07pytorch", "onnx", "an ONNX model"),
    (b"<html>404</html>", "unknown", "neither ONNX"),
])
def test_a_files_bytes_say_what_it_is(tmp_path: Path, content: bytes, kind: str, words: str) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    found, said = content_kind(path)
    assert found == kind and words in said, said


def test_a_folder_an_empty_and_a_missing_file_are_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="--model: .* is a folder, not a model file"):
        raise_for_unreadable(tmp_path, "--model")
    (tmp_path / "best.pt").write_bytes(b"")
    with pytest.raises(ModelError, match="best.pt is empty") as caught:
        raise_for_unreadable(tmp_path / "best.pt", "--model")
    assert "yolo export model=best.pt format=onnx" in str(caught.value)
    with pytest.raises(ModelError, match="file not found"):
        raise_for_unreadable(tmp_path / "gone.onnx", "--model")


def _detector(tmp_path: Path, size: int = 64) -> object:
    text = TINY_TOML
    for which in ("min_shape", "opt_shape", "max_shape"):
        start = text.index(f"{which} = [")
        end = text.index("]", start)
        batch = text[start:end].split("[")[1].split(",")[0]
        text = text[:start] + f"{which} = [{batch}, 3, {size}, {size}" + text[end:]
    text = text.replace("input_size = [64, 64]", f"input_size = [{size}, {size}]")
    write_tiny_project(tmp_path, text)
    return load_project(tmp_path)


def test_a_detectors_stride_comes_from_its_anchors(tmp_path: Path) -> None:
    project = _detector(tmp_path)
    boxes = project.task.postprocess.boxes_output
    # 64x64 at strides 8, 16, 32: 64 + 16 + 4 anchors
    assert model_stride(project, None, {boxes: [1, 84, 4]}) == (32, "its 84 anchors at 64x64: feature maps at "
                                                                  "strides 8, 16, 32")
    assert model_stride(project, None, {boxes: [1, 64, 4]})[0] == 8  # one level at stride 8
    assert model_stride(project, None, {boxes: [1, 83, 4]}) is None  # no pyramid gives 83
    said = UltralyticsSummary(task="detect", classes=["a"], imgsz=[64, 64], stride=[8, 16, 32], version="8.3.0")
    assert model_stride(project, said, {}) == (32, "its Ultralytics metadata")


def test_a_size_off_the_stride_is_named_as_such(tmp_path: Path) -> None:
    project = _detector(tmp_path, size=80)
    with pytest.raises(ModelError) as caught:
        raise_for_stride(project, Path("det.onnx"), (32, "its Ultralytics metadata"))
    message = str(caught.value)
    assert "det.onnx: model.inputs[0] ('images') image size is not a multiple of the model's stride 32 " \
           "(its Ultralytics metadata)" in message
    assert "opt_shape [2, 3, 80, 80]" in message and "multiples of 32, e.g. 64x64" in message
    raise_for_stride(_detector(tmp_path / "ok", size=96), Path("det.onnx"), (32, "its Ultralytics metadata"))
