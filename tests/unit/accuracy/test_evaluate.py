"""How detections are decoded for evaluation: the settings a project gives, on the host and on a device."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper, save

from edgebuild.accuracy.evaluate import detection_settings
from edgebuild.project.config import load_project
from tests.support.project import write_tiny_project


def _ultralytics_export(path: Path) -> None:
    """An ONNX file that says what an Ultralytics export says of itself (its metadata_props)."""
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["output0"])], "yolo",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 6, 84])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 84])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for key, value in {"author": "Ultralytics", "task": "detect", "names": "{0: 'a', 1: 'b'}", "imgsz": "[64, 64]",
                       "stride": "32"}.items():
        model.metadata_props.add(key=key, value=value)
    save(model, str(path))


def test_an_ultralytics_detector_decodes_with_ultralytics_pre_nms_top_k(tmp_path: Path) -> None:
    project = load_project(write_tiny_project(tmp_path / "tiny"))
    settings = detection_settings(project)
    assert settings == {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001,
                        "nms_iou": 0.6, "max_detections": 100, "pre_nms_top_k": 1000, "in_model": False}
    _ultralytics_export(project.root / "yolo.onnx")
    as_source = project.model_copy(update={"model": project.model.model_copy(update={"source": "yolo.onnx",
                                                                                     "entry_point": None})})
    assert detection_settings(as_source) == {**settings, "pre_nms_top_k": 30000}  # Ultralytics' max_nms
    by_name = project.model_copy(update={"model": project.model.model_copy(update={"source": "torchvision:x",
                                                                                   "entry_point": None})})
    assert detection_settings(by_name)["pre_nms_top_k"] == 1000
