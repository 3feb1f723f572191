"""`edgebuild serve --grpc-port` against NVIDIA's own KServe v2 gRPC client (tritonclient.grpc): the same
answers as HTTP (tritonclient.http) on the same server and input, and the errors as gRPC status codes."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from edgebuild.errors import CapabilityMissing, ConfigError
from edgebuild.runtime.base.group import GroupManifest, GroupModel
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.base.vision import NMS_OUTPUTS
from edgebuild.runtime.serving.server import Server
from tests.integration.test_kserve import _assert_detections, _host_raw, _images, detector  # noqa: F401
from tests.support.runtime_artifacts import SHAPES, TARGET, Client, free_port, same_numbers, write_artifact


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server answering HTTP and gRPC, with a client of each."""
    folder = write_artifact(tmp_path_factory.mktemp("grpc") / "yard")
    running = Server(folder, host="127.0.0.1", port=0, grpc_port=0, warmup_budget_s=1).start()
    Client(running.port).wait_ready()
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
    http = httpclient.InferenceServerClient(f"127.0.0.1:{running.port}")
    yield running, grpc, http
    grpc.close()
    http.close()
    running.stop()


def test_live_ready_and_server_metadata(served) -> None:
    running, grpc, http = served
    assert running.grpc_port and running.grpc_port != running.port
    assert grpc.is_server_live() and grpc.is_server_ready()
    assert grpc.is_model_ready("tiny") and grpc.is_model_ready("tiny", "0.3.0")
    assert not grpc.is_model_ready("tiny", "7") and not grpc.is_model_ready("other")
    meta = grpc.get_server_metadata(as_json=True)
    assert meta["name"] == "edgebuild" and meta["version"] == http.get_server_metadata()["version"]
    assert {"binary_tensor_data", "system_shared_memory", "model_configuration"} <= set(meta["extensions"])


def test_model_metadata_and_config_are_https(served) -> None:
    _, grpc, http = served
    over_http = http.get_model_metadata("tiny")
    for version in ("", "0.3.0"):
        meta = grpc.get_model_metadata("tiny", version, as_json=True)
        assert meta["name"] == "tiny" and meta["versions"] == ["0.3.0"] and meta["platform"] == "onnxruntime_onnx"
        for side in ("inputs", "outputs"):  # as_json gives int64 as strings
            assert [dict(t, shape=[int(d) for d in t["shape"]]) for t in meta[side]] == over_http[side]
    config = grpc.get_model_config("tiny", as_json=True)["config"]
    for side in ("input", "output"):  # as_json gives int64 as strings
        config[side] = [dict(t, dims=[int(d) for d in t["dims"]]) for t in config[side]]
    assert config == http.get_model_config("tiny")
    assert config["name"] == "tiny" and config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == SHAPES[2][0]  # axis 0 is dynamic from 1: Triton's implicit batch
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("images", "TYPE_FP32", [3, -1, -1])]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [("scores", [3]), ("scaled", [3, -1, -1])]


def test_repository_index_lists_the_model_ready(served) -> None:
    _, grpc, http = served
    index = grpc.get_model_repository_index(as_json=True)["models"]
    assert index == [{"name": "tiny", "version": "0.3.0", "state": "READY"}]  # an empty reason is left out
    assert http.get_model_repository_index() == [{"name": "tiny", "version": "0.3.0", "state": "READY",
                                                  "reason": ""}]
    with pytest.raises(InferenceServerException, match="fixed when it starts") as raised:
        grpc.load_model("other")
    assert raised.value.status() == "StatusCode.UNIMPLEMENTED"


def _grpc_infer(client, array: np.ndarray, outputs=("scores", "scaled"), **options):
    given = grpcclient.InferInput("images", list(array.shape), "FP32")
    given.set_data_from_numpy(array)
    return client.infer("tiny", [given], outputs=[grpcclient.InferRequestedOutput(n) for n in outputs], **options)


def _http_infer(client, array: np.ndarray):
    given = httpclient.InferInput("images", list(array.shape), "FP32")
    given.set_data_from_numpy(array, binary_data=True)
    return client.infer("tiny", [given], outputs=[httpclient.InferRequestedOutput(n, binary_data=True)
                                                  for n in ("scores", "scaled")])


def test_inference_equals_https_on_the_same_input(served) -> None:
    _, grpc, http = served
    for shape in SHAPES:
        array = np.random.default_rng(sum(shape)).random(shape, dtype=np.float32)
        over_grpc, over_http = _grpc_infer(grpc, array, request_id=f"g{shape[0]}"), _http_infer(http, array)
        for name in ("scores", "scaled"):
            same_numbers(over_grpc.as_numpy(name), over_http.as_numpy(name))
        response = over_grpc.get_response(as_json=True)
        assert response["id"] == f"g{shape[0]}" and response["model_version"] == "0.3.0"
        assert [o["datatype"] for o in response["outputs"]] == ["FP32", "FP32"]
        parameters = response["parameters"]
        assert parameters["backend"]["string_param"].startswith("onnxruntime-cpu")
        assert parameters["detections"]["bool_param"] is False and int(parameters["batch_rows"]["int64_param"]) \
            == shape[0]


def test_only_the_outputs_asked_for_come_back(served) -> None:
    _, grpc, _ = served
    result = _grpc_infer(grpc, np.ones(SHAPES[0], np.float32), outputs=("scaled",))
    assert [o.name for o in result.get_response().outputs] == ["scaled"] and result.as_numpy("scores") is None
    np.testing.assert_array_equal(result.as_numpy("scaled"), np.full(SHAPES[0], 2.0, np.float32))


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "pixels"}, "unknown input 'pixels'"),
    ({"shape": [8, 3, 8, 8]}, "outside the profile"),
    ({"datatype": "INT64"}, "the model takes FP32"),
])
def test_a_bad_request_is_invalid_argument_with_https_message(served, change: dict, message: str) -> None:
    _, grpc, http = served
    shape = change.get("shape", SHAPES[0])
    dtype = np.int64 if change.get("datatype") == "INT64" else np.float32
    answers = []
    for module, client in ((grpcclient, grpc), (httpclient, http)):
        given = module.InferInput(change.get("name", "images"), shape, change.get("datatype", "FP32"))
        given.set_data_from_numpy(np.zeros(shape, dtype=dtype))
        with pytest.raises(InferenceServerException, match=message) as raised:
            client.infer("tiny", [given])
        answers.append(raised.value)
    assert answers[0].status() == "StatusCode.INVALID_ARGUMENT" and answers[1].status() == "400"
    assert answers[0].message() == answers[1].message()


def test_unknown_models_versions_and_outputs(served) -> None:
    _, grpc, _ = served
    array = np.ones(SHAPES[0], np.float32)
    for call, message in ((lambda: grpc.get_model_metadata("other"), "unknown model 'other'"),
                          (lambda: grpc.get_model_config("tiny", "9"), "unknown version '9'"),
                          (lambda: _grpc_infer(grpc, array, model_version="9"), "unknown version '9'")):
        with pytest.raises(InferenceServerException, match=message) as raised:
            call()
        assert raised.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="unknown outputs") as raised:
        _grpc_infer(grpc, array, outputs=("logits",))
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_a_model_not_ready_is_unavailable(tmp_path: Path) -> None:
    """The gRPC port answers live at once and UNAVAILABLE for inference until warm-up ends (here: never)."""
    folder = write_artifact(tmp_path / "yard")
    running = Server(folder, host="127.0.0.1", port=0, grpc_port=0)
    running.start_services = lambda: running.grpc.start()  # the gRPC server without the model services
    running.start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
    try:
        assert client.is_server_live() and not client.is_server_ready() and not client.is_model_ready("tiny")
        with pytest.raises(InferenceServerException, match="warming up") as raised:
            _grpc_infer(client, np.ones(SHAPES[0], np.float32))
        assert raised.value.status() == "StatusCode.UNAVAILABLE"
        assert client.get_model_repository_index(as_json=True)["models"][0]["state"] == "LOADING"
    finally:
        client.close()
        running.stop()


def test_a_group_folder_answers_every_model_over_grpc(tmp_path: Path) -> None:
    """Two models in one server (a fleet group's folder): each by its name, both in the index."""
    group = tmp_path / "group"
    models = []
    for name in ("left", "right"):
        folder = write_artifact(group / "models" / name)
        dataclasses.replace(Recipe.load(folder), model_name=name).save(folder)
        models.append(GroupModel(name=name, served_as=name, folder=f"models/{name}", version="0.3.0",
                                 precision="fp32"))
    GroupManifest(group="yard", target=TARGET, fleet="fleet.toml", version="1.0.0", models=models,
                  memory_plan={}).save(group)
    running = Server(group, host="127.0.0.1", port=0, grpc_port=0, warmup_budget_s=1).start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
    try:
        Client(running.port).wait_ready()
        assert client.is_server_ready()
        assert [m["name"] for m in client.get_model_repository_index(as_json=True)["models"]] == ["left", "right"]
        array = np.random.default_rng(1).random(SHAPES[1], dtype=np.float32)
        for name in ("left", "right"):
            given = grpcclient.InferInput("images", SHAPES[1], "FP32")
            given.set_data_from_numpy(array)
            result = client.infer(name, [given])
            assert result.get_response().model_name == name
            np.testing.assert_allclose(result.as_numpy("scaled"), array * 2)
    finally:
        client.close()
        running.stop()


def test_a_raw_head_detector_answers_detections_over_grpc_as_over_http(detector) -> None:  # noqa: F811
    recipe, folder, servers, clients = detector
    array = _images(recipe, 2)
    from edgebuild.runtime.base.vision import decode_outputs

    host = decode_outputs(_host_raw(folder, array), dict(recipe.task.postprocess.as_dict(), in_model=False))
    running = Server(folder, host="127.0.0.1", port=0, grpc_port=0, warmup_budget_s=1).start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
    try:
        Client(running.port).wait_ready()
        given = grpcclient.InferInput("images", list(array.shape), "FP32")
        given.set_data_from_numpy(array)
        result = client.infer(recipe.model_name, [given])
        assert result.get_response().parameters["detections"].bool_param is True
        _assert_detections(_AsHTTP(result), host, recipe.task.postprocess.max_detections)
        raw = client.infer(recipe.model_name, [given], parameters={"detections": False})
        assert [o.name for o in raw.get_response().outputs] == list(_host_raw(folder, array))
        assert client.get_model_metadata(recipe.model_name, as_json=True)["outputs"][0]["name"] == NMS_OUTPUTS[0]
    finally:
        client.close()
        running.stop()


class _AsHTTP:
    """A gRPC result with the HTTP result's ``get_response()`` shape that ``_assert_detections`` reads."""

    def __init__(self, result) -> None:
        self.result = result

    def as_numpy(self, name: str) -> np.ndarray:
        return self.result.as_numpy(name)

    def get_response(self) -> dict:
        return {"outputs": [{"name": o.name} for o in self.result.get_response().outputs]}


def test_a_grpc_port_in_use_is_a_clear_error_and_the_default_one_a_warning(tmp_path: Path, capsys) -> None:
    folder = write_artifact(tmp_path / "yard")
    first = Server(folder, host="127.0.0.1", port=0, grpc_port=0)
    try:
        with pytest.raises(ConfigError, match=f"cannot serve gRPC on 127.0.0.1:{first.grpc_port}"):
            Server(folder, host="127.0.0.1", port=0, grpc_port=first.grpc_port)
        second = Server(folder, host="127.0.0.1", port=0, grpc_port=first.grpc_port, grpc_required=False)
        assert second.grpc is None and second.grpc_port is None
        second.stop()
        assert "WARNING: serving HTTP only, no gRPC" in capsys.readouterr().err
    finally:
        first.stop()


def test_without_grpcio_a_grpc_port_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    folder = write_artifact(tmp_path / "yard")
    monkeypatch.setitem(sys.modules, "grpc", None)  # as on a device without grpcio: `import grpc` fails
    with pytest.raises(CapabilityMissing, match="grpcio, tritonclient.grpc. and hpack") as raised:
        Server(folder, host="127.0.0.1", port=0, grpc_port=free_port())
    assert "edgebuild[grpc]" in str(raised.value) and "--grpc-port 0" in str(raised.value)
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "hpack", None)  # the HTTP/2 transport's header decoder missing
    with pytest.raises(CapabilityMissing, match="hpack") as raised:
        Server(folder, host="127.0.0.1", port=0, grpc_port=free_port())
    plain = Server(folder, host="127.0.0.1", port=0)  # no gRPC asked: no grpcio needed
    assert plain.grpc is None
    plain.stop()


def test_the_device_command_line_takes_grpc_port(tmp_path: Path) -> None:
    """``--grpc-port`` on both command lines; a port grpcio cannot bind ends the command with the error in JSON."""
    from click.testing import CliRunner

    from edgebuild.cli import main

    device = subprocess.run([sys.executable, "-m", "edgebuild.runtime", "serve", "--help"], capture_output=True,
                            text=True, check=True).stdout
    host = CliRunner().invoke(main, ["serve", "--help"]).output
    for text in (device, host):
        assert "--grpc-port" in text and "0 serves HTTP only" in " ".join(text.split())
    folder = write_artifact(tmp_path / "yard")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "edgebuild.runtime", "serve", str(folder), "--host", "127.0.0.1",
                               "--port", str(free_port()), "--grpc-port", str(port)], capture_output=True, text=True,
                              timeout=120)
    answer = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == ConfigError.exit_code and answer["kind"] == "config error", done.stderr
    assert f"cannot serve gRPC on 127.0.0.1:{port}" in answer["message"]


def test_typed_contents_are_taken_as_raw_bytes_are(served) -> None:
    """A client that sends ``contents.fp32_contents`` (not tritonclient's raw bytes) gets the same answer."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    running, client, _ = served
    array = np.random.default_rng(3).random(SHAPES[0], dtype=np.float32)
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="images", datatype="FP32", shape=SHAPES[0])
    tensor.contents.fp32_contents.extend(array.reshape(-1).tolist())
    with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answer = stub.ModelInfer(service_pb2.ModelInferRequest(model_name="tiny", inputs=[tensor]))
        del tensor.contents.fp32_contents[-1]
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelInfer(service_pb2.ModelInferRequest(model_name="tiny", inputs=[tensor]))
    assert [o.name for o in answer.outputs] == ["scores", "scaled"]
    expected = _grpc_infer(client, array)
    for index, name in enumerate(("scores", "scaled")):
        got = np.frombuffer(answer.raw_output_contents[index], np.float32).reshape(expected.as_numpy(name).shape)
        same_numbers(got, expected.as_numpy(name))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"contents.fp32_contents holds {array.size - 1} values" in raised.value.details()


def test_serve_without_grpc_port_falls_back_to_http_when_8001_is_taken(tmp_path: Path) -> None:
    """The default gRPC port is a wish, not a demand: taken (here by this test, or by anyone), the server warns and
    answers HTTP; SIGTERM then stops it cleanly."""
    import signal

    from edgebuild.runtime.serving.ports import GRPC_PORT

    folder = write_artifact(tmp_path / "yard")
    port = free_port()
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", GRPC_PORT))
            holder.listen()
        except OSError:
            pass  # someone else holds it: just as taken
        child = subprocess.Popen([sys.executable, "-m", "edgebuild.runtime", "serve", str(folder), "--host",
                                  "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        try:
            Client(port).wait_ready()
        finally:
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and json.loads(out.splitlines()[-1])["ok"], err
    assert f"WARNING: serving HTTP only, no gRPC on port {GRPC_PORT}: cannot serve gRPC" in err


def test_the_container_and_the_unit_publish_the_grpc_port(tmp_path: Path) -> None:
    import yaml

    from edgebuild.runtime.serving.ports import GRPC_PORT
    from edgebuild.shipping.container import container_spec, run_args, systemd_unit, write_container
    from edgebuild.targets.presets import load_preset
    from edgebuild.targets.profiles import load_catalog

    folder = write_artifact(tmp_path / "yard")
    recipe = Recipe.load(folder)
    target = load_catalog().parse_target(recipe.target)
    spec = container_spec(recipe, target, load_preset(target.module.id))
    write_container(folder, tmp_path / "context", spec)
    assert f"EXPOSE 8000 {GRPC_PORT}\n" in (tmp_path / "context/Dockerfile").read_text()
    compose = yaml.safe_load((tmp_path / "context/compose.yaml").read_text())
    assert compose["services"]["yard"]["ports"] == ["8000:8000", f"{GRPC_PORT}:{GRPC_PORT}"]
    args = run_args(spec)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--publish"] == ["8000:8000", f"{GRPC_PORT}:{GRPC_PORT}"]
    assert f"KServe v2 over gRPC on {GRPC_PORT}" in systemd_unit(spec)
    # an HTTP port that is gRPC's own is published once (the server then serves HTTP only, with a warning)
    clash = container_spec(dataclasses.replace(recipe, runtime=dataclasses.replace(recipe.runtime, port=GRPC_PORT)),
                           target, load_preset(target.module.id))
    args = run_args(clash)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--publish"] == [f"{GRPC_PORT}:{GRPC_PORT}"]


def _stream(client, requests) -> list:
    """The answers of ``requests`` ((model, inputs, options) each) sent on one ModelStreamInfer stream, in order."""
    import queue

    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for model, inputs, options in requests:
            client.async_stream_infer(model, inputs, **options)
        return [answers.get(timeout=30) for _ in requests]
    finally:
        client.stop_stream()


def test_streamed_inference_answers_each_request_in_order_as_unary_does(served) -> None:
    _, grpc, _ = served
    requests, arrays = [], []
    for i, shape in enumerate(SHAPES * 2):
        array = np.random.default_rng(i).random(shape, dtype=np.float32)
        given = grpcclient.InferInput("images", list(shape), "FP32")
        given.set_data_from_numpy(array)
        requests.append(("tiny", [given], {"request_id": f"s{i}",
                                          "outputs": [grpcclient.InferRequestedOutput("scaled")]}))
        arrays.append(array)
    answers = _stream(grpc, requests)
    for i, ((result, error), array) in enumerate(zip(answers, arrays)):
        assert error is None
        assert result.get_response().id == f"s{i}" and [o.name for o in result.get_response().outputs] == ["scaled"]
        same_numbers(result.as_numpy("scaled"), _grpc_infer(grpc, array, outputs=("scaled",)).as_numpy("scaled"))


def test_a_bad_request_on_a_stream_is_an_error_answer_and_the_stream_goes_on(served) -> None:
    _, grpc, _ = served
    good = grpcclient.InferInput("images", SHAPES[0], "FP32")
    good.set_data_from_numpy(np.ones(SHAPES[0], np.float32))
    bad = grpcclient.InferInput("pixels", SHAPES[0], "FP32")
    bad.set_data_from_numpy(np.ones(SHAPES[0], np.float32))
    answers = _stream(grpc, [("tiny", [good], {"request_id": "1"}), ("tiny", [bad], {"request_id": "2"}),
                             ("other", [good], {"request_id": "3"}), ("tiny", [good], {"request_id": "4"})])
    (first, no_error), (none, bad_input), (nothing, unknown), (last, still_none) = answers
    assert no_error is None and still_none is None and none is None and nothing is None
    assert "unknown input 'pixels'" in bad_input.message() and "unknown model 'other'" in unknown.message()
    np.testing.assert_array_equal(last.as_numpy("scaled"), first.as_numpy("scaled"))
    assert last.get_response().id == "4"
