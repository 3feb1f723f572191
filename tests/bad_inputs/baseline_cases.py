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


def _mean_of_one_for_rgb(kit: Kit, folder: Path) -> Inputs:
    return Inputs(kit.copy(kit.classifier, folder), kit.copy(kit.folders, folder), init_args=("--mean", "0.5"))


CASES = [
    Case("baseline-init-mean-of-wrong-length", _mean_of_one_for_rgb, "init", 3,
         ("--mean", "[0.5]", "3 channel(s)"), why="--mean 0.5 for an RGB model: one value where it needs three"),
    Case("baseline-classifier-at-chance", _classifier, "validate", 11,
         ("at chance", "top-1", "3 classes", "task.preprocess.mean", "task.preprocess.channel_order",
          "class order: task.classes", 'accuracy.baseline = "accept"'),
         why="an ONNX classifier that scores chance-level top-1 under every convention init measured", marks=SLOW),
    Case("baseline-classifier-wrong-flags", _classifier_flags, "validate", 11,
         ("at chance", "task.preprocess.mean = [0.5, 0.5, 0.5]", "task.preprocess.channel_order = 'bgr'",
          "edgebuild.toml"),
         why="explicit --mean/--std/--channel-order that give a chance-level FP32: kept, then refused", marks=SLOW),
    Case("baseline-classifier-recorded-metric", _classifier_recorded, "validate", 11,
         ("at chance", "0.9100", "model.onnx metadata_props['val_metric.top-1']"),
         why="the ONNX records top-1 0.91 for itself; FP32 here is at chance: both numbers named", marks=SLOW),
    Case("baseline-detector-at-chance", _detector, "validate", 11,
         ("mAP50-95", "floor", "task.preprocess.resize", "task.preprocess.mean", "data.yaml"),
         why="an Ultralytics detector whose FP32 mAP50-95 is below the detection floor", marks=SLOW),
    Case("baseline-detector-recorded-metric", _detector_recorded, "validate", 11,
         ("0.5530", "best.onnx metadata_props['metrics/mAP50-95(B)']", "mAP50-95"),
         why="an Ultralytics export whose metadata records mAP50-95 0.553; FP32 here is near 0", marks=SLOW),
]
