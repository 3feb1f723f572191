"""The model stage: what identifies the model (every Python file under model.python_path, nothing
imported), and the check of its outputs against the task at the min, opt and max shapes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ModelError
from edgebuild.project.config import Project, load_project
from edgebuild.project.schema import ClassificationTask
from edgebuild.runtime.base.vision import decode_outputs
from edgebuild.sources.entry_point import (
    TorchRunner,
    check_model,
    model_key_parts,
    model_source_digest,
    outputs_by_name,
)
from edgebuild.sources.task_outputs import task_output_mismatches
from tests.support.project import (
    TINY_CLASSIFIER_TOML,
    TINY_TOML,
    write_tiny_classifier_project,
    write_tiny_project,
    write_tiny_wrong_models,
)


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


# -- the model stage checks the outputs against the task ------------------------------------------

def _wrong_detector(root: Path, builder: str) -> Project:
    write_tiny_project(root, TINY_TOML.replace("tinydet.model:build_model", f"tinydet.wrong:{builder}"))
    write_tiny_wrong_models(root)
    return load_project(root)


def _model_error(project: Project) -> str:
    with pytest.raises(ModelError) as caught:
        check_model(project, TorchRunner(project))
    return str(caught.value)


def test_a_raw_yolo_head_is_named_with_the_shapes_got_and_expected(tmp_path: Path) -> None:
    message = _model_error(_wrong_detector(tmp_path, "build_raw_head"))
    assert "boxes [N, 4+C, A] = [1, 6, 16]: looks like Ultralytics' raw head output; transpose to " \
           "[N, A, 4+C] and split boxes/scores in your wrapper" in message
    assert "expected  boxes [N, A, 4], scores [N, A, 2], float" in message
    # every shape it ran at, each mismatch once
    assert "min_shape (images [1, 3, 32, 32]): boxes [1, 6, 16] float32, scores [1, 2, 16] float32" in message
    assert "max_shape (images [4, 3, 96, 96]): boxes [4, 6, 144] float32" in message
    assert message.count("looks like Ultralytics") == 1


def test_split_but_not_transposed_outputs_say_transpose(tmp_path: Path) -> None:
    message = _model_error(_wrong_detector(tmp_path, "build_untransposed"))
    assert "boxes [1, 4, 16] is [N, 4, A], coordinates first: transpose(1, 2) to [N, A, 4]" in message
    assert "scores [1, 2, 16] is [N, C, A], classes first: transpose(1, 2) to [N, A, C]" in message
    assert "(2 problems)" in message


def test_a_wrong_class_count_names_both_counts(tmp_path: Path) -> None:
    message = _model_error(_wrong_detector(tmp_path, "build_too_many_classes"))
    assert "scores have 80 classes, task.classes lists 2" in message
    assert "(1 problem)" in message and "transpose(1, 2)" not in message


def test_integer_scores_are_refused(tmp_path: Path) -> None:
    assert "scores is int64; the task reads float" in _model_error(_wrong_detector(tmp_path, "build_int_scores"))


def test_classification_logits_must_have_one_score_per_class(tmp_path: Path) -> None:
    write_tiny_classifier_project(tmp_path / "ok")
    good = load_project(tmp_path / "ok")
    assert check_model(good, TorchRunner(good)).output_shapes["max_shape"] == {"logits": [4, 3]}
    write_tiny_classifier_project(tmp_path / "imagenet", TINY_CLASSIFIER_TOML.replace(
        "build_classifier", "build_imagenet_classifier"))
    message = _model_error(load_project(tmp_path / "imagenet"))
    assert "logits have 1000 classes, task.classes lists 3" in message
    assert "expected  logits [N, 3], float" in message and "logits [2, 1000] float32" in message


# (case id, task kind, outputs at an input batch of 2, words the mismatch must contain)
SHAPES = [
    ("fits-detection", "detection", {"boxes": (2, 9, 4), "scores": (2, 9, 2)}, None),
    ("fits-classification", "classification", {"logits": (2, 2)}, None),
    ("batch-fixed-to-one", "detection", {"boxes": (1, 9, 4), "scores": (1, 9, 2)},
     "boxes has 1 on axis 0 at an input batch of 2"),
    ("boxes-and-scores-together", "detection", {"boxes": (2, 9, 6), "scores": (2, 9, 2)},
     "boxes = y[..., :4], scores = y[..., 4:]"),
    ("yolov5-objectness", "detection", {"boxes": (2, 9, 7), "scores": (2, 9, 2)},
     "scores = y[..., 5:] * y[..., 4:5]"),
    ("background-class", "detection", {"boxes": (2, 9, 4), "scores": (2, 9, 3)},
     "scores have 3 classes, task.classes lists 2: if one is a background class"),
    ("anchor-counts-differ", "detection", {"boxes": (2, 9, 4), "scores": (2, 8, 2)},
     "boxes hold 9 anchors and scores 8"),
    ("no-batch-axis", "detection", {"boxes": (9, 4), "scores": (2, 9, 2)}, "boxes [9, 4] has no batch axis"),
    ("pooled-logits", "classification", {"logits": (2, 2, 1, 1)}, "flatten(1) to [N, C]"),
    ("vit-tokens", "classification", {"logits": (2, 5, 2)}, "token features [N, T, D]"),
]


@pytest.mark.parametrize("case, kind, shapes, words", SHAPES, ids=[c[0] for c in SHAPES])
def test_output_mismatches_name_the_usual_cause(tiny_project: Path, case, kind, shapes, words) -> None:
    project = load_project(tiny_project)
    if kind == "classification":
        project = project.model_copy(update={"task": ClassificationTask(kind="classification", classes=["a", "b"],
                                                                        preprocess=project.task.preprocess)})
    outputs = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    found = task_output_mismatches(project, outputs, batch=2)
    if words is None:
        assert found == []
    else:
        assert words in found[0].text, found
        assert all(m.kind == found[0].kind for m in found), found  # one cause, on each output it shows in


def test_a_forward_returning_a_non_tensor_is_a_model_error() -> None:
    import torch

    # Ultralytics' Detect head in eval mode returns (predictions, [feature maps])
    with pytest.raises(ModelError, match="output 'scores' is a list, not a tensor"):
        outputs_by_name((torch.zeros(1, 6, 4), [torch.zeros(1)]), ["boxes", "scores"], "edgebuild.toml")


def test_validate_stops_at_the_model_stage_without_a_traceback(tmp_path: Path) -> None:
    _wrong_detector(tmp_path, "build_untransposed")
    result = CliRunner().invoke(main, ["validate", "-p", str(tmp_path)])
    assert result.exit_code == 6, result.output
    assert "transpose(1, 2) to [N, A, 4]" in result.output
    assert "Traceback" not in result.output and "unpack" not in result.output


def test_the_decoders_refuse_outputs_the_task_cannot_read(tmp_path: Path) -> None:
    """A runner that skipped the model stage (or a model folder built before it) meets a clear error."""
    from edgebuild.accuracy.evaluate import evaluate

    for builder, words in (("build_untransposed", "boxes is [4, 4, 64] and scores is [4, 2, 64], not [N, A, 4] "
                                                  "and [N, A, 2]"),
                           ("build_too_many_classes", "scores is [4, 64, 80], not [N, A, 4] and [N, A, 2]")):
        project = _wrong_detector(tmp_path / builder, builder)
        with pytest.raises(ModelError, match=re.escape(words)):
            evaluate(project, TorchRunner(project), progress=False)
    write_tiny_classifier_project(tmp_path / "imagenet", TINY_CLASSIFIER_TOML.replace(
        "build_classifier", "build_imagenet_classifier"))
    project = load_project(tmp_path / "imagenet")
    with pytest.raises(ModelError, match=re.escape("logits is [4, 1000] for 4 images, not [N, 3]")):
        evaluate(project, TorchRunner(project), progress=False)
    with pytest.raises(ModelError, match="cannot decode detections"):
        decode_outputs({"boxes": np.zeros((1, 4, 16)), "scores": np.zeros((1, 2, 16))},
                       {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.1,
                        "nms_iou": 0.5, "max_detections": 10})
