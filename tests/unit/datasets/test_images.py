"""A capped set keeps images evenly spread over it by file name, the same in every format, and says so.

``images.spread`` is the one rule: the YOLO, COCO and VOC readers, class folders and the calibration
images all cap with it. The sets here are a few tiny images from two "cameras" whose names sort in
two runs (``cam1-*`` then ``cam2-*``), the case that the first images by name got wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgebuild.datasets.coco import read_coco
from edgebuild.datasets.folders import balanced, load_class_folders
from edgebuild.datasets.images import image_stem, list_images, spread
from edgebuild.datasets.project_data import calibration_images, describe_data, load_validation_set
from edgebuild.datasets.voc import load_voc_folder, load_voc_root
from edgebuild.datasets.yolo import load_yolo_set
from edgebuild.project.config import load_project
from tests.support.project import TINY_TOML, write_tiny_project

# nine images, names sorting as six of camera 1, then three of camera 2
NAMES = [f"cam1-{i:02d}" for i in range(6)] + [f"cam2-{i:02d}" for i in range(3)]


def _image(path: Path, seed: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(path)


def test_spread_takes_evenly_spaced_items_by_name_and_keeps_their_order() -> None:
    items = [f"{n}.png" for n in reversed(NAMES)]  # listed in another order than their names sort
    kept = spread(items, 3, lambda item: Path(item).stem)
    assert kept == ["cam2-00.png", "cam1-03.png", "cam1-00.png"]  # by name: the 1st, 4th, 7th of 9; list order
    assert spread(items, None, str) == items and spread(items, 9, str) == items and spread(items, 0, str) == []
    assert len(spread(list(range(1000)), 7, str)) == 7
    # the first three by name are all camera 1; the spread takes each camera in its share (6:3 -> 2:1)
    assert [Path(p).stem[:4] for p in spread(sorted(items), 3, lambda item: Path(item).stem)] == \
        ["cam1", "cam1", "cam2"]


def _three_formats(root: Path) -> tuple[Path, Path, Path]:
    """NAMES as a YOLO data.yaml, a COCO JSON (ids in another order) and a VOC root (its list reversed)."""
    yolo, voc = root / "yolo", root / "VOC"
    images, annotations = [], []
    for seed, name in enumerate(NAMES):
        _image(yolo / "images" / "val" / f"{name}.png", seed)
        _image(voc / "JPEGImages" / f"{name}.png", seed)
        (yolo / "labels" / "val").mkdir(parents=True, exist_ok=True)
        (yolo / "labels" / "val" / f"{name}.txt").write_text("0 0.5 0.5 0.25 0.5\n")
        (voc / "Annotations").mkdir(parents=True, exist_ok=True)
        (voc / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.png</filename><object><name>a</name><bndbox><xmin>13</xmin>"
            "<ymin>7</ymin><xmax>20</xmax><ymax>18</ymax></bndbox></object></annotation>")
        image_id = 100 - seed  # COCO's order, by id, is the names' reversed
        images.append({"id": image_id, "file_name": f"{name}.png", "width": 32, "height": 24})
        annotations.append({"id": seed + 1, "image_id": image_id, "category_id": 1, "bbox": [12, 6, 8, 12],
                            "area": 96, "iscrowd": 0})
    (yolo / "data.yaml").write_text("path: .\ntrain: images/val\nval: images/val\nnames: [a, b]\n")
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    (voc / "ImageSets" / "Main" / "val.txt").write_text("".join(f"{n}\n" for n in reversed(NAMES)))
    coco = root / "coco.json"
    coco.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}))
    return yolo / "data.yaml", coco, voc


def test_a_capped_set_is_the_same_images_in_yolo_coco_and_voc(tmp_path: Path) -> None:
    data_yaml, coco_json, voc = _three_formats(tmp_path)
    sets = {"yolo": load_yolo_set(data_yaml, "val", ["a", "b"], 3),
            "coco": read_coco(coco_json, voc / "JPEGImages", ["a", "b"], 3),
            "voc": load_voc_root(voc, "val", ["a", "b"], 3),
            "voc-folder": load_voc_folder(voc / "Annotations", voc / "JPEGImages", ["a", "b"], 3)}
    taken = {name: sorted(s.path.stem for s in coco.samples) for name, coco in sets.items()}
    assert taken == dict.fromkeys(sets, ["cam1-00", "cam1-03", "cam2-00"]), taken
    assert {name: coco.available for name, coco in sets.items()} == dict.fromkeys(sets, 9)
    # the ground truth follows the images kept: one box each
    assert {name: len(coco.ground_truth["annotations"]) for name, coco in sets.items()} == dict.fromkeys(sets, 3)
    uncapped = read_coco(coco_json, voc / "JPEGImages", ["a", "b"])
    assert len(uncapped.samples) == uncapped.available == 9


def test_class_folders_capped_stay_balanced_and_spread_within_each_class(tmp_path: Path) -> None:
    for seed, name in enumerate(NAMES):
        _image(tmp_path / "cats" / f"{name}.png", seed)
    for seed in range(2):
        _image(tmp_path / "dogs" / f"d{seed}.png", seed)
    samples = load_class_folders(tmp_path, ["cats", "dogs"], 5)
    # a turn each, until the dogs run out: cats get 3 of 9 (spread), dogs both
    assert [(s.label, s.path.stem) for s in samples] == [(0, "cam1-00"), (0, "cam1-03"), (0, "cam2-00"),
                                                         (1, "d0"), (1, "d1")]
    assert [s.image_id for s in samples] == list(range(5))
    groups = [list_images(tmp_path / "cats", "k"), list_images(tmp_path / "dogs", "k")]
    assert [len(g) for g in balanced(groups, 3)] == [2, 1] and balanced(groups, None) == groups
    assert [p.stem for p in list_images(tmp_path / "cats", "k", 2)] == ["cam1-00", "cam1-04"]  # 9 // 2 apart
    assert image_stem(Path("x/cam1-00.png")) == "cam1-00"


def test_the_data_line_says_how_many_of_how_many_a_cap_took(tmp_path: Path) -> None:
    data_yaml, _, _ = _three_formats(tmp_path / "data")
    head, rest = TINY_TOML.split("[data]\n", 1)
    data = ('[data]\ndataset = "data/yolo/data.yaml"\ncalibration_images = "data/calibration"\n'
            "max_calibration_images = 2\n\n[data.validation]\nmax_images = 4\n")
    write_tiny_project(tmp_path, head + data + "\n[accuracy]" + rest.split("[accuracy]", 1)[1])
    project = load_project(tmp_path)
    assert [s.path.stem for s in load_validation_set(project)[1]] == ["cam1-00", "cam1-02", "cam1-04", "cam2-00"]
    assert [p.name for p in calibration_images(project)] == ["0.png", "2.png"]  # 2 of the folder's 4, spread
    summary = describe_data(project)
    assert str(summary) == ("YOLO data.yaml (val: 4 images, 2 classes; calibration: calibration/, 2 images); "
                            "capped, evenly spread by file name: val 4 of 9 (data.validation.max_images), "
                            "calibration 2 of 4 (data.max_calibration_images)")
    assert summary.as_dict()["validation_available"] == 9 and summary.as_dict()["calibration_available"] == 4
