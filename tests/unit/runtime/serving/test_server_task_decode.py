"""The server decodes a pose, segmentation or OBB model's raw outputs on the device (``[runtime] detections``,
``parameters.detections``) with the host gate's decode, and answers them as a model with NMS inside would:
tiny ONNX models of each task's raw outputs (docs/tasks.md), served, asked over HTTP with NVIDIA's tritonclient."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper

from edgebuild.accuracy.task_decode import decode_instances
from edgebuild.project.ultralytics_facts import VAL_PRE_NMS_TOP_K
from edgebuild.runtime.base.model_outputs import INSTANCE_NMS_OUTPUTS, OBB_NMS_OUTPUTS
from edgebuild.runtime.base.preprocess_spec import PreprocessSpec
from edgebuild.runtime.base.recipe import Recipe, RecipePostprocess, RecipeTask, RuntimeSettings
from edgebuild.runtime.base.task_decode import INSTANCE_PRE_NMS_TOP_K
from edgebuild.runtime.serving.server import Server
from edgebuild.runtime.serving.service import answer_forms
from tests.support.runtime_artifacts import TARGET, Client, recipe_for

KINDS = ("pose", "segmentation", "obb")
SIZE = 16  # the input is [N, 3, 16, 16]: 768 values an image, read as 64 anchors of 12 channels
ANCHORS, CHANNELS = 64, 12
PROFILE = [[1, 3, SIZE, SIZE], [2, 3, SIZE, SIZE], [4, 3, SIZE, SIZE]]
POST = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.6, "nms_iou": 0.5,
        "max_detections": 100}
EXTRA = {"pose": {"keypoints_output": "keypoints", "kpt_shape": [2, 3]},
         "segmentation": {"coefficients_output": "mask_coefficients", "prototypes_output": "prototypes"},
         "obb": {}}
ANSWERS = {"pose": INSTANCE_NMS_OUTPUTS["pose"], "segmentation": INSTANCE_NMS_OUTPUTS["segmentation"],
           "obb": OBB_NMS_OUTPUTS}
RAW = {"pose": ["boxes", "scores", "keypoints"], "segmentation": ["boxes", "scores", "mask_coefficients", "prototypes"],
       "obb": ["boxes", "scores"]}


def _const(name: str, values, dtype=TensorProto.FLOAT) -> onnx.TensorProto:
    array = np.asarray(values)
    return helper.make_tensor(name, dtype, list(array.shape), array.reshape(-1).tolist())


def _slice(source: str, start: int, end: int, out: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """source[..., start:end] on the last axis: the node and its constants."""
    return ([helper.make_node("Slice", [source, f"{out}_s", f"{out}_e", "last"], [out])],
            [_const(f"{out}_s", [start], TensorProto.INT64), _const(f"{out}_e", [end], TensorProto.INT64)])


def _model(kind: str) -> onnx.ModelProto:
    """The task's raw outputs of docs/tasks.md, each a plain function of the image's values: anchor a's 12
    channels are the image's values 12a..12a+11 (boxes from 0..3, OBB's angle from 4, two class scores
    after the box, keypoints or mask coefficients after them; the prototypes are channel 0's top-left 8 x 8)."""
    nodes, consts = [helper.make_node("Reshape", ["images", "anchor_shape"], ["raw"])], [
        _const("anchor_shape", [-1, ANCHORS, CHANNELS], TensorProto.INT64), _const("last", [-1], TensorProto.INT64),
        _const("spread", [8.0]), _const("four", [4.0]), _const("half", [0.5])]

    def take(start: int, end: int, out: str) -> None:
        more_nodes, more_consts = _slice("raw", start, end, out)
        nodes.extend(more_nodes)
        consts.extend(more_consts)

    def node(op: str, inputs: list[str], out: str, **attributes) -> None:
        nodes.append(helper.make_node(op, inputs, [out], **attributes))

    take(0, 2, "corner_raw")
    take(2, 4, "size_raw")
    node("Mul", ["corner_raw", "spread"], "corner")  # boxes 4 to 12 pixels wide in 8 x 8: many overlap
    node("Mul", ["size_raw", "spread"], "size_scaled")
    node("Add", ["size_scaled", "four"], "size")
    first = 5 if kind == "obb" else 4
    take(first, first + 2, "logits_raw")
    node("Mul", ["logits_raw", "four"], "logits")
    node("Sigmoid", ["logits"], "scores")
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", ANCHORS, 2])]
    if kind == "obb":
        consts += [_const("quarter", [0.25]), _const("pi", [float(np.pi)])]
        take(4, 5, "angle_raw")
        node("Sub", ["angle_raw", "quarter"], "angle_turn")
        node("Mul", ["angle_turn", "pi"], "angle")
        node("Concat", ["corner", "size", "angle"], "boxes", axis=-1)  # cx, cy, w, h, angle
        outputs.insert(0, helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", ANCHORS, 5]))
    else:
        node("Add", ["corner", "size"], "far")
        node("Concat", ["corner", "far"], "boxes", axis=-1)  # x1, y1, x2, y2
        outputs.insert(0, helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", ANCHORS, 4]))
    if kind == "pose":
        take(6, 12, "points_raw")
        node("Mul", ["points_raw", "at"], "points")
        consts += [_const("at", [float(SIZE)]), _const("points_shape", [-1, ANCHORS, 2, 3], TensorProto.INT64)]
        node("Reshape", ["points", "points_shape"], "keypoints")
        outputs.append(helper.make_tensor_value_info("keypoints", TensorProto.FLOAT, ["n", ANCHORS, 2, 3]))
    if kind == "segmentation":
        take(6, 10, "coefficients_raw")
        node("Sub", ["coefficients_raw", "half"], "mask_coefficients")
        consts += [_const("p_start", [0, 0, 0], TensorProto.INT64), _const("p_end", [1, 8, 8], TensorProto.INT64),
                   _const("p_axes", [1, 2, 3], TensorProto.INT64),
                   _const("p_shape", [-1, 4, SIZE // 4, SIZE // 4], TensorProto.INT64)]
        nodes.append(helper.make_node("Slice", ["images", "p_start", "p_end", "p_axes"], ["corner_pixels"]))
        node("Sub", ["corner_pixels", "half"], "centred")
        node("Reshape", ["centred", "p_shape"], "prototypes")
        outputs += [helper.make_tensor_value_info("mask_coefficients", TensorProto.FLOAT, ["n", ANCHORS, 4]),
                    helper.make_tensor_value_info("prototypes", TensorProto.FLOAT, ["n", 4, SIZE // 4, SIZE // 4])]
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, SIZE, SIZE])
    graph = helper.make_graph(nodes, kind, [images], outputs, consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _task(kind: str, **changes) -> RecipeTask:
    post = dict(POST, **EXTRA[kind], **changes)
    return RecipeTask(kind=kind, classes=["a", "b"], outputs="raw", postprocess=RecipePostprocess.from_dict(post),
                      preprocess=PreprocessSpec((SIZE, SIZE)))


def _folder(root: Path, kind: str) -> Path:
    """The model folder as compile writes one for the task, with ``[runtime] detections = true``."""
    folder = root / kind
    folder.mkdir(parents=True)
    onnx.save(_model(kind), folder / "model.onnx")
    recipe = recipe_for(folder, TARGET, model_name=f"tiny-{kind}", profiles={"images": PROFILE}, task=_task(kind),
                        runtime=RuntimeSettings(warmup_budget_s=1.0, port=8000, max_batch_size=1,
                                                max_queue_delay_ms=2.0, detections=True))
    recipe.save(folder)
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Each task's folder served by one server of its own: kind -> (folder, tritonclient)."""
    root = tmp_path_factory.mktemp("tasks")
    servers, clients = {}, {}
    try:
        for kind in KINDS:
            folder = _folder(root, kind)
            servers[kind] = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
            Client(servers[kind].port).wait_ready()
            clients[kind] = (folder, triton.InferenceServerClient(f"127.0.0.1:{servers[kind].port}"))
        yield clients
    finally:
        for kind, running in servers.items():
            if kind in clients:
                clients[kind][1].close()
            running.stop()


def _images(count: int, seed: int) -> np.ndarray:
    """Random images, the last all zeros (every score sigmoid(0) = 0.5, under the threshold: no detection)."""
    array = np.random.default_rng(seed).random((count, 3, SIZE, SIZE), dtype=np.float32)
    array[-1] = 0.0
    return array


def _ask(client, kind: str, array: np.ndarray, **parameters):
    given = triton.InferInput("images", list(array.shape), "FP32")
    given.set_data_from_numpy(array, binary_data=True)
    return client.infer(f"tiny-{kind}", [given], parameters=parameters or None)


def _host_raw(folder: Path, array: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {"images": array})))


@pytest.mark.parametrize("kind", KINDS)
def test_the_server_answers_the_hosts_decode_of_the_raw_outputs(served, kind: str) -> None:
    folder, client = served[kind]
    array = _images(3, seed=KINDS.index(kind))
    result = _ask(client, kind, array)
    assert result.get_response()["parameters"]["detections"] is True
    assert [o["name"] for o in result.get_response()["outputs"]] == list(ANSWERS[kind])
    answer = {name: result.as_numpy(name) for name in ANSWERS[kind]}
    k, width = POST["max_detections"], 5 if kind == "obb" else 4
    assert answer["num_detections"].dtype == np.int32 and answer["num_detections"].shape == (3, 1)
    assert answer[ANSWERS[kind][1]].shape == (3, k, width) and answer["detection_scores"].shape == (3, k)
    raw = _host_raw(folder, array)
    for image in range(3):
        host = decode_instances(raw["boxes"][image], raw["scores"][image], POST["score_threshold"], POST["nms_iou"], k)
        n = len(host["scores"])
        assert int(answer["num_detections"][image, 0]) == n and (5 < n < k if image < 2 else n == 0)
        np.testing.assert_allclose(answer[ANSWERS[kind][1]][image, :n], host["boxes"], atol=1e-5)
        np.testing.assert_allclose(answer["detection_scores"][image, :n], host["scores"], atol=1e-6)
        np.testing.assert_array_equal(answer["detection_classes"][image, :n], host["labels"])
        if kind == "pose":
            assert answer["detection_keypoints"].shape == (3, k, 2, 3)
            np.testing.assert_allclose(answer["detection_keypoints"][image, :n],
                                       raw["keypoints"][image][host["anchors"]], atol=1e-5)
        if kind == "segmentation":
            assert answer["detection_mask_coefficients"].shape == (3, k, 4)
            np.testing.assert_allclose(answer["detection_mask_coefficients"][image, :n],
                                       raw["mask_coefficients"][image][host["anchors"]], atol=1e-6)
        for name in ANSWERS[kind][1:]:  # rows past the count are zero
            if name != "mask_prototypes":
                assert not answer[name][image, n:].any(), name
    if kind == "segmentation":  # passed through
        np.testing.assert_allclose(answer["mask_prototypes"], raw["prototypes"], atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_asking_no_detections_gets_the_raw_tensors(served, kind: str) -> None:
    folder, client = served[kind]
    array = _images(2, seed=7)
    result = _ask(client, kind, array, detections=False)
    assert result.get_response()["parameters"]["detections"] is False
    assert [o["name"] for o in result.get_response()["outputs"]] == RAW[kind]
    for name, expected in _host_raw(folder, array).items():
        np.testing.assert_allclose(result.as_numpy(name), expected, rtol=1e-6, atol=1e-6)


def _same_tensor(meta: dict, answered: dict) -> bool:
    shape = meta["shape"]
    return (meta["name"] == answered["name"] and meta["datatype"] == answered["datatype"]
            and len(shape) == len(answered["shape"]) and all(m in (-1, a) for m, a in zip(shape, answered["shape"])))


@pytest.mark.parametrize("kind", KINDS)
def test_the_metadata_says_the_server_decodes_and_describes_what_comes_back(served, kind: str) -> None:
    _, client = served[kind]
    meta = client.get_model_metadata(f"tiny-{kind}")
    answered = _ask(client, kind, _images(2, seed=3)).get_response()["outputs"]
    assert len(meta["outputs"]) == len(answered)
    assert all(_same_tensor(m, a) for m, a in zip(meta["outputs"], answered)), (meta["outputs"], answered)
    task = meta["parameters"]["task"]
    assert (task["kind"], task["output_form"], task["model_outputs"]) == (kind, "detections", "raw")
    detections = task["detections"]
    assert detections["available"] and detections["decoded_by"] == "server" and detections["default"]
    assert detections["outputs"] == list(ANSWERS[kind]) and detections["max_detections"] == POST["max_detections"]
    assert detections["box_convention"].startswith("cx, cy, w, h" if kind == "obb" else "xyxy")
    assert [t["name"] for t in task["raw_outputs"]] == RAW[kind]


def test_an_obb_answer_gives_rotated_boxes_in_input_pixels_and_the_angle_in_radians(served) -> None:
    _, client = served["obb"]
    array = np.zeros((1, 3, SIZE, SIZE), np.float32)
    # anchor 5: cx 0.5 * 8, cy 0.25 * 8, w 1 * 8 + 4, h 0.5 * 8 + 4, angle (0.75 - 0.25) * pi; class 1 scores
    # sigmoid(4): the only score above the threshold (the others are sigmoid(0))
    array.reshape(-1)[5 * CHANNELS:6 * CHANNELS] = [0.5, 0.25, 1.0, 0.5, 0.75, 0.0, 1.0] + [0.0] * 5
    result = _ask(client, "obb", array)
    assert int(result.as_numpy("num_detections")[0, 0]) == 1
    np.testing.assert_allclose(result.as_numpy("detection_rotated_boxes")[0, 0], [4.0, 2.0, 12.0, 8.0, np.pi / 2],
                               rtol=1e-6)
    assert result.as_numpy("detection_classes")[0, 0] == 1.0
    assert result.as_numpy("detection_scores")[0, 0] == pytest.approx(1 / (1 + np.exp(-4.0)), rel=1e-6)


def test_a_folder_without_the_outputs_named_or_with_nms_inside_is_not_decoded_by_the_server() -> None:
    # a recipe without the task's output names answers the raw tensors only, as before
    older = RecipeTask(kind="pose", classes=["a"], outputs="raw", postprocess=RecipePostprocess.from_dict(dict(POST)),
                       preprocess=PreprocessSpec((SIZE, SIZE)))
    forms = answer_forms(older, RAW["pose"], decode=True)
    assert forms.decoded is None and not forms.decode and forms.choose(None) == (False, RAW["pose"])
    # NMS inside: the model's own detections, asked for or not
    in_model = _task("pose", in_model=True)
    forms = answer_forms(in_model, list(INSTANCE_NMS_OUTPUTS["pose"]), decode=False)
    assert forms.decoded is None and forms.choose(True) == (False, list(INSTANCE_NMS_OUTPUTS["pose"]))
    assert answer_forms(_task("obb"), RAW["obb"], decode=False).choose(True) == (True, list(OBB_NMS_OUTPUTS))


def test_the_device_keeps_as_many_candidates_before_nms_as_ultralytics_val() -> None:
    assert INSTANCE_PRE_NMS_TOP_K == VAL_PRE_NMS_TOP_K


def test_a_recipe_with_its_runtime_detections_off_answers_raw_by_default(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "segmentation")
    recipe = Recipe.load(folder)
    dataclasses.replace(recipe, runtime=dataclasses.replace(recipe.runtime, detections=False)).save(folder)
    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
    client = triton.InferenceServerClient(f"127.0.0.1:{running.port}")
    try:
        Client(running.port).wait_ready()
        array = _images(1, seed=2)
        assert [o["name"] for o in _ask(client, "segmentation", array).get_response()["outputs"]] == RAW["segmentation"]
        asked = _ask(client, "segmentation", array, detections=True).get_response()
        assert [o["name"] for o in asked["outputs"]] == list(INSTANCE_NMS_OUTPUTS["segmentation"])
        task = client.get_model_metadata("tiny-segmentation")["parameters"]["task"]
        assert task["output_form"] == "raw" and task["detections"]["default"] is False
    finally:
        client.close()
        running.stop()
