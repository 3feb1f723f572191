"""A compiled model folder as `edgebuild compile` writes it, and an HTTP client for the runtime server.

Shared by the server tests, the container tests and the benchmarks' checks: a tiny dynamic-shape
ONNX model (per-channel means and a scaled image) with its recipe.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from edgebuild.devices.recipes import onnx_outputs
from edgebuild.runtime.base.files import sha256_file
from edgebuild.runtime.base.recipe import Recipe, RecipeLimits, RecipeModule, RuntimeSettings
from edgebuild.targets.presets import load_preset
from edgebuild.targets.profiles import load_catalog

SHAPES = [[1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 32]]
TARGET = "orin-nano-8gb@6.2"


def free_port() -> int:
    """A loopback port nobody listens on now (the OS picks it), for a server a test starts in another process:
    unlike a port derived from the pid, two test workers never get the same one at once."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_artifact(folder: Path) -> Path:
    """A small dynamic-shape model (per-channel means and a scaled image) and its recipe, as compile writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, "h", "w"])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 3])
    scaled = helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["n", 3, "h", "w"])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    graph = helper.make_graph([helper.make_node("ReduceMean", ["images", "axes"], ["scores"], keepdims=0),
                               helper.make_node("Mul", ["images", "two"], ["scaled"])],
                              "tiny", [images], [scores, scaled], [two, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, folder / "model.onnx")
    recipe_for(folder, TARGET).save(folder)
    return folder


def recipe_for(folder: Path, target_id: str, **changes) -> Recipe:
    """The recipe the engine stage writes for the folder's model.onnx in deferred placement for ``target_id``."""
    target = load_catalog().parse_target(target_id)
    module, release = target.module, target.release
    preset = load_preset(module.id)
    recipe = Recipe(
        group="yard", model_name="tiny", model_version="0.3.0", target=target.id,
        runtime=RuntimeSettings(warmup_budget_s=5.0, port=8000, max_batch_size=1, max_queue_delay_ms=2.0),
        placement="deferred", placement_reason="no TensorRT on this test host", shippable_engine=False,
        onnx="model.onnx", onnx_sha256=sha256_file(folder / "model.onnx"), precision="fp32", candidate="fp32",
        kept_fp32=[], retention=1.0, accuracy_backend="onnxruntime-cpu", profiles={"images": SHAPES},
        workspace_bytes=preset.tensorrt_workspace, limits=RecipeLimits(**preset.as_dict()), dla_core=None,
        timing_cache=f"{module.id}-trt{release.tensorrt}.cache",
        module=RecipeModule(id=module.id, name=module.name, compute_capability=module.compute_capability,
                            compatible=list(module.compatible)),
        jetpack=release.jetpack, l4t=release.l4t, l4t_accepted=[release.l4t, *release.l4t_aliases],
        tensorrt=release.tensorrt, outputs=onnx_outputs(folder / "model.onnx"))
    return dataclasses.replace(recipe, **changes)


class Client:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        return answer.status, data

    def json(self, method: str, path: str, payload=None):
        status, data = self.request(method, path, json.dumps(payload).encode() if payload is not None else None)
        return status, json.loads(data)

    def wait_ready(self, timeout: float = 60) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                status, body = self.json("GET", "/v2/health/ready")
                if status == 200:
                    return body
            except (ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise AssertionError("the server did not become ready")


def infer_body(array: np.ndarray) -> dict:
    return {"inputs": [{"name": "images", "shape": list(array.shape), "datatype": "FP32",
                        "data": array.reshape(-1).tolist()}]}


def check_answers_match_the_host(client: Client, folder: Path) -> list[dict]:
    """POST one request per profile shape; every output must equal ONNX Runtime on this host. Returns the answers."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    answers = []
    for shape in SHAPES:
        array = np.random.default_rng(sum(shape)).random(shape, dtype=np.float32)
        status, answer = client.json("POST", "/v2/models/tiny/infer", infer_body(array))
        assert status == 200, answer
        expected = dict(zip(["scores", "scaled"], session.run(["scores", "scaled"], {"images": array})))
        for out in answer["outputs"]:
            got = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
            np.testing.assert_allclose(got, expected[out["name"]], rtol=1e-6, atol=1e-6)
            assert out["datatype"] == "FP32"
        answers.append(answer)
    return answers


def same_numbers(got: np.ndarray, expected: np.ndarray) -> None:
    """The same numbers up to ONNX Runtime's own rounding: its ReduceMean can differ by one ulp with the input's
    memory alignment (a shared-memory page, a protobuf string, an HTTP body), so bit equality is not asked."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
