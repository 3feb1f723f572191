"""The FP32 baseline judged: against chance (k/classes x 1.5; a detection floor) and what the source records."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.accuracy.baseline import (
    CHANCE_FACTOR,
    DETECTION_FLOORS,
    RECORDED_FRACTION,
    BaselineCheck,
    RecordedMetric,
    chance_level,
    judge_baseline,
    majority_share,
)
from edgebuild.project.ultralytics_facts import recorded_metric_of
from edgebuild.workflows.init.preprocess import Convention, choose, conventions, tie_margin

CAUSES = ["normalization: task.preprocess.mean = [0.0], std = [1.0]", "class order: task.classes"]


def _judge(value: float, metric: str = "top-1", classes: int = 10, **kwargs) -> BaselineCheck:
    return judge_baseline(value, metric=metric, classes=classes, backend="onnxruntime-cpu", images=200,
                          dataset="data/split (split 'val')", causes=CAUSES, **kwargs)


def test_chance_level_is_k_over_classes() -> None:
    assert chance_level("top-1", 10) == pytest.approx(0.1)
    assert chance_level("top-5", 10) == pytest.approx(0.5)
    assert chance_level("top-5", 3) == 1.0
    assert chance_level("mAP50-95", 80) == 0.0


@pytest.mark.parametrize(("value", "verdict"), [(0.100, "chance"), (0.15, "chance"), (0.1501, "ok"), (0.9, "ok")])
def test_a_classifier_at_most_one_and_a_half_times_chance_is_at_chance(value: float, verdict: str) -> None:
    check = _judge(value)
    assert check.verdict == verdict
    assert check.floor == pytest.approx(CHANCE_FACTOR * 0.1)
    if verdict == "chance":
        assert check.refuses and check.causes == CAUSES
        assert "0.100" in check.finding and "10 classes" in check.finding and "data/split" in check.finding
        message = check.message("edgebuild.toml")
        assert "1. normalization: task.preprocess.mean" in message and "2. class order" in message
    else:
        assert check.ok and check.causes == [] and not check.refuses


def test_top5_is_judged_against_five_over_classes_and_not_at_all_where_it_is_always_one() -> None:
    assert _judge(0.74, "top-5", classes=10).verdict == "chance"  # 1.5 x 0.5
    assert _judge(0.76, "top-5", classes=10).verdict == "ok"
    assert _judge(1.0, "top-5", classes=4).verdict == "ok"  # top-5 of 4 classes: always 1


@pytest.mark.parametrize("metric", sorted(DETECTION_FLOORS) + ["mask mAP50", "pose mAP50-95", "obb mAP50"])
def test_a_detector_below_the_floor_is_at_chance(metric: str) -> None:
    floor = DETECTION_FLOORS[metric.split()[-1]]  # a task's mask/pose/obb mAP has its detection namesake's floor
    low, fine = _judge(floor * 0.9, metric, classes=80), _judge(floor, metric, classes=80)
    assert low.verdict == "chance" and "floor" in low.finding and low.chance == 0.0
    assert fine.verdict == "ok"


def test_far_below_the_recorded_metric_is_refused_naming_both() -> None:
    recorded = RecordedMetric("mAP50-95", 0.612, "best.pt train_metrics['metrics/mAP50-95(B)']")
    below = _judge(0.2, "mAP50-95", classes=3, recorded=recorded)
    assert below.verdict == "below-recorded" and below.refuses
    assert "0.2000" in below.finding and "0.6120" in below.finding and "best.pt train_metrics" in below.finding
    assert "data/split" in below.finding
    near = _judge(RECORDED_FRACTION * 0.612 + 0.001, "mAP50-95", classes=3, recorded=recorded)
    assert near.verdict == "ok" and near.recorded == pytest.approx(0.612)
    other = _judge(0.2, "mAP50", classes=3, recorded=recorded)  # another metric: not compared, not shown
    assert other.verdict == "ok" and other.recorded is None


def test_accept_and_gate_off_keep_the_finding_but_do_not_refuse() -> None:
    accepted = _judge(0.1, accept=True)
    assert accepted.verdict == "accepted" and accepted.ok and not accepted.refuses and accepted.finding
    assert "ACCEPTED" in accepted.line()
    off = _judge(0.1, enforced=False)
    assert off.verdict == "chance" and not off.refuses and "not enforced" in off.line()


def test_the_record_round_trips() -> None:
    check = _judge(0.1, recorded=RecordedMetric("top-1", 0.97, "digits.onnx metadata_props['val_metric.top-1']"))
    assert BaselineCheck.from_dict(check.as_dict()) == check
    assert "AT CHANCE" in check.line() and "0.9700" in check.line()


# -- review of issue 34 ------------------------------------------------------------------------------

def test_a_majority_predictor_on_an_imbalanced_set_is_at_chance() -> None:
    """Item 7: 9 of 10 images in one class; always answering it scores 0.9, which is chance here."""
    assert majority_share([0] * 9 + [1]) == pytest.approx(0.9)
    assert majority_share([0, 0, 1, 2], k=2) == pytest.approx(0.75) and majority_share([]) == 0.0
    at = _judge(0.9, classes=2, majority=0.9, majority_said="'a_red' (9 of 10 images)")
    assert at.verdict == "chance" and at.chance == pytest.approx(0.9) and at.floor == pytest.approx(0.9)
    assert "always answering 'a_red' (9 of 10 images) scores 0.900" in at.finding, at.finding
    assert "90% of the images" in at.line()
    assert _judge(0.95, classes=2, majority=0.9).verdict == "ok"
    # a balanced set, or a majority below 1.5 x 1/classes: the uniform rule decides as before
    for share in (0.1, 0.103, 0.15):
        balanced = _judge(0.12, majority=share)
        assert balanced.verdict == "chance" and balanced.floor == pytest.approx(0.15) and balanced.majority == 0.0
        assert balanced.chance == pytest.approx(0.1) and "chance is 0.100 for 10 classes" in balanced.finding
    # top-5 of 6 classes (1.5 x 5/6 >= 1) on a set whose five most common classes hold 90%: judged by the majority
    assert _judge(0.85, "top-5", classes=6, majority=0.9).verdict == "chance"
    assert _judge(1.0, "top-1", classes=3, majority=1.0).verdict == "ok"  # a one-class set: nothing told


def test_where_the_chance_floor_reaches_one_nothing_is_judged() -> None:
    """Item 17: top-5 over 6 or 7 classes: 1.5 x 5/6 > 1, so every top-5 was refused; now not judged."""
    for classes in (6, 7):
        check = _judge(1.0, "top-5", classes=classes)
        assert check.verdict == "ok" and not check.judged, check
        assert "chance not judged (top-5 of" in check.line() and "floor" not in check.line()
    assert _judge(0.1, "top-5", classes=6).verdict == "ok"
    assert _judge(0.74, "top-5", classes=10).judged


def test_a_binary_classifier_at_0_6_is_said_at_or_near_chance_with_the_numbers() -> None:
    """Item 18: the issue's 1.5x rule is kept; the words say "at or near" and give the numbers and images."""
    check = _judge(0.6, classes=2)
    assert check.verdict == "chance"
    for said in ("at or near chance", "chance is 0.500 for 2 classes", "0.6000 is at most 1.5x that (0.750)",
                 "200 images"):
        assert said in check.finding, (said, check.finding)


def _onnx_with(path: Path, props: dict[str, str]) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path


def test_a_recorded_percentage_is_read_as_one_and_said_so(tmp_path: Path) -> None:
    """Item 8: ``val_metric.top-1 = "76.1"`` was dropped (only (0, 1] kept); now 0.761, said as a percentage."""
    path = _onnx_with(tmp_path / "m.onnx", {"val_metric.top-1": "76.1", "val_metric.top-5": "93%",
                                            "metrics/mAP50(B)": "0.5", "val_metric.mAP50-95": "250"})
    found = recorded_metric_of(path)
    assert found["top-1"] == ("top-1", pytest.approx(0.761),
                              "m.onnx metadata_props['val_metric.top-1'] = 76.1, read as a percentage")
    assert found["top-5"][1] == pytest.approx(0.93) and "read as a percentage" in found["top-5"][2]
    assert found["mAP50"] == ("mAP50", 0.5, "m.onnx metadata_props['metrics/mAP50(B)']")
    assert "mAP50-95" not in found  # 250 is no metric


def test_preprocessing_from_the_model_s_metadata_puts_the_data_first(tmp_path: Path) -> None:
    """Items 12-15: for an Ultralytics model (preprocessing read from its metadata) the data comes first."""
    from edgebuild.accuracy.baseline import baseline_causes
    from edgebuild.project.config import load_project
    from tests.support.project import write_tiny_project

    project = load_project(write_tiny_project(tmp_path / "tiny"))
    own = baseline_causes(project, from_metadata=False)
    assert own[0].startswith("normalization: task.preprocess.mean")
    meta = baseline_causes(project, from_metadata=True)
    assert meta[0].startswith("the data: the labels or annotations of ") and "empty validation set" in meta[0]
    assert meta[1].startswith("class order: task.classes")
    assert meta[2].startswith("normalization (read from the model's own metadata: rarely the cause): ")
    assert meta[-1].startswith("if this number is right") and len(meta) == len(own) + 1


def _convention(name: str, order: str = "RGB") -> Convention:
    return Convention(name, [0.0] * 3, [1.0] * 3, order, "letterbox")


def test_init_prefers_a_conventional_normalization_where_the_scores_do_not_tell_them_apart() -> None:
    """init chose "0-255" on 10 images by one image, with no note (the note came only within 0.01)."""
    scores = [(_convention("0-1"), 0.3), (_convention("ImageNet"), 0.6), (_convention("0-255"), 0.7),
              (_convention("data"), 0.2)]
    chosen, note = choose(scores, 10)
    assert chosen.name == "ImageNet" and "not a meaningful margin on 10 images" in note, note
    assert "2 conventions score within 0.200 (2 of 10 images) of the best 0.700" in note, note
    assert "chosen ImageNet RGB 0.600 (the conventional one among them) over 0-255 RGB 0.700" in note, note
    chosen, note = choose(scores, 100)  # 0.1 is 10 images of 100: a real difference
    assert chosen.name == "0-255" and note == ""
    assert tie_margin(10) == pytest.approx(0.2) and tie_margin(1000) == pytest.approx(0.01)
    chosen, note = choose([(_convention("0-255"), 0.7), (_convention("data"), 0.69)], 64)  # none conventional
    assert chosen.name == "0-255" and "(the highest)" in note, note
    # a detector's mAP: the best kept within the margin (a small difference is often systematic), noted
    chosen, note = choose([(_convention("ImageNet"), 0.781), (_convention("data"), 0.789)], 64, detection=True)
    assert chosen.name == "data" and "(the highest)" in note, note
    equal = [(_convention("data"), 0.7), (_convention("0-255"), 0.7), (_convention("ImageNet", "BGR"), 0.7)]
    chosen, note = choose(equal, 64, detection=True)  # an equal score: the conventional one
    assert (chosen.name, chosen.channel_order) == ("ImageNet", "BGR") and "(the highest, conventional)" in note, note


def test_only_mean_given_labels_each_std_by_where_it_comes_from() -> None:
    """With only --mean given, every std variant was labelled "given"."""
    names = [c.name for c in conventions(3, "letterbox", {"mean": [0.5] * 3, "channel_order": "RGB"})]
    assert names == ["0-1 std, given mean", "ImageNet std, given mean", "0-255 std, given mean"], names
    both = conventions(3, "letterbox", {"mean": [0.5] * 3, "std": [0.5] * 3})
    assert {c.name for c in both} == {"given"} and len(both) == 2  # RGB and BGR
    only_std = conventions(1, "letterbox", {"std": [0.5]})
    assert [c.name for c in only_std] == ["0-1 mean, given std", "ImageNet mean, given std"]


# -- issue 38: what a pose / segmentation / OBB checkpoint records, read by its task ----------------------

#: every key Ultralytics' metrics write, at a value of its own (SegmentMetrics: (B) and (M); PoseMetrics: (B) and
#: (P); OBBMetrics: DetMetrics' (B), the oriented boxes)
TRAIN_METRICS = {"metrics/mAP50-95(B)": 0.61, "metrics/mAP50(B)": 0.81, "metrics/mAP50-95(M)": 0.52,
                 "metrics/mAP50(M)": 0.72, "metrics/mAP50-95(P)": 0.43, "metrics/mAP50(P)": 0.63,
                 "metrics/accuracy_top1": 0.91, "metrics/accuracy_top5": 0.99, "fitness": 0.7}
RECORDED_BY_TASK = {
    "DetectionModel": {"mAP50-95": "metrics/mAP50-95(B)", "mAP50": "metrics/mAP50(B)",
                       "top-1": "metrics/accuracy_top1", "top-5": "metrics/accuracy_top5"},
    "ClassificationModel": {"mAP50-95": "metrics/mAP50-95(B)", "mAP50": "metrics/mAP50(B)",
                            "top-1": "metrics/accuracy_top1", "top-5": "metrics/accuracy_top5"},
    "SegmentationModel": {"mask mAP50-95": "metrics/mAP50-95(M)", "mask mAP50": "metrics/mAP50(M)",
                          "box mAP50-95": "metrics/mAP50-95(B)", "box mAP50": "metrics/mAP50(B)"},
    "PoseModel": {"pose mAP50-95": "metrics/mAP50-95(P)", "pose mAP50": "metrics/mAP50(P)",
                  "box mAP50-95": "metrics/mAP50-95(B)", "box mAP50": "metrics/mAP50(B)"},
    "OBBModel": {"obb mAP50-95": "metrics/mAP50-95(B)", "obb mAP50": "metrics/mAP50(B)"},
}


def _checkpoint(path: Path, monkeypatch: pytest.MonkeyPatch, model_class: str, **state: object) -> Path:
    """A checkpoint-shaped zip (``archive/data.pkl``) of a stand-in ``ultralytics.nn.tasks.<model_class>`` and
    ``TRAIN_METRICS``, as a trained best.pt records them; read without running it, so torch is not needed."""
    import pickle
    import sys
    import types
    import zipfile

    with monkeypatch.context() as patched:
        for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks"):
            patched.setitem(sys.modules, name, types.ModuleType(name))
        cls = type(model_class, (), {"__module__": "ultralytics.nn.tasks"})
        setattr(sys.modules["ultralytics.nn.tasks"], model_class, cls)
        model = cls()
        model.__dict__.update(state)
        data = pickle.dumps({"model": model, "version": "8.4.0", "train_args": {"imgsz": 128},
                             "train_metrics": TRAIN_METRICS}, protocol=2)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
    return path


@pytest.mark.parametrize("model_class", sorted(RECORDED_BY_TASK))
def test_each_task_reads_the_key_its_ultralytics_metrics_write(tmp_path: Path, monkeypatch, model_class) -> None:
    from edgebuild.project.ultralytics_facts import TASKS, facts_for_source

    path = _checkpoint(tmp_path / "best.pt", monkeypatch, model_class)
    expected = {metric: (metric, TRAIN_METRICS[key], f"best.pt train_metrics[{key!r}]")
                for metric, key in RECORDED_BY_TASK[model_class].items()}
    assert recorded_metric_of(path) == expected  # the kind from the checkpoint's own task
    facts = facts_for_source(path)
    assert facts is not None
    assert recorded_metric_of(path, TASKS[facts.task]) == expected  # or the project's


def test_an_obb_project_far_below_what_its_checkpoint_records_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Before issue 38 an OBB checkpoint's (B) was read as "mAP50-95", a metric no OBB project has: not shown,
    not checked. Now it is its obb mAP50-95, shown and checked as a detector's mAP50-95 is."""
    import importlib.util

    from edgebuild.accuracy.baseline import judge_project_baseline
    from edgebuild.project.config import load_project
    from edgebuild.project.ultralytics_facts import recorded_metric
    from edgebuild.workflows.init.project_file import init_from_files
    from tests.support.task_datasets import obb_dataset

    checkpoint = _checkpoint(tmp_path / "best.pt", monkeypatch, "OBBModel", names={0: "bar", 1: "block"},
                             stride=[8, 16, 32], args={"imgsz": 128, "task": "obb"})
    find_spec = importlib.util.find_spec  # init checks only that ultralytics is installed: it is said to be
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "ultralytics" else find_spec(name, *rest))
    init_from_files(tmp_path / "p", model=checkpoint, data=obb_dataset(tmp_path / "data", train=2, val=2),
                    trust_checkpoint=True)
    project = load_project(tmp_path / "p")
    assert project.metric == "obb mAP50-95"
    where = "best.pt train_metrics['metrics/mAP50-95(B)']"
    assert recorded_metric(project) == ("obb mAP50-95", 0.61, where)
    below = judge_project_baseline(project, 0.2, backend="onnxruntime-cpu", images=2)
    assert below.verdict == "below-recorded" and below.refuses, below
    assert "far below the 0.6100 its source records" in below.finding and where in below.finding, below.finding
    assert f"the source records 0.6100 ({where})" in below.line()
    near = judge_project_baseline(project, 0.5, backend="onnxruntime-cpu", images=2)
    assert near.verdict == "ok" and near.recorded == pytest.approx(0.61)


def test_an_ultralytics_export_s_metadata_is_read_by_its_task(tmp_path: Path) -> None:
    props = {"author": "Ultralytics", "task": "pose", "metrics/mAP50-95(P)": "0.43", "metrics/mAP50-95(B)": "0.61",
             "val_metric.pose mAP50": "0.63"}
    path = _onnx_with(tmp_path / "pose.onnx", props)
    found = recorded_metric_of(path)
    assert found == {"pose mAP50-95": ("pose mAP50-95", 0.43, "pose.onnx metadata_props['metrics/mAP50-95(P)']"),
                     "box mAP50-95": ("box mAP50-95", 0.61, "pose.onnx metadata_props['metrics/mAP50-95(B)']"),
                     "pose mAP50": ("pose mAP50", 0.63, "pose.onnx metadata_props['val_metric.pose mAP50']")}
    assert recorded_metric_of(path, "detection")["mAP50-95"][1] == 0.61  # the project's kind, where it is given


def test_the_channel_order_is_resolved_only_by_a_paired_difference_beyond_its_noise() -> None:
    from edgebuild.workflows.init.preprocess import channel_order_resolved

    assert not channel_order_resolved([0.1, -0.05, 0.2, 0.0, -0.12])[0]  # 5 images: too few whatever they say
    decided, words = channel_order_resolved([0.3] * 5 + [0.0] * 5)  # 5 of 10 images better, none worse
    assert decided and "over 10 images" in words, words
    noisy, words = channel_order_resolved([0.2, -0.15, 0.1, -0.1, 0.05, 0.0, -0.05, 0.1, 0.02, 0.03])
    assert not noisy and "not above 2 standard errors" in words, words
    assert not channel_order_resolved([-0.3] * 20)[0]


def _measured(monkeypatch, tmp_path: Path, rgb: list[float], bgr: list[float]):
    """measure_conventions on the tiny detector's project with each convention's per-image scores given."""
    import numpy as np

    from edgebuild.project.config import load_project
    from edgebuild.workflows.init import preprocess as init_preprocess
    from tests.support.project import write_tiny_project

    project = load_project(write_tiny_project(tmp_path / "tiny"))

    def score(project, runner, convention, images):
        each = bgr if convention.channel_order == "BGR" else rgb
        each = [v * (1.0 if convention.name == "0-1" else 0.5) for v in each]  # 0-1 the best normalization
        return float(np.mean(each)), len(each), tuple(each)

    monkeypatch.setattr(init_preprocess, "_score", score)
    monkeypatch.setattr(init_preprocess, "_runner", lambda project: type("R", (), {"backend": "fake"})())
    monkeypatch.setattr(init_preprocess, "sample_statistics", lambda project, images: {})
    return init_preprocess.measure_conventions(project, {})


def test_init_keeps_rgb_where_the_sample_cannot_tell_bgr_from_noise(monkeypatch, tmp_path: Path) -> None:
    """Issue 44: BGR was chosen for a model trained on RGB from 5 validation images (0.7509 vs 0.7247)."""
    measured = _measured(monkeypatch, tmp_path, rgb=[0.80, 0.60, 0.90, 0.70, 0.6235],
                         bgr=[0.85, 0.55, 0.95, 0.72, 0.6845])
    assert measured.chosen.channel_order == "RGB" and measured.chosen.name == "0-1"
    said = "\n".join(measured.lines)
    assert "could not tell the channel order from 5 validation images" in said, said
    assert "0-1 BGR letterbox 0.7509 against 0-1 RGB letterbox 0.7247" in said, said
    assert "kept the convention, RGB" in said and 'channel_order = "BGR"' in said, said
    assert "could not tell the channel order" in measured.said


def test_init_chooses_bgr_where_every_image_says_so(monkeypatch, tmp_path: Path) -> None:
    rgb = [0.1 + 0.01 * (i % 7) for i in range(24)]
    measured = _measured(monkeypatch, tmp_path, rgb=rgb, bgr=[v + 0.5 for v in rgb])
    assert measured.chosen.channel_order == "BGR", measured.lines
    assert "could not tell" not in "\n".join(measured.lines)
