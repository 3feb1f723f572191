"""Images are read as Ultralytics reads them (cv2.imread), and nothing is read wrongly without a word.

16-bit PNGs decoded as all white made FP32 0.0 (issue 34): they are scaled by their high byte, as
cv2.imread does, so a 16-bit copy of an image reads as the 8-bit original. EXIF orientation is
applied, alpha dropped, palettes expanded, each counted. Every image is decoded by ``check``, once
per content: a second pass over unchanged files decodes nothing, and a broken cache is ignored.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgebuild.datasets.coco import read_coco
from edgebuild.datasets.decoded import decode_all
from edgebuild.datasets.images import image_size, read_image
from edgebuild.datasets.yolo import read_labels
from edgebuild.errors import DataError


def _rgb(height: int = 24, width: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _sixteen_bit(path: Path, gray8: np.ndarray) -> Path:
    Image.fromarray(gray8.astype(np.uint16) * 257).save(path)  # the 8-bit values spread over 16 bits
    return path


def test_a_16_bit_png_reads_as_its_8_bit_original_not_white(tmp_path: Path) -> None:
    original = np.asarray(Image.fromarray(_rgb()).convert("L"))
    Image.fromarray(original).save(tmp_path / "eight.png")
    path = _sixteen_bit(tmp_path / "sixteen.png", original)
    with Image.open(path) as image:
        assert image.mode.startswith("I")  # PIL's own convert("RGB") clips these to 255: all white
    decoded = read_image(path)
    assert decoded.shape == (24, 32, 3) and decoded.dtype == np.uint8
    assert np.abs(decoded.astype(int) - read_image(tmp_path / "eight.png").astype(int)).max() <= 1
    assert np.abs(read_image(path, gray=True).astype(int) - original.astype(int)).max() <= 1
    assert decoded.mean() < 200  # not the all-white image that scored FP32 0.0


@pytest.mark.parametrize("mode", ["I;16", "RGB;16", "RGBA", "P", "L", "LA"])
def test_an_image_reads_as_cv2_imread_reads_it(tmp_path: Path, mode: str) -> None:
    cv2 = pytest.importorskip("cv2")
    path = tmp_path / f"{mode.replace(';', '')}.png"
    rgb = Image.fromarray(_rgb(seed=3))
    if mode == "I;16":
        _sixteen_bit(path, np.asarray(rgb.convert("L")))
    elif mode == "RGB;16":
        cv2.imwrite(str(path), np.asarray(rgb)[..., ::-1].astype(np.uint16) * 257 + 100)  # low bytes not zero
        assert decode_all([path]).traits["16-bit"] == 1
    else:
        rgb.convert(mode).save(path)
    expected = cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1]  # BGR -> RGB
    assert np.array_equal(read_image(path), expected)


def test_an_exif_orientation_is_applied_as_ultralytics_does(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise
    path = tmp_path / "turned.jpg"
    Image.fromarray(_rgb(20, 40)).save(path, exif=exif, quality=100)
    decoded = read_image(path)
    assert decoded.shape == (40, 20, 3)  # upright: the stored 40 wide x 20 high, turned
    assert image_size(path, "data.dataset") == (20, 40)  # the header says the same, without decoding
    cv2 = pytest.importorskip("cv2")
    expected = cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1]
    assert expected.shape == decoded.shape and np.abs(expected.astype(int) - decoded.astype(int)).mean() < 2


def test_every_image_is_decoded_once_per_content_and_said(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(_rgb()).save(images / "plain.png")
    Image.fromarray(_rgb()).convert("RGBA").save(images / "alpha.png")
    _sixteen_bit(images / "wide.png", np.asarray(Image.fromarray(_rgb()).convert("L")))
    (images / "broken.png").write_bytes((images / "plain.png").read_bytes()[:70])
    paths = sorted(images.iterdir())
    cache = tmp_path / "build" / ".cache" / "decoded.json"

    first = decode_all(paths, cache)
    assert first.decoded_now == 4 and first.images == 4 and cache.is_file()
    assert first.problems == [f"{images / 'broken.png'}: cannot read image: image file is truncated"]
    assert first.traits == Counter({"alpha": 1, "16-bit": 1, "gray": 1})
    notes = first.notes()
    assert any(n.startswith("1 of 4 images are 16-bit, scaled to 8 bits") for n in notes), notes
    assert any(n.startswith("1 of 4 images have an alpha channel") for n in notes), notes
    assert not any("grayscale" in n for n in first.notes(gray=True))

    again = decode_all(paths, cache)  # nothing changed: nothing decoded, the same findings
    assert again.decoded_now == 0 and again.problems == first.problems and again.traits == first.traits

    Image.fromarray(_rgb(seed=9)).save(images / "plain.png")  # one file changed: that one decoded
    assert decode_all(paths, cache).decoded_now == 1

    cache.write_text("{not json")  # a broken cache is ignored, and replaced
    assert decode_all(paths, cache).decoded_now == 4
    assert json.loads(cache.read_text())["version"] == 1
    cache.unlink()
    cache.parent.rmdir()
    cache.parent.write_text("a file where the cache folder goes")  # a cache that cannot be written only costs time
    assert decode_all(paths, cache).decoded_now == 4


def test_yolo_boxes_past_the_edge_are_clipped_and_zero_area_dropped_with_counts(tmp_path: Path) -> None:
    labels = tmp_path / "a.txt"
    labels.write_text("\ufeff0 0.95 0.5 0.2 0.4\n1 0.5 0.5 0 0.2\n0 0.95 0.5 0.2 0.4\n2 0.5 1.004 0.2 0.2\n")
    tally: Counter[str] = Counter()
    boxes = read_labels(labels, 3, tally=tally)
    assert boxes == [(0, pytest.approx(0.925), 0.5, pytest.approx(0.15), pytest.approx(0.4)),
                     (2, 0.5, pytest.approx(0.952), pytest.approx(0.2), pytest.approx(0.096))]
    assert tally == Counter({"clipped": 2, "zero-area": 1, "duplicate": 1})
    labels.write_text("0 0.5 0.5 0.2 1.2\n")
    with pytest.raises(DataError, match=r"a\.txt:1: coordinates must be normalised .* 1\.2"):
        read_labels(labels, 3)


def _coco_set(root: Path, annotations: list[dict], images: list[dict] | None = None) -> Path:
    (root / "images").mkdir(parents=True, exist_ok=True)
    Image.fromarray(_rgb(24, 32)).save(root / "images" / "a.png")
    gt = {"images": images or [{"id": 1, "file_name": "a.png", "width": 32, "height": 24}],
          "annotations": annotations, "categories": [{"id": 1, "name": "x"}]}
    path = root / "annotations.json"
    path.write_text("\ufeff" + json.dumps(gt), encoding="utf-8")  # a BOM is stripped
    return path


def _ann(ann_id: int = 1, **fields: object) -> dict:
    return {"id": ann_id, "image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10], "area": 100, "iscrowd": 0,
            **fields}


def test_coco_boxes_are_clipped_to_the_image_and_zero_area_ones_dropped(tmp_path: Path) -> None:
    path = _coco_set(tmp_path, [_ann(1), _ann(2, bbox=[28, -4, 10, 10]), _ann(3, bbox=[5, 5, 0, 3])])
    coco = read_coco(path, tmp_path / "images", ["x"])
    assert [a["bbox"] for a in coco.ground_truth["annotations"]] == [[2, 2, 10, 10], [28.0, 0.0, 4.0, 6.0]]
    assert coco.notes == ("annotations.json: 1 box(es) reach past the image edge: clipped to the image",
                          "annotations.json: 1 box(es) of zero width or height: dropped (no detection can match them)")


@pytest.mark.parametrize("annotations, images, says", [
    ([_ann(1), _ann(1)], None, "annotation id 1 appears more than once"),
    ([_ann(1, image_id=5)], None, "annotation id 1: its image_id 5 is not an image of the file"),
    ([_ann(1, category_id=3)], None, "annotation id 1: its category_id 3 is not a category of the file"),
    ([_ann(1, bbox=[1, 2, 3])], None, "annotation id 1: bbox must be 4 numbers"),
    ([_ann(1, bbox=[1, 2, 3, float("nan")])], None, "annotation id 1: bbox must be 4 numbers"),
    ([_ann(1, bbox=[10, 10, -3, 4])], None, "annotation id 1: bbox [10, 10, -3, 4] has a negative width"),
    ([], [{"id": 1, "file_name": "a.png"}, {"id": 1, "file_name": "b.png"}], "image id 1 appears more than once"),
    ([], [{"id": 1, "file_name": "a.png", "width": 24, "height": 32}], "image id 1 (a.png) says width/height 24x32, "
                                                                       "but the file is 32x24"),
])
def test_a_coco_error_names_the_file_and_the_id(tmp_path: Path, annotations: list[dict], images: list[dict] | None,
                                                says: str) -> None:
    path = _coco_set(tmp_path, annotations, images)
    with pytest.raises(DataError) as caught:
        read_coco(path, tmp_path / "images", ["x"])
    assert str(path) in caught.value.message and says in caught.value.message, caught.value.message


def test_one_coco_file_name_under_two_ids_is_refused_naming_both(tmp_path: Path) -> None:
    path = _coco_set(tmp_path, [_ann(1)], [{"id": 1, "file_name": "a.png"}, {"id": 99, "file_name": "a.png"}])
    with pytest.raises(DataError, match=r"file_name 'a\.png' is image id 1 and again image id 99"):
        read_coco(path, tmp_path / "images", ["x"])


def test_coco_categories_in_another_order_than_task_classes_are_refused(tmp_path: Path) -> None:
    path = _coco_set(tmp_path, [_ann(1)])
    gt = json.loads(path.read_text(encoding="utf-8-sig"))
    gt["categories"] = [{"id": 1, "name": "y"}, {"id": 2, "name": "other"}, {"id": 3, "name": "x"}]
    path.write_text(json.dumps(gt))
    assert read_coco(path, tmp_path / "images", ["y", "x"]).category_ids == [1, 3]  # a category more is fine
    with pytest.raises(DataError, match=r"in id order name task.classes as \['y', 'x'\], but task.classes is "
                                        r"\['x', 'y'\]"):
        read_coco(path, tmp_path / "images", ["x", "y"])


def test_tiff_images_are_images_and_other_files_are_counted(tmp_path: Path) -> None:
    from edgebuild.datasets.images import list_images, non_images

    Image.fromarray(_rgb()).save(tmp_path / "a.tif")
    Image.fromarray(_rgb()).save(tmp_path / "b.png")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".hidden").write_text("x")
    assert [p.name for p in list_images(tmp_path, "k")] == ["a.tif", "b.png"]
    assert [p.name for p in non_images(tmp_path)] == ["notes.txt"]
    assert read_image(tmp_path / "a.tif").shape == (24, 32, 3)


def test_a_data_yaml_with_only_nc_takes_task_classes(tmp_path: Path) -> None:
    from edgebuild.datasets.yolo import load_yolo_set

    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "labels" / "val").mkdir(parents=True)
    Image.fromarray(_rgb()).save(tmp_path / "images" / "val" / "a.png")
    (tmp_path / "labels" / "val" / "a.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    (tmp_path / "data.yaml").write_text("path: .\ntrain: images/val\nval: images/val\nnc: 2\n")
    coco = load_yolo_set(tmp_path / "data.yaml", "val", ["cat", "dog"])
    assert [c["name"] for c in coco.ground_truth["categories"]] == ["cat", "dog"]
    assert any("only nc: 2" in note for note in coco.notes), coco.notes
    with pytest.raises(DataError, match="differ from task.classes"):
        load_yolo_set(tmp_path / "data.yaml", "val", ["cat", "dog", "fox"])


def test_a_class_folder_not_in_task_classes_holding_images_is_refused(tmp_path: Path) -> None:
    from edgebuild.datasets.folders import load_class_folders

    for name in ("cat", "dog", "wolf"):
        (tmp_path / name).mkdir()
        Image.fromarray(_rgb()).save(tmp_path / name / "0.png")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"folders \['wolf'\] hold images but are not in task.classes"):
        load_class_folders(tmp_path, ["cat", "dog"])
    (tmp_path / "wolf" / "0.png").unlink()
    assert len(load_class_folders(tmp_path, ["cat", "dog"])) == 2  # empty extra folders are no set's business
