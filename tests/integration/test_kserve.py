"""`edgebuild serve` against NVIDIA's own KServe v2 client (tritonclient.http) and Prometheus' parser."""

from __future__ import annotations

import dataclasses
import http.client
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from edgebuild.runtime.recipe import Recipe, TensorSpec
from edgebuild.runtime.server import Server
from tests.support.runtime_artifacts import SHAPES, Client, write_artifact

ONNX_DATATYPES = {onnx.TensorProto.FLOAT: "FP32", onnx.TensorProto.INT64: "INT64"}


def _onnx_tensors(values) -> list[dict]:
    """name, v2 datatype and shape (-1 for a named axis) of ONNX graph inputs or outputs."""
    return [{"name": v.name, "datatype": ONNX_DATATYPES[v.type.tensor_type.elem_type],
             "shape": [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim]}
            for v in values]


@pytest.fixture(scope="module", params=["recipe outputs", "older recipe"])
def served(request, tmp_path_factory):
    """A served folder whose recipe records its outputs, and one from before recipes did (the backend says)."""
    folder = write_artifact(tmp_path_factory.mktemp("kserve") / "yard")
    model = onnx.load(str(folder / "model.onnx"))
    if request.param == "recipe outputs":
        outputs = {t["name"]: TensorSpec(t["datatype"], t["shape"]) for t in _onnx_tensors(model.graph.output)}
        dataclasses.replace(Recipe.load(folder), outputs=outputs).save(folder)
    else:
        dataclasses.replace(Recipe.load(folder), outputs=None).save(folder)
    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
    Client(running.port).wait_ready()
    client = triton.InferenceServerClient(f"127.0.0.1:{running.port}")
    yield running, client, folder, model
    client.close()
    running.stop()


def test_server_and_model_readiness(served) -> None:
    running, client, _, _ = served
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("tiny") and client.is_model_ready("tiny", "0.3.0")
    assert not client.is_model_ready("tiny", "7") and not client.is_model_ready("other")
    server = client.get_server_metadata()
    assert server["name"] == "edgebuild" and "binary_tensor_data" in server["extensions"] and server["version"]


def test_model_metadata_gives_datatype_and_shape_of_every_input_and_output(served) -> None:
    _, client, _, model = served
    for meta in (client.get_model_metadata("tiny"), client.get_model_metadata("tiny", "0.3.0")):
        assert meta["name"] == "tiny" and meta["versions"] == ["0.3.0"]
        assert meta["platform"] == "onnxruntime_onnx"  # no TensorRT on this host
        assert meta["inputs"] == _onnx_tensors(model.graph.input)
        assert meta["outputs"] == _onnx_tensors(model.graph.output)
        assert all(set(t) == {"name", "datatype", "shape"} for t in meta["inputs"] + meta["outputs"])
        parameters = meta["parameters"]
        assert parameters["backend"].startswith("onnxruntime-cpu") and parameters["backend_reason"]
        assert parameters["profiles"]["images"]["max_shape"] == SHAPES[2]
        assert {"target", "acceptance", "fallback", "warmup", "dynamic_batching"} <= set(parameters)


def _expected(folder: Path, array: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return dict(zip(["scores", "scaled"], session.run(["scores", "scaled"], {"images": array})))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_inference_equals_onnx_runtime_on_the_host(served, binary: bool) -> None:
    _, client, folder, _ = served
    for shape in SHAPES:
        array = np.random.default_rng(sum(shape)).random(shape, dtype=np.float32)
        given = triton.InferInput("images", shape, "FP32")
        given.set_data_from_numpy(array, binary_data=binary)
        asked = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("scores", "scaled")]
        result = client.infer("tiny", [given], outputs=asked, request_id=f"r{shape[0]}")
        expected = _expected(folder, array)
        for name in expected:
            np.testing.assert_allclose(result.as_numpy(name), expected[name], rtol=1e-6, atol=1e-6)
        response = result.get_response()
        assert response["id"] == f"r{shape[0]}" and response["model_version"] == "0.3.0"
        assert all(("data" in o) != binary for o in response["outputs"])


def test_only_the_outputs_asked_for_come_back(served) -> None:
    _, client, folder, _ = served
    array = np.ones(SHAPES[0], dtype=np.float32)
    given = triton.InferInput("images", SHAPES[0], "FP32")
    given.set_data_from_numpy(array, binary_data=True)
    result = client.infer("tiny", [given], outputs=[triton.InferRequestedOutput("scores", binary_data=True)],
                          model_version="0.3.0")
    assert [o["name"] for o in result.get_response()["outputs"]] == ["scores"]
    np.testing.assert_allclose(result.as_numpy("scores"), _expected(folder, array)["scores"])
    assert result.as_numpy("scaled") is None


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "pixels"}, "unknown input 'pixels'"),
    ({"shape": [8, 3, 8, 8]}, "outside the profile"),
    ({"datatype": "INT64"}, "the model takes FP32"),
])
def test_a_bad_input_raises_with_the_servers_message(served, change: dict, message: str) -> None:
    _, client, _, _ = served
    shape = change.get("shape", SHAPES[0])
    given = triton.InferInput(change.get("name", "images"), shape, change.get("datatype", "FP32"))
    dtype = np.int64 if change.get("datatype") == "INT64" else np.float32
    given.set_data_from_numpy(np.zeros(shape, dtype=dtype), binary_data=True)
    with pytest.raises(InferenceServerException, match=message):
        client.infer("tiny", [given])
    with pytest.raises(InferenceServerException, match="unknown version '9'"):
        client.infer("tiny", [given], model_version="9")
    with pytest.raises(InferenceServerException, match="unknown model 'other'"):
        client.get_model_metadata("other")


@pytest.mark.parametrize(("method", "path", "status", "message"), [
    ("GET", "/v2/models/other", 404, "unknown model 'other'"),
    ("GET", "/v2/models/tiny/versions/2", 404, "unknown version '2'"),
    ("GET", "/v2/models/tiny/versions/2/ready", 404, "unknown version '2'"),
    ("POST", "/v2/models/tiny/versions/2/infer", 404, "unknown version '2'"),
    ("GET", "/v2/models/tiny/stats", 404, "no such endpoint"),
    ("GET", "/v3", 404, "no such endpoint"),
    ("GET", "/v2/models/tiny/infer", 405, "takes POST"),
    ("POST", "/v2/health/live", 405, "takes GET"),
    ("POST", "/v2/models/tiny/infer", 400, "not valid JSON"),
])
def test_every_error_is_a_json_body_with_its_status(served, method, path, status, message) -> None:
    running, _, _, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    conn.request(method, path, body=b"{" if method == "POST" else None)
    answer = conn.getresponse()
    body = json.loads(answer.read())
    conn.close()
    assert answer.status == status and message in body["error"], body
    assert answer.getheader("Content-Type") == "application/json"


def test_the_version_routes_answer_like_the_unversioned_ones(served) -> None:
    running, _, _, _ = served
    client = Client(running.port)
    assert client.json("GET", "/v2/models/tiny/versions/0.3.0")[1] == client.json("GET", "/v2/models/tiny")[1]
    assert client.json("GET", "/v2/models/tiny/versions/0.3.0/ready") == (200, {"name": "tiny", "ready": True})
    body = {"inputs": [{"name": "images", "shape": SHAPES[0], "datatype": "FP32", "data": [1.0] * 192}]}
    status, answer = client.json("POST", "/v2/models/tiny/versions/0.3.0/infer", body)
    assert status == 200 and answer["outputs"][0]["data"] == [1.0, 1.0, 1.0]


def test_metrics_parse_with_prometheus_client(served) -> None:
    running, client, _, _ = served
    given = triton.InferInput("images", SHAPES[0], "FP32")
    given.set_data_from_numpy(np.zeros(SHAPES[0], dtype=np.float32))
    client.infer("tiny", [given])
    families = {f.name: f for f in text_string_to_metric_families(Client(running.port).request("GET", "/metrics")[1]
                                                                  .decode())}
    requests = families["edgebuild_requests"]
    assert requests.type == "counter"
    success = [s for s in requests.samples if s.name == "edgebuild_requests_total" and s.labels["outcome"] == "success"]
    assert success and success[0].value >= 1
    histogram = families["edgebuild_inference_latency_ms"]
    assert histogram.type == "histogram"
    buckets = [s for s in histogram.samples if s.name.endswith("_bucket")]
    count = next(s.value for s in histogram.samples if s.name.endswith("_count"))
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == count >= 1
    assert [b.value for b in buckets] == sorted(b.value for b in buckets)  # cumulative
    assert families["edgebuild_ready"].samples[0].value == 1
