"""The FP32 baseline judged: retention is a ratio, only as true as the number under it.

Every candidate is measured against FP32 on the same images, so an FP32 that is wrong (the most
common cause: preprocessing that is not the training's) makes every candidate "keep" a wrong
number. Before any candidate is decided, the FP32 value is judged twice:

- against chance: a classifier at or below ``CHANCE_FACTOR`` x k/classes (top-k), a detector
  below ``DETECTION_FLOORS`` (docs/accuracy.md says why these numbers);
- against the metric its source records, where it records one (an Ultralytics checkpoint's
  ``train_metrics``; ONNX ``metadata_props``, ``edgebuild.project.ultralytics_facts.recorded_metric``, read
  by the project's task: a pose model's ``(P)`` is its pose mAP, an OBB model's ``(B)`` its obb mAP):
  an FP32 here below ``RECORDED_FRACTION`` of it is refused naming both.

``judge_baseline`` gives a ``BaselineCheck`` record, carried in the gate's result and shown by the
report, the compile summary and ``validate``. The gate refuses on it unless the project says
``accuracy.baseline = "accept"``; with the gate off it is reported, not enforced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from edgebuild.jsontypes import JsonObject

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["BaselineCheck", "judge_baseline"]

#: a classifier scoring at most this many times chance (k/classes for top-k) is at chance
CHANCE_FACTOR = 1.5
#: a detector below these scores finds nothing it was trained to find (docs/accuracy.md: random boxes
#: score about 0.001-0.005 mAP50-95; trained detectors on their own data score 0.1 and up)
DETECTION_FLOORS = {"mAP50-95": 0.02, "mAP50": 0.05}
#: an FP32 here below this fraction of what the source records for itself is far below it
RECORDED_FRACTION = 0.5

VERDICTS = ("ok", "chance", "below-recorded", "accepted")


@dataclass(frozen=True)
class RecordedMetric:
    """A validation metric the model's own file records (what its training measured)."""

    metric: str  # edgebuild's name: mAP50-95, top-1, mask mAP50-95, pose mAP50, obb mAP50-95, ...
    value: float
    where: str  # e.g. "best.pt train_metrics['metrics/mAP50-95(B)']"


@dataclass(frozen=True)
class BaselineCheck:
    """The FP32 baseline against chance and against what the source records."""

    metric: str
    value: float  # the FP32 value measured here
    backend: str
    images: int
    classes: int
    chance: float  # chance level (classification: k/classes); 0 for detection
    floor: float  # at or below (classification) / below (detection) this is "at chance"
    dataset: str
    verdict: str  # ok | chance | below-recorded | accepted
    finding: str = ""  # what is wrong ("" when ok): kept when accepted or with the gate off
    recorded: float | None = None  # the metric the source records, if any
    recorded_from: str = ""
    causes: list[str] = field(default_factory=list)  # most likely first, each with its project key
    enforced: bool = True  # False: the gate is off, the check is reported only
    majority: float = 0.0  # the k most common classes' share of the images, where above k/classes (else 0)

    @property
    def judged(self) -> bool:
        """False where no score can be told from chance (a classifier whose floor reaches 1)."""
        return not self.chance or self.floor < 1.0

    @property
    def ok(self) -> bool:
        return self.verdict in ("ok", "accepted")

    @property
    def refuses(self) -> bool:
        """Whether this check stops the gate."""
        return self.enforced and not self.ok

    def line(self) -> str:
        """One line for tables and summaries."""
        head = f"FP32 {self.metric} {self.value:.4f} on {self.images} images [{self.backend}]"
        common = f"; the most common class(es): {self.majority:.0%} of the images" if self.majority else ""
        bound = (f"chance {self.chance:.3f} ({self.classes} classes{common}), floor {self.floor:.3f}" if self.judged
                 and self.chance else f"floor {self.floor:.3f}" if self.judged else
                 f"chance not judged ({self.metric} of {self.classes} classes: {CHANCE_FACTOR} x chance reaches 1)")
        recorded = f"; the source records {self.recorded:.4f} ({self.recorded_from})" if self.recorded is not None \
            else ""
        said = {"ok": "OK", "chance": "AT CHANCE", "below-recorded": "FAR BELOW WHAT THE SOURCE RECORDS",
                "accepted": "ACCEPTED (accuracy.baseline = \"accept\")"}[self.verdict]
        if not self.enforced and self.verdict != "ok":
            said += " (gate off: reported, not enforced)"
        return f"baseline: {said}: {head}; {bound}{recorded}"

    def message(self, source: str) -> str:
        """The refusal: the numbers, then the causes, most likely first."""
        so = ("so retention cannot be measured (an untrained model, or validation data or preprocessing that does "
              "not match it)" if self.value <= 0 else
              "so as the baseline it would make every candidate's retention a wrong number")
        return (f"{source}: the FP32 model {self.finding}, {so}; likely causes, most likely first:\n"
                + "\n".join(f"  {n}. {c}" for n, c in enumerate(self.causes, 1)))

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> BaselineCheck:
        return cls(**data)


def chance_level(metric: str, classes: int) -> float:
    """k/classes for top-k (capped at 1); 0 for a detection metric (no chance level: a floor instead)."""
    if metric.startswith("top-"):
        return min(1.0, int(metric.split("-", 1)[1]) / max(classes, 1))
    return 0.0


def majority_share(labels: list[int], k: int = 1) -> float:
    """The share of ``labels`` in its ``k`` most common classes: what always answering those scores (0: no labels)."""
    if not labels:
        return 0.0
    counts = sorted(Counter(labels).values(), reverse=True)
    return sum(counts[:k]) / len(labels)


def judge_baseline(value: float, *, metric: str, classes: int, backend: str, images: int, dataset: str,
                   recorded: RecordedMetric | None = None, accept: bool = False, enforced: bool = True,
                   causes: list[str] | None = None, majority: float = 0.0, majority_said: str = "") -> BaselineCheck:
    """The verdict on an FP32 value: "chance", "below-recorded", "accepted" (one of those, but the project
    says it knows) or "ok". ``causes`` (most likely first) are kept where the verdict is not ok.

    ``majority`` (classification): the share of the validation images in the k most common classes, what a
    model that always answers those scores (``majority_said`` names them). A value at most ``CHANCE_FACTOR``
    x k/classes is at or near chance; on a set imbalanced enough that the majority share is above that floor,
    a value at most the majority share is (chance is then that share).
    Where neither floor is below 1 (top-5 of 6 classes: 1.5 x 5/6; a one-class set) nothing can be told: not
    judged."""
    uniform = chance_level(metric, classes)
    chance, said = uniform, ""
    if uniform:
        floors = [f for f in (min(1.0, CHANCE_FACTOR * uniform),) if f < 1.0]
        # the majority counts where it raises the floor (a slightly imbalanced set keeps k/classes)
        if max(floors, default=uniform) < majority < 1.0:
            floors.append(majority)
            chance = majority
        else:
            majority = 0.0
        floor = max(floors, default=1.0)
        at_chance = bool(floors) and value <= floor + 1e-6  # a float32 mean of 9 of 11 is not above 9/11
        if at_chance and majority and majority == floor:  # the majority share is the higher floor
            said = (f"always answering {majority_said or 'the most common class'} scores {majority:.3f} on this "
                    f"imbalanced set, and {value:.4f} is no better")
        elif at_chance:
            said = (f"chance is {uniform:.3f} for {classes} classes and {value:.4f} is at most {CHANCE_FACTOR}x "
                    f"that ({floor:.3f})")
    else:
        # a task's "mask mAP50" or "pose mAP50" has the floor of detection's mAP50
        floor = DETECTION_FLOORS["mAP50"] if metric.endswith("mAP50") else DETECTION_FLOORS["mAP50-95"]
        at_chance = value < floor
        said = f"below the floor {floor:.3f} a detector that finds what it was trained on scores above"
    finding = ""
    if at_chance:
        finding = (f"scores {metric} {value:.4f} on {dataset} ({images} images, {backend}): "
                   + (f"at or near chance ({said})" if uniform else f"at chance ({said})"))
        if recorded is not None and recorded.metric == metric:
            finding += f"; its source records {recorded.value:.4f} ({recorded.where})"
        verdict = "chance"
    elif recorded is not None and recorded.metric == metric and value < RECORDED_FRACTION * recorded.value:
        finding = (f"scores {metric} {value:.4f} on {dataset} ({images} images, {backend}), far below the "
                   f"{recorded.value:.4f} its source records ({recorded.where}; less than "
                   f"{RECORDED_FRACTION:.0%} of it)")
        verdict = "below-recorded"
    else:
        verdict = "ok"
    if verdict != "ok" and accept:
        verdict = "accepted"
    shown = recorded if recorded is not None and recorded.metric == metric else None
    return BaselineCheck(metric=metric, value=float(value), backend=backend, images=images, classes=classes,
                         chance=chance, floor=floor, dataset=dataset, verdict=verdict, finding=finding,
                         recorded=shown.value if shown else None, recorded_from=shown.where if shown else "",
                         causes=list(causes or []) if finding else [], enforced=enforced,
                         majority=majority)


# -- a project's baseline ----------------------------------------------------------------------------

def baseline_causes(project: Project, recorded: bool = False, from_metadata: bool | None = None) -> list[str]:
    """The likely causes of a wrong FP32, most likely first, each naming its key and the value it has now.

    ``from_metadata``: the preprocessing was read from the model's own metadata (an Ultralytics model; None:
    asked of ``model.source``). Then it is rarely the cause and the data comes first: its labels or
    annotations, the class order, an empty or wrong validation set."""
    if from_metadata is None:
        from edgebuild.project.ultralytics_facts import source_facts

        from_metadata = source_facts(project) is not None
    pre = project.task.preprocess
    gray = pre.channel_order == "GRAY"
    imagenet = "[0.449] and [0.226]" if gray else "[0.485, 0.456, 0.406] and [0.229, 0.224, 0.225]"
    causes = [f"normalization: task.preprocess.mean = {pre.mean}, std = {pre.std}: they must be the training's "
              f"(ImageNet's are {imagenet}; a model trained on its own data often uses that data's)"]
    if gray:
        causes.append("channels: task.preprocess.channel_order = \"GRAY\": a model trained on colour images "
                      "wants \"RGB\" or \"BGR\"")
    else:
        other = "BGR" if pre.channel_order == "RGB" else "RGB"
        causes.append(f"channel order: task.preprocess.channel_order = {pre.channel_order!r}: a model trained "
                      f"with OpenCV reads {other!r}" if other == "BGR" else
                      f"channel order: task.preprocess.channel_order = {pre.channel_order!r}: most training "
                      "(PyTorch, PIL, Ultralytics) reads \"RGB\"")
    if project.task.kind == "detection":
        other = "resize" if pre.resize == "letterbox" else "letterbox"
        causes.append(f"resizing: task.preprocess.resize = {pre.resize!r}: a detector trained with {other!r} "
                      f"(Ultralytics: letterbox, pad 114) sees shifted, scaled boxes")
    causes.append(f"pixel range: pixels are scaled to 0-1 before mean/std (std now {pre.std}); a model trained "
                  "on 0-255 wants std = " + str([round(1 / 255, 8)] * pre.channels) + " (mean 0)")
    shown = ", ".join(repr(c) for c in project.task.classes[:6]) + (", ..." if len(project.task.classes) > 6
                                                                     else "")
    order = (f"class order: task.classes = [{shown}] must be in the model's output order (class folders "
             "are read in sorted order; a data.yaml's names in its order)")
    if from_metadata:
        data = (f"the data: the labels or annotations of {dataset_name(project)} must be the ones the model was "
                "trained for: an empty validation set (every label file empty, no annotations, every object "
                "iscrowd or difficult) or another split or label set scores 0 whatever the preprocessing")
        note = " (read from the model's own metadata: rarely the cause)"
        return [data, order] + [c.replace(": ", note + ": ", 1) for c in causes] + [
            "if this number is right (an untrained or deliberately weak model): accuracy.baseline = "
            "\"accept\"; to dry-run the later stages: `edgebuild compile --no-gate`"]
    causes.append(order)
    if recorded:
        causes.append("the data: the validation set here is not the one the source was measured on "
                      "(another split, other labels)")
    causes.append("if this number is right (an untrained or deliberately weak model): accuracy.baseline = "
                  "\"accept\"; to dry-run the later stages: `edgebuild compile --no-gate`")
    return causes


def dataset_name(project: Project) -> str:
    """How messages name the validation data: the dataset and its split, or the images folder."""
    data = project.data
    if data.dataset:
        return f"{data.dataset} (split {data.validation_split!r})"
    return str(data.validation.images or data.validation.annotations or "the validation set")


def judge_project_baseline(project: Project, value: float, *, backend: str, images: int) -> BaselineCheck:
    """The project's FP32 value judged, with what its source records and its accuracy.baseline / gate keys."""
    from edgebuild.project.ultralytics_facts import recorded_metric

    found = recorded_metric(project)
    recorded = RecordedMetric(*found) if found is not None else None
    majority, said = validation_majority(project)
    return judge_baseline(value, metric=project.metric, classes=len(project.task.classes), backend=backend,
                          images=images, dataset=dataset_name(project), recorded=recorded,
                          accept=project.accuracy.baseline == "accept", enforced=project.accuracy.gate,
                          causes=baseline_causes(project, recorded is not None), majority=majority,
                          majority_said=said)


def validation_majority(project: Project, limit: int | None = None) -> tuple[float, str]:
    """A classifier's validation set: the share of its images in the k most common classes (top-k), and
    those classes named with their counts; (0, "") for detection or where the set cannot be read (the
    measurement that preceded says what is wrong with it). Reads file names only, not images."""
    if not project.metric.startswith("top-"):
        return 0.0, ""
    from edgebuild.datasets.project_data import load_validation_set
    from edgebuild.errors import EdgebuildError

    try:
        labels = [s.label for s in load_validation_set(project, limit)[1]]
    except (EdgebuildError, OSError, ValueError):
        return 0.0, ""
    k = int(project.metric.split("-", 1)[1])
    top = Counter(labels).most_common(k)
    names = project.task.classes
    said = ", ".join(f"{names[c]!r}" if 0 <= c < len(names) else str(c) for c, _ in top)
    count = sum(n for _, n in top)
    return majority_share(labels, k), f"{said} ({count} of {len(labels)} images)"
