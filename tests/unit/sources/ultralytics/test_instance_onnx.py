"""Ultralytics pose, segment and OBB exports on the ONNX route, without Ultralytics: small graphs shaped as their
exports (the head [N, 4+C+..., A], a segment export's prototypes, the metadata) get edgebuild's adapter appended
as ONNX nodes, whose outputs equal the checkpoint adapter's split (``instance_outputs``), and go through
``edgebuild init`` into a project of their task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebuild._compat import tomllib
from edgebuild.errors import ModelError
from edgebuild.sources.ultralytics.adapter import append_instance_adapter, instance_head_outputs
from edgebuild.workflows.init.project_file import init_from_files
from tests.support.task_datasets import obb_dataset, pose_dataset, segmentation_dataset

#: task -> (class names, kpt_shape, the head's channels beyond 4 + C)
TASKS = {"pose": (["box"], [4, 3], 12), "segment": (["triangle", "octagon"], [], 32), "obb": (["bar", "block"], [], 1)}
DATASETS = {"pose": pose_dataset, "segment": segmentation_dataset, "obb": obb_dataset}


def _export(task: str, batch: object = "batch", size: object = "height") -> onnx.ModelProto:
    """A stand-in export: the image through a 1x1 convolution at stride 8 flattened to the head [N, 4+C+X, A]
    (segment: and one at stride 4 as the prototypes [N, 32, H/4, W/4]), with Ultralytics' metadata."""
    names, kpt_shape, extra = TASKS[task]
    channels = 4 + len(names) + extra
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.uniform(0.1, 2, (channels, 3, 1, 1)).astype(np.float32), "w"),
               numpy_helper.from_array(np.asarray([0, channels, -1], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["images", "w"], ["maps"], kernel_shape=[1, 1], strides=[8, 8]),
             helper.make_node("Reshape", ["maps", "flat"], ["output0"])]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, channels, "anchors"])]
    if task == "segment":
        weights.append(numpy_helper.from_array(rng.normal(size=(32, 3, 1, 1)).astype(np.float32), "p"))
        nodes.append(helper.make_node("Conv", ["images", "p"], ["output1"], kernel_shape=[1, 1], strides=[4, 4]))
        outputs.append(helper.make_tensor_value_info("output1", TensorProto.FLOAT, [batch, 32, "ph", "pw"]))
    graph = helper.make_graph(nodes, task, [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                          [batch, 3, size, size])],
                              outputs, initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    props = {"author": "Ultralytics", "task": task, "names": repr(dict(enumerate(names))), "imgsz": "[64, 64]",
             "stride": "32", "version": "8.4.0", "batch": "1"}
    if kpt_shape:
        props["kpt_shape"] = repr(kpt_shape)
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    return model


def _run(model: onnx.ModelProto, images: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {"images": images})))


#: task -> the task's output names, as a project names them by default
NAMES = {"pose": ["boxes", "scores", "keypoints"], "segment": ["boxes", "scores", "mask_coefficients", "prototypes"],
         "obb": ["boxes", "scores"]}


@pytest.mark.parametrize("task", list(TASKS))
def test_the_appended_nodes_give_what_the_checkpoint_adapter_gives(task: str) -> None:
    torch = pytest.importorskip("torch")
    from edgebuild.sources.ultralytics.adapter import instance_outputs

    names, kpt_shape, _ = TASKS[task]
    export = _export(task)
    found = instance_head_outputs(export, task, len(names), tuple(kpt_shape))
    assert found == ("output0", "output1" if task == "segment" else None)
    adapted = append_instance_adapter(export, task, found[0], NAMES[task], len(names), tuple(kpt_shape), found[1])
    onnx.checker.check_model(adapted, full_check=True)
    assert [o.name for o in adapted.graph.output] == NAMES[task]
    assert all(n.name.startswith(f"edgebuild_ultralytics_{task}_") for n in adapted.graph.node[-3:])
    images = np.random.default_rng(1).uniform(0, 1, (2, 3, 64, 96)).astype(np.float32)
    raw, ours = _run(export, images), _run(adapted, images)
    head = torch.from_numpy(raw["output0"])
    y = (head, torch.from_numpy(raw["output1"])) if task == "segment" else head
    want = instance_outputs(y, task, (len(names), *kpt_shape))
    anchors = (64 // 8) * (96 // 8)
    shapes = {"pose": [(2, anchors, 4), (2, anchors, 1), (2, anchors, 4, 3)],
              "segment": [(2, anchors, 4), (2, anchors, 2), (2, anchors, 32), (2, 32, 16, 24)],
              "obb": [(2, anchors, 5), (2, anchors, 2)]}[task]
    for name, expected, shape in zip(NAMES[task], want, shapes):
        assert ours[name].shape == shape, name
        np.testing.assert_allclose(ours[name], expected.numpy(), rtol=1e-6, atol=1e-5, err_msg=name)
    assert export.graph.output[0].name == "output0"  # the input graph is left as it was


def test_a_segment_export_keeps_its_prototypes_name_where_the_project_uses_it() -> None:
    adapted = append_instance_adapter(_export("segment"), "segment", "output0",
                                      ["b", "s", "c", "output1"], 2, (), "output1")
    assert [o.name for o in adapted.graph.output] == ["b", "s", "c", "output1"]
    assert not [n for n in adapted.graph.node if n.op_type == "Identity"]


def test_a_head_of_another_size_is_not_taken() -> None:
    assert instance_head_outputs(_export("pose"), "pose", 1, (17, 3)) is None  # 4 + 1 + 51 channels, not 17
    assert instance_head_outputs(_export("obb"), "obb", 3) is None
    assert instance_head_outputs(_export("obb"), "segment", 2) is None  # no prototypes
    with pytest.raises(ValueError, match="no output 'nope'"):
        append_instance_adapter(_export("obb"), "obb", "nope", NAMES["obb"], 2)


@pytest.mark.parametrize("task", list(TASKS))
def test_init_takes_an_export_of_each_task(tmp_path: Path, task: str) -> None:
    """``edgebuild init --model export.onnx --data data.yaml``: the project is the task's, with the adapter's
    outputs, and the model check (ONNX Runtime on the adapted copy at min/opt/max) passes."""
    model = tmp_path / f"{task}.onnx"
    onnx.save_model(_export(task), str(model))
    result = init_from_files(tmp_path / "p", model=model, data=DATASETS[task](tmp_path / "data", train=2, val=2))
    written = tomllib.loads((tmp_path / "p" / "edgebuild.toml").read_text())
    kind = {"pose": "pose", "segment": "segmentation", "obb": "obb"}[task]
    assert written["task"]["kind"] == kind and written["task"]["classes"] == TASKS[task][0]
    assert written["model"]["outputs"] == NAMES[task]
    assert written["model"]["source"] == f"../{task}.onnx"
    assert written["task"]["postprocess"]["nms_iou"] == 0.7
    assert written["task"].get("kpt_shape") == (TASKS[task][1] or None)
    assert any(f"raw {task} head" in line for line in result.found), result.found


def test_a_segment_export_with_no_prototypes_is_refused_at_init(tmp_path: Path) -> None:
    export = _export("segment")
    outputs = [o for o in export.graph.output if o.name == "output0"]
    del export.graph.output[:]
    export.graph.output.extend(outputs)
    onnx.save_model(export, str(tmp_path / "seg.onnx"))
    with pytest.raises(ModelError, match=r"segment export with outputs .* not its raw head"):
        init_from_files(tmp_path / "p", model=tmp_path / "seg.onnx",
                        data=segmentation_dataset(tmp_path / "data", train=2, val=2))
