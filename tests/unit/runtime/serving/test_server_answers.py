"""What the server answers without sockets: detections or raw tensors (``AnswerForms``), the raw head
decoded into the NMS-inside layout, and the per-stage histograms in ``/metrics``."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgebuild.runtime.base.preprocess_spec import PreprocessSpec
from edgebuild.runtime.base.recipe import RecipePostprocess, RecipeTask
from edgebuild.runtime.base.vision import NMS_OUTPUTS, decode_outputs
from edgebuild.runtime.serving import protocol
from edgebuild.runtime.serving.protocol import AnswerForms, BadRequest, InputSpec
from edgebuild.runtime.serving.service import STAGES, ModelService, answer_forms, detection_metadata, detection_tensors
from tests.support.runtime_artifacts import write_artifact

SPEC = {"images": InputSpec("images", [1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32])}
RAW = ["boxes", "scores"]
SETTINGS = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.3, "nms_iou": 0.5,
            "max_detections": 5, "pre_nms_top_k": 1000, "in_model": False}


def _request(**parameters) -> bytes:
    return json.dumps({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": [0.0] * 192}],
                       **({"parameters": parameters} if parameters else {})}).encode()


def _task(outputs: str, kind: str = "detection") -> RecipeTask:
    post = RecipePostprocess.from_dict(dict(SETTINGS, in_model=outputs == "nms"))
    return RecipeTask(kind=kind, classes=["a", "b"], outputs=outputs, postprocess=post,
                      preprocess=PreprocessSpec((8, 8)))


def test_a_raw_head_detector_answers_what_the_recipe_says_and_a_request_may_choose() -> None:
    decoding = answer_forms(_task("raw_head"), RAW, decode=True)
    parsed = protocol.parse_inference(_request(), None, SPEC, decoding)
    assert parsed.decode and parsed.outputs is None
    raw = protocol.parse_inference(_request(detections=False, binary_data_output=True), None, SPEC, decoding)
    assert not raw.decode and raw.binary_outputs == RAW
    # raw by default ([runtime] detections off); a request asks for detections and may name them
    plain = answer_forms(_task("raw_head"), RAW, decode=False)
    assert not protocol.parse_inference(_request(), None, SPEC, plain).decode
    body = json.loads(_request(detections=True))
    body["outputs"] = [{"name": "num_detections"}, {"name": "detection_boxes", "parameters": {"binary_data": True}}]
    asked = protocol.parse_inference(json.dumps(body).encode(), None, SPEC, plain)
    assert asked.decode and asked.outputs == ["num_detections", "detection_boxes"]
    assert asked.binary_outputs == ["detection_boxes"]


def test_nms_inside_and_classifiers_never_decode() -> None:
    nms = answer_forms(_task("nms"), list(NMS_OUTPUTS), decode=False)
    assert nms.choose(True) == (False, list(NMS_OUTPUTS)) and nms.choose(None) == (False, list(NMS_OUTPUTS))
    logits = answer_forms(_task("logits", "classification"), ["logits"], decode=False)
    assert logits.choose(None) == (False, ["logits"]) and logits.choose(False) == (False, ["logits"])
    with pytest.raises(BadRequest, match="cannot decode them into detections"):
        protocol.parse_inference(_request(detections=True), None, SPEC, logits)
    with pytest.raises(BadRequest, match=re.escape("parameters.detections must be true or false, not 'yes'")):
        protocol.parse_inference(_request(detections="yes"), None, SPEC, AnswerForms(RAW, ["x"]))
    with pytest.raises(BadRequest, match=re.escape("unknown outputs ['boxes']")):
        body = json.loads(_request())
        body["outputs"] = [{"name": "boxes"}]
        protocol.parse_inference(json.dumps(body).encode(), None, SPEC, answer_forms(_task("raw_head"), RAW, True))


def _raw_head(images: int, anchors: int = 60, classes: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    corner = rng.random((images, anchors, 2), dtype=np.float32) * 100
    boxes = np.concatenate([corner, corner + 5 + rng.random((images, anchors, 2), dtype=np.float32) * 30], axis=2)
    return {"boxes": boxes, "scores": rng.random((images, anchors, classes), dtype=np.float32)}


def test_the_decoded_answer_is_the_hosts_decode_in_the_nms_inside_layout() -> None:
    outputs = _raw_head(3)
    outputs["scores"][1] = 0.0  # an image without a detection
    tensors = detection_tensors(outputs, SETTINGS)
    assert list(tensors) == list(NMS_OUTPUTS)
    assert [(a.dtype.name, list(a.shape)) for a in tensors.values()] == [
        ("int32", [3, 1]), ("float32", [3, 5, 4]), ("float32", [3, 5]), ("float32", [3, 5])]
    expected = decode_outputs(outputs, SETTINGS)
    for image, found in enumerate(expected):
        n = len(found["scores"])
        assert int(tensors["num_detections"][image, 0]) == n and n <= 5
        np.testing.assert_array_equal(tensors["detection_boxes"][image, :n], found["boxes"])
        np.testing.assert_array_equal(tensors["detection_scores"][image, :n], found["scores"])
        np.testing.assert_array_equal(tensors["detection_classes"][image, :n], found["labels"])
        assert not tensors["detection_boxes"][image, n:].any() and not tensors["detection_scores"][image, n:].any()
    assert int(tensors["num_detections"][1, 0]) == 0
    # what the host reads back from an NMS-inside model is what the server answered
    again = decode_outputs(tensors, {"in_model": True})
    assert all(np.array_equal(a["labels"], b["labels"]) for a, b in zip(again, expected))
    assert [t["datatype"] for t in detection_metadata(-1, 5)] == ["INT32", "FP32", "FP32", "FP32"]


def test_stage_histograms_in_metrics_parse_with_prometheus(tmp_path) -> None:
    service = ModelService(write_artifact(tmp_path / "yard"), warmup=False)
    service.observe({"wait_worker": 0.0002, "parse": 0.0003, "wait_backend": 0.0, "encode": 0.004, "send": 0.02})
    service.observe({"wait_worker": 0.0001, "parse": 0.0001, "wait_backend": 0.001, "decode": 0.003,
                     "encode": 0.0002, "send": 0.0004, "not a stage": 9.0})
    families = {f.name: f for f in text_string_to_metric_families(service.metrics_text())}
    stages = families["edgebuild_request_stage_seconds"]
    assert stages.type == "histogram"
    counts = {s.labels["stage"]: s.value for s in stages.samples if s.name.endswith("_count")}
    assert counts == dict({s: 2.0 for s in STAGES}, decode=1.0)
    sums = {s.labels["stage"]: s.value for s in stages.samples if s.name.endswith("_sum")}
    assert sums["send"] == pytest.approx(0.0204) and sums["decode"] == pytest.approx(0.003)
    le = [s for s in stages.samples if s.name.endswith("_bucket") and s.labels["stage"] == "encode"]
    assert [s.value for s in le if s.labels["le"] in ("0.00025", "0.005", "+Inf")] == [1.0, 2.0, 2.0]
    total = families["edgebuild_server_seconds"]
    total_sum = next(s.value for s in total.samples if s.name.endswith("_sum"))
    assert total_sum == pytest.approx(0.0245 + 0.0048)
    assert next(s.value for s in total.samples if s.name.endswith("_count")) == 2.0
