"""`edgebuild serve` against NVIDIA's own KServe v2 client (tritonclient.http) and Prometheus' parser."""

from __future__ import annotations

import dataclasses
import http.client
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe, TensorSpec
from edgebuild.runtime.base.vision import NMS_OUTPUTS, decode_outputs
from edgebuild.runtime.serving.server import Server
from edgebuild.runtime.serving.service import STAGES
from tests.support.compiled import compiled_copy
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


# -- a raw-head detector: detections decoded on the device, or the raw head ------------------------

@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """The shapes example compiled with ``[runtime] detections = true`` (raw head, decoded by the server),
    served twice: as compiled ("decoding") and with the recipe's ``runtime.detections`` off ("raw")."""
    root = compiled_copy(tmp_path_factory, "shapes-detector", "yard-cams", tmp_path_factory.mktemp("detector"))
    toml = (root / "edgebuild.toml").read_text()
    (root / "edgebuild.toml").write_text(toml.replace("port = 8000", "port = 8000\ndetections = true"))
    result = CliRunner().invoke(main, ["compile", "--project", str(root), "--target", "yard-cams", "--no-progress"])
    assert result.exit_code == 0, result.output
    decoding = root / "build/engines/yard-cams"
    recipe = Recipe.load(decoding)
    assert recipe.task.outputs == "raw_head" and recipe.runtime.detections
    raw = root / "raw"
    shutil.copytree(decoding, raw)
    dataclasses.replace(recipe, runtime=dataclasses.replace(recipe.runtime, detections=False)).save(raw)
    servers = {name: Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
               for name, folder in (("decoding", decoding), ("raw", raw))}
    for running in servers.values():
        Client(running.port).wait_ready()
    clients = {name: triton.InferenceServerClient(f"127.0.0.1:{running.port}") for name, running in servers.items()}
    yield recipe, decoding, servers, clients
    for name in servers:
        clients[name].close()
        servers[name].stop()


def _images(recipe: Recipe, count: int, seed: int = 0) -> np.ndarray:
    height, width = recipe.task.preprocess.input_size
    return np.random.default_rng(seed).normal(0.0, 1.0, (count, 3, height, width)).astype(np.float32)


def _ask(client, recipe: Recipe, array: np.ndarray, **parameters):
    given = triton.InferInput("images", list(array.shape), "FP32")
    given.set_data_from_numpy(array, binary_data=True)
    return client.infer(recipe.model_name, [given], parameters=parameters or None)


def _host_raw(folder: Path, array: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {"images": array})))


def _assert_detections(result, host: list[dict[str, np.ndarray]], k: int) -> None:
    assert [o["name"] for o in result.get_response()["outputs"]] == list(NMS_OUTPUTS)
    count = result.as_numpy("num_detections")
    assert count.dtype == np.int32 and count.shape == (len(host), 1)
    assert result.as_numpy("detection_boxes").shape == (len(host), k, 4)
    for image, found in enumerate(host):
        n = len(found["scores"])
        assert int(count[image, 0]) == n > 0
        np.testing.assert_allclose(result.as_numpy("detection_boxes")[image, :n], found["boxes"], atol=1e-3)
        np.testing.assert_allclose(result.as_numpy("detection_scores")[image, :n], found["scores"], atol=1e-5)
        np.testing.assert_array_equal(result.as_numpy("detection_classes")[image, :n], found["labels"])
        assert not result.as_numpy("detection_scores")[image, n:].any()


def test_a_raw_head_detector_answers_the_detections_the_host_decodes(detector) -> None:
    recipe, folder, _, clients = detector
    array = _images(recipe, 2)
    host = decode_outputs(_host_raw(folder, array), recipe.task.postprocess.as_dict())
    result = _ask(clients["decoding"], recipe, array)
    assert result.get_response()["parameters"]["detections"] is True
    _assert_detections(result, host, recipe.task.postprocess.max_detections)


def test_a_request_chooses_raw_tensors_or_detections(detector) -> None:
    recipe, folder, _, clients = detector
    array = _images(recipe, 1, seed=4)
    raw = _host_raw(folder, array)
    k = recipe.task.postprocess.max_detections
    for result in (_ask(clients["decoding"], recipe, array, detections=False), _ask(clients["raw"], recipe, array)):
        assert [o["name"] for o in result.get_response()["outputs"]] == ["boxes", "scores"]
        for name in ("boxes", "scores"):
            np.testing.assert_allclose(result.as_numpy(name), raw[name], rtol=1e-5, atol=1e-5)
    host = decode_outputs(raw, recipe.task.postprocess.as_dict())
    _assert_detections(_ask(clients["raw"], recipe, array, detections=True), host, k)
    with pytest.raises(InferenceServerException, match="parameters.detections must be true or false"):
        _ask(clients["raw"], recipe, array, detections="yes")


def _same_tensor(meta: dict, answered: dict) -> bool:
    shape = meta["shape"]
    return (meta["name"] == answered["name"] and meta["datatype"] == answered["datatype"]
            and len(shape) == len(answered["shape"]) and all(m in (-1, a) for m, a in zip(shape, answered["shape"])))


def test_the_model_metadata_describes_exactly_what_comes_back(detector) -> None:
    recipe, _, _, clients = detector
    array = _images(recipe, 2, seed=9)
    for name, form in (("decoding", "detections"), ("raw", "raw_head")):
        meta = clients[name].get_model_metadata(recipe.model_name)
        answered = _ask(clients[name], recipe, array).get_response()["outputs"]
        assert len(meta["outputs"]) == len(answered)
        assert all(_same_tensor(m, a) for m, a in zip(meta["outputs"], answered)), (meta["outputs"], answered)
        task = meta["parameters"]["task"]
        assert task["output_form"] == form and task["classes"] == ["circle", "square", "triangle"]
        assert task["detections"]["decoded_by"] == "server" and task["detections"]["default"] == (form != "raw_head")
        assert task["detections"]["box_convention"].startswith("xyxy in network-input pixels")
        assert [t["name"] for t in task["raw_outputs"]] == ["boxes", "scores"]
    meta = clients["decoding"].get_model_metadata(recipe.model_name)
    assert meta["outputs"][1] == {"name": "detection_boxes", "datatype": "FP32",
                                  "shape": [-1, recipe.task.postprocess.max_detections, 4]}


def test_a_model_without_detections_refuses_to_decode_and_is_unchanged(served) -> None:
    _, client, _, _ = served
    given = triton.InferInput("images", SHAPES[0], "FP32")
    given.set_data_from_numpy(np.zeros(SHAPES[0], dtype=np.float32))
    with pytest.raises(InferenceServerException, match="cannot decode them into detections"):
        client.infer("tiny", [given], parameters={"detections": True})
    result = client.infer("tiny", [given], parameters={"detections": False})
    assert [o["name"] for o in result.get_response()["outputs"]] == ["scores", "scaled"]
    assert client.get_model_metadata("tiny")["parameters"]["task"]["detections"] == {"available": False}


def _stage_counts(port: int) -> dict[str, float]:
    text = Client(port).request("GET", "/metrics")[1].decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["edgebuild_request_stage_seconds"].type == "histogram"
    counts = {s.labels["stage"]: s.value for s in families["edgebuild_request_stage_seconds"].samples
              if s.name.endswith("_count")}
    counts["server"] = next(s.value for s in families["edgebuild_server_seconds"].samples if s.name.endswith("_count"))
    return counts


def test_metrics_give_the_time_outside_the_backend_per_stage(detector) -> None:
    recipe, _, servers, clients = detector
    port = servers["decoding"].port
    before = _stage_counts(port)
    array = _images(recipe, 1)
    for parameters in ({}, {}, {"detections": False}):
        _ask(clients["decoding"], recipe, array, **parameters)
    with pytest.raises(InferenceServerException):  # a refused request is not an answered one
        _ask(clients["decoding"], recipe, array, detections=1)
    after = _stage_counts(port)
    grown = {stage: after[stage] - before.get(stage, 0.0) for stage in after}
    assert grown == dict({stage: 3.0 for stage in STAGES}, decode=2.0, server=3.0)
