"""NMS-free heads (YOLOv10, YOLO26) without Ultralytics: their one-to-one top-k [N, K, 6] mapped to the
outputs NMS inside the model has, with no NonMaxSuppression; the facts that say a head is NMS-free; NMS
appended to nothing; the top-k tail kept out of INT8."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgebuild.project.ultralytics_facts import (
    NMS_FREE_NOTE,
    UltralyticsFacts,
    facts_from_props,
    fill_raw_defaults,
)
from edgebuild.runtime.base.vision import NMS_OUTPUTS, decode_outputs
from edgebuild.sources.export.nms_graph import answers_detections, append_nms, check_nms_settings
from edgebuild.sources.ultralytics.adapter import append_top_k_adapter, top_k_output

K, THRESHOLD = 8, 0.25


def _top_k(batch: int = 2) -> np.ndarray:
    """[N, K, 6] as an NMS-free head gives it: boxes, a score (best first), a class index."""
    rng = np.random.default_rng(0)
    found = np.zeros((batch, K, 6), np.float32)
    found[..., :2] = rng.uniform(0, 30, (batch, K, 2))
    found[..., 2:4] = found[..., :2] + rng.uniform(1, 30, (batch, K, 2))
    found[..., 4] = -np.sort(-rng.uniform(0, 1, (batch, K)), axis=1)
    found[..., 5] = rng.integers(0, 3, (batch, K))
    found[1, :, 4] = np.linspace(0.5, 0.0, K)  # some rows at or under the threshold
    return found


def _reference(found: np.ndarray) -> dict[str, np.ndarray]:
    valid = (found[..., 4] > THRESHOLD).astype(np.float32)
    return {NMS_OUTPUTS[0]: valid.sum(1, keepdims=True).astype(np.int32),
            NMS_OUTPUTS[1]: found[..., :4] * valid[..., None], NMS_OUTPUTS[2]: found[..., 4] * valid,
            NMS_OUTPUTS[3]: found[..., 5] * valid}


def _export(dims: list) -> onnx.ModelProto:
    """A stand-in Ultralytics export of an NMS-free head (metadata end2end, output0 [N, K, 6])."""
    graph = helper.make_graph([helper.make_node("Identity", ["top_k"], ["output0"])], "one-to-one",
                              [helper.make_tensor_value_info("top_k", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for key, value in {"author": "Ultralytics", "task": "detect", "names": "{0: 'a', 1: 'b', 2: 'c'}",
                       "imgsz": "[64, 64]", "stride": "32", "version": "8.4.0", "end2end": "True",
                       "args": "{'batch': 1, 'max_det': 8}"}.items():
        model.metadata_props.add(key=key, value=value)
    return model


@pytest.mark.parametrize("dims", [[2, K, 6], ["batch", K, 6], ["batch", "k", 6]])
def test_the_top_k_adapter_answers_what_nms_inside_answers(dims: list) -> None:
    import onnxruntime as ort

    model = _export(dims)
    assert top_k_output(model) == "output0"
    adapted = append_top_k_adapter(model, "output0", THRESHOLD)
    onnx.checker.check_model(adapted, full_check=True)
    assert [o.name for o in adapted.graph.output] == list(NMS_OUTPUTS)
    assert answers_detections(adapted)
    assert not any(n.op_type == "NonMaxSuppression" for n in adapted.graph.node)
    found = _top_k()
    session = ort.InferenceSession(adapted.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip(NMS_OUTPUTS, session.run(list(NMS_OUTPUTS), {"top_k": found})))
    for name, want in _reference(found).items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)
    images = decode_outputs(got, {"in_model": True, "boxes_output": NMS_OUTPUTS[1], "scores_output": NMS_OUTPUTS[2],
                                  "score_threshold": THRESHOLD, "nms_iou": 0.7, "max_detections": K})
    assert [len(i["scores"]) for i in images] == [int(c) for c in got[NMS_OUTPUTS[0]].ravel()]
    assert (images[1]["scores"] > THRESHOLD).all()


def test_the_module_adapter_runs_the_one_to_one_branch() -> None:
    torch = pytest.importorskip("torch")
    from edgebuild.sources.ultralytics.adapter import adapter_module, top_k_to_detections

    found = torch.from_numpy(_top_k())
    for name, array in zip(NMS_OUTPUTS, top_k_to_detections(found, THRESHOLD)):
        np.testing.assert_array_equal(array.numpy(), _reference(found.numpy())[name])

    class Detect(torch.nn.Module):
        dynamic, end2end, max_det = False, False, 300

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
            return found[: x.shape[0], : self.max_det], []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.ModuleList([Detect()])

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list]:
            return self.model[-1](x)

    inner = Model()
    wrapped = adapter_module(inner, "detect", list(NMS_OUTPUTS), top_k=K, score_threshold=THRESHOLD)
    head = inner.model[-1]
    assert head.end2end is True and head.max_det == K and head.dynamic is True
    out = wrapped(torch.zeros(2, 3, 64, 64))
    assert list(out) == list(NMS_OUTPUTS) and out[NMS_OUTPUTS[0]].dtype == torch.int32


def test_an_end2end_export_s_metadata_says_nms_free_and_fills_the_project() -> None:
    facts = facts_from_props({p.key: p.value for p in _export([1, K, 6]).metadata_props})
    assert facts is not None and facts.nms_free and facts.max_det == K
    assert NMS_FREE_NOTE in facts.summary()
    post = fill_raw_defaults({"task": {"kind": "detection"}}, facts)["task"]["postprocess"]
    assert post == {"score_threshold": 0.001, "nms_iou": 0.7, "max_detections": K, "in_model": True,
                    "boxes_output": "detection_boxes", "scores_output": "detection_scores"}
    stated = fill_raw_defaults({"task": {"kind": "detection", "postprocess": {"score_threshold": 0.1}}}, facts)
    assert stated["task"]["postprocess"]["score_threshold"] == 0.1  # what the project states is kept
    plain = _export([1, K, 6])
    del plain.metadata_props[6]  # no end2end: a one-to-many export
    assert not facts_from_props({p.key: p.value for p in plain.metadata_props}).nms_free
    assert not UltralyticsFacts("detect").nms_free


def _checkpoint(path, monkeypatch, one_to_one: bool = True, version: str = "8.4.0") -> None:
    """Stand-ins for Ultralytics' classes (a v10Detect head with or without its one2one_cv2), pickled by torch."""
    import sys
    import types

    torch = pytest.importorskip("torch")
    module = types.ModuleType("ultralytics.nn.modules.head")
    for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.modules"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def stand_in(name: str, **state: object) -> object:
        cls = getattr(module, name, None) or type(name, (), {"__module__": module.__name__})
        setattr(module, name, cls)
        made = cls()
        made.__dict__.update(state)
        return made

    head = stand_in("v10Detect", _modules={"cv2": stand_in("Seq"),
                                           "one2one_cv2": stand_in("Conv") if one_to_one else None})
    layers = stand_in("Sequential", _modules={"0": stand_in("Conv"), "23": head})
    model = stand_in("DetectionModel", _modules={"model": layers}, names={0: "cat", 1: "dog"},
                     args={"imgsz": 128}, stride=[8, 16, 32])
    torch.save({"model": model, "version": version, "train_metrics": {"metrics/mAP50-95(B)": 0.61}}, path)


def test_a_checkpoint_s_head_with_a_one_to_one_branch_is_nms_free(tmp_path, monkeypatch) -> None:
    from edgebuild.project.ultralytics_facts import facts_from_checkpoint

    for one_to_one in (True, False):
        _checkpoint(tmp_path / "best.pt", monkeypatch, one_to_one)
        facts = facts_from_checkpoint(tmp_path / "best.pt")
        assert facts is not None and facts.nms_free is one_to_one and facts.max_det == (300 if one_to_one else 0)


PROJECT = """\
[project]
name = "nms-free"

[model]
source = "best.pt"
outputs = {outputs}

[[model.inputs]]
name = "images"
min_shape = [1, 3, {size}, {size}]
opt_shape = [1, 3, 128, 128]
max_shape = [1, 3, 128, 128]

[task]
kind = "detection"
{post}
[data]
calibration_images = "calibration"

[data.validation]
annotations = "val.json"
images = "val"

[[fleet]]
name = "orin"
module = "orin-nano-8gb"
jetpack = "6.2"
"""


def test_a_project_reads_an_nms_free_head_s_detections_or_says_what_to_change(tmp_path, monkeypatch) -> None:
    from edgebuild.errors import ConfigError
    from edgebuild.project.config import load_project
    from edgebuild.project.ultralytics_facts import nms_free_head

    _checkpoint(tmp_path / "best.pt", monkeypatch)
    toml = tmp_path / "edgebuild.toml"
    toml.write_text(PROJECT.format(outputs=list(NMS_OUTPUTS), size=128, post="").replace("'", '"'))
    project = load_project(toml, check_paths=False)
    post = project.task.postprocess
    assert nms_free_head(project) and post.in_model and post.max_detections == 300
    assert (post.boxes_output, post.scores_output) == NMS_OUTPUTS[1:3]
    # the one-to-many form of earlier releases, and a profile too small for the top-k
    toml.write_text(PROJECT.format(outputs='["boxes", "scores"]', size=32, post=(
        '[task.postprocess]\nboxes_output = "boxes"\nscores_output = "scores"\nin_model = false\n')))
    with pytest.raises(ConfigError) as caught:
        load_project(toml, check_paths=False)
    text = str(caught.value)
    for said in ("model.outputs: ['boxes', 'scores'], but the checkpoint says the head is NMS-free",
                 "task.postprocess.in_model: false", "task.postprocess.boxes_output/scores_output",
                 "gives 21 anchors, fewer than the NMS-free head's top 300"):
        assert said in text, text


@pytest.mark.parametrize("version, said", [("8.4.0", True), ("8.3.200", False), ("unknown", False)])
def test_the_recorded_map_of_an_8_4_checkpoint_says_its_one_to_many_head_measured_it(tmp_path, monkeypatch,
                                                                                      version: str, said: bool) -> None:
    from edgebuild.project.config import load_project
    from edgebuild.project.ultralytics_facts import recorded_metric

    _checkpoint(tmp_path / "best.pt", monkeypatch, version=version)
    toml = tmp_path / "edgebuild.toml"
    toml.write_text(PROJECT.format(outputs=list(NMS_OUTPUTS), size=128, post="").replace("'", '"'))
    found = recorded_metric(load_project(toml, check_paths=False))
    assert found is not None and found[:2] == ("mAP50-95", 0.61)
    assert ("measured by training through the one-to-many head with NMS" in found[2]) is said, found


def test_head_one_to_many_ships_the_raw_head_with_nms_or_says_what_to_change(tmp_path, monkeypatch) -> None:
    """``model.head = "one-to-many"``: the checkpoint's raw head, decoded with NMS as any YOLO detector's; the
    one-to-one project's outputs are refused naming what to write; a head that is not NMS-free has no choice."""
    from edgebuild.errors import ConfigError
    from edgebuild.project.config import load_project
    from edgebuild.project.ultralytics_facts import nms_free_head
    from edgebuild.sources.ultralytics.checkpoint import _top_k as checkpoint_top_k

    _checkpoint(tmp_path / "best.pt", monkeypatch)
    toml = tmp_path / "edgebuild.toml"
    one_to_many = PROJECT.replace('source = "best.pt"', 'source = "best.pt"\nhead = "one-to-many"')
    toml.write_text(one_to_many.format(outputs='["boxes", "scores"]', size=128, post=(
        '[task.postprocess]\nboxes_output = "boxes"\nscores_output = "scores"\nin_model = true\n')))
    project = load_project(toml, check_paths=False)
    assert not nms_free_head(project) and checkpoint_top_k(project) == 0  # the adapter runs the one-to-many branch
    toml.write_text(one_to_many.format(outputs='["boxes", "scores"]', size=128, post=""))
    post = load_project(toml, check_paths=False).task.postprocess  # what it leaves out: Ultralytics' val's
    assert (post.in_model, post.nms_iou, post.max_detections) == (False, 0.7, 300)
    toml.write_text(one_to_many.format(outputs=list(NMS_OUTPUTS), size=128, post="").replace("'", '"'))
    with pytest.raises(ConfigError, match='model.head = "one-to-many" answers the raw head\'s boxes and scores'):
        load_project(toml, check_paths=False)
    _checkpoint(tmp_path / "best.pt", monkeypatch, one_to_one=False)
    toml.write_text(one_to_many.format(outputs='["boxes", "scores"]', size=128, post=(
        '[task.postprocess]\nboxes_output = "boxes"\nscores_output = "scores"\n')))
    with pytest.raises(ConfigError, match="has no NMS-free \\(one-to-one\\) detection head to choose from"):
        load_project(toml, check_paths=False)


def _detections_graph(with_nms: bool = False) -> onnx.ModelProto:
    adapted = append_top_k_adapter(_export(["batch", K, 6]), "output0", THRESHOLD)
    if with_nms:
        adapted.graph.node.append(helper.make_node("NonMaxSuppression", ["b", "s"], ["nms_out"]))
    return adapted


def test_nms_inside_appends_nothing_to_an_nms_free_head() -> None:
    from edgebuild.errors import ModelError

    graph = _detections_graph()
    settings = check_nms_settings("detection", {"boxes_output": NMS_OUTPUTS[1], "scores_output": NMS_OUTPUTS[2],
                                                "max_detections": K})
    same = append_nms(graph, settings, 3)
    assert same.SerializeToString() == graph.SerializeToString()
    with pytest.raises(ModelError, match="already has tensors named"):  # NMS appended before: still refused
        append_nms(_detections_graph(with_nms=True), settings, 3)


def test_the_top_k_tail_is_never_quantized() -> None:
    from edgebuild.accuracy.quantize import SELECTION_OPS, _selection_tail

    model = _detections_graph()
    conv = helper.make_node("Conv", ["x", "w"], ["top_k"], name="conv")
    topk = helper.make_node("TopK", ["top_k", "k"], ["values", "index"], name="topk")
    gather = helper.make_node("GatherElements", ["top_k", "index"], ["picked"], name="gather")
    after = helper.make_node("Conv", ["picked", "w"], ["late"], name="late_conv")
    model.graph.node.extend([conv, topk, gather, after])
    tail = _selection_tail(model)
    assert {"topk", "gather", "late_conv"} <= tail and "conv" not in tail
    assert {"TopK", "GatherElements", "NonMaxSuppression"} <= SELECTION_OPS


def test_head_one_to_many_is_refused_for_an_export_that_has_only_its_one_to_one_head(tmp_path) -> None:
    from edgebuild.errors import ConfigError
    from edgebuild.project.config import load_project

    onnx.save(_export([1, K, 6]), str(tmp_path / "model.onnx"))
    toml = tmp_path / "edgebuild.toml"
    toml.write_text(PROJECT.replace('source = "best.pt"', 'source = "model.onnx"\nhead = "one-to-many"').format(
        outputs='["boxes", "scores"]', size=128, post=""))
    with pytest.raises(ConfigError, match=r"the ONNX export has only its NMS-free \(one-to-one\) head \(exported "
                                          r"with nms=False\): leave head out, or export again without nms=False"):
        load_project(toml, check_paths=False)
