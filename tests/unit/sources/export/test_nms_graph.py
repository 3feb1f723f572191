"""NMS inside the model: the appended graph against the host's own decode, its fixed-size outputs,
and what TensorRT's parser tables say about every operator it adds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgebuild.errors import ConfigError, ModelError
from edgebuild.runtime.base.vision import (
    DetectionParams,
    ImageTransform,
    PreprocessSpec,
    best_first_cut,
    decode_detections,
    decode_outputs,
    in_canonical_order,
    preprocess,
    split_detections,
    stack_batch,
)
from edgebuild.sources.export.nms_graph import (
    MAX_DETECTIONS,
    NMS_OUTPUTS,
    PREFIX,
    NmsSettings,
    append_nms,
    check_nms_settings,
    is_nms_node,
    nms_target_problem,
)
from edgebuild.targets.preflight import BLOCKING, check_target, parser_table
from edgebuild.targets.profiles import SelectedGroup, load_catalog

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "shapes-detector"


def _head(anchors: int | str, classes: int, opset: int = 17) -> onnx.ModelProto:
    """A raw head that returns its inputs: boxes [N, A, 4], scores [N, A, C] (A may be a dim name)."""
    shapes = {"boxes": ["batch", anchors, 4], "scores": ["batch", anchors, classes]}
    graph = helper.make_graph(
        [helper.make_node("Identity", [f"{n}_in"], [n], name=f"head/{n}") for n in shapes], "head",
        [helper.make_tensor_value_info(f"{n}_in", TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _settings(settings: NmsSettings) -> dict:
    return {"boxes_output": settings.boxes_output, "scores_output": settings.scores_output,
            "score_threshold": settings.score_threshold, "nms_iou": settings.nms_iou,
            "max_detections": settings.max_detections}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _assert_same(got: list[dict], want: list[dict]) -> None:
    """The same detections per image, best first; equally scored ones in any order (no backend promises theirs)."""
    assert len(got) == len(want)
    for image, (g, w) in enumerate(zip(got, want)):
        g, w = in_canonical_order(g), in_canonical_order(w)
        assert len(g["scores"]) == len(w["scores"]), image
        np.testing.assert_allclose(g["scores"], w["scores"], atol=1e-5, rtol=0, err_msg=f"image {image}")
        np.testing.assert_allclose(g["boxes"], w["boxes"], atol=1e-5, rtol=0, err_msg=f"image {image}")
        np.testing.assert_array_equal(g["labels"], w["labels"], err_msg=f"image {image}")


def _crowded_head(rng: np.random.Generator, batch: int, anchors: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes piled around a few centres (many overlaps), scores spread over several classes."""
    centres = rng.uniform(30, 290, (batch, 12, 2))[:, rng.integers(0, 12, anchors)]
    centres += rng.normal(0, 6, centres.shape)
    sizes = rng.uniform(12, 70, (batch, anchors, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=-1).astype(np.float32)
    logits = rng.normal(-2.0, 2.0, (batch, anchors, classes))
    return boxes, (1 / (1 + np.exp(-logits))).astype(np.float32)


CASES = [  # anchors (or a dim name: dynamic), classes, score_threshold, max_detections
    pytest.param(600, 5, 0.25, 100, id="static-anchors"),
    pytest.param("anchors", 5, 0.25, 100, id="dynamic-anchors"),
    pytest.param(2400, 6, 0.01, 300, id="more-candidates-than-pre-nms-top-k"),
    pytest.param(60, 3, 0.001, 300, id="fewer-candidates-than-max-detections"),
    pytest.param("anchors", 2, 0.0, MAX_DETECTIONS, id="dynamic-few-anchors-threshold-0"),
]


@pytest.mark.parametrize("anchors, classes, threshold, limit", CASES)
def test_the_graph_returns_the_host_decodes_detections_in_the_same_order(anchors, classes, threshold, limit) -> None:
    settings = NmsSettings(score_threshold=threshold, nms_iou=0.5, max_detections=limit)
    model = append_nms(_head(anchors, classes), settings)
    rng = np.random.default_rng(7)
    count = anchors if isinstance(anchors, int) else 90
    boxes, scores = _crowded_head(rng, 3, count, classes)
    outputs = _run(model, {"boxes_in": boxes, "scores_in": scores})
    want = decode_outputs({"boxes": boxes, "scores": scores}, _settings(settings))
    _assert_same(split_detections(outputs), want)
    assert any(len(w["scores"]) > 10 for w in want) and len({int(c) for w in want for c in w["labels"]}) > 1
    assert outputs["num_detections"].dtype == np.int32 and outputs["num_detections"].shape == (3, 1)
    for name, shape in zip(NMS_OUTPUTS[1:], ((3, limit, 4), (3, limit), (3, limit))):
        assert outputs[name].dtype == np.float32 and outputs[name].shape == shape, name


def test_ties_and_values_at_the_thresholds_are_decided_as_the_host_decides() -> None:
    # IoU exactly nms_iou (kept), a score exactly the threshold (dropped), equal scores (lower index first)
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 20], [0, 0, 10, 10], [50, 50, 60, 60], [50, 50, 60, 60],
                       [100, 100, 120, 120], [101, 101, 121, 121], [200, 0, 210, 10]]], np.float32)
    scores = np.array([[[0.9, 0.0], [0.8, 0.0], [0.5, 0.5], [0.7, 0.7], [0.7, 0.7], [0.6, 0.1], [0.6, 0.1],
                        [0.25, 0.3]]], np.float32)
    settings = NmsSettings(score_threshold=0.25, nms_iou=0.5, max_detections=20)
    got = split_detections(_run(append_nms(_head(8, 2), settings), {"boxes_in": boxes, "scores_in": scores}))
    want = decode_outputs({"boxes": boxes, "scores": scores}, _settings(settings))
    _assert_same(got, want)
    kept = [(round(float(s), 4), int(c), got[0]["boxes"][i].tolist())
            for i, (s, c) in enumerate(zip(got[0]["scores"], got[0]["labels"]))]
    assert kept == [(0.9, 0, [0, 0, 10, 10]), (0.8, 0, [0, 0, 10, 20]), (0.7, 0, [50, 50, 60, 60]),
                    (0.7, 1, [50, 50, 60, 60]), (0.6, 0, [100, 100, 120, 120]), (0.5, 1, [0, 0, 10, 10]),
                    (0.3, 1, [200, 0, 210, 10])]


def test_the_host_decode_cuts_ties_at_the_top_k_by_the_lower_anchor_and_class() -> None:
    # ONNX TopK's rule, which the appended graph relies on: not whatever np.argpartition picks
    scores = np.full((50, 4), 0.5, np.float32)
    scores[[3, 17, 40], 1] = 0.9
    params = DetectionParams(score_threshold=0.1, nms_iou=0.99, max_detections=100, pre_nms_top_k=10)
    boxes = np.array([[a * 20, 0, a * 20 + 10, 10] for a in range(50)], np.float32)  # no two overlap
    found = decode_detections(boxes, scores, params)
    flat = [int(x // 20) * 4 + int(c) for x, c in zip(found["boxes"][:, 0], found["labels"])]
    assert flat == [13, 69, 161] + [0, 1, 2, 3, 4, 5, 6]  # the 0.9s, then the lowest flat indices of the 0.5s
    assert best_first_cut(np.array([0.2, 0.7, 0.7, 0.7, 0.1], np.float32), 2).tolist() == [1, 2]


def test_equal_scores_compare_in_any_order() -> None:
    a = {"boxes": np.array([[0, 0, 5, 5], [9, 9, 20, 20], [1, 1, 4, 4]], np.float32),
         "scores": np.array([0.9, 0.5, 0.5], np.float32), "labels": np.array([0, 2, 1])}
    swapped = {k: v[[0, 2, 1]] for k, v in a.items()}
    _assert_same([a], [swapped])
    moved = {**swapped, "scores": np.array([0.9, 0.5, 0.4], np.float32)}
    with pytest.raises(AssertionError):
        _assert_same([a], [moved])


def test_fewer_detections_than_max_detections_are_zero_rows_after_the_count() -> None:
    boxes = np.array([[[0, 0, 10, 10], [40, 40, 60, 60], [41, 41, 61, 61], [90, 90, 99, 99]]] * 2, np.float32)
    scores = np.array([[[0.9], [0.8], [0.7], [0.01]], [[0.01], [0.02], [0.03], [0.04]]], np.float32)
    out = _run(append_nms(_head(4, 1), NmsSettings(score_threshold=0.1, nms_iou=0.5, max_detections=5)),
               {"boxes_in": boxes, "scores_in": scores})
    assert out["num_detections"].tolist() == [[2], [0]]
    np.testing.assert_array_equal(out["detection_boxes"][0, :2], [[0, 0, 10, 10], [40, 40, 60, 60]])
    np.testing.assert_allclose(out["detection_scores"][0, :2], [0.9, 0.8])
    for name in NMS_OUTPUTS[1:]:
        assert not out[name][0, 2:].any() and not out[name][1].any(), name


def test_the_graph_is_valid_with_full_shape_inference_and_only_the_detections_are_outputs() -> None:
    head = _head("anchors", 4)
    model = append_nms(head, NmsSettings(max_detections=50))
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == list(NMS_OUTPUTS)
    declared = {o.name: (o.type.tensor_type.elem_type,
                         [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim])
                for o in model.graph.output}
    assert declared == {"num_detections": (TensorProto.INT32, ["batch", 1]),
                        "detection_boxes": (TensorProto.FLOAT, ["batch", 50, 4]),
                        "detection_scores": (TensorProto.FLOAT, ["batch", 50]),
                        "detection_classes": (TensorProto.FLOAT, ["batch", 50])}
    old = {n.name for n in head.graph.node}
    added = [n for n in model.graph.node if n.name not in old]
    assert added and all(n.name.startswith(PREFIX) and is_nms_node(n.name) for n in added)
    assert all(i.name.startswith(PREFIX) for i in model.graph.initializer)
    assert all(t.startswith(PREFIX) or t in NMS_OUTPUTS for n in added for t in n.output)
    assert [i.name for i in model.graph.input] == ["boxes_in", "scores_in"]
    assert len(head.graph.node) == 2 and [o.name for o in head.graph.output] == ["boxes", "scores"]  # not changed


def test_a_side_output_of_the_raw_model_is_dropped_with_what_only_it_needed() -> None:
    model = _head(10, 2)
    model.graph.node.append(helper.make_node("Add", ["scores_in", "bias"], ["side"], name="head/side"))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(2, np.float32), "bias"))
    model.graph.input.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2]))  # as IR < 4 wrote it
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["batch", 10, 2]))
    out = append_nms(model, NmsSettings())
    assert "head/side" not in {n.name for n in out.graph.node}
    assert "bias" not in {i.name for i in [*out.graph.initializer, *out.graph.input]}
    assert [o.name for o in out.graph.output] == list(NMS_OUTPUTS)
    _run(out, {"boxes_in": np.zeros((1, 10, 4), np.float32), "scores_in": np.zeros((1, 10, 2), np.float32)})


# -- TensorRT's parser tables ------------------------------------------------------------------

#: each restriction text the tables state for an operator the graph uses, and the check that the
#: graph keeps it. A restriction not listed here fails the test: read it and add its check.
def _initializer_input(index: int):
    def check(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
        return len(node.input) > index and node.input[index] in constants
    return check


RESTRICTION_CHECKS = {
    "`K` input must be an initializer": _initializer_input(1),
    "`sorted` must be 1. `K` input must be less than 3840.": lambda node, constants: (
        _attr(node, "sorted", 1) == 1 and _initializer_input(1)(node, constants)
        and int(constants[node.input[1]].max()) < 3840),
    "`axes` must be a constant tensor": _initializer_input(1),
    "`axes` must be resolvable to a constant.": _initializer_input(1),
    "`axes` must be an initializer": _initializer_input(1),
    "`reduction` is not supported": lambda node, constants: _attr(node, "reduction", None) is None,
    "`reduction` other than `none` is not supported": lambda node, constants: _attr(node, "reduction", None) is None,
}


def _attr(node: onnx.NodeProto, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _nms_tables() -> list[str]:
    """Every parser table of a TensorRT that runs the NMS graph (8.5 on), by major.minor."""
    return sorted({".".join(t.release.tensorrt.split(".")[:2]) for t in load_catalog().all_targets()
                   if nms_target_problem(t.release.tensorrt) is None}, key=lambda v: tuple(map(int, v.split("."))))


def assert_parsers_take_the_added_nodes(model: onnx.ModelProto) -> None:
    """Every node ``append_nms`` added is supported by the parser table of every TensorRT that runs NMS, with
    each of its restrictions checked on the node (RESTRICTION_CHECKS)."""
    from onnx import numpy_helper

    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    added = [n for n in model.graph.node if is_nms_node(n.name)]
    for version in _nms_tables():
        operators = parser_table(version)["operators"]
        for node in added:
            entry = operators.get(node.op_type)
            assert entry and entry["supported"], (version, node.op_type)
            rule = entry["restrictions"]
            if rule:
                assert rule in RESTRICTION_CHECKS, f"TensorRT {version} {node.op_type}: unchecked rule {rule!r}"
                assert RESTRICTION_CHECKS[rule](node, constants), (version, node.name, rule)


def test_every_added_operator_is_in_the_parser_tables_of_tensorrt_8_5_8_6_and_10_with_their_rules_kept() -> None:
    assert {"8.5", "8.6", "10.3"} <= set(_nms_tables())
    for model in (append_nms(_head(8400, 80), NmsSettings(max_detections=300)),
                  append_nms(_head("anchors", 3), NmsSettings(max_detections=MAX_DETECTIONS))):
        assert_parsers_take_the_added_nodes(model)


def test_preflight_finds_nothing_blocking_in_the_nms_part_on_any_target_that_runs_it() -> None:
    model = onnx.shape_inference.infer_shapes(append_nms(_head(8400, 80), NmsSettings(max_detections=300)))
    checked = set()
    for target in load_catalog().all_targets():
        version = ".".join(target.release.tensorrt.split(".")[:2])
        if version in checked or nms_target_problem(target.release.tensorrt):
            continue
        checked.add(version)
        findings = check_target(model, SelectedGroup(target.id, target)).findings
        assert [f for f in findings if f.severity == BLOCKING] == [], (target.id, findings)
    assert {"8.5", "8.6", "10.3"} <= checked


def test_targets_that_cannot_run_the_nms_part_are_named_with_what_to_do() -> None:
    assert nms_target_problem("8.5.2.2") is None and nms_target_problem("10.3.0.30") is None
    problem, fix = nms_target_problem("8.2.1.8")
    assert "TensorRT 8.2.1.8" in problem and "in_model" in fix and "JetPack 5.1" in fix
    problem, fix = nms_target_problem("8.5.2.2", use_dla=True)
    assert "DLA" in problem and 'accelerator = "gpu"' in fix


# -- bad input ------------------------------------------------------------------------------------

def test_check_nms_settings_takes_the_project_values_and_names_a_bad_key() -> None:
    good = check_nms_settings("detection", {"boxes_output": "b", "scores_output": "s", "score_threshold": 0.25,
                                            "nms_iou": 0.7, "max_detections": 300, "other": 1})
    assert good == NmsSettings("b", "s", 0.25, 0.7, 300)
    cases = [("classification", {}, "task.postprocess.in_model.*detection"),
             ("detection", {"max_detections": 5000}, r"task.postprocess.max_detections = 5000 .*1000"),
             ("detection", {"max_detections": 0}, "task.postprocess.max_detections"),
             ("detection", {"score_threshold": 1.0}, "task.postprocess.score_threshold = 1.0"),
             ("detection", {"nms_iou": 0.0}, "task.postprocess.nms_iou = 0.0"),
             ("detection", {"nms_iou": "high"}, "task.postprocess.nms_iou must be a number"),
             ("detection", {"scores_output": "boxes"}, "task.postprocess.boxes_output and")]
    for kind, settings, words in cases:
        with pytest.raises(ConfigError, match=words):
            check_nms_settings(kind, settings)


def test_a_model_that_does_not_fit_the_decode_is_refused_naming_the_key() -> None:
    with pytest.raises(ModelError, match="task.postprocess.boxes_output = 'pred' is not an output"):
        append_nms(_head(10, 2), NmsSettings(boxes_output="pred"))
    with pytest.raises(ModelError, match="opset >= 13"):
        append_nms(_head(10, 2, opset=12), NmsSettings())
    with pytest.raises(ModelError, match="has 2 classes; task.classes lists 3"):
        append_nms(_head(10, 2), NmsSettings(), num_classes=3)
    swapped = _head(10, 2)
    swapped.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 5
    with pytest.raises(ModelError, match=r"not \[N, A, 4\] and \[N, A, C\]"):
        append_nms(swapped, NmsSettings())
    with pytest.raises(ModelError, match="num_detections"):
        append_nms(append_nms(_head(10, 2), NmsSettings()), NmsSettings(boxes_output="detection_boxes",
                                                                         scores_output="detection_scores"))


# -- the shapes example ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shapes_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shapes example's trained detector, exported with dynamic batch, height and width."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(EXAMPLE))
    try:
        from shapes_detector import build_model
    finally:
        sys.path.remove(str(EXAMPLE))
    module = build_model()
    module.load_state_dict(torch.load(EXAMPLE / "weights" / "shapes_detector.pt", weights_only=True))
    module.eval()
    path = tmp_path_factory.mktemp("shapes") / "model.onnx"
    axes = {"images": {0: "batch", 2: "height", 3: "width"}, "boxes": {0: "batch", 1: "anchors"},
            "scores": {0: "batch", 1: "anchors"}}
    torch.onnx.export(module, (torch.zeros(1, 3, 160, 160),), str(path), input_names=["images"],
                      output_names=["boxes", "scores"], dynamic_axes=axes, opset_version=17, dynamo=False)
    return path


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:torch.tensor results are registered")
def test_the_shapes_detector_with_nms_inside_gives_the_host_detections_and_map(shapes_model: Path) -> None:
    from edgebuild.accuracy.metrics import coco_detection_metrics

    sys.path.insert(0, str(EXAMPLE))
    try:
        from shapes_detector import INPUT_SIZE, MEAN, RESIZE, STD
        from shapes_detector.data import CLASS_NAMES, VAL_SEED, render_sample
    finally:
        sys.path.remove(str(EXAMPLE))
    project = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001, "nms_iou": 0.6,
               "max_detections": 100}  # examples/shapes-detector/edgebuild.toml
    settings = check_nms_settings("detection", project)
    with_nms = append_nms(shapes_model, settings, num_classes=len(CLASS_NAMES))
    spec = PreprocessSpec(input_size=INPUT_SIZE, resize=RESIZE, mean=MEAN, std=STD)
    raw_session = ort.InferenceSession(str(shapes_model), providers=["CPUExecutionProvider"])
    nms_session = ort.InferenceSession(with_nms.SerializeToString(), providers=["CPUExecutionProvider"])
    truth: dict = {"images": [], "annotations": [], "categories": [{"id": i + 1, "name": n}
                                                                    for i, n in enumerate(CLASS_NAMES)]}
    host, graph = [], []
    for start in range(0, 48, 8):  # the first 48 of the example's validation images
        samples = [render_sample(np.random.default_rng([VAL_SEED, i])) for i in range(start, start + 8)]
        tensors, transforms = zip(*(preprocess(image, spec) for image, _, _ in samples))
        batch = stack_batch(tensors)
        raw = dict(zip(["boxes", "scores"], raw_session.run(None, {"images": batch})))
        host_detections = decode_outputs(raw, project)
        graph_detections = split_detections(dict(zip(NMS_OUTPUTS, nms_session.run(None, {"images": batch}))))
        _assert_same(graph_detections, host_detections)
        for offset, ((image, boxes, labels), transform) in enumerate(zip(samples, transforms)):
            image_id = start + offset + 1
            truth["images"].append({"id": image_id, "width": image.shape[1], "height": image.shape[0]})
            truth["annotations"] += [{"id": len(truth["annotations"]) + j + 1, "image_id": image_id,
                                      "category_id": int(c) + 1, "bbox": [float(b[0]), float(b[1]),
                                                                          float(b[2] - b[0]), float(b[3] - b[1])],
                                      "area": float((b[2] - b[0]) * (b[3] - b[1])), "iscrowd": 0}
                                     for j, (b, c) in enumerate(zip(boxes, labels))]
            host.append((image_id, transform, host_detections[offset]))
            graph.append((image_id, transform, graph_detections[offset]))
    host_map, graph_map = (coco_detection_metrics(truth, _coco_results(found)) for found in (host, graph))
    assert host_map["mAP50-95"] > 0.5  # the trained example, not noise
    assert graph_map == pytest.approx(host_map, abs=1e-6)


def _coco_results(found: list[tuple[int, ImageTransform, dict]]) -> list[dict]:
    results = []
    for image_id, transform, det in found:
        for box, score, label in zip(transform.boxes_to_original(det["boxes"]), det["scores"], det["labels"]):
            results.append({"image_id": image_id, "category_id": int(label) + 1, "score": float(score),
                            "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])]})
    return results
