"""A handful of synthetic images with COCO annotations, so the example runs offline (``data.prepare``).

The images are random coloured rectangles on noise, labelled with COCO class names; they say
nothing about accuracy (the yaml-built model has random weights anyway). Point ``data`` in
edgebuild.toml at real images for a trained model (see ../README.md).

The categories use COCO's own ids (1..90 with gaps), as a real ``instances_val2017.json`` does:
edgebuild maps them onto ``task.classes`` by name, not by id.
"""

import json
import os
import shutil
import tempfile

import numpy as np

# The 80 COCO classes in Ultralytics' order (its coco.yaml, and what a yolov8n.pt predicts)
COCO_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)
COCO_IDS = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34,
    35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)
NUM_IMAGES = 6  # for calibration, and as many for validation
WIDTH, HEIGHT = 320, 240
VAL_SEED, CALIBRATION_SEED = 21, 22


def _render(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, list[float]]]]:
    """An image and its objects: (class index, [x, y, w, h]) each."""
    image = rng.normal(110, 30, (HEIGHT, WIDTH, 3)).clip(0, 255)
    objects = []
    for _ in range(int(rng.integers(1, 4))):
        w, h = (int(v) for v in rng.integers(24, 120, 2))
        x, y = int(rng.integers(0, WIDTH - w)), int(rng.integers(0, HEIGHT - h))
        image[y:y + h, x:x + w] = rng.uniform(0, 255, 3)
        objects.append((int(rng.integers(0, len(COCO_CLASSES))), [float(x), float(y), float(w), float(h)]))
    return image.astype(np.uint8), objects


def _write_val(folder: str, seed: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "images"))
    images, annotations = [], []
    for i in range(NUM_IMAGES):
        pixels, objects = _render(rng)
        name = f"{i:03d}.png"
        Image.fromarray(pixels).save(os.path.join(folder, "images", name))
        images.append({"id": i + 1, "file_name": name, "width": WIDTH, "height": HEIGHT})
        for label, box in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": COCO_IDS[label],
                                "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
    categories = [{"id": i, "name": n} for i, n in zip(COCO_IDS, COCO_CLASSES)]
    with open(os.path.join(folder, "annotations.json"), "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)


def _write_calibration(folder: str, seed: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(folder)
    for i in range(NUM_IMAGES):
        Image.fromarray(_render(rng)[0]).save(os.path.join(folder, f"{i:03d}.png"))


def _atomic(target: str, write, seed: int) -> None:
    """Build ``target`` in a temporary sibling and rename it into place: a folder that exists is complete."""
    if os.path.isdir(target):
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(target))
    try:
        write(os.path.join(scratch, "out"), seed)
        os.rename(os.path.join(scratch, "out"), target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prepare(project_dir: str) -> None:
    """Write data/val (COCO json + images) and data/calibration if missing; the same files every time."""
    data = os.path.join(os.path.abspath(project_dir), "data")
    _atomic(os.path.join(data, "val"), _write_val, VAL_SEED)
    _atomic(os.path.join(data, "calibration"), _write_calibration, CALIBRATION_SEED)
