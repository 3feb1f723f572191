"""RT-DETR without Ultralytics: the DETR output convention (docs/transformer-detectors.md), its two Ultralytics
layouts read by the module adapter and by nodes appended to an export alike, the facts that say a model is an
RT-DETR, and the project checked against them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.project.ultralytics_facts import (
    DETR_NOTE,
    UltralyticsFacts,
    facts_from_props,
    fill_raw_defaults,
    ultralytics_preprocess,
)
from edgebuild.runtime.base.vision import NMS_OUTPUTS
from edgebuild.sources.export.nms_graph import answers_detections
from edgebuild.sources.ultralytics.adapter import append_top_k_adapter
from edgebuild.sources.ultralytics.detr import QUERIES, TOP_K, append_detr_rows, detr_head_output, export_layout

torch = pytest.importorskip("torch")

K, QUERY_COUNT, THRESHOLD = 12, 20, 0.2


def _queries(batch: int, classes: int) -> np.ndarray:
    """[N, Q, 4 + C]: cx, cy, w, h normalised and sigmoid-ed scores, as a decoder before 8.4 gives them."""
    rng = np.random.default_rng(1)
    rows = np.zeros((batch, QUERY_COUNT, 4 + classes), np.float32)
    rows[..., :2] = rng.uniform(0.2, 0.8, (batch, QUERY_COUNT, 2))
    rows[..., 2:4] = rng.uniform(0.05, 0.3, (batch, QUERY_COUNT, 2))
    rows[..., 4:] = rng.uniform(0, 1, (batch, QUERY_COUNT, classes))
    return rows


def _numpy_top_k(rows: np.ndarray, k: int, height: int, width: int) -> np.ndarray:
    """The reference: the best k (query, class) pairs, boxes to x1, y1, x2, y2 in pixels."""
    classes = rows.shape[2] - 4
    out = []
    for image in rows:
        flat = image[:, 4:].reshape(-1)
        best = np.argsort(-flat, kind="stable")[:k]
        query, label = best // classes, best % classes
        cx, cy, w, h = image[query, :4].T
        boxes = np.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height], 1)
        out.append(np.concatenate([boxes, flat[best, None], label[:, None].astype(np.float32)], 1))
    return np.stack(out)


def test_the_top_k_of_queries_is_over_every_query_and_class_as_the_rt_detr_reference_takes_it() -> None:
    from edgebuild.sources.ultralytics.detr import QUERIES, rtdetr_detections

    rows = _queries(2, 3)
    images = torch.zeros(2, 3, 64, 96)
    got = rtdetr_detections(torch.from_numpy(rows), images, K, QUERIES).numpy()
    np.testing.assert_allclose(got, _numpy_top_k(rows, K, 64, 96), rtol=1e-6, atol=1e-5)
    assert (np.diff(got[..., 4], axis=1) <= 0).all()  # best first
    # a query may give two classes: the RT-DETR reference's rule, not each query's best class
    many = rows.copy()
    many[..., 4:] *= 0.9
    many[0, 0, 4:] = [0.99, 0.98, 0.97]
    assert (rtdetr_detections(torch.from_numpy(many), images, K, QUERIES)[0, :3, 5].numpy() == [0, 1, 2]).all()


def _export(layout: str, classes: int, dims: list, top_ks: int = 2,
            head: str | None = "RTDETRDecoder") -> onnx.ModelProto:
    """A stand-in Ultralytics RT-DETR export: images [N, 3, H, W] and its decoder's rows as inputs, output0 the rows;
    ``top_ks`` TopK nodes off to the side (the encoder's query choice, the decoder's own top-k in 8.4)."""
    width = 6 if layout == TOP_K else 4 + classes
    nodes = [helper.make_node("Identity", ["rows"], ["output0"])]
    inits = [helper.make_tensor("k", TensorProto.INT64, [1], [1])]
    for i in range(top_ks):
        nodes.append(helper.make_node("TopK", ["rows", "k"], [f"v{i}", f"i{i}"], axis=1))
    graph = helper.make_graph(nodes, "rt-detr", [
        helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"]),
        helper.make_tensor_value_info("rows", TensorProto.FLOAT, dims[:2] + [width])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    names = {i: chr(97 + i) for i in range(classes)}
    props = {"author": "Ultralytics", "task": "detect", "names": str(names), "imgsz": "[64, 64]", "stride": "32",
             "version": "8.4.190", "description": "Ultralytics rtdetr-l model trained on data.yaml"}
    if head:
        props["head"] = head
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    return model


@pytest.mark.parametrize(("layout", "classes", "dims"), [
    (TOP_K, 3, ["batch", K, 6]), (TOP_K, 2, ["batch", "k", "c"]), (QUERIES, 3, ["batch", QUERY_COUNT, 7]),
    (QUERIES, 2, ["batch", "q", "c"]), (QUERIES, 3, [2, QUERY_COUNT, 7])])
def test_the_export_adapter_answers_what_the_module_adapter_answers(layout: str, classes: int, dims: list) -> None:
    import onnxruntime as ort

    from edgebuild.sources.ultralytics.adapter import top_k_to_detections
    from edgebuild.sources.ultralytics.detr import rtdetr_detections

    model = _export(layout, classes, dims, top_ks=2 if layout == TOP_K else 1)
    assert detr_head_output(model) == "output0" and export_layout(model, "output0", classes) == layout
    adapted = append_top_k_adapter(*append_detr_rows(model, "output0", layout, classes, K), THRESHOLD)
    onnx.checker.check_model(adapted, full_check=True)
    assert [o.name for o in adapted.graph.output] == list(NMS_OUTPUTS) and answers_detections(adapted)
    assert not any(n.op_type == "NonMaxSuppression" for n in adapted.graph.node)
    rows = _queries(2, classes)
    if layout == TOP_K:  # the decoder's own top-k: boxes normalised, a score best first, a class index
        rows = _numpy_top_k(rows, K, 1, 1)
    session = ort.InferenceSession(adapted.SerializeToString(), providers=["CPUExecutionProvider"])
    for height, width in ((64, 64), (96, 160)):
        images = np.zeros((2, 3, height, width), np.float32)
        got = session.run(list(NMS_OUTPUTS), {"images": images, "rows": rows})
        found = rtdetr_detections(torch.from_numpy(rows), torch.from_numpy(images), K, layout)
        for name, a, b in zip(NMS_OUTPUTS, got, top_k_to_detections(found, THRESHOLD)):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-4, err_msg=name)
        assert got[0].dtype == np.int32 and got[1].shape == (2, K, 4)


def test_an_rt_detr_export_is_told_by_its_head_or_its_description() -> None:
    props = {p.key: p.value for p in _export(TOP_K, 2, ["batch", K, 6]).metadata_props}
    facts = facts_from_props(props)
    assert facts is not None and facts.detr and facts.nms_free and facts.max_det == 300
    assert facts.model_class == "RT-DETR export"
    older = {k: v for k, v in props.items() if k != "head"}  # before 8.4 the metadata named no head
    assert facts_from_props(older).detr  # type: ignore[union-attr]
    assert not facts_from_props({**props, "head": "Detect"}).detr  # type: ignore[union-attr]
    # the two-class ambiguity of a dynamic export is settled by the graph: one TopK (the encoder's) or two
    assert export_layout(_export(TOP_K, 2, ["b", "k", "c"], top_ks=1), "output0", 2) == QUERIES
    assert export_layout(_export(TOP_K, 5, ["b", K, 8]), "output0", 5) is None  # neither 6 nor 4 + 5 wide


def test_rt_detr_is_preprocessed_as_ultralytics_validates_it_stretched_to_imgsz() -> None:
    facts = UltralyticsFacts("detect", ["a", "b"], [64, 64], 32, detr=True, nms_free=True, max_det=300)
    assert ultralytics_preprocess(facts)["resize"] == "resize" and "pad_value" not in ultralytics_preprocess(facts)
    raw = fill_raw_defaults({"model": {"source": "best.pt"}, "task": {}}, facts)
    assert raw["task"]["preprocess"]["resize"] == "resize"
    post = raw["task"]["postprocess"]
    assert post["in_model"] and post["max_detections"] == 300 and post["boxes_output"] == NMS_OUTPUTS[1]
    assert "NMS-free" in DETR_NOTE and "no NMS added" in DETR_NOTE


def test_a_checkpoint_says_rt_detr_by_its_model_class_and_its_queries(tmp_path, monkeypatch) -> None:
    """A stand-in RTDETRDetectionModel whose decoder has 100 queries, read without running its pickle."""
    import sys
    import types

    from edgebuild.project.ultralytics_facts import facts_from_checkpoint

    class Plain:
        def __setstate__(self, state: dict) -> None:
            self.__dict__.update(state)

    classes = {}
    for module, name in (("ultralytics.nn.tasks", "RTDETRDetectionModel"),
                         ("ultralytics.nn.modules.head", "RTDETRDecoder")):
        for part in ("ultralytics", "ultralytics.nn", "ultralytics.nn.modules", module):
            monkeypatch.setitem(sys.modules, part, sys.modules.get(part) or types.ModuleType(part))
        made = type(name, (Plain,), {"__module__": module, "__qualname__": name})
        # through monkeypatch: where the real Ultralytics is imported, its class comes back after the test
        # (a zoo test in the same process then pickles the real RTDETRDetectionModel)
        monkeypatch.setattr(sys.modules[module], name, made, raising=False)
        classes[name] = made
    head = classes["RTDETRDecoder"]()
    head.__dict__.update({"_modules": {}, "num_queries": 100, "nc": 2})
    layers = torch.nn.Sequential()
    model = classes["RTDETRDetectionModel"]()
    model.__dict__.update({"names": {0: "red", 1: "blue"}, "stride": torch.tensor([8.0, 16.0, 32.0]),
                           "args": {"imgsz": 128, "task": "detect"}, "_modules": {"model": layers}})
    layers._modules["0"] = head  # type: ignore[assignment]
    torch.save({"model": model, "version": "8.4.190"}, tmp_path / "best.pt")
    facts = facts_from_checkpoint(tmp_path / "best.pt")
    assert facts is not None and facts.detr and facts.nms_free and facts.max_det == 100, facts
    assert facts.model_class == "RTDETRDetectionModel" and facts.imgsz == [128, 128] and facts.stride == 32


def test_an_exports_top_k_is_read_from_its_graph_constant_or_clamped() -> None:
    """An RT-DETR export's metadata does not say its K: a static export has it as TopK's constant, a dynamic one
    computes it from the image size clamped to the decoder's queries (Ultralytics' RTDETRDecoder.dynamic)."""
    from edgebuild.project.ultralytics_facts import detr_export_top_k

    static = _export(TOP_K, 3, ["batch", 100, 6], top_ks=2)
    static.graph.initializer[0].CopyFrom(helper.make_tensor("k", TensorProto.INT64, [1], [100]))
    assert detr_export_top_k(static) == 100
    assert facts_from_props({p.key: p.value for p in static.metadata_props}, static).max_det == 100  # type: ignore
    nodes = [helper.make_node("Shape", ["rows"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
             helper.make_node("Clip", ["n", "", "queries"], ["clamped"]),
             helper.make_node("Unsqueeze", ["clamped", "zero"], ["k_dyn"]),
             helper.make_node("TopK", ["rows", "k_dyn"], ["v", "i"], axis=1)]
    inits = [helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
             helper.make_tensor("queries", TensorProto.INT64, [], [300])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["b", "q", 6])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)], inits)
    assert detr_export_top_k(helper.make_model(graph)) == 300
