"""COCO JSON read for segmentation (polygons, RLE, crowd regions) and pose (COCO's person keypoints layout).

One 32x24 image and a few annotations written by the test; errors name the JSON file and the
annotation or category id.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgebuild.datasets.coco import read_coco
from edgebuild.datasets.images import CocoSet
from edgebuild.errors import DataError

PERSON = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]


def _read(root: Path, annotations: list[dict], task: str, category: dict | None = None) -> CocoSet:
    (root / "images").mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(root / "images" / "a.png")
    gt = {"images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 24}], "annotations": annotations,
          "categories": [category or {"id": 1, "name": "person"}, {"id": 2, "name": "other"}]}
    (root / "annotations.json").write_text(json.dumps(gt))
    return read_coco(root / "annotations.json", root / "images", ["person"], task=task)


def _ann(ann_id: int = 1, **fields: object) -> dict:
    return {"id": ann_id, "image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10], "iscrowd": 0, **fields}


def _rle(mask: np.ndarray) -> dict:
    """Uncompressed COCO RLE (column-major run lengths, starting with zeros), as crowd regions are written."""
    flat = mask.flatten(order="F")
    runs, value, count = [], 0, 0
    for pixel in flat:
        if pixel == value:
            count += 1
        else:
            runs.append(count)
            value, count = pixel, 1
    runs.append(count)
    return {"size": list(mask.shape), "counts": runs}


def test_polygons_and_rle_are_kept_as_read_with_the_mask_area_where_the_file_has_none(tmp_path: Path) -> None:
    mask = np.zeros((24, 32), np.uint8)
    mask[4:10, 6:16] = 1
    polygon = [[2.0, 2.0, 12.0, 2.0, 12.0, 12.0, 2.0, 12.0]]
    coco = _read(tmp_path, [_ann(1, segmentation=polygon), _ann(2, segmentation=_rle(mask), iscrowd=1, area=55.5),
                            _ann(3, segmentation=_rle(mask))], "segmentation")
    first, crowd, third = coco.ground_truth["annotations"]
    assert first["segmentation"] == polygon and first["area"] == 100.0
    assert crowd["segmentation"] == _rle(mask) and crowd["area"] == 55.5  # the file's area is COCOeval's
    assert third["area"] == 60.0 and coco.task == "segmentation"


def test_a_compressed_rle_string_is_read(tmp_path: Path) -> None:
    from faster_coco_eval.core import mask as coco_mask

    pixels = np.zeros((24, 32), np.uint8, order="F")
    pixels[0:5, 0:4] = 1
    encoded = coco_mask.encode(np.asfortranarray(pixels))
    rle = {"size": encoded["size"], "counts": encoded["counts"].decode()}
    (ann,) = _read(tmp_path, [_ann(1, segmentation=rle)], "segmentation").ground_truth["annotations"]
    assert ann["area"] == 20.0 and ann["segmentation"] == rle


@pytest.mark.parametrize("segmentation, words", [
    (None, "annotation id 1: a segmentation model needs its mask as 'segmentation' (polygons [[x1, y1, ...]] or "
           "RLE {'size', 'counts'}), found none"),
    ([[1, 2, 3, 4, 5, 6, 7]], "annotation id 1: segmentation polygon 1 has 7 values, an odd number"),
    ([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4]], "annotation id 1: segmentation polygon 2 has 2 point(s): a polygon needs 3"),
    ([[1, 2, "x", 4, 5, 6]], "segmentation polygon 1 must be a list of numbers"),
    ({"size": [32, 24], "counts": [0, 10]}, "its RLE 'size' [32, 24] is not the image's [height, width] [24, 32]"),
    ({"size": [24, 32], "counts": [0, -1]}, "its RLE 'counts' must be a COCO RLE string or a list of run lengths"),
])
def test_a_bad_mask_names_the_file_and_annotation(tmp_path: Path, segmentation: object, words: str) -> None:
    fields = {} if segmentation is None else {"segmentation": segmentation}
    with pytest.raises(DataError) as caught:
        _read(tmp_path, [_ann(1, **fields)], "segmentation")
    assert caught.value.message.startswith(f"data.validation.annotations: {tmp_path / 'annotations.json'}: ")
    assert words in caught.value.message, caught.value.message


def test_a_category_outside_the_task_needs_no_mask(tmp_path: Path) -> None:
    coco = _read(tmp_path, [_ann(1, segmentation=[[2, 2, 8, 2, 8, 8]]), _ann(2, category_id=2)], "segmentation")
    assert len(coco.ground_truth["annotations"]) == 2


def test_person_keypoints_with_skeleton_flip_and_counts(tmp_path: Path) -> None:
    category = {"id": 1, "name": "person", "keypoints": PERSON, "skeleton": [[1, 2], [1, 3]]}
    points = [10, 5, 2, 8, 4, 2, 12, 4, 1, 0, 0, 0, 0, 0, 0]
    coco = _read(tmp_path, [_ann(1, keypoints=points, num_keypoints=3), _ann(2, keypoints=points, num_keypoints=5),
                            _ann(3, keypoints=points)], "pose", category)
    first, second, third = coco.ground_truth["annotations"]
    assert first["keypoints"] == points and first["num_keypoints"] == 3
    assert second["num_keypoints"] == 3 and third["num_keypoints"] == 3
    assert coco.notes == ("annotations.json: 1 annotation(s) whose num_keypoints disagree with their keypoints' "
                          "visibilities: counted again (v > 0)",)
    assert coco.kpt_shape == (5, 3) and coco.flip_idx == (0, 2, 1, 4, 3)
    assert coco.ground_truth["kpt_shape"] == [5, 3] and coco.ground_truth["flip_idx"] == [0, 2, 1, 4, 3]
    assert coco.ground_truth["categories"][0]["skeleton"] == [[1, 2], [1, 3]]


@pytest.mark.parametrize("category, keypoints, words", [
    ({"id": 1, "name": "person"}, [1, 2, 2],
     "category 'person' (id 1) has no 'keypoints' (the names of its keypoints): a pose model needs COCO keypoint"),
    ({"id": 1, "name": "person", "keypoints": PERSON}, [1, 2, 2] * 4,
     "annotation id 1: 12 keypoint values, its category names 5 keypoints (15 values: x, y, v each)"),
    ({"id": 1, "name": "person", "keypoints": PERSON}, [1, 2, 2] * 4 + [1, 2, 3],
     "annotation id 1: keypoint 5 has visibility 3; it must be 0 (not labelled), 1 (labelled, not visible) or 2"),
    ({"id": 1, "name": "person", "keypoints": PERSON}, None,
     "annotation id 1: a pose model needs 'keypoints' [x1, y1, v1, ...] on every object, found none"),
])
def test_bad_keypoints_name_the_file_and_id(tmp_path: Path, category: dict, keypoints: object, words: str) -> None:
    fields = {} if keypoints is None else {"keypoints": keypoints}
    with pytest.raises(DataError) as caught:
        _read(tmp_path, [_ann(1, **fields)], "pose", category)
    assert caught.value.message.startswith(f"data.validation.annotations: {tmp_path / 'annotations.json'}: ")
    assert words in caught.value.message, caught.value.message


def test_coco_json_for_an_obb_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="COCO JSON has no oriented boxes; an OBB model is validated on YOLO OBB"):
        _read(tmp_path, [_ann(1)], "obb")


def test_a_detection_read_leaves_masks_and_keypoints_unchecked(tmp_path: Path) -> None:
    coco = _read(tmp_path, [_ann(1, segmentation=[[1, 2, 3]], keypoints=[1])], "detection")
    assert coco.task == "detection" and coco.kpt_shape is None and "kpt_shape" not in coco.ground_truth
