"""Triton's system shared-memory extension against NVIDIA's own clients: regions made with
tritonclient.utils.shared_memory, registered over HTTP and gRPC, inputs read from and outputs written to
them, the same numbers as HTTP's binary tensors, the mistakes as errors, and unregistering unmaps them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from edgebuild.runtime.serving.protocol import BadRequest
from edgebuild.runtime.serving.server import Server
from edgebuild.runtime.serving.shared_memory import SystemSharedMemory
from tests.support.nvidia_shared_memory import nvidia_shared_memory
from tests.support.runtime_artifacts import SHAPES, Client, same_numbers, write_artifact

shm = nvidia_shared_memory()
ARRAY = np.random.default_rng(7).random(SHAPES[1], dtype=np.float32)
OUT_BYTES = ARRAY.nbytes * 2  # room for "scaled" (as large as the input) and "scores" after it



@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_artifact(tmp_path_factory.mktemp("shm") / "yard")
    running = Server(folder, host="127.0.0.1", port=0, grpc_port=0, warmup_budget_s=1).start()
    Client(running.port).wait_ready()
    clients = {"http": httpclient.InferenceServerClient(f"127.0.0.1:{running.port}"),
               "grpc": grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")}
    yield running, clients
    for client in clients.values():
        client.close()
    running.stop()


@pytest.fixture
def regions(served):
    """An input region holding ARRAY and an output region, made by NVIDIA's client; unregistered and destroyed after."""
    running, clients = served
    tag = f"{os.getpid()}_{id(object())}"
    keys = {"in": f"/edgebuild_test_in_{tag}", "out": f"/edgebuild_test_out_{tag}"}
    handles = {"in": shm.create_shared_memory_region("in", keys["in"], ARRAY.nbytes),
               "out": shm.create_shared_memory_region("out", keys["out"], OUT_BYTES)}
    shm.set_shared_memory_region(handles["in"], [ARRAY])
    yield keys, handles
    clients["http"].unregister_system_shared_memory()
    for handle in handles.values():
        shm.destroy_shared_memory_region(handle)


def _mappings(key: str) -> int:
    """How many mappings of /dev/shm/KEY this process has (the client's own and the server's: same process)."""
    return Path("/proc/self/maps").read_text().count("/dev/shm/" + key.lstrip("/"))


def _register(clients, keys) -> None:
    clients["http"].register_system_shared_memory("in", keys["in"], ARRAY.nbytes)
    clients["grpc"].register_system_shared_memory("out", keys["out"], OUT_BYTES)


def test_regions_registered_over_http_and_grpc_show_in_both_statuses(served, regions) -> None:
    _, clients = served
    keys, _ = regions
    before = _mappings(keys["in"])
    _register(clients, keys)
    assert _mappings(keys["in"]) == before + 1  # the server mapped it
    expected = [{"name": "in", "key": keys["in"], "offset": 0, "byte_size": ARRAY.nbytes},
                {"name": "out", "key": keys["out"], "offset": 0, "byte_size": OUT_BYTES}]
    assert sorted(clients["http"].get_system_shared_memory_status(), key=lambda r: r["name"]) == expected
    regions_over_grpc = clients["grpc"].get_system_shared_memory_status(as_json=True)["regions"]
    assert {n: dict(r, byte_size=int(r["byte_size"]), offset=int(r.get("offset", 0)))
            for n, r in regions_over_grpc.items()} == {r["name"]: r for r in expected}
    assert clients["http"].get_system_shared_memory_status("out") == [expected[1]]


def _http_binary(client) -> dict[str, np.ndarray]:
    given = httpclient.InferInput("images", list(ARRAY.shape), "FP32")
    given.set_data_from_numpy(ARRAY, binary_data=True)
    result = client.infer("tiny", [given], outputs=[httpclient.InferRequestedOutput(n, binary_data=True)
                                                    for n in ("scores", "scaled")])
    return {n: result.as_numpy(n) for n in ("scores", "scaled")}


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_inputs_and_outputs_in_shared_memory_equal_http_binary(served, regions, transport: str) -> None:
    _, clients = served
    keys, handles = regions
    _register(clients, keys)
    module = httpclient if transport == "http" else grpcclient
    given = module.InferInput("images", list(ARRAY.shape), "FP32")
    given.set_shared_memory("in", ARRAY.nbytes)
    scaled, scores = module.InferRequestedOutput("scaled"), module.InferRequestedOutput("scores")
    scaled.set_shared_memory("out", ARRAY.nbytes)
    scores.set_shared_memory("out", ARRAY.nbytes // 2, offset=ARRAY.nbytes)
    result = clients[transport].infer("tiny", [given], outputs=[scaled, scores])
    expected = _http_binary(clients["http"])
    got = {"scaled": shm.get_contents_as_numpy(handles["out"], np.float32, list(ARRAY.shape)),
           "scores": shm.get_contents_as_numpy(handles["out"], np.float32, [ARRAY.shape[0], 3], offset=ARRAY.nbytes)}
    for name in ("scaled", "scores"):
        same_numbers(got[name], expected[name])
    # as Triton answers an output written to shared memory: its name, datatype and shape, no data and no
    # parameters (Triton's C++ client, perf_analyzer's, reads binary_data_size from any output with parameters)
    if transport == "http":
        outputs = result.get_response()["outputs"]
        assert outputs == [{"name": "scaled", "shape": list(ARRAY.shape), "datatype": "FP32"},
                           {"name": "scores", "shape": [ARRAY.shape[0], 3], "datatype": "FP32"}]
    else:
        response = result.get_response()
        assert [(o.name, list(o.shape), o.datatype) for o in response.outputs] == [
            ("scaled", list(ARRAY.shape), "FP32"), ("scores", [ARRAY.shape[0], 3], "FP32")]
        assert not any(o.parameters for o in response.outputs)
        assert list(response.raw_output_contents) == [b"", b""]  # one entry per output, empty: Triton's


def test_an_output_in_shared_memory_beside_one_in_the_answer(served, regions) -> None:
    """gRPC: raw_output_contents keeps one entry per output, empty for the one written to shared memory."""
    _, clients = served
    keys, handles = regions
    _register(clients, keys)
    given = grpcclient.InferInput("images", list(ARRAY.shape), "FP32")
    given.set_data_from_numpy(ARRAY)
    scaled, scores = grpcclient.InferRequestedOutput("scaled"), grpcclient.InferRequestedOutput("scores")
    scaled.set_shared_memory("out", ARRAY.nbytes)
    result = clients["grpc"].infer("tiny", [given], outputs=[scaled, scores])
    expected = _http_binary(clients["http"])
    same_numbers(result.as_numpy("scores"), expected["scores"])
    same_numbers(shm.get_contents_as_numpy(handles["out"], np.float32, list(ARRAY.shape)),
                                  expected["scaled"])


@pytest.mark.parametrize(("where", "size", "offset", "message"), [
    ("input", ARRAY.nbytes - 4, 0, "does not fit shape"),
    ("input", ARRAY.nbytes, 4, "is past the end of region 'in'"),
    ("output", 8, 0, "too small for its"),
    ("output", ARRAY.nbytes, OUT_BYTES - 8, "is past the end of region 'out'"),
])
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_bad_offsets_and_sizes_are_refused(served, regions, transport, where, size, offset, message) -> None:
    _, clients = served
    keys, _ = regions
    _register(clients, keys)
    module = httpclient if transport == "http" else grpcclient
    given = module.InferInput("images", list(ARRAY.shape), "FP32")
    outputs = [module.InferRequestedOutput("scaled")]
    if where == "input":
        given.set_shared_memory("in", size, offset=offset)
    else:
        given.set_data_from_numpy(ARRAY)
        outputs[0].set_shared_memory("out", size, offset=offset)
    with pytest.raises(InferenceServerException, match=message) as raised:
        clients[transport].infer("tiny", [given], outputs=outputs)
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_bad_registrations_are_refused(served, regions) -> None:
    _, clients = served
    keys, _ = regions
    http, grpc = clients["http"], clients["grpc"]
    for call, message in (
            (lambda: http.register_system_shared_memory("x", "/edgebuild_no_such_key", 8), "cannot open key"),
            (lambda: grpc.register_system_shared_memory("x", keys["in"], ARRAY.nbytes + 1), "past the end of key"),
            (lambda: http.register_system_shared_memory("x", keys["in"], 8, offset=ARRAY.nbytes), "past the end"),
            (lambda: grpc.register_system_shared_memory("x", "/../etc/passwd", 8), "not a POSIX shared-memory name"),
            (lambda: http.get_system_shared_memory_status("nothing"), "no shared-memory region 'nothing'"),
            (lambda: grpc.unregister_system_shared_memory("nothing"), "no shared-memory region 'nothing'")):
        with pytest.raises(InferenceServerException, match=message):
            call()
    http.register_system_shared_memory("in", keys["in"], ARRAY.nbytes)
    with pytest.raises(InferenceServerException, match="registered already"):
        grpc.register_system_shared_memory("in", keys["in"], ARRAY.nbytes)


def test_unregister_unmaps_and_the_region_is_gone(served, regions) -> None:
    _, clients = served
    keys, _ = regions
    before = _mappings(keys["in"]), _mappings(keys["out"])
    _register(clients, keys)
    clients["grpc"].unregister_system_shared_memory("in")
    assert _mappings(keys["in"]) == before[0] and _mappings(keys["out"]) == before[1] + 1
    assert [r["name"] for r in clients["http"].get_system_shared_memory_status()] == ["out"]
    given = grpcclient.InferInput("images", list(ARRAY.shape), "FP32")
    given.set_shared_memory("in", ARRAY.nbytes)
    with pytest.raises(InferenceServerException, match="no shared-memory region 'in'"):
        clients["grpc"].infer("tiny", [given])
    clients["http"].unregister_system_shared_memory()  # every region
    assert clients["http"].get_system_shared_memory_status() == [] and _mappings(keys["out"]) == before[1]


def test_stopping_the_server_unmaps_every_region(tmp_path: Path, regions) -> None:
    keys, _ = regions
    folder = write_artifact(tmp_path / "yard")
    running = Server(folder, host="127.0.0.1", port=0).start()
    Client(running.port).wait_ready()
    client = httpclient.InferenceServerClient(f"127.0.0.1:{running.port}")
    before = _mappings(keys["in"])
    client.register_system_shared_memory("mine", keys["in"], ARRAY.nbytes)
    assert _mappings(keys["in"]) == before + 1
    client.close()
    running.stop()
    assert _mappings(keys["in"]) == before


def test_cuda_shared_memory_says_it_is_not_supported(served) -> None:
    _, clients = served
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported on this server"):
        clients["http"].get_cuda_shared_memory_status()
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported") as raised:
        clients["grpc"].register_cuda_shared_memory("gpu", b"aGFuZGxl", 0, 64)  # base64 of a handle
    assert raised.value.status() == "StatusCode.UNIMPLEMENTED"
    # none is ever registered, so unregistering (all, or one) succeeds, as Triton answers when it has none:
    # perf_analyzer unregisters both kinds when it finishes, and reports a failure
    for client in clients.values():
        client.unregister_cuda_shared_memory()
        client.unregister_cuda_shared_memory("gpu")


def test_an_input_is_a_view_of_the_region_not_a_copy(regions) -> None:
    keys, handles = regions
    memory = SystemSharedMemory()
    memory.register("in", keys["in"], 0, ARRAY.nbytes)
    view = memory.read("images", "in", 0, ARRAY.nbytes, np.dtype(np.float32), list(ARRAY.shape))
    np.testing.assert_array_equal(view, ARRAY)
    assert not view.flags.writeable and not view.flags.owndata
    shm.set_shared_memory_region(handles["in"], [np.zeros_like(ARRAY)])  # the client writes; the view sees it
    assert not view.any()
    with pytest.raises(BadRequest, match="does not fit shape"):
        memory.read("images", "in", 0, ARRAY.nbytes, np.dtype(np.float16), list(ARRAY.shape))
    del view
    memory.close()
    assert memory.status() == []


@pytest.mark.parametrize(("parameters", "message"), [
    ({"shared_memory_region": 7, "shared_memory_byte_size": 8}, "must be a region's name"),
    ({"shared_memory_region": "in", "shared_memory_byte_size": "all"}, "shared_memory_byte_size must be a whole"),
    ({"shared_memory_region": "in", "shared_memory_byte_size": 8, "shared_memory_offset": -1},
     "shared_memory_offset must be a whole"),
])
def test_malformed_shared_memory_parameters_get_a_400(served, parameters: dict, message: str) -> None:
    running, _ = served
    body = {"inputs": [{"name": "images", "shape": SHAPES[1], "datatype": "FP32", "parameters": parameters}]}
    status, answer = Client(running.port).json("POST", "/v2/models/tiny/infer", body)
    assert status == 400 and message in answer["error"], answer
    status, answer = Client(running.port).json("POST", "/v2/systemsharedmemory/region/x/register", {"offset": 0})
    assert status == 400 and "register takes" in answer["error"]
