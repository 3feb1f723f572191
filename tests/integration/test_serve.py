"""The runtime server on loopback: health, readiness after warm-up, v2 inference, 400s, metrics, limits."""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgebuild.runtime.serving.server import Server
from tests.support.runtime_artifacts import (
    SHAPES,
    TARGET,
    Client,
    check_answers_match_the_host,
    free_port,
    infer_body,
    recipe_for,
    write_artifact,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = write_artifact(tmp_path_factory.mktemp("artifact") / "yard")
    running = Server(folder, host="127.0.0.1", port=0, backend="auto", warmup_budget_s=3).start()
    client = Client(running.port)
    client.wait_ready()
    yield running, client, folder
    running.stop()


def test_ready_after_warm_up_with_its_numbers(server) -> None:
    running, client, _ = server
    assert client.json("GET", "/v2/health/live") == (200, {"live": True})
    status, ready = client.json("GET", "/v2/health/ready")
    warmup = ready["warmup"]
    assert status == 200 and warmup["runs"] >= 11 and warmup["warmup_s"] <= 3 + 1
    assert warmup["cold_first_call_ms"] > 0 and warmup["warm_p50_ms"] > 0
    status, meta = client.json("GET", "/v2/models/tiny")
    assert status == 200 and meta["versions"] == ["0.3.0"]
    assert meta["inputs"] == [{"name": "images", "datatype": "FP32", "shape": [-1, 3, -1, -1]}]
    assert meta["parameters"]["profiles"]["images"] == {"min_shape": SHAPES[0], "opt_shape": SHAPES[1],
                                                        "max_shape": SHAPES[2]}
    # no TensorRT here: the server says it is not using it, and why
    assert meta["platform"] == "onnxruntime_onnx" and meta["parameters"]["backend"].startswith("onnxruntime-cpu")
    # ONNX Runtime without batching: the HTTP workers run it, its runs overlap
    assert meta["parameters"]["concurrent_runs"] is True
    assert "NOT TensorRT" in meta["parameters"]["backend_reason"]


def test_inference_matches_onnx_runtime_on_the_host(server) -> None:
    _, client, folder = server
    for answer in check_answers_match_the_host(client, folder):
        assert answer["parameters"]["inference_ms"] > 0


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda b: b["inputs"][0].update(name="pixels"), "unknown input 'pixels'"),
    (lambda b: b["inputs"][0].update(datatype="INT64"), "the model takes FP32"),
    (lambda b: b["inputs"][0].update(shape=[8, 3, 16, 16], data=[0.0] * 8 * 3 * 256), "outside the profile"),
    (lambda b: b["inputs"][0].update(shape=[1, 3, 16]), "outside the profile"),
    (lambda b: b["inputs"][0].update(data=[0.0, 1.0]), "data has 2 values"),
    (lambda b: b["inputs"][0].update(data=["a"] * 768), "not FP32 numbers"),
    (lambda b: b.update(inputs=[]), "inputs ['images'] are missing"),
    (lambda b: b.pop("inputs"), 'an "inputs" list'),
])
def test_bad_requests_get_a_400_and_the_server_keeps_serving(server, mutate, message) -> None:
    _, client, _ = server
    body = infer_body(np.zeros(SHAPES[0], dtype=np.float32))
    mutate(body)
    status, answer = client.json("POST", "/v2/models/tiny/infer", body)
    assert status == 400 and message in answer["error"]
    good = client.json("POST", "/v2/models/tiny/infer", infer_body(np.zeros(SHAPES[0], dtype=np.float32)))
    assert good[0] == 200


def _binary_request(array: np.ndarray, *, outputs: bool = True, size: int | None = None) -> tuple[bytes, dict]:
    header = {"inputs": [{"name": "images", "shape": list(array.shape), "datatype": "FP32",
                          "parameters": {"binary_data_size": array.nbytes if size is None else size}}]}
    if outputs:
        header["parameters"] = {"binary_data_output": True}
    head = json.dumps(header).encode()
    return head + array.astype("<f4").tobytes(), {"Inference-Header-Content-Length": str(len(head))}


def test_binary_tensors_in_and_out(server) -> None:
    """The v2 binary tensor extension: raw little-endian tensors after a JSON header, both ways."""
    import onnxruntime as ort

    _, client, folder = server
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    array = np.random.default_rng(5).random(SHAPES[1], dtype=np.float32)
    expected = dict(zip(["scores", "scaled"], session.run(["scores", "scaled"], {"images": array})))
    body, headers = _binary_request(array)
    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=30)
    conn.request("POST", "/v2/models/tiny/infer", body=body, headers=headers)
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    assert answer.status == 200, data[:300]
    length = int(answer.getheader("Inference-Header-Content-Length"))
    head, tail = json.loads(data[:length]), data[length:]
    offset = 0
    for out in head["outputs"]:
        size = out["parameters"]["binary_data_size"]
        got = np.frombuffer(tail, dtype="<f4", count=size // 4, offset=offset).reshape(out["shape"])
        np.testing.assert_allclose(got, expected[out["name"]], rtol=1e-6, atol=1e-6)
        offset += size
    assert offset == len(tail)
    # binary in, JSON out (no binary_data_output asked)
    body, headers = _binary_request(array, outputs=False)
    status, data = client.request("POST", "/v2/models/tiny/infer", body, headers)
    assert status == 200 and "data" in json.loads(data)["outputs"][0]
    assert client.json("GET", "/v2")[1]["extensions"] == ["binary_tensor_data", "model_configuration",
                                                          "system_shared_memory"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda body, h: (body, {**h, "Inference-Header-Content-Length": "99999999"}), "outside the body"),
    (lambda body, h: (body, {**h, "Inference-Header-Content-Length": "ten"}), "is not a number"),
    (lambda body, h: (body[:-4], h), "binary_data_size 768 with 764 binary bytes left"),
    (lambda body, h: (body + b"\0" * 4, h), "4 binary bytes after the inputs"),
    (lambda body, h: (body, {}), "the body is not valid JSON"),
])
def test_bad_binary_requests_get_a_400(server, change, message) -> None:
    _, client, _ = server
    body, headers = change(*_binary_request(np.zeros(SHAPES[0], dtype=np.float32)))
    status, data = client.request("POST", "/v2/models/tiny/infer", body, headers)
    assert status == 400 and message in json.loads(data)["error"], data


def test_malformed_and_oversized_bodies(server) -> None:
    running, client, _ = server
    status, data = client.request("POST", "/v2/models/tiny/infer", b"{not json")
    assert status == 400 and b"not valid JSON" in data
    too_big = running.service.max_body + 1
    status, data = client.request("POST", "/v2/models/tiny/infer", b" " * too_big)
    assert status == 413 and b"at most" in data
    assert client.request("POST", "/v2/models/other/infer", b"{}")[0] == 404
    assert client.request("GET", "/v2/health/ready")[0] == 200


def test_metrics_count_requests_and_expose_warm_up(server) -> None:
    _, client, _ = server
    client.json("POST", "/v2/models/tiny/infer", infer_body(np.zeros(SHAPES[0], dtype=np.float32)))
    client.request("POST", "/v2/models/tiny/infer", b"[]")
    status, text = client.request("GET", "/metrics")
    lines = text.decode().splitlines()
    assert status == 200
    counted = {line.split('outcome="')[1].split('"')[0]: int(line.split()[-1])
               for line in lines if line.startswith("edgebuild_requests_total{")}
    assert counted["success"] >= 1 and counted["bad_request"] >= 1
    assert any(line.startswith('edgebuild_inference_latency_ms_bucket{model="tiny",le="+Inf"}') for line in lines)
    assert any(line.startswith("edgebuild_warmup_seconds") for line in lines)
    assert any(line.startswith("edgebuild_cold_first_call_ms") for line in lines)
    assert 'edgebuild_ready{model="tiny",backend="onnxruntime-cpu' in text.decode()


def test_not_ready_until_warm_up_ends(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=2).start()
    try:
        client = Client(running.port)
        early = client.request("GET", "/v2/health/ready")[0]
        body = infer_body(np.zeros(SHAPES[0], dtype=np.float32))
        early_infer = client.json("POST", "/v2/models/tiny/infer", body)[0]
        client.wait_ready()
        assert client.json("POST", "/v2/models/tiny/infer", body)[0] == 200
    finally:
        running.stop()
    assert early in (200, 503) and early_infer in (200, 503)  # 503 whenever the request came before ready
    assert early == 503 or running.service.warmup["warmup_s"] < 0.05


def _concurrently(client: Client, arrays: list[np.ndarray]) -> list[dict]:
    """POST every array at once (one thread each) and return the answers in order."""
    answers: list[dict] = [{}] * len(arrays)
    start = threading.Barrier(len(arrays))

    def send(i: int) -> None:
        start.wait()
        status, answers[i] = client.json("POST", "/v2/models/tiny/infer", infer_body(arrays[i]))
        assert status == 200, answers[i]

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def _outputs(answer: dict) -> dict[str, np.ndarray]:
    return {o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"]) for o in answer["outputs"]}


def test_dynamic_batching_stacks_waiting_requests_and_answers_each_its_own_rows(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    running = Server(folder, host="127.0.0.1", port=0, warmup=False, max_batch_size=4,
                     max_queue_delay_ms=200).start()
    try:
        client = Client(running.port)
        client.wait_ready()
        rng = np.random.default_rng(7)
        # two sizes that cannot share a batch, and one request that brings two rows of its own
        arrays = ([rng.random([1, 3, 8, 8], dtype=np.float32) for _ in range(5)]
                  + [rng.random([1, 3, 16, 16], dtype=np.float32) for _ in range(3)]
                  + [rng.random([2, 3, 8, 8], dtype=np.float32)])
        answers = _concurrently(client, arrays)
        for array, answer in zip(arrays, answers):
            expected = dict(zip(["scores", "scaled"], session.run(["scores", "scaled"], {"images": array})))
            got = _outputs(answer)
            assert got["scores"].shape == (array.shape[0], 3)
            for name in expected:
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6)
            assert 1 <= answer["parameters"]["batch_rows"] <= 4
        batches = running.service.batches
        assert batches["requests"] == len(arrays) and batches["rows"] == 10
        assert batches["runs"] < len(arrays), batches  # some requests shared a run
        assert any(a["parameters"]["batch_rows"] > 1 for a in answers)
        _, meta = client.json("GET", "/v2/models/tiny")
        assert meta["parameters"]["dynamic_batching"] == {"max_batch_size": 4, "max_queue_delay_ms": 200,
                                                          "preferred_batch_size": []}
        assert meta["parameters"]["instance_count"] == 1
        assert meta["parameters"]["concurrent_runs"] is False  # batching: one worker thread runs the backend
        _, text = client.request("GET", "/metrics")
        assert f'edgebuild_batch_rows_total{{model="tiny"}} {batches["rows"]}' in text.decode()
        # the batcher's queue is where these requests waited: the first of a batch for the others
        waited = re.search(r'^edgebuild_request_stage_seconds_sum\{model="tiny",stage="wait_backend"\} (\S+)$',
                           text.decode(), re.MULTILINE)
        assert waited and float(waited.group(1)) > 0.1
    finally:
        running.stop()


def test_dynamic_batching_never_passes_the_profiles_max_batch(tmp_path: Path, capsys) -> None:
    folder = write_artifact(tmp_path / "yard")
    running = Server(folder, host="127.0.0.1", port=0, warmup=False, max_batch_size=16)
    assert running.service.max_batch_size == SHAPES[2][0]
    assert "past the profile's max batch 4" in capsys.readouterr().err
    running.httpd.server_close()


def test_dynamic_batching_turns_itself_off_for_outputs_without_a_batch_axis(tmp_path: Path, capsys) -> None:
    folder = write_artifact(tmp_path / "yard")
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, "h", "w"])
    means = helper.make_tensor_value_info("means", TensorProto.FLOAT, [3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [3], [0, 2, 3])
    graph = helper.make_graph([helper.make_node("ReduceMean", ["images", "axes"], ["means"], keepdims=0)],
                              "pooled", [images], [means], [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, folder / "model.onnx")
    recipe_for(folder, TARGET).save(folder)  # as compile would: the recipe records the new model's hash
    running = Server(folder, host="127.0.0.1", port=0, warmup=False, max_batch_size=4,
                     max_queue_delay_ms=200).start()
    try:
        client = Client(running.port)
        client.wait_ready()
        arrays = [np.full([1, 3, 8, 8], i, dtype=np.float32) for i in range(4)]
        answers = _concurrently(client, arrays)
    finally:
        running.stop()
    for i, answer in enumerate(answers):  # each still gets the answer to its own input
        np.testing.assert_allclose(_outputs(answer)["means"], [i, i, i])
    assert running.service.max_batch_size == 1
    assert "do not carry the batch on axis 0" in capsys.readouterr().err


def test_a_folder_without_a_recipe_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "edgebuild", "serve", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 3 and "no recipe.json here" in done.stderr


@pytest.mark.cgroup
@pytest.mark.slow
def test_thirty_clients_under_the_preset(tmp_path: Path) -> None:
    """The server in a real cgroup with the Orin Nano 8GB preset: 30 clients send 12 requests each at once; no
    request fails and memory stays within the preset. A count, not a duration: how many requests a busy host
    gets through in a given time says nothing about the server."""
    folder = write_artifact(tmp_path / "yard")
    report = tmp_path / "run.json"
    port = free_port()
    run = subprocess.Popen([sys.executable, "-m", "edgebuild", "run", "--limits", "orin-nano-8gb", "--report",
                            str(report), "--", sys.executable, "-m", "edgebuild", "serve", str(folder), "--host",
                            "127.0.0.1", "--port", str(port)], stderr=subprocess.PIPE, text=True)
    client = Client(port)
    try:
        client.wait_ready(timeout=600)  # a cap against a hang only
        failures: list[str] = []
        counts = [0] * 30

        def hammer(index: int) -> None:
            rng = np.random.default_rng(index)
            for _ in range(12):
                shape = SHAPES[int(rng.integers(0, 3))]
                body = json.dumps(infer_body(rng.random(shape, dtype=np.float32))).encode()
                try:
                    status, _ = client.request("POST", "/v2/models/tiny/infer", body)
                    if status != 200:
                        failures.append(f"HTTP {status}")
                except OSError as exc:
                    failures.append(repr(exc))
                counts[index] += 1

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
    assert not failures, failures[:5]
    assert counts == [12] * 30, counts
    result = json.loads(report.read_text())
    print(f"{sum(counts)} requests from 30 clients at once; cgroup peak memory {result['peak_memory']} bytes "
          f"of {result['preset']['memory']}")
    assert not result["oom_killed"], stderr
    assert result["peak_memory"] <= result["preset"]["memory"]
    assert "ready:" in stderr


def test_systemd_hears_ready_only_after_warm_up(tmp_path: Path, monkeypatch) -> None:
    """Type=notify units: READY=1 arrives on $NOTIFY_SOCKET once the server is warm."""
    import socket

    address = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    running = Server(write_artifact(tmp_path / "yard"), host="127.0.0.1", port=0, warmup_budget_s=1).start()
    try:
        message = listener.recv(4096).decode()
        assert running.service.ready.is_set() and running.service.warmup["runs"] >= 1
    finally:
        running.stop()
        listener.close()
    assert message.startswith("READY=1\n") and "onnxruntime" in message


def _perturb_weights(folder: Path) -> None:
    """The model file changed after its recipe was written: the constant 2.0 becomes 2.5."""
    model = onnx.load(str(folder / "model.onnx"))
    two = next(t for t in model.graph.initializer if t.name == "two")
    two.CopyFrom(helper.make_tensor("two", TensorProto.FLOAT, [], [2.5]))
    onnx.save(model, str(folder / "model.onnx"))


def test_a_model_file_that_does_not_match_its_recipe_is_never_served(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    _perturb_weights(folder)
    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
    try:
        client = Client(running.port)
        deadline = time.time() + 30
        while running.service.failed is None and time.time() < deadline:
            time.sleep(0.05)
        status, body = client.request("GET", "/v2/health/ready")
        infer = client.json("POST", "/v2/models/tiny/infer", infer_body(np.zeros(SHAPES[0], np.float32)))[0]
    finally:
        running.stop()
    assert status == 503 and infer == 503
    assert "model.onnx does not match the onnx_sha256 of recipe.json" in body.decode()


def test_bench_refuses_a_model_folder_whose_files_were_changed(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    _perturb_weights(folder)
    done = subprocess.run([sys.executable, "-m", "edgebuild.runtime", "bench", str(folder), "--iterations", "3"],
                          capture_output=True, text=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 15 and not answer["ok"]
    assert "model.onnx does not match the onnx_sha256" in answer["message"]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_sixteen_concurrent_requests_all_reach_the_batcher_past_the_worker_count(tmp_path: Path, monkeypatch,
                                                                                 transport: str) -> None:
    """With the default 8 workers and max batch 8, 16 requests in flight form two batches of 8: the threads
    that take requests are sized from the batching settings (``request_threads``), not capped at 8."""
    from edgebuild.runtime.serving import service as service_module
    from tests.unit.runtime.serving.test_batching import PROFILE, SlowRunner

    folder = write_artifact(tmp_path / "yard")
    recipe_for(folder, TARGET, profiles={"images": PROFILE}).save(folder)
    gate = threading.Event()
    runner = SlowRunner(gate=gate)
    monkeypatch.setattr(service_module, "load_backend", lambda *a, **k: (runner, "a test double"))
    running = Server(folder, host="127.0.0.1", port=0, grpc_port=0 if transport == "grpc" else None,
                     warmup=False, max_batch_size=8, max_queue_delay_ms=500).start()
    assert running.httpd.workers == 16
    answers: list = [None] * 16
    try:
        Client(running.port).wait_ready()

        def call(i: int) -> None:
            array = np.full([1, 3, 8, 8], i, np.float32)
            if transport == "http":
                answers[i] = Client(running.port).json("POST", "/v2/models/tiny/infer", infer_body(array))[1]
            else:
                import tritonclient.grpc as grpcclient

                client = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
                tensor = grpcclient.InferInput("images", list(array.shape), "FP32")
                tensor.set_data_from_numpy(array)
                answers[i] = client.infer("tiny", [tensor]).as_numpy("scores")

        threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (runner.log["batches"] and running.service._jobs.qsize() == 8):
            time.sleep(0.01)
        assert runner.log["batches"] == [8] and running.service._jobs.qsize() == 8  # 8 run, 8 wait in the queue
        gate.set()
        for thread in threads:
            thread.join(10)
    finally:
        gate.set()
        running.stop()
    assert runner.log["batches"] == [8, 8]
    for i, answer in enumerate(answers):
        scores = _outputs(answer)["scores"] if transport == "http" else answer
        np.testing.assert_allclose(scores, np.full([1, 3], i))
