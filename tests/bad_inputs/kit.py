"""Valid inputs every bad-input case starts from, made once per test session.

- ``classifier``: a small CNN (RGB 3x32x32, batch dynamic, one ``logits`` output, 3 classes) exported
  to ONNX; its data ``folders`` (split folders of class folders: train/ and val/, one folder per class).
- ``detector``: a graph with Ultralytics' metadata and its raw head [N, 4+C, A] at 64x64 (3 classes);
  its data as a YOLO ``data.yaml``, a ``coco`` JSON with images/ and calibration/ beside it, and a
  Pascal ``voc`` root. Every format holds the same images and boxes.

A case copies what it breaks (``Kit.copy``): the kit itself is never changed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CLASSIFIER_CLASSES = ["cat", "dog", "fox"]
DETECTOR_CLASSES = ["circle", "square", "triangle"]
SIZE = 64  # the detector's image size; the classifier's is 32
#: every detection image: (file stem, [(class, x1, y1, x2, y2) in pixels])
BOXES = {
    "a0": [(0, 8, 8, 30, 30)], "a1": [(1, 20, 10, 50, 40), (2, 4, 40, 20, 60)], "a2": [(2, 30, 30, 60, 62)],
    "a3": [(0, 2, 2, 20, 24)],
}
CALIBRATION = ["c0", "c1", "c2", "c3"]


@dataclass(frozen=True)
class Kit:
    root: Path
    classifier: Path  # model.onnx
    folders: Path  # split folders
    detector: Path  # best.onnx (Ultralytics metadata, raw head)
    yolo: Path  # data.yaml
    coco: Path  # annotations.json (images/ and calibration/ beside it)
    voc: Path  # VOC root

    def copy(self, what: Path, folder: Path) -> Path:
        """A copy of one kit input (a file with its neighbours where it needs them, or a folder) under ``folder``."""
        relative = what.relative_to(self.root)
        top = self.root / relative.parts[0]
        target = folder / relative.parts[0]
        if top.is_dir():
            shutil.copytree(top, target)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(top, target)
        return folder / relative


def make_kit(root: Path) -> Kit:
    root.mkdir(parents=True, exist_ok=True)
    classifier = _classifier_onnx(root / "classifier" / "model.onnx")
    folders = _class_folders(root / "folders")
    detector = ultralytics_onnx(root / "detector" / "best.onnx", DETECTOR_CLASSES)
    yolo = _yolo(root / "yolo")
    coco = _coco(root / "coco")
    voc = _voc(root / "voc")
    return Kit(root, classifier, folders, detector, yolo, coco, voc)


def image(path: Path, seed: int, size: tuple[int, int] = (SIZE, SIZE), mode: str = "RGB") -> Path:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).convert(mode).save(path)
    return path


def _classifier_onnx(path: Path) -> Path:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3)).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (torch.zeros(1, 3, 32, 32),), str(path), input_names=["images"],
                      output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return path


def _class_folders(root: Path) -> Path:
    for split, count in (("train", 3), ("val", 3)):
        for c, name in enumerate(CLASSIFIER_CLASSES):
            for i in range(count):
                image(root / split / name / f"{name}{i}.png", 100 * c + 10 * i + (split == "val"), (32, 32))
    return root


def ultralytics_onnx(path: Path, names: list[str]) -> Path:
    """A tiny graph with Ultralytics' metadata and its raw head [N, 4+C, A] (A = 64 at 64x64)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    channels = 4 + len(names)
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(size=(channels, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, channels, -1], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["features"], strides=[8, 8], pads=[1, 1, 1, 1]),
         helper.make_node("Reshape", ["features", "shape"], ["output0"])],
        "head", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", channels, SIZE])],
        initializer=[weight, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    for key, value in {"author": "Ultralytics", "task": "detect", "stride": "8", "imgsz": f"[{SIZE}, {SIZE}]",
                       "names": repr(dict(enumerate(names)))}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _yolo(root: Path) -> Path:
    for n, stem in enumerate(CALIBRATION):
        image(root / "images" / "train" / f"{stem}.png", 500 + n)
    for n, (stem, boxes) in enumerate(BOXES.items()):
        image(root / "images" / "val" / f"{stem}.png", n)
        (root / "labels" / "val").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "val" / f"{stem}.txt").write_text("".join(
            f"{c} {(x1 + x2) / 2 / SIZE} {(y1 + y2) / 2 / SIZE} {(x2 - x1) / SIZE} {(y2 - y1) / SIZE}\n"
            for c, x1, y1, x2, y2 in boxes))
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: images/val\n"
                                    "names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(DETECTOR_CLASSES)))
    return root / "data.yaml"


def coco_dict() -> dict:
    images = [{"id": n + 1, "file_name": f"{stem}.png", "width": SIZE, "height": SIZE}
              for n, stem in enumerate(BOXES)]
    annotations = []
    for n, boxes in enumerate(BOXES.values()):
        for c, x1, y1, x2, y2 in boxes:
            annotations.append({"id": len(annotations) + 1, "image_id": n + 1, "category_id": c + 1,
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(DETECTOR_CLASSES)]
    return {"images": images, "annotations": annotations, "categories": categories}


def _coco(root: Path) -> Path:
    for n, stem in enumerate(CALIBRATION):
        image(root / "calibration" / f"{stem}.png", 500 + n)
    for n, stem in enumerate(BOXES):
        image(root / "images" / f"{stem}.png", n)
    (root / "annotations.json").write_text(json.dumps(coco_dict()))
    return root / "annotations.json"


def voc_xml(file_name: str, boxes: list[tuple[int, int, int, int, int]], names: list[str] = DETECTOR_CLASSES) -> str:
    """Pascal VOC: 1-based pixel indices, both ends inclusive."""
    return (f"<annotation><filename>{file_name}</filename><size><width>{SIZE}</width><height>{SIZE}</height>"
            "<depth>3</depth></size>" + "".join(
                f"<object><name>{names[c]}</name><difficult>0</difficult><bndbox><xmin>{x1 + 1}</xmin>"
                f"<ymin>{y1 + 1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"
                for c, x1, y1, x2, y2 in boxes) + "</annotation>")


def _voc(root: Path) -> Path:
    (root / "Annotations").mkdir(parents=True)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    for n, stem in enumerate(CALIBRATION):
        image(root / "JPEGImages" / f"{stem}.jpg", 500 + n)
        (root / "Annotations" / f"{stem}.xml").write_text(voc_xml(f"{stem}.jpg", [(0, 4, 4, 20, 20)]))
    for n, (stem, boxes) in enumerate(BOXES.items()):
        image(root / "JPEGImages" / f"{stem}.jpg", n)
        (root / "Annotations" / f"{stem}.xml").write_text(voc_xml(f"{stem}.jpg", boxes))
    (root / "ImageSets" / "Main" / "train.txt").write_text("".join(f"{s}\n" for s in CALIBRATION))
    (root / "ImageSets" / "Main" / "val.txt").write_text("".join(f"{s}\n" for s in BOXES))
    return root
