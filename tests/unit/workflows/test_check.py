"""`edgebuild check` beyond the project file: the entry point's model builds and runs at the profile's shapes,
data.prepare imports, the data folders hold images."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ConfigError, DataError, ModelError
from edgebuild.project.config import load_project
from edgebuild.workflows.check import check_code_and_data, raise_for_problems
from tests.support.project import TINY_TOML, write_tiny_classifier_project, write_tiny_project


def _problems(root: Path) -> list[str]:
    return [str(f) for f in check_code_and_data(load_project(root)) if f.is_problem]


def test_a_valid_project_has_only_notes_and_its_model_is_built_and_run(tiny_project: Path) -> None:
    marker = tiny_project / "built"
    with (tiny_project / "tinydet" / "model.py").open("a") as source:
        source.write(f"\n\ndef build_model():\n    open({str(marker)!r}, 'w').close()\n    return TinyDetector()\n")
    findings = check_code_and_data(load_project(tiny_project))
    assert [f.key for f in findings] == ["model.entry_point", "data.calibration_images", "data.validation.images"]
    assert not any(f.is_problem for f in findings)
    assert str(findings[0]).startswith("model.entry_point: tinydet.model:build_model builds (168 parameters); run at "
                                       "the min/opt/max shapes, its outputs ['boxes', 'scores'] fit the detection "
                                       "task (")
    assert "4 images in" in str(findings[1]) and "4 decoded" in str(findings[1])
    assert marker.exists()  # built, as validate's model stage builds it


#: a detector whose stride-16 and stride-32 feature maps (rounded up, as padded convolutions round) are added: its
#: image sizes must be multiples of 32
PYRAMID = """
import torch
from torch.nn.functional import avg_pool2d, interpolate


class Pyramid(torch.nn.Module):
    def __init__(self, classes=2):
        super().__init__()
        self.head = torch.nn.Conv2d(3, 4 + classes, 1)

    def forward(self, images):
        maps = avg_pool2d(images, 16, ceil_mode=True) + interpolate(avg_pool2d(images, 32, ceil_mode=True),
                                                                    scale_factor=2.0)
        y = self.head(maps).flatten(2).transpose(1, 2)
        return {"boxes": y[..., :4].abs() * 16.0, "scores": torch.sigmoid(y[..., 4:])}


def build_model():
    return Pyramid()
"""


def test_an_image_size_off_the_models_stride_is_a_config_error_naming_the_key_and_the_nearest_sizes(
        tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace("[1, 3, 32, 32]", "[1, 3, 100, 100]")
                       .replace("[2, 3, 64, 64]", "[2, 3, 128, 128]").replace("[4, 3, 96, 96]", "[4, 3, 160, 150]")
                       .replace("input_size = [64, 64]", "input_size = [128, 128]"))
    (tmp_path / "tinydet" / "model.py").write_text(PYRAMID)
    project = load_project(tmp_path)
    [problem] = [f for f in check_code_and_data(project) if f.is_problem]
    assert problem.error is ConfigError and problem.key == "model.inputs[0].min_shape, model.inputs[0].max_shape"
    assert problem.message.startswith(
        "image size not a multiple of the model's stride 32: min_shape 100x100 (nearest valid: 96 or 128), "
        "max_shape 160x150 (nearest valid: height 160, width 128 or 160); the forward at min_shape [1, 3, 100, 100] "
        "raised RuntimeError: "), problem.message
    assert problem.message.endswith("(the model runs at 96x96, not at 100x100, 104x104 or 112x112)")
    assert "multiples of 32" in str(problem.hint)
    with pytest.raises(ConfigError, match=r"edgebuild.toml: model.inputs\[0\].min_shape"):
        raise_for_problems(project, check_code_and_data(project))


def test_a_forward_that_fails_at_every_size_is_not_called_a_stride_problem(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML)
    (tmp_path / "tinydet" / "model.py").write_text(
        "import torch\n\nclass Broken(torch.nn.Module):\n    def forward(self, images):\n"
        "        return torch.nn.functional.conv2d(images, torch.zeros(6, 4, 3, 3))\n\n"
        "def build_model():\n    return Broken()\n")
    [problem] = [f for f in check_code_and_data(load_project(tmp_path)) if f.is_problem]
    assert problem.error is ModelError and problem.key == "model.entry_point"
    assert problem.message.startswith("model forward at {'images': [1, 3, 32, 32]} raised RuntimeError")
    assert "stride" not in problem.message


def test_weights_that_do_not_fit_are_named_by_check(tiny_project: Path) -> None:
    import torch

    torch.save({"conv.weight": torch.zeros(1)}, tiny_project / "w.pt")
    toml = tiny_project / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('outputs = ["boxes", "scores"]',
                                             'outputs = ["boxes", "scores"]\nweights = "w.pt"'))
    [problem] = [f for f in check_code_and_data(load_project(tiny_project)) if f.is_problem]
    assert problem.error is ModelError and problem.key == "model.weights"
    assert "w.pt does not fit the model" in problem.message


@pytest.mark.parametrize("entry_point, words", [
    ("tinydet.modle:build_model", "cannot import module 'tinydet.modle': No module named 'tinydet.modle'"),
    ("tinydet.model:build_modle", "module 'tinydet.model' has no function 'build_modle'; did you mean 'build_model'?"),
], ids=["module", "attribute"])
def test_a_mistyped_entry_point_is_a_model_error_naming_it(tmp_path: Path, entry_point: str, words: str) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace("tinydet.model:build_model", entry_point))
    project = load_project(tmp_path)
    assert _problems(tmp_path) == [f"model.entry_point: {words}"]
    with pytest.raises(ModelError, match="model.entry_point"):
        raise_for_problems(project, check_code_and_data(project))


def test_a_module_that_raises_on_import_names_the_error(tiny_project: Path) -> None:
    (tiny_project / "tinydet" / "model.py").write_text("import torchvison\n")
    assert _problems(tiny_project) == ["model.entry_point: cannot import module 'tinydet.model': "
                                       "No module named 'torchvison'"]


def test_an_empty_calibration_folder_is_a_data_error_naming_the_path(tiny_project: Path) -> None:
    folder = tiny_project / "data" / "calibration"
    for image in folder.iterdir():
        image.unlink()
    (folder / "notes.txt").write_text("no images here")
    [problem] = _problems(tiny_project)
    assert problem.startswith("data.calibration_images: no images") and str(folder) in problem
    project = load_project(tiny_project)
    with pytest.raises(DataError):
        raise_for_problems(project, check_code_and_data(project))


def test_a_corrupt_image_is_named(tiny_project: Path) -> None:
    broken = tiny_project / "data" / "val" / "images" / "0.png"
    broken.write_bytes(broken.read_bytes()[:60])
    assert _problems(tiny_project) == [f"data.validation.images: {broken}: cannot read image: image file is truncated"]


def test_annotations_naming_a_missing_image_are_reported(tiny_project: Path) -> None:
    (tiny_project / "data" / "val" / "images" / "3.png").unlink()
    [problem] = _problems(tiny_project)
    assert problem.startswith("data.validation.images: 1 image(s) listed in annotations.json") and "3.png" in problem


def test_class_folders_must_match_task_classes(tmp_path: Path) -> None:
    write_tiny_classifier_project(tmp_path)
    val = tmp_path / "data" / "val"
    assert _problems(tmp_path) == []
    (val / "hen").mkdir()  # an extra folder alone is a note: its images are simply not evaluated
    notes = [str(f) for f in check_code_and_data(load_project(tmp_path))]
    assert any("folders ['hen']" in n and "not in task.classes" in n for n in notes), notes
    shutil.rmtree(val / "fox")
    assert _problems(tmp_path) == [f"data.validation.images: {val} needs one folder per task.classes entry; "
                                   "missing ['fox'], and ['hen'] are not in task.classes "
                                   "(found: ['cat', 'dog', 'hen'])"]


def test_an_empty_class_folder_is_named(tmp_path: Path) -> None:
    write_tiny_classifier_project(tmp_path)
    folder = tmp_path / "data" / "val" / "dog"
    for image in folder.iterdir():
        image.unlink()
    [problem] = _problems(tmp_path)
    assert problem.startswith("data.validation.images: no images") and str(folder) in problem


def test_data_that_prepare_makes_is_not_asked_for(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML.replace(
        'calibration_images = "data/calibration"',
        'calibration_images = "data/generated"\nprepare = "tinydet.prep:prepare"'))
    (tmp_path / "tinydet" / "prep.py").write_text("def prepare(root):\n    raise SystemExit('ran')\n")
    findings = check_code_and_data(load_project(tmp_path))
    assert not any(f.is_problem for f in findings)
    assert "data.prepare: tinydet.prep:prepare imports (not called)" in [str(f) for f in findings]
    assert "data.calibration_images" not in [f.key for f in findings]


# -- the command (needs `edgebuild check` to call check_code_and_data and raise_for_problems) ------

def test_check_command_lists_what_it_checked(tiny_project: Path) -> None:
    result = CliRunner().invoke(main, ["check", "-p", str(tiny_project)])
    assert result.exit_code == 0, result.output
    assert "model.entry_point: tinydet.model:build_model builds (168 parameters)" in result.output


@pytest.mark.parametrize("edit, code, words", [
    (lambda root: (root / "edgebuild.toml").write_text(TINY_TOML.replace("tinydet.model:", "tinydet.modle:")),
     6, "model.entry_point: cannot import module 'tinydet.modle'"),
    (lambda root: [p.unlink() for p in (root / "data" / "calibration").iterdir()],
     5, "data.calibration_images: no images"),
], ids=["mistyped-entry-point", "empty-calibration"])
def test_check_command_exits_with_the_problems_class(tiny_project: Path, edit, code: int, words: str) -> None:
    edit(tiny_project)
    result = CliRunner().invoke(main, ["check", "-p", str(tiny_project)])
    assert result.exit_code == code, result.output
    assert words in result.output and "Traceback" not in result.output
