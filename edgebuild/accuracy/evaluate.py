"""Task evaluation: run a backend over the validation set and compute the project's metric.

Works with any runner of ``edgebuild.runtime.engines.backends`` (``backend`` name, ``run(inputs) -> outputs``);
every result records which backend produced it. A ``ValidationSet`` (``edgebuild.accuracy.validation_set``, and
named here too, where the backends are run over it) decodes and preprocesses the images once, so comparing
several candidates does not redo that work.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.accuracy.evaluation_record import Evaluation
from edgebuild.accuracy.gate_records import NmsParity
from edgebuild.accuracy.metrics import coco_detection_metrics, top_k_accuracy
from edgebuild.accuracy.task_decode import INSTANCE_TASKS, InstanceCollector
from edgebuild.accuracy.validation_set import ValidationSet, evaluation_batch_size, preprocess_spec
from edgebuild.datasets.project_data import Sample
from edgebuild.errors import ModelError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.schema import DetectionPostprocess, InstancePostprocess
from edgebuild.project.ultralytics_facts import VAL_PRE_NMS_TOP_K, nms_free_head, source_facts
from edgebuild.runtime.base.recipe import RecipePostprocess, RecipeTask
from edgebuild.runtime.base.vision import (
    DetectionParams,
    ImageTransform,
    check_detection_outputs,
    decode_outputs,
    in_canonical_order,
)
from edgebuild.runtime.engines.backends import Runner

if TYPE_CHECKING:
    from edgebuild.project.config import Project

__all__ = ["ACCEPTANCE_IMAGES", "ACCEPTANCE_VERSION", "Evaluation", "ValidationSet", "acceptance_set",
           "detection_settings", "device_inputs", "evaluate", "preprocess_spec", "score_device_results"]


def evaluate(project: Project, runner: Runner, *, data: ValidationSet | None = None,
             progress: bool = True, desc: str | None = None, raw_head: bool = False,
             per_image: bool = False) -> Evaluation:
    """The project's metric for ``runner`` on the validation set (or ``data``, a subset of it).

    ``raw_head``: the runner is a detector's (or pose or segmentation model's) raw head even where the project
    puts NMS inside the model (the gate's INT8 signal and the parity of the appended NMS read the head). An NMS-free
    head's raw head is its top-k, already the detections: read as NMS inside answers them."""
    from tqdm import tqdm

    started = time.perf_counter()
    data = data or ValidationSet(project)
    input_name = project.model.inputs[0].name
    bar = tqdm(total=len(data), desc=desc or f"evaluate [{runner.backend}]", unit="img",
               disable=not progress, leave=False)
    collect = _DetectionCollector(project, data, raw_head) if project.task.kind == "detection" \
        else InstanceCollector(project, data, raw_head) if project.task.kind in INSTANCE_TASKS \
        else _ClassificationCollector(project, data)
    try:
        for chunk, batch, transforms in data.batches():
            collect.add(chunk, transforms, runner.run({input_name: batch}))
            bar.update(len(chunk))
    finally:
        bar.close()
    metrics = collect.metrics()
    return Evaluation(project.metric, metrics[project.metric], metrics, runner.backend, len(data),
                      time.perf_counter() - started, per_image_scores(collect, data) if per_image else ())


def per_image_scores(collect: Any, data: ValidationSet) -> tuple[float, ...]:
    """Each image's own score, for paired comparisons of two runs on the same images: a classifier's top-1 hit
    (1 or 0); a detector's (and pose, segmentation and OBB models') box mAP50-95 on that image alone."""
    if isinstance(collect, _ClassificationCollector):
        logits = np.concatenate(collect.logits) if collect.logits else np.zeros((0, collect.classes))
        return tuple(float(v) for v in (logits.argmax(1) == collect.labels[:len(logits)]))
    limit = int(collect.settings.get("max_detections") or 100)
    return tuple(coco_detection_metrics(data.ground_truth, collect.results, limit, image_ids=[s.image_id])["mAP50-95"]
                 for s in data.samples)


class _DetectionCollector:
    def __init__(self, project: Project, data: ValidationSet, raw_head: bool = False) -> None:
        settings = detection_settings(project)
        assert settings is not None and data.coco is not None, "a detection task's set, in its COCO form"
        self.settings: JsonObject = settings
        if raw_head and not nms_free_head(project):
            self.settings["in_model"] = False
        self.coco, self.data = data.coco, data
        self.results: list[JsonObject] = []

    def add(self, chunk: list[Sample], transforms: list[ImageTransform], outputs: dict[str, np.ndarray]) -> None:
        for sample, transform, found in zip(chunk, transforms, self.decode(outputs)):
            self.add_found(sample, transform, found)

    def decode(self, outputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Every image's detections (boxes in network-input pixels), decoded here or read from NMS inside."""
        boxes, scores = self.settings["boxes_output"], self.settings["scores_output"]
        if not self.settings["in_model"]:  # NMS inside: decode_outputs checks its outputs
            check_detection_outputs(outputs[boxes], outputs[scores], boxes, scores, len(self.coco.category_ids))
        return decode_outputs(outputs, self.settings)

    def add_found(self, sample: Sample, transform: ImageTransform, found: dict[str, np.ndarray]) -> None:
        """One image's decoded detections (boxes in network-input pixels), from here or from a device."""
        xyxy = transform.boxes_to_original(found["boxes"])
        for box, score, label in zip(xyxy, found["scores"], found["labels"]):
            x1, y1, x2, y2 = (float(v) for v in box)
            self.results.append({
                "image_id": sample.image_id,
                "category_id": self.coco.category_ids[int(label)],
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "score": float(score),
            })

    def metrics(self) -> dict[str, float]:
        return coco_detection_metrics(self.data.ground_truth, self.results, self.settings["max_detections"])


def nms_parity(project: Project, head: Runner, inside: Runner, data: ValidationSet) -> NmsParity:
    """NMS inside the model against the host's decode of its raw head, on every validation image.

    ``head`` runs the raw head, ``inside`` the same model with the decode appended. Returns both
    metrics, their difference, how many images got the same detections (same classes; boxes and
    scores, and pose's keypoints or segmentation's mask coefficients, within ``NMS_PARITY_ATOL``,
    compared best first) and the largest difference seen.
    An NMS-free head had nothing appended: both are its top-k, and ``nms_free`` says so.
    """
    nms_free = nms_free_head(project)
    host: _DetectionCollector | InstanceCollector
    graph: _DetectionCollector | InstanceCollector
    if project.task.kind in INSTANCE_TASKS:
        host, graph = InstanceCollector(project, data, raw_head=True), InstanceCollector(project, data)
    else:
        host, graph = _DetectionCollector(project, data, raw_head=True), _DetectionCollector(project, data)
    name, same, worst = project.model.inputs[0].name, 0, 0.0
    for chunk, batch, transforms in data.batches():
        want = host.decode(head.run({name: batch}))
        got = graph.decode(inside.run({name: batch}))
        for sample, transform, w, g in zip(chunk, transforms, want, got):
            host.add_found(sample, transform, w)
            graph.add_found(sample, transform, g)
            difference = _detections_difference(w, g)
            worst = max(worst, difference)
            same += difference <= NMS_PARITY_ATOL
    want_value, got_value = host.metrics()[project.metric], graph.metrics()[project.metric]
    return NmsParity(metric=project.metric, host_decode=want_value, in_model=got_value,
                     difference=abs(want_value - got_value), images=len(data), same_detections=same,
                     largest_difference=worst, nms_free=nms_free)


#: boxes (input pixels) and scores of NMS inside the model may differ from the host's by float rounding
NMS_PARITY_ATOL = 1e-3


def _detections_difference(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    """The largest box or score difference between two images' detections (inf: other counts or classes)."""
    if len(want["labels"]) != len(got["labels"]):
        return float("inf")
    # pose's keypoints and segmentation's mask coefficients are compared as the boxes are
    keys = [k for k in ("boxes", "scores", "labels", "keypoints", "coefficients") if k in want and k in got]
    (w, g) = (in_canonical_order({k: f[k] for k in keys}) for f in (want, got))
    if not np.array_equal(w["labels"], g["labels"]):
        return float("inf")
    return float(max(np.abs(w[k].astype(np.float64) - g[k]).max(initial=0.0) for k in keys if k != "labels"))


class _ClassificationCollector:
    def __init__(self, project: Project, data: ValidationSet) -> None:
        task = project.task
        assert task.kind == "classification", "a detection task's results go to _DetectionCollector"
        self.logits_name = task.postprocess.logits_output
        self.classes = len(project.task.classes)
        self.labels = np.array([s.label for s in data.samples])
        self.logits: list[np.ndarray] = []

    def add(self, chunk: list[Sample], transforms: list[ImageTransform], outputs: dict[str, np.ndarray]) -> None:
        logits = outputs[self.logits_name]
        if logits.ndim != 2 or logits.shape != (len(chunk), self.classes):
            raise ModelError(f"cannot score classification: {self.logits_name} is {list(logits.shape)} for "
                             f"{len(chunk)} images, not [N, {self.classes}] (N images, len(task.classes))",
                             hint="`edgebuild compile` checks the outputs in its model stage and says what the "
                                  "shapes look like")
        self.logits.append(logits)

    def metrics(self) -> dict[str, float]:
        return top_k_accuracy(np.concatenate(self.logits), self.labels)


# -- on a device -----------------------------------------------------------------------------------

def device_inputs(project: Project, data: ValidationSet) -> bytes:
    """The preprocessed validation batches as ``inputs.npz`` for ``edgebuild-device.pyz evaluate``.

    The exact float32 tensors the gate evaluated (not images plus a preprocessing spec: the device
    has numpy but no image decoder, and the metric must come from the same inputs), compressed.
    """
    import io

    arrays = {f"batch_{i:04d}": batch for i, (_, batch, _) in enumerate(data.batches())}
    buffer = io.BytesIO()
    name = np.asarray(project.model.inputs[0].name)
    # numpy's stub matches **arrays against its allow_pickle: bool
    np.savez_compressed(buffer, input_name=name, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def detection_settings(project: Project) -> JsonObject | None:
    """What the device needs to decode detections as the host does (None: not a detection task).

    ``pre_nms_top_k`` is not a project key: Ultralytics' 30000 (its max_nms) for an Ultralytics
    detector as ``model.source``, as its val decodes; edgebuild's 1000 for any other model, and for
    every model with NMS inside (``in_model``: the graph keeps 1000, and the host's decode of its raw
    head must keep what the graph keeps to be its parity reference).
    """
    if project.task.kind != "detection":
        return None
    post = project.task.postprocess
    facts = source_facts(project)
    ultralytics = facts is not None and facts.task == "detect" and not post.in_model
    return _box_decode(post, VAL_PRE_NMS_TOP_K if ultralytics else DetectionParams.pre_nms_top_k)


def recipe_task(project: Project) -> RecipeTask:
    """The recipe's ``task``: what the outputs mean and the preprocessing, from the project (the device's
    pipelines read it from the recipe; the tracking gate runs the same on the build host)."""
    decode = detection_settings(project)
    if project.task.kind in ("pose", "segmentation", "obb"):  # the application decodes (docs/tasks.md)
        form, post = "raw", project.task.postprocess.model_dump(exclude={"in_model"})
        if project.task.postprocess.in_model:  # pose, segmentation: the raw outputs are INSTANCE_NMS_OUTPUTS
            post["in_model"] = True
        if project.task.kind == "pose":
            post["kpt_shape"] = list(project.task.kpt_shape)
    elif decode is None:
        assert project.task.kind == "classification", "detection_settings is None for a classification task only"
        form, post = "logits", {"logits_output": project.task.postprocess.logits_output}
    else:
        form, post = ("nms" if decode["in_model"] else "raw_head"), decode
    return RecipeTask(kind=project.task.kind, classes=list(project.task.classes), outputs=form,
                      postprocess=RecipePostprocess.from_dict(post), preprocess=preprocess_spec(project))


def _box_decode(post: DetectionPostprocess | InstancePostprocess, pre_nms_top_k: int) -> JsonObject:
    """The settings ``decode_outputs`` reads to decode boxes and scores (``runtime.vision``)."""
    return {"boxes_output": post.boxes_output, "scores_output": post.scores_output,
            "score_threshold": post.score_threshold, "nms_iou": post.nms_iou, "max_detections": post.max_detections,
            "pre_nms_top_k": pre_nms_top_k, "in_model": post.in_model}


def score_device_results(project: Project, data: ValidationSet, results: bytes, backend: str,
                         seconds: float) -> Evaluation:
    """The project's metric from a device's ``results.npz``, with the gate's own collectors."""
    import io

    stored = np.load(io.BytesIO(results), allow_pickle=False)
    batches = list(data.batches())
    samples = [s for chunk, _, _ in batches for s in chunk]
    transforms = [t for _, _, chunk in batches for t in chunk]
    collect: _DetectionCollector | InstanceCollector | _ClassificationCollector
    if project.task.kind in INSTANCE_TASKS:  # the device sent the raw outputs: decoded here, as the gate does
        collect, start, arrays = InstanceCollector(project, data), 0, {k: stored[k] for k in stored.files}
        for chunk, _, chunk_transforms in batches:
            collect.add(chunk, chunk_transforms, {k: v[start:start + len(chunk)] for k, v in arrays.items()})
            start += len(chunk)
    elif project.task.kind == "detection":
        collect = _DetectionCollector(project, data)
        start = 0
        for sample, transform, count in zip(samples, transforms, stored["counts"].tolist()):
            found = {k: stored[k][start:start + count] for k in ("boxes", "scores", "labels")}
            collect.add_found(sample, transform, found)
            start += count
    else:
        collect = _ClassificationCollector(project, data)
        collect.add(samples, transforms, {k: stored[k] for k in stored.files})
    metrics = collect.metrics()
    return Evaluation(project.metric, metrics[project.metric], metrics, backend, len(samples), seconds)


# -- the acceptance set a model folder carries -------------------------------------------------------

#: the acceptance statistic's settings, chosen by measurement (README, "Accuracy on the device");
#: change ACCEPTANCE_VERSION with them or with acceptance_set, so stored sets are made again
ACCEPTANCE_VERSION = 2  # 2: pose, segmentation and OBB matched by their own decode
ACCEPTANCE_IMAGES = 32
ACCEPTANCE_MIN_SCORE = 0.25
ACCEPTANCE_IOU = 0.85
ACCEPTANCE_MARGIN = 0.04


def acceptance_set(project: Project, data: ValidationSet, fp32_onnx: Path, candidate_onnx: Path) -> tuple[bytes, float]:
    """``acceptance.npz`` for a model folder, and the agreement the candidate itself reaches on it here.

    The first ``ACCEPTANCE_IMAGES`` inputs of the validation set (a capped set is already spread over its
    split, so these are too), FP32's results for them, and a threshold of
    the candidate's own agreement with FP32 minus ``ACCEPTANCE_MARGIN``: an engine that computes
    what the gate measured passes, one that loses the gate's margin does not.
    """
    import io

    from edgebuild.accuracy.lowbit import host_runner
    from edgebuild.runtime.engines import acceptance
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    inputs = np.concatenate([batch for _, batch, _ in data.batches()])[:ACCEPTANCE_IMAGES]
    # 8 bits a value, as the camera gave them (the bundle grows by about 1 MB, not 10): FP32's
    # results and the threshold are computed from exactly what the device will run
    packed, scale, offset = acceptance.pack_inputs(inputs)
    inputs = acceptance.unpack_inputs(packed, scale, offset)
    name, batch = project.model.inputs[0].name, evaluation_batch_size(project)
    fp32 = acceptance.run_outputs(OnnxRuntimeRunner(fp32_onnx), inputs, name, batch)
    settings: JsonObject = {"inputs_u8": packed, "inputs_scale": np.float64(scale),
                                "inputs_offset": np.float64(offset), "threshold": np.float64(0.0)}
    decode = detection_settings(project)
    if decode is not None:
        found = decode_outputs(fp32, decode)
        settings.update(kind=np.asarray("detection"), min_score=np.float64(ACCEPTANCE_MIN_SCORE),
                        iou=np.float64(ACCEPTANCE_IOU), **{k: np.asarray(v) for k, v in decode.items()},
                        **acceptance.pack_found([(f["boxes"], f["scores"], f["labels"]) for f in found], "fp32_"))
    elif project.task.kind in INSTANCE_TASKS:
        # pose, segmentation and OBB: the task's own decode, a match needing the keypoints, mask or rotated box too
        post = project.task.postprocess
        # the device's top-k (1000, as NMS inside keeps), not the gate's 30000: FP32 and the backend decode alike
        instance = {**post.model_dump(), "kind": project.task.kind, "pre_nms_top_k": DetectionParams.pre_nms_top_k,
                    "input_size": list(project.task.preprocess.input_size)}
        settings.update(match=np.asarray("instances"), min_score=np.float64(ACCEPTANCE_MIN_SCORE),
                        iou=np.float64(ACCEPTANCE_IOU), **{k: np.asarray(v) for k, v in instance.items()},
                        **acceptance.pack_instances(acceptance.task_instances(fp32, instance, ACCEPTANCE_MIN_SCORE),
                                                    "fp32_"))
    else:
        assert project.task.kind == "classification", "a classifier's acceptance is its top-1 class"
        logits = project.task.postprocess.logits_output
        settings.update(kind=np.asarray("classification"), logits_output=np.asarray(logits),
                        fp32_top1=np.argmax(fp32[logits], axis=-1).astype(np.int64))
    own = acceptance.agreement_of(settings, acceptance.run_outputs(host_runner(candidate_onnx), inputs, name,
                                                                   batch))
    settings["threshold"] = np.float64(max(0.0, own - ACCEPTANCE_MARGIN))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **settings)
    return buffer.getvalue(), own
