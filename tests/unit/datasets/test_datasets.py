"""Dataset formats read into the one internal form: YOLO data.yaml, COCO JSON, Pascal VOC, class folders.

Every dataset here is a few tiny images written by the test; the tiny project (tests/support/project.py,
classes "a" and "b") gets its [data] section replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgebuild.datasets.project_data import (
    calibration_digest,
    calibration_images,
    data_format,
    describe_data,
    load_validation_set,
    prepare_data,
    validation_digest,
)
from edgebuild.datasets.yolo import label_path
from edgebuild.errors import ConfigError, DataError
from edgebuild.project.config import load_project
from tests.support.project import TINY_TOML, write_tiny_classifier_project, write_tiny_project

WIDTH, HEIGHT = 64, 48


def _image(path: Path, seed: int = 0, size: tuple[int, int] = (WIDTH, HEIGHT)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _project(root: Path, data: str) -> Path:
    """The tiny detection project with its [data] section replaced by ``data``."""
    head, rest = TINY_TOML.split("[data]\n", 1)
    write_tiny_project(root, head + data.strip() + "\n\n[accuracy]" + rest.split("[accuracy]", 1)[1])
    return root


def _yolo(root: Path, *, names: object = ("a", "b"), train: int = 3, val: int = 2,
          labels: dict[str, str] | None = None, extra: str = "") -> Path:
    """data/yolo: images/{train,val}/<i>.png, labels/val/<i>.txt; returns the data.yaml."""
    base = root / "data" / "yolo"
    for split, count in (("train", train), ("val", val)):
        for i in range(count):
            _image(base / "images" / split / f"{split}{i}.png", seed=100 * (split == "val") + i)
    labels = {"val0": "0 0.5 0.5 0.25 0.5\n1 0.25 0.25 0.125 0.25\n"} if labels is None else labels
    for stem, text in labels.items():
        (base / "labels" / "val").mkdir(parents=True, exist_ok=True)
        (base / "labels" / "val" / f"{stem}.txt").write_text(text)
    names_text = json.dumps(names if isinstance(names, dict) else list(names))
    (base / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\nnames: {names_text}\n{extra}")
    return base / "data.yaml"


YOLO_DATA = '[data]\ndataset = "data/yolo/data.yaml"\n'


def _load(root: Path):
    project = load_project(root)
    return project, *load_validation_set(project)


# -- YOLO --------------------------------------------------------------------------------------------

def test_yolo_labels_become_coco_pixel_boxes_with_the_images_own_size(tmp_path: Path) -> None:
    _yolo(tmp_path, names={0: "a", 1: "b"})
    project, coco, samples = _load(_project(tmp_path, YOLO_DATA))
    assert [s.path.name for s in samples] == ["val0.png", "val1.png"]  # val1 has no label file: no objects
    assert coco.format == "yolo" and coco.category_ids == [1, 2]
    boxes = [(a["image_id"], a["category_id"], a["bbox"], a["iscrowd"]) for a in coco.ground_truth["annotations"]]
    assert boxes == [(1, 1, [24.0, 12.0, 16.0, 24.0], 0), (1, 2, [12.0, 6.0, 8.0, 12.0], 0)]
    assert coco.ground_truth["images"][0] | {"file_name": ""} == {"id": 1, "file_name": "", "width": 64, "height": 48}
    assert [c["name"] for c in coco.ground_truth["categories"]] == ["a", "b"]
    fmt = data_format(project)
    assert (fmt.name, fmt.key, fmt.told) == ("yolo", "data.dataset", "a YOLO data.yaml")
    assert [p.name for p in calibration_images(project)] == ["train0.png", "train1.png", "train2.png"]
    summary = describe_data(project)
    assert str(summary) == "YOLO data.yaml (val: 2 images, 2 classes; calibration: train, 3 images)"
    assert summary.as_dict()["format"] == "yolo"


def test_yolo_splits_as_image_lists_and_lists_of_folders_resolve_as_ultralytics_does(tmp_path: Path) -> None:
    base = tmp_path / "data" / "sets"
    for folder, count in (("images/a", 2), ("images/b", 1), ("images/c", 2)):
        for i in range(count):
            _image(base / folder / f"{folder[-1]}{i}.jpg", seed=i)
    (base / "images" / "b" / ".hidden.jpg").write_bytes(b"not looked at")
    (base / "labels" / "c").mkdir(parents=True)
    (base / "labels" / "c" / "c0.txt").write_text("1 0.5 0.5 1 1\n")
    (base / "val.txt").write_text("./images/c/c0.jpg\nimages/c/c1.jpg\n\n")
    # `path` is relative to the data.yaml's folder; a `../` split missing there is tried without it
    (tmp_path / "data" / "cfg").mkdir()
    (tmp_path / "data" / "cfg" / "data.yaml").write_text(
        "path: ../sets\ntrain: [images/a, images/b]\nval: ../val.txt\nnames: [a, b]\n")
    project, coco, samples = _load(_project(tmp_path, '[data]\ndataset = "data/cfg"\n'))
    assert data_format(project).path.name == "data.yaml"  # a folder holding one data.yaml
    assert [s.path.name for s in samples] == ["c0.jpg", "c1.jpg"]
    assert coco.ground_truth["annotations"][0]["bbox"] == [0.0, 0.0, 64.0, 48.0]
    assert [p.name for p in calibration_images(project)] == ["a0.jpg", "a1.jpg", "b0.jpg"]


def test_yolo_label_path_replaces_the_last_images_folder() -> None:
    assert label_path(Path("/d/images/x/images/train/a.b.jpg")) == Path("/d/images/x/labels/train/a.b.txt")
    assert label_path(Path("/d/pictures/a.png")) == Path("/d/pictures/a.txt")


def test_yolo_polygons_keypoints_duplicates_and_blank_lines(tmp_path: Path) -> None:
    _yolo(tmp_path, labels={"val0": "0 0.25 0.25 0.75 0.25 0.5 0.75\n\n0 0.25 0.25 0.75 0.25 0.5 0.75\n",
                            "val1": "1 0.5 0.5 0.5 0.5\n1 0.50 0.5 0.5 0.5\n"})
    _, coco, _ = _load(_project(tmp_path, YOLO_DATA))
    assert [(a["image_id"], a["bbox"]) for a in coco.ground_truth["annotations"]] == [
        (1, [16.0, 12.0, 32.0, 24.0]), (2, [16.0, 12.0, 32.0, 24.0])]
    _yolo(tmp_path, labels={"val0": "0 0.5 0.5 0.5 0.5 0.1 0.2 2 0.3 0.4 1\n", "val1": ""}, extra="kpt_shape: [2, 3]\n")
    _, coco, _ = _load(tmp_path)
    assert [a["bbox"] for a in coco.ground_truth["annotations"]] == [[16.0, 12.0, 32.0, 24.0]]


@pytest.mark.parametrize("line, words", [
    ("2 0.5 0.5 0.1 0.1", "class 2 is out of range: the data.yaml names 2 classes (0..1)"),
    ("-1 0.5 0.5 0.1 0.1", "class -1 is out of range"),
    ("0.5 0.5 0.5 0.1 0.1", "class 0.5 is out of range"),
    ("0 0.5 1.5 0.1 0.1", "coordinates must be normalised to [0, 1] by the image size, found 1.5"),
    ("0 12 20 30 40", "found 12, 20, 30, 40"),
    ("0 0.5 0.5 0.1", "4 fields, needs 5 (class cx cy w h) or a polygon"),
    ("0 0.5 0.5 0.1 0.1 0.3", "6 fields"),
    ("0 0.5 0.5 0.1 zero", "not numbers"),
])
def test_a_bad_yolo_label_line_names_the_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    _yolo(tmp_path, labels={"val1": f"0 0.5 0.5 0.1 0.1\n{line}\n"})
    with pytest.raises(DataError) as caught:
        _load(_project(tmp_path, YOLO_DATA))
    labels = tmp_path / "data" / "yolo" / "labels" / "val" / "val1.txt"
    assert caught.value.message.startswith(f"data.dataset: {labels}:2: ") and words in caught.value.message


def test_yolo_names_must_be_task_classes_and_the_error_names_both(tmp_path: Path) -> None:
    _yolo(tmp_path, names=["b", "a"])
    with pytest.raises(DataError) as caught:
        _load(_project(tmp_path, YOLO_DATA))
    assert "names ['b', 'a'] differ from task.classes ['a', 'b']" in caught.value.message
    _yolo(tmp_path, names={0: "a", 2: "b"})
    with pytest.raises(DataError, match=r"'names' needs ids 0..1, found \[0, 2\]"):
        _load(tmp_path)


@pytest.mark.parametrize("yaml_text, words", [
    ("path: .\ntrain: images/train\nval: images/missing\nnames: [a, b]\n", "val: "),
    ("path: .\ntrain: images/train\nval: images/empty\nnames: [a, b]\n", "no images"),
    ("path: .\ntrain: images/train\nnames: [a, b]\n", "'val' missing"),
    ("path: .\ntrain: images/train\nval: images/val\n", "'names' missing"),
    ("path: .\ntrain: images/train\nval: images/val\nnames: [a, b]\nnc: 3\n", "'names' has 2 classes but 'nc' is 3"),
    ("- just\n- a list\n", "is not a YOLO data.yaml"),
    ("path: .\ntrain: images/train\nval: {a: 1}\nnames: [a, b]\n", "'val' must be a folder"),
    ("names: [a, b\n", "is not valid YAML"),
])
def test_a_bad_data_yaml_names_the_file_and_key(tmp_path: Path, yaml_text: str, words: str) -> None:
    data_yaml = _yolo(tmp_path)
    (data_yaml.parent / "images" / "empty").mkdir()
    data_yaml.write_text(yaml_text)
    with pytest.raises(DataError) as caught:
        _load(_project(tmp_path, '[data]\ndataset = "data/yolo/data.yaml"\nformat = "yolo"\n'))
    assert caught.value.message.startswith(f"data.dataset: {data_yaml}") and words in caught.value.message
    if "missing" in yaml_text:
        assert "images/missing does not exist" in caught.value.message


def test_validate_refuses_a_bad_label_before_measuring_and_writes_nothing(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from edgebuild.cli import main

    _yolo(tmp_path, labels={"val0": "0 0.5 0.5 0.25 0.5\n7 0.5 0.5 0.1 0.1\n"})
    result = CliRunner().invoke(main, ["validate", "-p", str(_project(tmp_path, YOLO_DATA))])
    assert result.exit_code == 5, result.output
    assert "val0.txt:2: class 7 is out of range" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "build" / "gate").exists()


def test_duplicate_image_names_in_a_split_and_corrupt_images_are_refused(tmp_path: Path) -> None:
    data_yaml = _yolo(tmp_path)
    _image(data_yaml.parent / "images" / "val" / "val0.jpg")
    with pytest.raises(DataError, match="val: 1 image name.s. appear more than once: val0: .*val0.jpg, .*val0.png"):
        _load(_project(tmp_path, YOLO_DATA))
    (data_yaml.parent / "images" / "val" / "val0.jpg").unlink()
    (data_yaml.parent / "images" / "val" / "val1.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="val1.png: cannot read image"):
        _load(tmp_path)


def test_a_split_list_naming_a_missing_image_names_the_line(tmp_path: Path) -> None:
    data_yaml = _yolo(tmp_path)
    (data_yaml.parent / "val.txt").write_text("./images/val/val0.png\n./images/val/nope.png\n")
    data_yaml.write_text("path: .\ntrain: images/train\nval: val.txt\nnames: [a, b]\n")
    with pytest.raises(DataError, match=r"val.txt:2: image .*nope.png does not exist"):
        _load(_project(tmp_path, YOLO_DATA))


# -- Pascal VOC --------------------------------------------------------------------------------------

def _voc_xml(objects: list[tuple[str, int, int, int, int, int]], size: tuple[int, int] = (WIDTH, HEIGHT),
             filename: str = "") -> str:
    body = "".join(f"<object><name>{n}</name><difficult>{d}</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin>"
                   f"<xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox><part><name>hand</name><bndbox><xmin>1</xmin>"
                   f"<ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></part></object>"
                   for n, x1, y1, x2, y2, d in objects)
    return (f"<annotation><filename>{filename}</filename><size><width>{size[0]}</width><height>{size[1]}</height>"
            f"<depth>3</depth></size>{body}</annotation>")


def _voc(root: Path, objects: dict[str, list] | None = None, splits: dict[str, list[str]] | None = None) -> Path:
    base = root / "data" / "VOC"
    objects = {"v0": [("a", 1, 1, 10, 20, 0), ("b", 5, 6, 64, 48, 1)], "v1": [], "t0": [], "t1": []} \
        if objects is None else objects
    for i, (stem, found) in enumerate(objects.items()):
        _image(base / "JPEGImages" / f"{stem}.png", seed=i)
        (base / "Annotations").mkdir(parents=True, exist_ok=True)
        (base / "Annotations" / f"{stem}.xml").write_text(_voc_xml(found))
    (base / "ImageSets" / "Main").mkdir(parents=True, exist_ok=True)
    for split, ids in (splits or {"train": ["t0", "t1"], "val": ["v0", "v1"]}).items():
        (base / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return base


VOC_DATA = '[data]\ndataset = "data/VOC"\n'


def test_voc_one_based_inclusive_boxes_and_difficult_objects_as_crowd_regions(tmp_path: Path) -> None:
    _voc(tmp_path)
    project, coco, samples = _load(_project(tmp_path, VOC_DATA))
    assert [s.path.name for s in samples] == ["v0.png", "v1.png"] and coco.format == "voc"
    assert [(a["category_id"], a["bbox"], a["iscrowd"]) for a in coco.ground_truth["annotations"]] == [
        (1, [0.0, 0.0, 10.0, 20.0], 0), (2, [4.0, 5.0, 60.0, 43.0], 1)]  # <part> boxes are not objects
    assert [p.name for p in calibration_images(project)] == ["t0.png", "t1.png"]
    assert str(describe_data(project)) == "Pascal VOC VOC (val: 2 images, 2 classes; calibration: train, 2 images)"


def test_voc_annotations_folder_with_an_images_folder(tmp_path: Path) -> None:
    base = _voc(tmp_path)
    (base / "Annotations" / "v0.xml").write_text(_voc_xml([("b", 2, 3, 4, 5, 0)], filename="v0.png"))
    project, coco, samples = _load(_project(tmp_path, '[data]\ncalibration_images = "data/calibration"\n\n'
                                                      '[data.validation]\nannotations = "data/VOC/Annotations"\n'
                                                      'images = "data/VOC/JPEGImages"\n'))
    assert data_format(project).name == "voc" and len(samples) == 4
    assert coco.ground_truth["annotations"][0]["bbox"] == [1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("objects, words", [
    ({"v0": [("cat", 1, 1, 5, 5, 0)]}, "objects of classes that are not in task.classes ['a', 'b']: 'cat' (v0.xml)"),
    ({"v0": [("a", 9, 1, 5, 5, 0)]}, "object 1 (a): xmax/ymax below xmin/ymin"),
    ({"v0": [("a", 1, 1, 5, 5, 2)]}, "<difficult> must be 0 or 1"),
    ({"v0": [("a", "nan", 1, 5, 5, 0)]}, "<bndbox> needs finite numbers"),
    ({"v0": [("a", "one", 1, 5, 5, 0)]}, "<bndbox> needs numbers xmin, ymin, xmax, ymax"),
])
def test_bad_voc_objects_name_the_file_object_and_classes(tmp_path: Path, objects, words: str) -> None:
    _voc(tmp_path, {**objects, "t0": []}, {"train": ["t0"], "val": ["v0"]})
    with pytest.raises(DataError) as caught:
        _load(_project(tmp_path, VOC_DATA))
    assert caught.value.message.startswith("data.dataset: ") and words in caught.value.message


def test_voc_problems_with_sizes_splits_and_xml(tmp_path: Path) -> None:
    base = _voc(tmp_path)
    _project(tmp_path, VOC_DATA)
    (base / "Annotations" / "v1.xml").write_text(_voc_xml([], size=(48, 64)))
    with pytest.raises(DataError, match="v1.xml: <size> says 48x64, but .*v1.png is 64x48"):
        _load(tmp_path)
    (base / "Annotations" / "v1.xml").write_text("<annotation><object>")
    with pytest.raises(DataError, match="v1.xml is not valid XML"):
        _load(tmp_path)
    (base / "ImageSets" / "Main" / "val.txt").write_text("v0\nv1\nv0\n")
    with pytest.raises(DataError, match=r"val.txt:3: image id 'v0' again \(first on line 1\)"):
        _load(tmp_path)
    (base / "ImageSets" / "Main" / "val.txt").unlink()
    with pytest.raises(DataError, match=r"has no split list ImageSets/Main/val.txt \(lists: train\)"):
        _load(tmp_path)


# -- one format where another is expected ------------------------------------------------------------

def test_a_data_yaml_given_as_coco_annotations_says_what_it_is_and_which_key_takes_it(tmp_path: Path) -> None:
    _yolo(tmp_path)
    _project(tmp_path, '[data]\ncalibration_images = "data/calibration"\n\n[data.validation]\n'
                       'annotations = "data/yolo/data.yaml"\nimages = "data/yolo/images/val"\n')
    with pytest.raises(DataError) as caught:
        _load(tmp_path)
    message = caught.value.message
    assert message.startswith("data.validation.annotations: ") and "is a YOLO data.yaml" in message
    assert "data.dataset takes it" in message and "not valid JSON" not in message


@pytest.mark.parametrize("dataset, words", [
    ("data/val/annotations.json", "is a COCO annotations file, not a dataset edgebuild reads"),
    ("data/VOC/Annotations/v0.xml", "is one Pascal VOC annotation (XML)"),
    ("data/calibration", "is a folder of images"),
])
def test_a_file_of_another_kind_given_as_dataset(tmp_path: Path, dataset: str, words: str) -> None:
    _voc(tmp_path)
    _project(tmp_path, f'[data]\ndataset = "{dataset}"\n')
    with pytest.raises(DataError) as caught:
        _load(tmp_path)
    assert caught.value.message.startswith("data.dataset: ") and words in caught.value.message


def test_an_xml_file_given_as_coco_annotations(tmp_path: Path) -> None:
    _voc(tmp_path)
    _project(tmp_path, '[data]\ncalibration_images = "data/calibration"\n\n[data.validation]\n'
                       'annotations = "data/VOC/Annotations/v0.xml"\nimages = "data/VOC/JPEGImages"\n')
    with pytest.raises(DataError, match="is one Pascal VOC annotation .XML., not a COCO JSON file.*folder of XML"):
        _load(tmp_path)


def test_a_declared_format_must_match_the_files(tmp_path: Path) -> None:
    _yolo(tmp_path)
    _project(tmp_path, '[data]\ndataset = "data/yolo/data.yaml"\nformat = "voc"\n')
    with pytest.raises(DataError, match="data.format is 'voc', but .*data.yaml is a YOLO data.yaml"):
        _load(tmp_path)


# -- the project file ----------------------------------------------------------------------------------

@pytest.mark.parametrize("data, key, words", [
    ('[data]\ndataset = "data/yolo/data.yaml"\ncalibration_split = "val"\n', "data.calibration_split",
     "'val' is also data.validation_split"),
    ('[data]\ndataset = "data/yolo/data.yaml"\n\n[data.validation]\nimages = "data/val/images"\n',
     "data.validation.images", "not used with data.dataset"),
    ('[data]\n\n[data.validation]\nimages = "data/val/images"\nannotations = "data/val/annotations.json"\n',
     "data.calibration_images", "required key is missing"),
    ('[data]\ncalibration_images = "data/calibration"\n', "data.validation.images", "required key is missing"),
    ('[data]\ncalibration_images = "data/calibration"\n\n[data.validation]\nimages = "data/val/images"\n',
     "data.validation.annotations", "a COCO JSON file or a folder of Pascal VOC XML files"),
    ('[data]\ndataset = "data/yolo/data.yaml"\nformat = "folders"\n', "data.format",
     "'folders' is classification data; task.kind is 'detection'"),
    ('[data]\ndataset = "data/val/annotations.json"\nformat = "coco"\n', "data.format",
     "name it with data.validation.annotations"),
    ('[data]\ncalibration_images = "data/calibration"\nvalidation_split = "test"\n\n[data.validation]\n'
     'images = "data/val/images"\nannotations = "data/val/annotations.json"\n', "data.validation_split",
     "data.dataset is not set"),
    ('[data]\ndataset = "data/yolo/data.yaml"\ncalibration_split = "../train"\n', "data.calibration_split",
     "must be a split name"),
    ('[data]\ndataset = "data/nope.yaml"\n', "data.dataset", "path does not exist"),
])
def test_data_keys_that_do_not_fit_together_are_config_errors(tmp_path: Path, data: str, key: str, words: str) -> None:
    _yolo(tmp_path)
    _project(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path)
    assert f"{key}: " in str(caught.value) and words in str(caught.value)


# -- digests, caps, calibration against validation ------------------------------------------------------

def test_digests_cover_labels_and_the_data_yaml(tmp_path: Path) -> None:
    data_yaml = _yolo(tmp_path)
    project = load_project(_project(tmp_path, YOLO_DATA))
    val, cal = validation_digest(project), calibration_digest(project)
    label = data_yaml.parent / "labels" / "val" / "val0.txt"
    label.write_text("0 0.5 0.5 0.25 0.4\n")
    assert validation_digest(project) != val and calibration_digest(project) == cal  # calibration reads no labels
    val = validation_digest(project)
    (data_yaml.parent / "labels" / "val" / "val1.txt").write_text("1 0.5 0.5 0.25 0.4\n")  # a new label file
    assert validation_digest(project) != val
    val = validation_digest(project)
    data_yaml.write_text(data_yaml.read_text() + "# a comment\n")
    assert validation_digest(project) != val and calibration_digest(project) != cal
    cal = calibration_digest(project)
    _image(data_yaml.parent / "images" / "train" / "train0.png", seed=7)
    assert calibration_digest(project) != cal


def test_voc_digest_covers_the_xml_and_the_split_list(tmp_path: Path) -> None:
    base = _voc(tmp_path)
    project = load_project(_project(tmp_path, VOC_DATA))
    val = validation_digest(project)
    (base / "Annotations" / "v1.xml").write_text(_voc_xml([("a", 1, 1, 3, 3, 0)]))
    assert validation_digest(project) != val
    val = validation_digest(project)
    (base / "ImageSets" / "Main" / "val.txt").write_text("v1\nv0\n")
    assert validation_digest(project) != val


def test_coco_and_class_folder_digests_are_what_they_were(tiny_project: Path, tmp_path: Path) -> None:
    from edgebuild.content import files_digest

    project = load_project(tiny_project)
    images = sorted((tiny_project / "data" / "val" / "images").iterdir())
    assert validation_digest(project) == files_digest([tiny_project / "data/val/annotations.json", *images])
    assert calibration_digest(project) == files_digest(sorted((tiny_project / "data" / "calibration").iterdir()))
    root = tmp_path / "classifier"
    write_tiny_classifier_project(root)
    classifier = load_project(root)
    files = sorted((root / "data" / "val").rglob("*.png"))
    assert validation_digest(classifier) == files_digest(files, root=root / "data" / "val")


def test_caps_apply_to_dataset_splits(tmp_path: Path) -> None:
    _yolo(tmp_path, train=5, val=4)
    project = load_project(_project(tmp_path, YOLO_DATA.replace("\n", "\nmax_calibration_images = 2\n", 1)
                                    + "\n[data.validation]\nmax_images = 3\n"))
    assert len(load_validation_set(project)[1]) == 3 and len(calibration_images(project)) == 2
    assert len(load_validation_set(project, limit=1)[1]) == 1


def test_calibration_images_that_are_validation_images_are_refused(tmp_path: Path) -> None:
    data_yaml = _yolo(tmp_path)
    data_yaml.write_text(data_yaml.read_text().replace("train: images/train", "train: [images/train, images/val]"))
    project = load_project(_project(tmp_path, YOLO_DATA))
    with pytest.raises(DataError) as caught:
        calibration_digest(project)
    assert caught.value.message.startswith("data.calibration_split: 2 of the 5 calibration images are validation")
    with pytest.raises(DataError, match="are validation images too"):
        describe_data(project)
    # a calibration folder of its own replaces the split
    project = load_project(_project(tmp_path, YOLO_DATA + 'calibration_images = "data/calibration"\n'))
    assert calibration_digest(project) and [p.parent.name for p in calibration_images(project)] == ["calibration"] * 4
    same = ('[data]\ncalibration_images = "data/val/images"\n\n[data.validation]\n'
            'images = "data/val/images"\nannotations = "data/val/annotations.json"\n')
    project = load_project(_project(tmp_path, same))
    with pytest.raises(DataError, match="data.calibration_images: 4 of the 4 calibration images are validation"):
        calibration_digest(project)


def test_prepare_data_says_what_the_data_is(tmp_path: Path) -> None:
    _yolo(tmp_path)
    project = load_project(_project(tmp_path, YOLO_DATA))
    said: list[str] = []
    assert prepare_data(project, said.append) is False
    assert said == ["data: YOLO data.yaml (val: 2 images, 2 classes; calibration: train, 3 images)"]
    tiny = tmp_path / "tiny"
    write_tiny_project(tiny)
    said.clear()
    prepare_data(load_project(tiny), said.append)
    assert said == ["data: COCO annotations.json (4 images, 2 classes; calibration: calibration/, 4 images)"]


# -- classification ------------------------------------------------------------------------------------

def test_a_classification_dataset_of_split_folders(tmp_path: Path) -> None:
    root = tmp_path / "classifier"
    write_tiny_classifier_project(root)
    for split, count in (("train", 3), ("val", 2)):
        for name in ("cat", "dog", "fox"):
            for i in range(count):
                _image(root / "data" / "set" / split / name / f"{i}.png", seed=i, size=(48, 40))
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    toml.write_text(text.split("[data]")[0] + '[data]\ndataset = "data/set"\nmax_calibration_images = 4\n\n'
                    + "[accuracy]" + text.split("[accuracy]")[1])
    project = load_project(root)
    _, samples = load_validation_set(project)
    assert [(s.path.parent.name, s.label) for s in samples] == [("cat", 0)] * 2 + [("dog", 1)] * 2 + [("fox", 2)] * 2
    assert sorted(p.parent.name for p in calibration_images(project)) == ["cat", "cat", "dog", "fox"]
    assert str(describe_data(project)) == ("class folders set (val: 6 images, 3 classes; calibration: train, 4 images)"
                                           "; capped, evenly spread by file name: calibration 4 of 9 "
                                           "(data.max_calibration_images)")
    val = validation_digest(project)
    (root / "data" / "set" / "val" / "dog" / "0.png").rename(root / "data" / "set" / "val" / "fox" / "9.png")
    assert validation_digest(project) != val
