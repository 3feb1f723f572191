"""``edgebuild init --model --data`` from a model PyTorch loads (a TorchScript file, a torchvision/timm name)
and ``--input-size``; the files are tiny models traced here and datasets of a few blank images.

Compiling what init writes is tests/integration/test_init_from_files.py (ONNX, checkpoints, TorchScript);
a torchvision or timm model by name is tests/zoo/test_model_hub_sources.py (they need those packages).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgebuild._compat import tomllib
from edgebuild.cli import main
from edgebuild.errors import ConfigError, DataError, ModelError
from edgebuild.workflows.init.project_file import init_from_files, parse_input_size

# torch 2.13 marks torch.jit deprecated; TorchScript files are what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


class _Classifier(torch.nn.Module):
    def __init__(self, channels: int = 1, classes: int = 3) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean((2, 3)))


class _Detector(torch.nn.Module):
    """boxes [N, A, 4] and scores [N, A, C] over an 8-pixel grid."""

    def __init__(self, classes: int = 2) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4 + classes, 8, stride=8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x).flatten(2).transpose(1, 2)
        return y[..., :4].abs() * 8, y[..., 4:].sigmoid()


def _traced(path: Path, model: torch.nn.Module, example: list[int]) -> Path:
    torch.jit.trace(model.eval(), torch.zeros(*example)).save(str(path))
    return path


def _image(path: Path, seed: int, gray: bool = False) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    shape = (32, 32) if gray else (32, 32, 3)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, shape, dtype=np.uint8)).save(path)


def _class_folders(root: Path, names: tuple[str, ...] = ("a", "b", "c")) -> Path:
    for split in ("train", "val"):
        for n, name in enumerate(names):
            for i in range(2):
                _image(root / split / name / f"{i}.png", seed=10 * n + i, gray=True)
    return root


def _yolo(root: Path, names: tuple[str, ...] = ("a", "b")) -> Path:
    for split in ("train", "val"):
        for i in range(2):
            _image(root / "images" / split / f"{split}{i}.png", seed=i)
            (root / "labels" / split).mkdir(parents=True, exist_ok=True)
            (root / "labels" / split / f"{split}{i}.txt").write_text(f"{i % len(names)} 0.5 0.5 0.25 0.25\n")
    (root / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames: [{', '.join(names)}]\n")
    return root / "data.yaml"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (str(result.exception) if result.exception and
                                               not isinstance(result.exception, SystemExit) else "")


def _written(project: Path) -> dict:
    return tomllib.loads((project / "edgebuild.toml").read_text())


def test_input_size_is_one_number_or_height_and_width() -> None:
    assert parse_input_size("224") == [224, 224]
    assert parse_input_size("480,640") == parse_input_size("480x640") == [480, 640]
    for bad in ("", "0", "a,b", "1,2,3", "-3"):
        with pytest.raises(ValueError, match="is not an image size"):
            parse_input_size(bad)
    code, output = _run("init", "--model", "m.ts", "--data", "d", "--input-size", "big")
    assert code == 2 and "is not an image size" in output, output


def test_a_traced_classifier_says_its_task_size_channels_and_classes(tmp_path: Path) -> None:
    model = _traced(tmp_path / "digits.ts", _Classifier(channels=1, classes=3), [2, 1, 16, 16])
    code, output = _run("init", "--model", str(model), "--data", str(_class_folders(tmp_path / "data")),
                        str(tmp_path / "p"))
    assert code == 0, output
    assert "task classification (digits.ts's one output [1, 3]: a classification model of 3 classes)" in output
    assert "loaded: TorchScript file digits.ts" in output and "next: edgebuild compile --target orin" in output
    written = _written(tmp_path / "p")
    assert written["model"]["source"] == "../digits.ts" and written["model"]["outputs"] == ["logits"]
    assert "weights" not in written["model"] and "kind" not in written["model"]
    spec = written["model"]["inputs"][0]
    assert (spec["name"], spec["min_shape"], spec["max_shape"]) == ("images", [1, 1, 16, 16], [4, 1, 16, 16])
    assert written["task"]["kind"] == "classification" and written["task"]["classes"] == ["a", "b", "c"]
    assert written["task"]["postprocess"] == {"logits_output": "logits"}
    preprocess = written["task"]["preprocess"]
    assert (preprocess["input_size"], preprocess["channel_order"], preprocess["resize"]) == ([16, 16], "GRAY", "resize")
    text = (tmp_path / "p" / "edgebuild.toml").read_text()
    assert "traced at [2, 1, 16, 16]" in text and "measured by init (the model file does not say)" in text


def test_a_traced_detector_and_a_yolo_data_yaml(tmp_path: Path) -> None:
    model = _traced(tmp_path / "det.ts", _Detector(classes=2), [1, 3, 64, 64])
    init_from_files(tmp_path / "p", model=model, data=_yolo(tmp_path / "data"))
    written = _written(tmp_path / "p")
    assert written["task"]["kind"] == "detection" and written["model"]["outputs"] == ["boxes", "scores"]
    assert written["task"]["postprocess"]["boxes_output"] == "boxes"
    assert written["task"]["preprocess"]["resize"] == "letterbox" and written["task"]["classes"] == ["a", "b"]
    assert written["model"]["inputs"][0]["opt_shape"] == [1, 3, 64, 64]


def test_the_task_and_class_count_the_model_says_are_checked_against_the_data(tmp_path: Path) -> None:
    classifier = _traced(tmp_path / "cls.ts", _Classifier(channels=3, classes=3), [1, 3, 32, 32])
    with pytest.raises(DataError, match="detection data; cls.ts is a classification model"):
        init_from_files(tmp_path / "p", model=classifier, data=_yolo(tmp_path / "yolo"))
    two = _traced(tmp_path / "two.ts", _Classifier(channels=1, classes=2), [1, 1, 32, 32])
    with pytest.raises(DataError, match="two.ts predicts 2 classes, the dataset names 3"):
        init_from_files(tmp_path / "p", model=two, data=_class_folders(tmp_path / "folders"))
    assert not (tmp_path / "p").exists()


def test_outputs_of_neither_task_take_the_datasets_task_and_the_model_check_says_what_is_wrong(
        tmp_path: Path) -> None:
    class Spatial(_Classifier):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.conv(x).mean((2, 3)))[:, :, None, None]  # [N, C, 1, 1]

    model = _traced(tmp_path / "spatial.ts", Spatial(channels=1), [1, 1, 16, 16])
    with pytest.raises(ModelError) as raised:
        init_from_files(tmp_path / "p", model=model, data=_class_folders(tmp_path / "data"))
    message = str(raised.value)
    assert "edgebuild.toml: the model's outputs do not fit the classification task" in message, message
    assert "flatten(1)" in message and ".init-draft" not in message
    assert not (tmp_path / "p").exists()


def test_a_scripted_file_takes_the_input_size_given_or_a_default(tmp_path: Path) -> None:
    model = tmp_path / "scripted.ts"
    torch.jit.script(_Classifier(channels=1).eval()).save(str(model))
    data = _class_folders(tmp_path / "data")
    result = init_from_files(tmp_path / "p", model=model, data=data)
    assert _written(tmp_path / "p")["model"]["inputs"][0]["max_shape"] == [4, 1, 224, 224]  # its first conv's 1
    assert any("CHECK: scripted.ts does not say its image size" in line for line in result.found)
    init_from_files(tmp_path / "q", model=model, data=data, input_size=[24, 32])
    written = _written(tmp_path / "q")
    assert written["task"]["preprocess"]["input_size"] == [24, 32]
    assert written["model"]["inputs"][0]["opt_shape"] == [1, 1, 24, 32]


def test_a_forward_that_fails_at_the_size_tried_says_to_pass_the_size(tmp_path: Path) -> None:
    class Fixed(_Classifier):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.conv(x).reshape(x.shape[0], 4, 256).mean(2))  # 16x16 only

    model = tmp_path / "fixed.ts"
    torch.jit.script(Fixed(channels=1).eval()).save(str(model))
    with pytest.raises(ModelError, match=r"forward at \[1, 1, 224, 224\] raised .*shape") as raised:
        init_from_files(tmp_path / "p", model=model, data=_class_folders(tmp_path / "data"))
    assert "--input-size" in (raised.value.hint or "")
    init_from_files(tmp_path / "p", model=model, data=_class_folders(tmp_path / "data"), input_size=[16, 16])


def test_a_model_by_name_is_a_classifier_and_weights_go_only_with_one(tmp_path: Path) -> None:
    with pytest.raises(DataError) as raised:
        init_from_files(tmp_path / "p", model="torchvision:resnet18", data=_yolo(tmp_path / "yolo"))
    assert "torchvision:resnet18 is a classification model (a torchvision model by name is a classifier)" in \
        raised.value.message and "export it to ONNX" in (raised.value.hint or "")
    with pytest.raises(ModelError, match="is not a model name"):
        init_from_files(tmp_path / "p", model="timm:", data=_yolo(tmp_path / "yolo"))
    model = _traced(tmp_path / "cls.ts", _Classifier(channels=1), [1, 1, 16, 16])
    with pytest.raises(ConfigError, match="--weights: goes with a model by name"):
        init_from_files(tmp_path / "p", model=model, data=tmp_path, weights=tmp_path / "w.pth")
    code, output = _run("init", "--model", "torchvison:resnet18", "--data", str(tmp_path / "yolo"), str(tmp_path / "p"))
    assert code == 6 and "file not found" in output and "torchvision:<name>" in output, output
    assert not (tmp_path / "p").exists()


def _onnx(path: Path, dims: list[int | str]) -> Path:
    """A one-layer classifier [N, 3, H, W] -> [N, 2] with the input dims given (str: dynamic)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((2, 3, 1, 1), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["g"]),
         helper.make_node("Flatten", ["g"], ["logits"])],
        "cls", [helper.make_tensor_value_info("images", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_input_size_fills_what_an_onnx_file_leaves_open_and_may_not_change_what_it_fixes(tmp_path: Path) -> None:
    data = _class_folders(tmp_path / "data", ("a", "b"))
    dynamic = _onnx(tmp_path / "dynamic.onnx", ["batch", 3, "h", "w"])
    result = init_from_files(tmp_path / "default", model=dynamic, data=data)
    assert _written(tmp_path / "default")["task"]["preprocess"]["input_size"] == [224, 224]  # a classifier's
    assert any("CHECK: dynamic.onnx fixes no image size" in line for line in result.found)
    init_from_files(tmp_path / "given", model=dynamic, data=data, input_size=[96, 128])
    assert _written(tmp_path / "given")["model"]["inputs"][0]["max_shape"] == [4, 3, 96, 128]
    fixed = _onnx(tmp_path / "fixed.onnx", ["batch", 3, 64, 64])
    with pytest.raises(ConfigError, match=r"--input-size 96,128: fixed.onnx fixes its image size at 64x64"):
        init_from_files(tmp_path / "p", model=fixed, data=data, input_size=[96, 128])
    init_from_files(tmp_path / "same", model=fixed, data=data, input_size=[64, 64])
    half = _onnx(tmp_path / "half.onnx", ["batch", 3, 64, "w"])
    with pytest.raises(ConfigError, match="half.onnx fixes its image size at 64x128"):
        init_from_files(tmp_path / "p", model=half, data=data, input_size=[96, 128])
