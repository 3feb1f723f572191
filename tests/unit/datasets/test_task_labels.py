"""YOLO segmentation, pose and OBB labels read into the COCO ground truth, and every malformed line named.

Each set is one or two tiny images written by the test, with labels of the task (``_set``); the
ground-truth form is the one the metrics read: ``segmentation`` polygons in pixels with the mask's
area, ``keypoints`` x, y, v in pixels with ``num_keypoints`` and the set's ``kpt_shape``/``flip_idx``,
``obb`` corners in pixels with their bounding box.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from edgebuild.datasets.formats import data_format
from edgebuild.datasets.images import CocoSet
from edgebuild.datasets.task_labels import flip_pairs, min_area_rectangle
from edgebuild.datasets.yolo import load_yolo_set
from edgebuild.errors import DataError

WIDTH, HEIGHT = 64, 48


def _set(root: Path, labels: dict[str, str], extra: str = "", names: tuple[str, ...] = ("a", "b")) -> Path:
    """root/images/val/<stem>.png (64x48) with root/labels/val/<stem>.txt; returns the data.yaml."""
    for stem, text in labels.items():
        (root / "images" / "val").mkdir(parents=True, exist_ok=True)
        (root / "labels" / "val").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((HEIGHT, WIDTH, 3), np.uint8)).save(root / "images" / "val" / f"{stem}.png")
        (root / "labels" / "val" / f"{stem}.txt").write_text(text)
    (root / "data.yaml").write_text(f"path: .\ntrain: images/val\nval: images/val\nnames: {list(names)}\n{extra}")
    return root / "data.yaml"


def _read(root: Path, labels: dict[str, str], task: str, extra: str = "") -> CocoSet:
    return load_yolo_set(_set(root, labels, extra), "val", ["a", "b"], task=task)


def test_segmentation_polygons_become_pixel_polygons_with_the_mask_area(tmp_path: Path) -> None:
    coco = _read(tmp_path, {"v0": "0 0.25 0.25 0.75 0.25 0.75 0.75 0.25 0.75\n1 0 0 0.5 0 0 0.5\n"}, "segmentation")
    square, triangle = coco.ground_truth["annotations"]
    assert square["segmentation"] == [[16.0, 12.0, 48.0, 12.0, 48.0, 36.0, 16.0, 36.0]]
    assert square["bbox"] == [16.0, 12.0, 32.0, 24.0] and square["category_id"] == 1
    assert square["area"] == 32 * 24  # COCO's rasterisation of the polygon (faster-coco-eval's mask.area)
    assert triangle["bbox"] == [0.0, 0.0, 32.0, 24.0] and 0 < triangle["area"] < 32 * 24
    assert coco.task == "segmentation" and "kpt_shape" not in coco.ground_truth


def test_detection_reads_a_polygon_as_its_box_and_segmentation_keeps_it(tmp_path: Path) -> None:
    labels = {"v0": "0 0.25 0.25 0.75 0.25 0.75 0.75\n0 0.25 0.25 0.75 0.25 0.75 0.75\n"}  # a repeated line: once
    detection = _read(tmp_path, labels, "detection")
    assert [set(a) for a in detection.ground_truth["annotations"]] == [
        {"id", "image_id", "category_id", "bbox", "area", "iscrowd"}]
    assert len(_read(tmp_path, labels, "segmentation").ground_truth["annotations"]) == 1


def test_pose_keypoints_with_visibility_and_the_data_yaml_keys(tmp_path: Path) -> None:
    extra = ("kpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\nkpt_oks_sigmas: [0.1, 0.2, 0.3]\n"
             "kpt_names: {0: [nose, left_eye, right_eye]}\n")
    coco = _read(tmp_path, {"v0": "0 0.5 0.5 0.5 0.5 0.5 0.25 2 0.25 0.5 1 0 0 0\n"}, "pose", extra)
    (person,) = coco.ground_truth["annotations"]
    assert person["keypoints"] == [32.0, 12.0, 2.0, 16.0, 24.0, 1.0, 0.0, 0.0, 0.0]
    assert person["num_keypoints"] == 2 and person["bbox"] == [16.0, 12.0, 32.0, 24.0]
    assert coco.kpt_shape == (3, 3) and coco.flip_idx == (0, 2, 1)
    assert {k: coco.ground_truth[k] for k in ("kpt_shape", "flip_idx", "kpt_oks_sigmas")} == {
        "kpt_shape": [3, 3], "flip_idx": [0, 2, 1], "kpt_oks_sigmas": [0.1, 0.2, 0.3]}
    assert [c.get("keypoints") for c in coco.ground_truth["categories"]] == [["nose", "left_eye", "right_eye"], None]


def test_pose_with_two_values_a_keypoint_is_labelled_unless_negative_as_ultralytics_masks_it(tmp_path: Path) -> None:
    coco = _read(tmp_path, {"v0": "1 0.5 0.5 0.5 0.5 0.5 0.25 0 0 -0.005 0.5\n"}, "pose", "kpt_shape: [3, 2]\n")
    (person,) = coco.ground_truth["annotations"]
    assert person["keypoints"] == [32.0, 12.0, 2.0, 0.0, 0.0, 2.0, pytest.approx(-0.32), 24.0, 0.0]
    assert person["num_keypoints"] == 2  # (0, 0) counts: Ultralytics' mask is x < 0 or y < 0
    assert coco.ground_truth["kpt_shape"] == [3, 2] and coco.ground_truth["flip_idx"] is None


def test_obb_corners_in_pixels_with_their_bounding_box(tmp_path: Path) -> None:
    # a 20 x 10 rectangle turned 37 degrees, in pixels: (20, 6) (36, 18) (30, 26) (14, 14); y to 7 decimals
    turned = "0 0.3125 0.125 0.5625 0.375 0.46875 0.5416667 0.21875 0.2916667"
    coco = _read(tmp_path, {"v0": turned + "\n"}, "obb")
    (box,) = coco.ground_truth["annotations"]
    assert box["obb"] == pytest.approx([20.0, 6.0, 36.0, 18.0, 30.0, 26.0, 14.0, 14.0], abs=1e-4)  # as written
    assert box["bbox"] == pytest.approx([14.0, 6.0, 22.0, 20.0], abs=1e-4) and box["area"] == pytest.approx(200.0)
    assert coco.notes == ()
    diamond = "0 0.5 0.25 0.75 0.5 0.5 0.75 0.25 0.5"  # equal sides, not square in pixels: (32,12) (48,24) ...
    (box,) = _read(tmp_path, {"v0": diamond + "\n"}, "obb").ground_truth["annotations"]
    assert box["area"] > 32 * 24 / 2  # not the rhombus: the smallest rectangle around it


def test_an_obb_that_is_not_a_rectangle_becomes_the_smallest_rectangle_around_it(tmp_path: Path) -> None:
    coco = _read(tmp_path, {"v0": "1 0.25 0.25 0.75 0.25 0.625 0.75 0.25 0.75\n"}, "obb")  # a trapezoid
    (box,) = coco.ground_truth["annotations"]
    xs, ys = box["obb"][0::2], box["obb"][1::2]
    corners = [v for xy in sorted(zip(xs, ys)) for v in xy]
    assert corners == pytest.approx([16.0, 12.0, 16.0, 36.0, 48.0, 12.0, 48.0, 36.0])
    assert box["area"] == pytest.approx(32 * 24)
    assert any("1 oriented box(es) whose 4 corners are not a rectangle" in note for note in coco.notes), coco.notes


def test_the_smallest_rectangle_agrees_with_opencv() -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    for _ in range(20):
        points = [(float(x), float(y)) for x, y in rng.uniform(0, 100, (int(rng.integers(3, 9)), 2))]
        corners, area = min_area_rectangle(points)
        (_, _), (w, h), _ = cv2.minAreaRect(np.asarray(points, np.float32))
        assert area == pytest.approx(w * h, rel=1e-4)
        ours = cv2.contourArea(np.asarray(corners, np.float32))
        assert ours == pytest.approx(area, rel=1e-4)


def test_flip_pairs_from_left_and_right_names() -> None:
    coco_person = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]
    assert flip_pairs(coco_person) == [0, 2, 1, 4, 3]
    assert flip_pairs(["a", "b"]) is None


@pytest.mark.parametrize("task, extra, line, words", [
    ("segmentation", "", "0 0.1 0.1 0.5 0.1 0.5", "5 coordinates after the class, an odd number: a polygon is x y"),
    ("segmentation", "", "0 0.1 0.1 0.5 0.1 0.5 0.6 0.7", "7 coordinates after the class, an odd number"),
    ("segmentation", "", "0 0.5 0.5 0.2 0.2", "5 fields (class cx cy w h: a box, not a polygon); "
                                              "a segmentation model needs class x1 y1"),
    ("segmentation", "", "0 0.1 0.1", "a polygon of 1 point(s): it needs 3 or more"),
    ("segmentation", "", "0 0.1 0.1 0.5 1.2 0.5 0.6", "coordinates must be normalised to [0, 1]"),
    ("pose", "kpt_shape: [17, 3]\n", "0 0.5 0.5 0.2 0.2", "5 fields (class cx cy w h: a box, no keypoints), "
                                                         "a pose model needs 5 + 17*3 = 56"),
    ("pose", "kpt_shape: [2, 3]\n", "0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.2 0.2", "10 fields, a pose model needs 5 + 2*3"),
    ("pose", "kpt_shape: [2, 3]\n", "0 0.5 0.5 0.2 0.2 0.1 0.1 3 0.2 0.2 2", "keypoint 1 has visibility 3; it must "
                                                                           "be 0 (not labelled), 1"),
    ("pose", "kpt_shape: [2, 3]\n", "0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.2 1.5 2", "found 1.5"),
    ("pose", "kpt_shape: [2, 2]\n", "0 0.5 0.5 0.2 0.2 0.1 0.1 0.2", "8 fields, a pose model needs 5 + 2*2 = 9"),
    ("obb", "", "0 0.1 0.1 0.5 0.1 0.5 0.6 0.1 0.6 0.3", "9 values after the class, an odd number; an OBB model "
                                                         "needs 9 (class x1 y1"),
    ("obb", "", "0 0.5 0.5 0.2 0.2", "5 fields (class cx cy w h: an axis-aligned box, not 4 corners)"),
    ("obb", "", "2 0.1 0.1 0.5 0.1 0.5 0.6 0.1 0.6", "class 2 is out of range"),
])
def test_a_malformed_task_label_names_the_file_and_line(tmp_path: Path, task: str, extra: str, line: str,
                                                        words: str) -> None:
    good = {"segmentation": "0 0.1 0.1 0.5 0.1 0.5 0.6", "obb": "0 0.1 0.1 0.5 0.1 0.5 0.6 0.1 0.6",
            "pose": "0 0.5 0.5 0.2 0.2" + " 0.1 0.1 2" * (17 if "17" in extra else 2)}[task]
    if "[2, 2]" in extra:
        good = "0 0.5 0.5 0.2 0.2 0.1 0.1 0.2 0.2"
    with pytest.raises(DataError) as caught:
        _read(tmp_path, {"v0": f"{good}\n\n{line}\n"}, task, extra)
    labels = tmp_path / "labels" / "val" / "v0.txt"
    assert caught.value.message.startswith(f"data.dataset: {labels}:3: "), caught.value.message
    assert words in caught.value.message, caught.value.message


@pytest.mark.parametrize("extra, words", [
    ("", "has no 'kpt_shape': a pose model needs it"),
    ("kpt_shape: [17, 4]\n", "'kpt_shape' must be [keypoints, 2 or 3]"),
    ("kpt_shape: [3, 3]\nflip_idx: [0, 2]\n", "'flip_idx' [0, 2] must name each of the 3 keypoints"),
    ("kpt_shape: [3, 3]\nflip_idx: [0, 1, 1]\n", "'flip_idx' [0, 1, 1] must name each of the 3 keypoints"),
    ("kpt_shape: [3, 3]\nkpt_oks_sigmas: [0.1, 0.2]\n", "'kpt_oks_sigmas' must be 3 positive numbers"),
    ("kpt_shape: [3, 3]\nkpt_names: {0: [a, b]}\n", "'kpt_names' must be {class id: [3 keypoint names]}"),
])
def test_pose_keys_of_the_data_yaml_are_checked_against_each_other(tmp_path: Path, extra: str, words: str) -> None:
    with pytest.raises(DataError) as caught:
        _read(tmp_path, {"v0": "0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.2 0.2 2 0.3 0.3 2\n"}, "pose", extra)
    assert caught.value.message.startswith(f"data.dataset: {tmp_path / 'data.yaml'}")
    assert words in caught.value.message, caught.value.message


def test_past_the_edge_and_zero_area_are_counted_for_every_task(tmp_path: Path) -> None:
    tally_lines = "0 0.5 0.5 1.005 0.5 0.5 0.9\n0 0.2 0.2 0.4 0.2 0.6 0.2\n"  # one past the edge, one on a line
    coco = _read(tmp_path, {"v0": tally_lines}, "segmentation")
    assert len(coco.ground_truth["annotations"]) == 1
    assert any("1 box(es) reach past the image edge" in n for n in coco.notes), coco.notes
    assert any("1 box(es) of zero width or height" in n for n in coco.notes), coco.notes


def _project(tmp_path: Path, task: str, dataset: Path | None = None, annotations: Path | None = None) -> object:
    """What ``data_format`` reads of a project, for a task kind the project file does not take yet."""
    from edgebuild.project.schema import DataSection

    data = DataSection.model_validate(
        {"dataset": str(dataset)} if dataset else
        {"calibration_images": str(tmp_path), "validation": {"annotations": str(annotations), "images": str(tmp_path)}})
    return SimpleNamespace(data=data, task=SimpleNamespace(kind=task), path=lambda p: tmp_path / p)


def test_a_format_that_cannot_hold_the_task_says_what_can(tmp_path: Path) -> None:
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    (voc / "JPEGImages").mkdir()
    with pytest.raises(DataError, match=r"Pascal VOC holds axis-aligned boxes only; task.kind 'pose' needs keypoints"):
        data_format(_project(tmp_path, "pose", dataset=voc))
    coco = tmp_path / "annotations.json"
    coco.write_text('{"images": [], "annotations": [], "categories": []}')
    with pytest.raises(DataError, match=r"COCO JSON has no oriented boxes; task.kind 'obb' needs oriented boxes: a "
                                        r"YOLO OBB data.yaml"):
        data_format(_project(tmp_path, "obb", annotations=coco))
    assert data_format(_project(tmp_path, "pose", annotations=coco)).name == "coco"
    assert data_format(_project(tmp_path, "segmentation", dataset=_set(tmp_path / "y", {"v0": ""}))).name == "yolo"


def test_boxes_and_polygons_in_one_file_are_refused_as_ultralytics_drops_the_image(tmp_path: Path) -> None:
    with pytest.raises(DataError) as caught:
        _read(tmp_path, {"v0": "0 0.1 0.1 0.5 0.1 0.5 0.6\n\n1 0.5 0.5 0.2 0.2\n"}, "detection")
    assert caught.value.message.startswith(f"data.dataset: {tmp_path / 'labels' / 'val' / 'v0.txt'}:3: a box after "
                                           "the polygon of line 1: a label file holds boxes"), caught.value.message


def test_a_label_file_read_for_a_task_it_does_not_hold_counts_in_the_tally(tmp_path: Path) -> None:
    from edgebuild.datasets.task_labels import LabelLayout, read_objects

    labels = tmp_path / "a.txt"
    labels.write_text("0 0.25 0.25 0.75 0.25 0.75 0.75\n0 0.25 0.25 0.75 0.25 0.75 0.75\n")
    tally: Counter[str] = Counter()
    (obj,) = read_objects(labels, 1, LabelLayout("segmentation"), tally=tally)
    assert obj.points == (0.25, 0.25, 0.75, 0.25, 0.75, 0.75) and tally == Counter({"duplicate": 1})
