"""Comparing two bench results (the change in each figure, refusing runs that are not alike), and one
request timed stage by stage (preprocessing from a JPEG, inference, the decode of the output form)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from edgebuild.devices.remote_bench import compare, request_lines
from edgebuild.errors import ConfigError
from edgebuild.runtime.base import vision
from edgebuild.runtime.base.recipe import Recipe, RecipePostprocess, RecipeTask
from edgebuild.runtime.bench.bench_request import jpeg_codec, measure_request, synthetic_frame
from edgebuild.runtime.bench.bench_result import BenchResult, RequestBreakdown
from tests.support.bench_results import config_dict, jetson_result_dict, result_dict


def _result(p50: float, ips: float, mode: str | None = "MAXN", engine: str = "aa") -> BenchResult:
    power = {"available": True, "name": mode, "id": 0} if mode else {"available": False, "reason": "not a Jetson"}
    config = config_dict(1, 1, p50, ips)
    config["latency"].update(p90_ms=p50, p99_ms=p50, mean_ms=p50)
    jetson = {"power_mode": power, "clocks": {"available": False, "reason": "-"}}
    return BenchResult.from_dict(result_dict([config], backend="tensorrt 10.3.0", files={"engine.plan": engine},
                                             jetson=jetson))


def test_compare_shows_the_change_and_refuses_unlike_runs() -> None:
    rows = {r.figure: r for r in compare(_result(9.0, 110.0), _result(10.0, 100.0)).rows}
    assert rows["p50_ms"].change_pct == -10.0 and rows["p50_ms"].better is True
    assert rows["throughput_ips"].change_pct == 10.0 and rows["throughput_ips"].better is True
    with pytest.raises(ConfigError, match=r"different power modes \(15W then, MAXN now\)") as caught:
        compare(_result(9.0, 110.0), _result(10.0, 100.0, mode="15W"))
    assert "--force" in caught.value.hint
    with pytest.raises(ConfigError, match=r"different artifacts \(engine.plan differ\)"):
        compare(_result(9.0, 110.0), _result(10.0, 100.0, engine="bb"))
    forced = compare(_result(9.0, 110.0), _result(10.0, 100.0, engine="bb"), force=True)
    assert forced.forced_over == ["different artifacts (engine.plan differ)"]
    json.dumps(forced.as_dict())  # what --json would hold


# -- one request, stage by stage ---------------------------------------------------------------

CLASSES = ["circle", "square", "triangle"]
PREPROCESS = vision.PreprocessSpec((16, 16), "letterbox", pad_value=114, channel_order="RGB")
RAW = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.25, "nms_iou": 0.6,
       "max_detections": 10, "in_model": False}


class _Runner:
    """What a backend answers, for each output form: two boxes of the first class, or three logits."""

    def __init__(self, form: str) -> None:
        self.form, self.inputs = form, []

    def run(self, inputs):
        self.inputs.append({n: v.shape for n, v in inputs.items()})
        if self.form == "raw_head":
            boxes = np.array([[[0, 0, 4, 4], [8, 8, 12, 12], [0, 0, 1, 1]]], np.float32)
            return {"boxes": boxes, "scores": np.array([[[0.9, 0, 0], [0.8, 0, 0], [0.1, 0, 0]]], np.float32)}
        if self.form == "nms":
            return {"num_detections": np.array([[2]], np.int32), "detection_boxes": np.ones((1, 10, 4), np.float32),
                    "detection_scores": np.ones((1, 10), np.float32),
                    "detection_classes": np.zeros((1, 10), np.float32)}
        return {"logits": np.array([[0.1, 2.0, 0.5]], np.float32)}


def _recipe(tmp_path: Path, form: str):
    from tests.support.runtime_artifacts import TARGET, recipe_for, write_artifact

    kind = "classification" if form == "logits" else "detection"
    post = {"logits_output": "logits"} if form == "logits" else dict(RAW, in_model=form == "nms")
    folder = write_artifact(tmp_path / form)
    return recipe_for(folder, TARGET, task=RecipeTask(kind=kind, classes=CLASSES, outputs=form,
                                                      postprocess=RecipePostprocess.from_dict(post),
                                                      preprocess=PREPROCESS))


@pytest.mark.parametrize(("form", "decode"), [("raw_head", "decode_outputs"), ("nms", "split_detections"),
                                              ("logits", "top_k")])
def test_a_request_is_timed_stage_by_stage_with_the_decode_of_its_form(tmp_path: Path, monkeypatch, form: str,
                                                                       decode: str) -> None:
    calls = {name: 0 for name in ("decode_outputs", "split_detections", "top_k")}
    for name in calls:
        real = getattr(vision, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(vision, name, spy)
    runner = _Runner(form)
    request = measure_request(runner, _recipe(tmp_path, form), runs=12, warmup=2)
    assert calls == {name: 14 if name == decode else 0 for name in calls}  # warm-up + measured runs, only this one
    assert request["measured"] and request["runs"] == 12 and request["outputs"] == form
    assert request["postprocess_step"].startswith(decode)
    assert runner.inputs[0] == {"images": (1, 3, 16, 16)}  # one preprocessed image of the task's input size
    assert request["image"]["jpeg_bytes"] > 10_000 and request["image"]["decoder"].split()[0] in ("PIL", "OpenCV")
    for stage in ("preprocess", "inference", "postprocess", "end_to_end"):
        assert 0 <= request[stage]["p50_ms"] <= request[stage]["p99_ms"], stage
    assert request["end_to_end"]["p50_ms"] >= request["inference"]["p50_ms"]
    assert request["detections_p50"] == (None if form == "logits" else 2)
    typed = BenchResult.from_dict(jetson_result_dict(json.loads(json.dumps(request)))).request
    assert isinstance(typed, RequestBreakdown) and typed.as_dict() == request  # the record reads what the bench wrote
    text = "\n".join(request_lines(typed))
    for label in ("preprocess", "inference", "post-processing", "end to end", decode):
        assert label in text


def test_without_a_jpeg_decoder_preprocessing_is_said_unmeasured(tmp_path: Path) -> None:
    request = measure_request(_Runner("raw_head"), _recipe(tmp_path, "raw_head"), runs=5, warmup=0, codec=None)
    assert request["preprocess"] is None and request["image"] is None and request["preprocess_unmeasured"]
    assert request["end_to_end"]["p50_ms"] >= request["inference"]["p50_ms"]
    text = "\n".join(request_lines(RequestBreakdown.from_dict(request)))
    assert "NOT MEASURED" in text and "inference + post-processing only" in text


def test_the_jpeg_decoder_falls_back_to_opencv_and_then_says_why(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # an import of a None entry raises ImportError
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    codec, why = jpeg_codec()
    if codec is not None:  # OpenCV is installed here: it decodes to RGB as PIL would
        frame = synthetic_frame(64, 96)
        decoded = codec.decode(codec.encode(frame))
        assert codec.name.startswith("OpenCV") and decoded.shape == (64, 96, 3)
        assert np.abs(decoded.astype(int) - frame).mean() < 12
    monkeypatch.setitem(sys.modules, "cv2", None)
    codec, why = jpeg_codec()
    assert codec is None and "PIL" in why and "cv2" in why


def test_a_folder_without_a_task_says_why_it_has_no_breakdown(tmp_path: Path) -> None:
    from tests.support.runtime_artifacts import write_artifact

    recipe = Recipe.load(write_artifact(tmp_path / "old"))
    request = measure_request(_Runner("logits"), recipe, runs=3)
    assert request == {"measured": False, "reason": request["reason"]} and "no task" in request["reason"]
    typed = BenchResult.from_dict(result_dict(request=request)).request
    assert "not measured: the recipe has no task" in request_lines(typed)[0]


def test_an_input_size_outside_the_profile_says_so(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "raw_head")
    task = dataclasses.replace(recipe.task, preprocess=dataclasses.replace(PREPROCESS, input_size=(64, 64)))
    request = measure_request(_Runner("raw_head"), dataclasses.replace(recipe, task=task), runs=3)
    assert not request["measured"] and "[1, 3, 64, 64], is outside the profile of input 'images'" in request["reason"]
