"""The v2 protocol without sockets: metadata tensors, platform names, outputs asked for, request ids."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from edgebuild.runtime.serving import protocol
from edgebuild.runtime.serving.protocol import BadRequest, InputSpec

SPEC = {"images": InputSpec("images", [1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32])}


def _request(**extra) -> bytes:
    return json.dumps({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "datatype": "FP32",
                                   "data": [0.0] * 192}], **extra}).encode()


@pytest.mark.parametrize(("backend", "platform"), [("tensorrt 10.3.0", "tensorrt_plan"),
                                                   ("onnxruntime-cpu 1.32.0", "onnxruntime_onnx"),
                                                   ("loading", "onnxruntime_onnx")])
def test_platform_is_a_standard_name(backend: str, platform: str) -> None:
    assert protocol.platform(backend) == platform


def test_metadata_tensors_hold_name_datatype_shape_and_the_profile_goes_under_parameters() -> None:
    meta = protocol.model_metadata("tiny", "3", "tensorrt 10.3.0", SPEC,
                                   [{"name": "scores", "datatype": "FP32", "shape": [-1, 3]}], {"backend": "x"})
    assert meta["inputs"] == [{"name": "images", "datatype": "FP32", "shape": [-1, 3, -1, -1]}]
    assert meta["outputs"] == [{"name": "scores", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["platform"] == "tensorrt_plan" and meta["versions"] == ["3"]
    assert meta["parameters"] == {"backend": "x", "profiles": {"images": {
        "min_shape": [1, 3, 8, 8], "opt_shape": [2, 3, 16, 16], "max_shape": [4, 3, 32, 32]}}}


def test_outputs_asked_for_and_the_request_id() -> None:
    parsed = protocol.parse_inference(_request(id="a1", outputs=[{"name": "scores"}]), None, SPEC,
                                      ["scores", "scaled"])
    assert parsed.outputs == ["scores"] and parsed.request_id == "a1" and parsed.binary_outputs == []
    assert protocol.parse_inference(_request(), None, SPEC, ["scores"]).outputs is None
    body, _, _ = protocol.encode_response("tiny", "3", {"scores": np.zeros([1, 3], np.float32)}, [], {}, "a1")
    assert json.loads(body)["id"] == "a1"


@pytest.mark.parametrize(("extra", "message"), [({"outputs": [{"name": "logits"}]}, "unknown outputs ['logits']"),
                                                ({"outputs": "scores"}, '"outputs" must be a list'),
                                                ({"id": 7}, '"id" must be a string')])
def test_bad_outputs_or_id_are_bad_requests(extra: dict, message: str) -> None:
    with pytest.raises(BadRequest, match=re.escape(message)):
        protocol.parse_inference(_request(**extra), None, SPEC, ["scores", "scaled"])


def test_a_header_read_once_serves_the_next_requests_with_the_same_header_each_with_its_own_tensors() -> None:
    head = json.dumps({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 768}}], "id": "x",
                       "outputs": [{"name": "scores", "parameters": {"binary_data": True}}]}).encode()
    cache: dict = {}
    for seed in (0, 1):
        array = np.random.default_rng(seed).random((1, 3, 8, 8), dtype=np.float32)
        body = bytearray(head + array.tobytes())
        parsed = protocol.parse_inference(body, len(head), SPEC, ["scores"], cache=cache)
        assert np.array_equal(parsed.inputs["images"], array)
        assert np.shares_memory(parsed.inputs["images"], np.frombuffer(body, np.uint8))  # this body's, not the first's
        assert (parsed.outputs, parsed.binary_outputs, parsed.request_id) == (["scores"], ["scores"], "x")
    assert len(cache) == 1
    # JSON data is not kept (the values differ from request to request); a bad request is refused each time
    assert protocol.parse_inference(bytearray(_request()), None, SPEC, ["scores"], cache=cache).inputs["images"].size
    assert len(cache) == 1
    for _ in range(2):
        with pytest.raises(BadRequest, match="binary_data_size"):
            protocol.parse_inference(bytearray(head + b"\0" * 4), len(head), SPEC, ["scores"], cache=cache)
