"""A wrong FP32 baseline (issue 34, item 1): refused by ``validate``'s gate (exit 11) before any candidate.

The kit's models are untrained, so their FP32 is at chance whatever the preprocessing: the gate must
say so with the numbers and the likely causes (the keys to look at), and a metric the model file
records for itself (ONNX ``metadata_props``) must be named beside the FP32 measured here. Only the
gate can see these (they need the export and a measurement), so every case here is a validate case.
"""

from __future__ import annotations

from pathlib import Path

from tests.bad_inputs.harness import Case, Inputs
from tests.bad_inputs.kit import Kit

SLOW = ("slow",)


def _with_props(model: Path, props: dict[str, str]) -> Path:
    import onnx

    proto = onnx.load(str(model))
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(model))
    return model


def _classifier(kit: Kit, folder: Path) -> Inputs:
    return Inputs(kit.copy(kit.classifier, folder), kit.copy(kit.folders, folder))


def _classifier_flags(kit: Kit, folder: Path) -> Inputs:
    return Inputs(kit.copy(kit.classifier, folder), kit.copy(kit.folders, folder),
                  init_args=("--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5", "--channel-order", "BGR"))


def _classifier_recorded(kit: Kit, folder: Path) -> Inputs:
    model = _with_props(kit.copy(kit.classifier, folder), {"val_metric.top-1": "0.91"})
    return Inputs(model, kit.copy(kit.folders, folder))


def _detector(kit: Kit, folder: Path) -> Inputs:
    return Inputs(kit.copy(kit.detector, folder), kit.copy(kit.yolo, folder))


def _detector_recorded(kit: Kit, folder: Path) -> Inputs:
    model = _with_props(kit.copy(kit.detector, folder), {"metrics/mAP50-95(B)": "0.553"})
    return Inputs(model, kit.copy(kit.yolo, folder))


def _always_first_class(path: Path, classes: int = 3) -> Path:
    """An ONNX classifier that answers class 0 whatever the image (logits 5, 0, 0...): a majority predictor."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    zeros = numpy_helper.from_array(np.zeros((1, classes), dtype=np.float32), "zeros")
    bias = numpy_helper.from_array(np.array([[5.0] + [0.0] * (classes - 1)], dtype=np.float32), "bias")
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["images"], ["mean"], axes=[2, 3], keepdims=0),  # [N, 3]
         helper.make_node("ReduceMean", ["mean"], ["one"], axes=[1], keepdims=1),  # [N, 1]
         helper.make_node("Mul", ["one", "zeros"], ["nothing"]),  # [N, classes], all 0
         helper.make_node("Add", ["nothing", "bias"], ["logits"])],
        "majority", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], initializer=[zeros, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _majority_predictor(kit: Kit, folder: Path) -> Inputs:
    """val: 9 of 11 images are 'cat' (the first class), and the model always answers 'cat': top-1 0.818."""
    from tests.bad_inputs.kit import image

    data = kit.copy(kit.folders, folder)
    for i in range(3, 9):
        image(data / "val" / "cat" / f"cat{i}.png", 900 + i, (32, 32))
    for name in ("dog", "fox"):
        for extra in sorted((data / "val" / name).iterdir())[1:]:
            extra.unlink()
    return Inputs(_always_first_class(folder / "model.onnx"), data)


def _classifier_recorded_percent(kit: Kit, folder: Path) -> Inputs:
    model = _with_props(kit.copy(kit.classifier, folder), {"val_metric.top-1": "76.1"})
    return Inputs(model, kit.copy(kit.folders, folder))


def _mean_of_one_for_rgb(kit: Kit, folder: Path) -> Inputs:
    return Inputs(kit.copy(kit.classifier, folder), kit.copy(kit.folders, folder), init_args=("--mean", "0.5"))


CASES = [
    Case("baseline-init-mean-of-wrong-length", _mean_of_one_for_rgb, "init", 3,
         ("--mean", "[0.5]", "3 channel(s)"), why="--mean 0.5 for an RGB model: one value where it needs three"),
    Case("baseline-classifier-at-chance", _classifier, "validate", 11,
         ("at or near chance", "top-1", "3 classes", "task.preprocess.mean", "task.preprocess.channel_order",
          "class order: task.classes", 'accuracy.baseline = "accept"'),
         why="an ONNX classifier that scores chance-level top-1 under every convention init measured", marks=SLOW),
    Case("baseline-classifier-wrong-flags", _classifier_flags, "validate", 11,
         ("at or near chance", "task.preprocess.mean = [0.5, 0.5, 0.5]", "task.preprocess.channel_order = 'bgr'",
          "edgebuild.toml"),
         why="explicit --mean/--std/--channel-order that give a chance-level FP32: kept, then refused", marks=SLOW),
    Case("baseline-classifier-recorded-metric", _classifier_recorded, "validate", 11,
         ("at or near chance", "0.9100", "model.onnx metadata_props['val_metric.top-1']"),
         why="the ONNX records top-1 0.91 for itself; FP32 here is at chance: both numbers named", marks=SLOW),
    Case("baseline-detector-at-chance", _detector, "validate", 11,
         ("mAP50-95", "floor", "task.preprocess.resize", "task.preprocess.mean", "data.yaml",
          "1. the data: the labels or annotations of", "2. class order: task.classes"),
         why="an Ultralytics detector whose FP32 mAP50-95 is below the detection floor", marks=SLOW),
    Case("baseline-detector-recorded-metric", _detector_recorded, "validate", 11,
         ("0.5530", "best.onnx metadata_props['metrics/mAP50-95(B)']", "mAP50-95"),
         why="an Ultralytics export whose metadata records mAP50-95 0.553; FP32 here is near 0", marks=SLOW),
    # review of issue 34
    Case("baseline2-classifier-majority-predictor", _majority_predictor, "validate", 11,
         ("at or near chance", "top-1 0.8182", "always answering 'cat' (9 of 11 images)", "11 images"),
         why="a 9:2 validation set and a model that always answers the majority class: 0.818 is chance here "
             "(item 7)", marks=SLOW),
    Case("baseline2-classifier-recorded-percentage", _classifier_recorded_percent, "validate", 11,
         ("0.7610", "metadata_props['val_metric.top-1'] = 76.1, read as a percentage", "at or near chance"),
         why="the ONNX records top-1 as 76.1 (a percentage): read as 0.761, said so, not dropped (item 8)",
         marks=SLOW),
]
