"""Whether the model's outputs are what its task reads and, where they are not, the usual cause.

Detection reads boxes [N, A, 4] (x1, y1, x2, y2 in input pixels) and scores [N, A, C]; classification
reads logits [N, C]. C is len(task.classes), N the input's batch, A any number of anchors; all float.
Pose, segmentation and oriented boxes read per-anchor outputs (``instance_outputs``, docs/tasks.md);
an oriented box is [N, A, 5]: cx, cy, w, h in input pixels and the angle in radians.
An NMS-free head (YOLOv10, YOLO26: ``nms_free_head``) answers the detections themselves, as NMS inside
the model does: num_detections [N, 1] int32, detection_boxes [N, K, 4], detection_scores and
detection_classes [N, K], K = ``[task.postprocess] max_detections``.
With ``[task.postprocess] in_model`` the export is still the raw head (the gate appends NMS to it); pose and
segmentation's graph with NMS appended answers ``in_model_outputs``, and an export that already answers those
is named as such.
A wrapper that gets this wrong still exports, and would fail much later inside the decoder, so the
model stage checks the outputs at the min, opt and max shapes and names the mistake they look like.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgebuild.errors import ModelError
from edgebuild.project.schema import (
    ClassificationPostprocess,
    DetectionPostprocess,
    InstancePostprocess,
    ObbPostprocess,
    PosePostprocess,
    PoseTask,
    SegmentationPostprocess,
)
from edgebuild.runtime.base.model_outputs import INSTANCE_NMS_OUTPUTS, NMS_OUTPUTS

if TYPE_CHECKING:
    import numpy as np

    from edgebuild.project.config import Project

__all__ = []


@dataclass(frozen=True)
class Mismatch:
    output: str
    kind: str  # what is wrong ("layout", "classes", "batch", ...): reported once per output and kind
    text: str


def expected_outputs(project: Project) -> dict[str, str]:
    """{output name: the shape the task reads}, in the task's own notation."""
    post, classes = project.task.postprocess, len(project.task.classes)
    if _detections(project):
        k = project.detection_postprocess.max_detections
        return dict(zip(NMS_OUTPUTS, ("[N, 1] int32", f"[N, {k}, 4]", f"[N, {k}]", f"[N, {k}]")))
    if isinstance(post, InstancePostprocess):
        return instance_outputs(project)
    if isinstance(post, DetectionPostprocess):
        return {post.boxes_output: "[N, A, 4]", post.scores_output: f"[N, A, {classes}]"}
    assert isinstance(post, ClassificationPostprocess)
    return {post.logits_output: f"[N, {classes}]"}


def instance_outputs(project: Project) -> dict[str, str]:
    """Pose, segmentation and oriented boxes: {output name: shape} (docs/tasks.md; M the mask coefficients, 32
    for YOLO-seg; an oriented box is cx, cy, w, h and its angle)."""
    post, classes = project.task.postprocess, len(project.task.classes)
    assert isinstance(post, InstancePostprocess)
    box = 5 if isinstance(post, ObbPostprocess) else 4
    shapes = {post.boxes_output: f"[N, A, {box}]", post.scores_output: f"[N, A, {classes}]"}
    if isinstance(post, ObbPostprocess):
        return shapes
    if isinstance(post, PosePostprocess):
        assert isinstance(project.task, PoseTask)
        keypoints, dims = project.task.kpt_shape
        return {**shapes, post.keypoints_output: f"[N, A, {keypoints}, {dims}]"}
    assert isinstance(post, SegmentationPostprocess)
    return {**shapes, post.coefficients_output: "[N, A, M]", post.prototypes_output: "[N, M, H/4, W/4]"}


def in_model_outputs(project: Project) -> dict[str, str]:
    """Pose and segmentation with NMS inside the model: {output name: shape} of the graph that ships
    (``edgebuild.sources.export.nms_graph``; K = max_detections, M the mask coefficients)."""
    post, kind = project.task.postprocess, project.task.kind
    assert isinstance(post, InstancePostprocess) and kind in INSTANCE_NMS_OUTPUTS, f"a {kind} task"
    k = post.max_detections
    shapes = ["[N, 1] int32", f"[N, {k}, 4]", f"[N, {k}]", f"[N, {k}]"]
    if isinstance(project.task, PoseTask):
        keypoints, dims = project.task.kpt_shape
        shapes.append(f"[N, {k}, {keypoints}, {dims}]")
    else:
        shapes += [f"[N, {k}, M]", "[N, M, H/4, W/4]"]
    return dict(zip(INSTANCE_NMS_OUTPUTS[kind], shapes))


def task_output_mismatches(project: Project, outputs: Mapping[str, np.ndarray], batch: int) -> list[Mismatch]:
    """Every way ``outputs`` (one forward at an input batch of ``batch``) miss what the task reads."""
    task, classes = project.task, len(project.task.classes)
    if _detections(project):
        return _detections_mismatches(project, outputs, batch)
    if isinstance(task.postprocess, InstancePostprocess):
        return _instance_mismatches(project, outputs, batch)
    found: list[Mismatch] = []
    for name, rank in zip(expected_outputs(project), (3, 3) if task.kind == "detection" else (2,)):
        if name in outputs:
            found += _dtype_and_batch(name, outputs[name].shape, outputs[name].dtype, rank, batch)
    post = task.postprocess
    if isinstance(post, DetectionPostprocess):
        boxes, scores = outputs.get(post.boxes_output), outputs.get(post.scores_output)
        if boxes is not None:
            found += _boxes_layout(post.boxes_output, boxes.shape, classes)
        if scores is not None:
            anchors = _box_anchors(boxes.shape) if boxes is not None else None
            found += _scores_layout(post.scores_output, scores.shape, classes, post.boxes_output, anchors)
    elif isinstance(post, ClassificationPostprocess) and post.logits_output in outputs:
        logits = post.logits_output
        found += _logits_layout(logits, outputs[logits].shape, classes)
    return found


def raise_for_task_outputs(project: Project,
                           runs: Mapping[str, tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]]) -> None:
    """``runs``: {"min_shape" | "opt_shape" | "max_shape": (inputs, outputs)}. One ModelError lists every
    mismatch (each once, as the first shape showed it) with the shapes got and expected."""
    image = project.model.inputs[0].name
    wanted = expected_outputs(project)
    seen: dict[tuple[str, str], Mismatch] = {}
    got = []
    for which, (inputs, outputs) in runs.items():
        for mismatch in task_output_mismatches(project, outputs, int(inputs[image].shape[0])):
            seen.setdefault((mismatch.output, mismatch.kind), mismatch)
        shown = ", ".join(f"{n} {_dims(outputs[n].shape)} {outputs[n].dtype}" for n in wanted if n in outputs)
        got.append(f"{which} ({image} {_dims(inputs[image].shape)}): {shown}")
    if not seen:
        return
    classes = project.task.classes
    lines = [f"{project.source}: the model's outputs do not fit the {project.task.kind} task "
             f"({len(seen)} problem{'s' if len(seen) > 1 else ''}):",
             "  got       " + "\n            ".join(got),
             "  expected  " + ", ".join(f"{n} {shape}" for n, shape in wanted.items())
             + f", float; N = the input's batch, {len(classes)} = len(task.classes)"]
    lines += [f"  - {m.text}" for m in seen.values()]
    if any(m.kind == "classes" for m in seen.values()):
        lines += class_sources(project)
    raise ModelError("\n".join(lines), hint="forward must return exactly these: a wrapper torch.nn.Module is the "
                                            "usual place to transpose, split or slice (model.entry_point names the "
                                            "function that builds the model)")


def class_sources(project: Project) -> list[str]:
    """Where task.classes' names are used when the data is a Pascal VOC root (init takes its object names, so
    a stray object name becomes a class the model does not score): each name's XML files, rarest first."""
    from edgebuild.datasets.formats import data_format
    from edgebuild.datasets.voc import voc_class_sources
    from edgebuild.errors import EdgebuildError

    try:
        found = data_format(project)
        if found.name != "voc" or not found.has_splits:
            return []
        split = project.data.validation_split
        return [f"  task.classes are the object names of {found.path}'s {split} split; by use, rarest first (a "
                f"class the model was not trained on is usually a stray name): "
                f"{voc_class_sources(found.path, split, found.key)}"]
    except EdgebuildError:  # the data's own problems are check's next report
        return []


def _detections(project: Project) -> bool:
    from edgebuild.project.ultralytics_facts import nms_free_head

    return nms_free_head(project)


def _detections_mismatches(project: Project, outputs: Mapping[str, np.ndarray], batch: int) -> list[Mismatch]:
    """An NMS-free head's detections against ``NMS_OUTPUTS``' shapes and dtypes."""
    import numpy as np
    k = project.detection_postprocess.max_detections
    wanted = dict(zip(NMS_OUTPUTS, ((batch, 1), (batch, k, 4), (batch, k), (batch, k))))
    found = []
    for name, shape in wanted.items():
        if name not in outputs:
            found.append(Mismatch(name, "missing", f"{name} is not among the outputs {sorted(outputs)}"))
            continue
        array = outputs[name]
        kind = "i" if name == NMS_OUTPUTS[0] else "f"
        if np.dtype(array.dtype).kind != kind:
            found.append(Mismatch(name, "dtype", f"{name} is {array.dtype}, not {'int32' if kind == 'i' else 'float'}"))
        if tuple(array.shape) != shape:
            found.append(Mismatch(name, "layout", f"{name} is {_dims(array.shape)}, not {_dims(shape)} (K = "
                                                  "task.postprocess.max_detections, the head's top-k)"))
    return found


def _instance_mismatches(project: Project, outputs: Mapping[str, np.ndarray], batch: int) -> list[Mismatch]:
    """Pose, segmentation and OBB outputs against ``instance_outputs``: rank, batch, anchors and the fixed sizes."""
    found: list[Mismatch] = []
    wanted = instance_outputs(project)
    anchors = None
    in_model = INSTANCE_NMS_OUTPUTS.get(project.task.kind, ())
    if in_model and not any(n in outputs for n in wanted) and all(n in outputs for n in in_model):
        return [Mismatch(in_model[0], "in_model",
                         f"the outputs are {', '.join(in_model)}: the model has NMS inside already; export its raw "
                         f"head ({', '.join(wanted)}), and set task.postprocess.in_model = true to ship NMS inside")]
    for name, text in wanted.items():
        if name not in outputs:
            found.append(Mismatch(name, "missing", f"{name} is not among the outputs {sorted(outputs)}"))
            continue
        shape = tuple(outputs[name].shape)
        dims = text.strip("[]").split(", ")
        found += _dtype_and_batch(name, shape, outputs[name].dtype, len(dims), batch)
        fixed = [(axis, int(d)) for axis, d in enumerate(dims) if d.isdigit()]
        if len(shape) != len(dims) or any(shape[axis] != size for axis, size in fixed):
            found.append(Mismatch(name, "layout", f"{name} is {_dims(shape)}, not {text}"))
        elif dims[1] == "A":
            anchors = shape[1] if anchors is None else anchors
            if shape[1] != anchors:
                found.append(Mismatch(name, "anchors", f"{name} holds {shape[1]} anchors, the boxes {anchors}: "
                                                       "every per-anchor output in the same order"))
    post = project.task.postprocess
    if isinstance(post, SegmentationPostprocess):
        coefficients, prototypes = outputs.get(post.coefficients_output), outputs.get(post.prototypes_output)
        if coefficients is not None and prototypes is not None and coefficients.ndim == 3 and prototypes.ndim == 4 \
                and coefficients.shape[2] != prototypes.shape[1]:
            found.append(Mismatch(post.coefficients_output, "masks", f"{post.coefficients_output} has "
                                  f"{coefficients.shape[2]} coefficients, {post.prototypes_output} "
                                  f"{prototypes.shape[1]} prototypes: one coefficient per prototype"))
    return found


def task_outputs_key(project: Project) -> str:
    """What the output check depends on besides the model: for the model stage's key."""
    from edgebuild.content import digest

    return digest([project.task.kind, expected_outputs(project)])


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _dtype_and_batch(name: str, shape: tuple[int, ...], dtype: np.dtype, rank: int, batch: int) -> list[Mismatch]:
    import numpy as np
    found = []
    if np.dtype(dtype).kind != "f":
        found.append(Mismatch(name, "dtype", f"{name} is {dtype}; the task reads float (float32 or float16)"))
    # a rank mismatch is its own problem; axis 0 is only the batch once the rank is right
    if len(shape) >= rank and shape[0] != batch:
        found.append(Mismatch(name, "batch",
                              f"{name} has {shape[0]} on axis 0 at an input batch of {batch}: axis 0 must be the "
                              "batch (a fixed size in a reshape or view, or a reduction over the batch?)"))
    return found


def _box_anchors(shape: tuple[int, ...]) -> int | None:
    """How many anchors boxes of this shape hold, where that is clear ([N, A, 4] or [N, 4, A])."""
    if len(shape) != 3:
        return None
    return shape[1] if shape[2] == 4 else shape[2] if shape[1] == 4 else None


def _boxes_layout(name: str, shape: tuple[int, ...], classes: int) -> list[Mismatch]:
    got = _dims(shape)
    if len(shape) == 3:
        _, across, last = shape
        if last == 4:
            return []
        if across == 4:
            text = f"{name} {got} is [N, 4, A], coordinates first: transpose(1, 2) to [N, A, 4] in your wrapper"
        elif 4 < across < last:
            text = (f"{name} [N, 4+C, A] = {got}: looks like Ultralytics' raw head output; transpose to "
                    f"[N, A, 4+C] and split boxes/scores in your wrapper")
            if across - 4 != classes:
                text += f" (that head scores {across - 4} classes, task.classes lists {classes})"
        elif last == 5 + classes:
            text = (f"{name} {got} looks like [N, A, 5+C], boxes, objectness and class scores together (YOLOv5): "
                    "split it in your wrapper: boxes = y[..., :4], scores = y[..., 5:] * y[..., 4:5]")
        elif last > 4:
            text = (f"{name} {got} has {last} values per anchor, boxes need 4 (x1, y1, x2, y2): if it is "
                    "[N, A, 4+C], boxes and class scores together, split it in your wrapper: "
                    "boxes = y[..., :4], scores = y[..., 4:]")
        else:
            text = f"{name} {got} has {last} values per anchor; boxes need 4 (x1, y1, x2, y2) on the last axis"
    elif len(shape) == 2 and shape[-1] == 4:
        text = f"{name} {got} has no batch axis: keep axis 0 as the batch, [N, A, 4] ([1, A, 4] for one image)"
    elif len(shape) == 4 and shape[-1] == 4:
        text = f"{name} {got} looks like a box per anchor and class, [N, A, C, 4]; the task reads one box per anchor"
    else:
        text = f"{name} {got} has rank {len(shape)}; the task reads [N, A, 4]"
    return [Mismatch(name, "layout", text)]


def _scores_layout(name: str, shape: tuple[int, ...], classes: int, boxes_name: str,
                   anchors: int | None) -> list[Mismatch]:
    got = _dims(shape)
    if len(shape) == 2:
        text = (f"{name} {got} has no class axis: for one class, unsqueeze(-1) to [N, A, 1]" if classes == 1 else
                f"{name} {got} has rank 2; the task reads a score per anchor and class, [N, A, {classes}], "
                "not the best score per anchor")
        return [Mismatch(name, "layout", text)]
    if len(shape) != 3:
        return [Mismatch(name, "layout", f"{name} {got} has rank {len(shape)}; the task reads [N, A, {classes}]")]
    _, across, last = shape
    # which axis holds the classes: the one that is not the boxes' anchor count, else the one that fits
    first = last == anchors != across if anchors is not None else across == classes != last
    scored, per = (across, last) if first else (last, across)
    found = []
    if first:
        found.append(Mismatch(name, "layout", f"{name} {got} is [N, C, A], classes first: transpose(1, 2) to "
                                              f"[N, A, C] in your wrapper"))
    if scored != classes:
        found.append(Mismatch(name, "classes", _class_count(name, scored, classes, detection=True)))
    if anchors is not None and per != anchors:
        found.append(Mismatch(name, "anchors", f"{boxes_name} hold {anchors} anchors and {name} {per}: both are "
                                               "per anchor, in the same order"))
    return found


def _logits_layout(name: str, shape: tuple[int, ...], classes: int) -> list[Mismatch]:
    got = _dims(shape)
    if len(shape) == 2:
        return [] if shape[1] == classes else [Mismatch(name, "classes", _class_count(name, shape[1], classes))]
    if len(shape) == 4 and tuple(shape[2:]) == (1, 1):
        found = [Mismatch(name, "layout", f"{name} {got} is [N, C, 1, 1], still with its spatial axes: "
                                          "flatten(1) to [N, C] in your wrapper")]
        if shape[1] != classes:
            found.append(Mismatch(name, "classes", _class_count(name, shape[1], classes)))
        return found
    if len(shape) == 3:
        text = (f"{name} {got} looks like token features [N, T, D], not logits: take the class token "
                "([:, 0]) and apply the classifier head in your wrapper")
    elif len(shape) == 1:
        text = f"{name} {got} has one value per image; the task reads a score per class, [N, {classes}]"
    else:
        text = f"{name} {got} has rank {len(shape)}; the task reads [N, {classes}]"
    return [Mismatch(name, "layout", text)]


def _class_count(name: str, got: int, classes: int, detection: bool = False) -> str:
    text = f"{name} have {got} classes, task.classes lists {classes}"
    if detection and got == classes + 1:
        return text + (": if one is a background class (torchvision's SSD and Faster R-CNN put it at index 0), "
                       "drop it in your wrapper (scores[..., 1:])")
    if not detection and got == 1000:
        return text + (f": 1000 is an ImageNet head; replace it with one of {classes} outputs (e.g. model.fc = "
                       f"torch.nn.Linear(model.fc.in_features, {classes})) or list its classes in task.classes")
    return text + ": task.classes must list every class the model scores, in its output order"
