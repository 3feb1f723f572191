"""Deterministic split of scikit-learn's digits into train / val / calibration.

The images are scikit-learn's copy of the UCI "Optical Recognition of Handwritten Digits"
test set (1797 images, 8x8, integer values 0..16); it ships inside the scikit-learn package,
so nothing is downloaded. Every image is stored and used as 8-bit gray with
pixel = round(value * 255 / 16), kept at 8x8; resizing is left to the preprocessing.

    data/val/<class>/<index>.png     held-out 20%, stratified by class (360 images)
    data/calibration/<index>.png     100 training images, 10 per class

<index> is the image's position in sklearn.datasets.load_digits(). The split depends only on
SEED and numpy's PCG64 generator, not on scikit-learn's splitting helpers.
"""

import os
import shutil
import tempfile

import numpy as np

SEED = 20240611
VAL_FRACTION = 0.2
CALIBRATION_PER_CLASS = 10
NUM_CLASSES = 10


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 images as uint8 [N, 8, 8] (0..255) and labels int64 [N]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    # value * 255 / 16 is never exactly .5 except for value 8 (127.5 -> 128 either way).
    images = np.floor(digits.images * 255.0 / 16.0 + 0.5).astype(np.uint8)
    return images, digits.target.astype(np.int64)


def split_indices(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, calibration) indices into load_images(), each sorted ascending.

    calibration is a subset of train.
    """
    rng = np.random.default_rng(SEED)
    train: list[np.ndarray] = []
    val: list[np.ndarray] = []
    calibration: list[np.ndarray] = []
    for cls in range(NUM_CLASSES):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_val = int(round(len(members) * VAL_FRACTION))
        val.append(members[:n_val])
        rest = members[n_val:]
        train.append(rest)
        calibration.append(rest[:CALIBRATION_PER_CLASS])  # rest is already shuffled
    return (np.sort(np.concatenate(train)), np.sort(np.concatenate(val)),
            np.sort(np.concatenate(calibration)))


def train_split() -> tuple[np.ndarray, np.ndarray]:
    """The training 80%: uint8 images [N, 8, 8] (exactly the PNG pixels) and int64 labels [N]."""
    images, labels = load_images()
    train, _, _ = split_indices(labels)
    return images[train], labels[train]


def _save_png(path: str, image: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(path, format="PNG")


def prepare(project_dir: str) -> None:
    """Write data/val and data/calibration under project_dir unless they already exist.

    Each is written into a temporary directory inside data/ and renamed into place at the end,
    so an interrupted run leaves no data/val or data/calibration behind, only a hidden
    data/.tmp-* directory (safe to delete).
    """
    data_dir = os.path.join(project_dir, "data")
    val_dir = os.path.join(data_dir, "val")
    calib_dir = os.path.join(data_dir, "calibration")
    if os.path.isdir(val_dir) and os.path.isdir(calib_dir):
        return
    images, labels = load_images()
    _, val, calibration = split_indices(labels)
    os.makedirs(data_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=data_dir)
    try:
        if not os.path.isdir(val_dir):
            for cls in range(NUM_CLASSES):
                os.makedirs(os.path.join(tmp, "val", str(cls)))
            for i in val:
                _save_png(os.path.join(tmp, "val", str(labels[i]), f"{i}.png"), images[i])
            os.rename(os.path.join(tmp, "val"), val_dir)
        if not os.path.isdir(calib_dir):
            os.makedirs(os.path.join(tmp, "calibration"))
            for i in calibration:
                _save_png(os.path.join(tmp, "calibration", f"{i}.png"), images[i])
            os.rename(os.path.join(tmp, "calibration"), calib_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
