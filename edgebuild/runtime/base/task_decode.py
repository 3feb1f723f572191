"""Pose, instance segmentation and oriented boxes decoded as Ultralytics' val decodes them, and the tensors the
server answers with a decode (a raw-head detector's too).

One decode for the build host and the device: the gate's (``edgebuild.accuracy.task_decode``) and the server's
(``service.py``, with ``[runtime] detections`` or ``parameters.detections``) are these functions. The outputs
follow docs/tasks.md: boxes [N, A, 4] (x1, y1, x2, y2 in input pixels; OBB [N, A, 5]: cx, cy, w, h and the
angle in radians) and scores [N, A, C], and per anchor the keypoints [N, A, K, D] or the mask coefficients
[N, A, M] with the prototypes [N, M, H/4, W/4]. Every (anchor, class) above ``score_threshold`` is a candidate
(Ultralytics' ``multi_label=True``), the best ``pre_nms_top_k`` go through class-aware NMS at ``nms_iou`` (OBB:
rotated Fast-NMS by probabilistic IoU), ``max_detections`` are kept, and the kept candidates' anchors give their
keypoints or mask coefficients.

The server answers a decode in the layout of a model with NMS inside: ``NMS_OUTPUTS``, for pose and
segmentation ``INSTANCE_NMS_OUTPUTS`` (the prototypes passed through), for OBB ``OBB_NMS_OUTPUTS``; network-input
pixels, K = ``max_detections`` rows, zero past ``num_detections``.

Python 3.8 and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from edgebuild.errors import ModelError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.model_outputs import OBB_NMS_OUTPUTS
from edgebuild.runtime.base.recipe import RecipeTask
from edgebuild.runtime.base.vision import (
    INSTANCE_NMS_OUTPUTS,
    NMS_OUTPUTS,
    DetectionParams,
    best_first_cut,
    check_detection_outputs,
    check_nms_outputs,
    class_aware_nms,
    decode_outputs,
    split_detections,
)

__all__ = ["decode_instance_outputs", "instances_in_model", "keypoint_oks", "probiou"]

#: the candidates Ultralytics' val keeps before NMS (its ``max_nms``; ``edgebuild.project.ultralytics_facts``'
#: ``VAL_PRE_NMS_TOP_K``, which a test holds it to): a recipe's task that names none decodes with it
INSTANCE_PRE_NMS_TOP_K = 30000
#: the candidates the device's decode (the server's, the bench's) keeps before NMS where the recipe names none: as
#: NMS inside the model keeps (``DetectionParams.pre_nms_top_k``), not Ultralytics' val's 30000 (the gate's): at
#: val's score threshold (0.001) rotated Fast-NMS compares every pair of a class's candidates, about 50 s an image
#: for 30000 on a desktop CPU
DEVICE_PRE_NMS_TOP_K = DetectionParams.pre_nms_top_k
#: keypoint_oks' guard against a zero area or no labelled keypoint (Ultralytics' kpt_iou: 1e-7)
_OKS_EPS = np.float32(1e-7)
#: rotated NMS compares its candidates in blocks of about this many pairs (its memory, not its result)
_PAIRS_PER_BLOCK = 2_000_000
#: what the decode reads from a task's postprocess, beyond boxes and scores and the thresholds
_TASK_OUTPUTS = {"pose": ("keypoints_output",), "segmentation": ("coefficients_output", "prototypes_output"),
                 "obb": ()}
_DECODE_SETTINGS = ("boxes_output", "scores_output", "score_threshold", "nms_iou", "max_detections")
#: what a task's detections are answered as (a model with NMS inside, or the server's decode)
ANSWER_OUTPUTS = {"detection": NMS_OUTPUTS, "pose": INSTANCE_NMS_OUTPUTS["pose"],
                  "segmentation": INSTANCE_NMS_OUTPUTS["segmentation"], "obb": OBB_NMS_OUTPUTS}
#: OBB's box convention in the answer (detection's, pose's and segmentation's: ``service.BOX_CONVENTION``)
ROTATED_BOX_CONVENTION = ("cx, cy, w, h in network-input pixels (the preprocessed tensor; undo the letterbox or "
                          "resize to map them) and the angle in radians")


def decode_instances(boxes: np.ndarray, scores: np.ndarray, score_threshold: float, nms_iou: float,
                     max_detections: int, pre_nms_top_k: int = INSTANCE_PRE_NMS_TOP_K) -> Dict[str, np.ndarray]:
    """One image's boxes [A, 4] and scores [A, C] -> the kept detections, best first: boxes [D, 4], scores [D],
    labels [D] and ``anchors`` [D], the anchor each came from (its keypoints or mask coefficients).
    Oriented boxes [A, 5] (cx, cy, w, h, angle) go through ``rotated_fast_nms`` instead."""
    anchor_idx, class_idx = np.nonzero(scores > score_threshold)
    found = scores[anchor_idx, class_idx]
    if found.size > pre_nms_top_k:
        top = best_first_cut(found, pre_nms_top_k)  # ties: the lower (anchor, class), as the appended graph's TopK
        anchor_idx, class_idx, found = anchor_idx[top], class_idx[top], found[top]
    candidates = boxes[anchor_idx].astype(np.float32)
    if candidates.shape[-1] == 5:
        keep = rotated_fast_nms(candidates, found, class_idx, nms_iou)[:max_detections]
    else:
        keep = class_aware_nms(candidates, found, class_idx, nms_iou, max_detections)
    return {"boxes": candidates[keep], "scores": found[keep].astype(np.float32),
            "labels": class_idx[keep].astype(np.int64), "anchors": anchor_idx[keep].astype(np.int64)}


def decode_instance_outputs(outputs: Mapping[str, np.ndarray], kind: str, settings: Mapping[str, Any],
                            pre_nms_top_k: int = INSTANCE_PRE_NMS_TOP_K,
                            classes: Optional[int] = None) -> List[Dict[str, np.ndarray]]:
    """Every image's kept detections (``decode_instances``' form) in network-input pixels, with pose's
    ``keypoints`` [D, K, dims] or segmentation's ``coefficients`` [D, M] and ``prototypes`` [M, h, w].

    ``settings``: the task's ``[task.postprocess]`` (output names and thresholds; a recipe's ``task.postprocess``);
    ``classes``: C where known. A ModelError where the boxes and scores have other shapes."""
    boxes_name, scores_name = str(settings["boxes_output"]), str(settings["scores_output"])
    boxes, scores = outputs[boxes_name], outputs[scores_name]
    if kind == "obb":
        check_rotated_outputs(boxes, scores, boxes_name, scores_name, classes)
    else:
        check_detection_outputs(boxes, scores, boxes_name, scores_name, classes)
    decoded = []
    for i in range(boxes.shape[0]):
        found = decode_instances(boxes[i], scores[i], settings["score_threshold"], settings["nms_iou"],
                                 int(settings["max_detections"]), pre_nms_top_k)
        if kind == "pose":
            found["keypoints"] = np.asarray(outputs[str(settings["keypoints_output"])][i][found["anchors"]],
                                            np.float32)
        elif kind == "segmentation":
            found["coefficients"] = np.asarray(outputs[str(settings["coefficients_output"])][i][found["anchors"]])
            found["prototypes"] = np.asarray(outputs[str(settings["prototypes_output"])][i])
        decoded.append(found)
    return decoded


def instances_in_model(outputs: Mapping[str, np.ndarray], kind: str) -> List[Dict[str, np.ndarray]]:
    """Every image's detections from a pose or segmentation model with NMS inside (``INSTANCE_NMS_OUTPUTS``), in
    ``decode_instances``' form without ``anchors``: boxes, scores, labels and ``keypoints`` [D, kpts, dims], or
    ``coefficients`` [D, M] and ``prototypes`` [M, h, w] (the image's)."""
    check_nms_outputs(outputs)
    names = INSTANCE_NMS_OUTPUTS[kind][4:]
    missing = [n for n in names if n not in outputs]
    if missing:
        raise ModelError("the model has no {} output(s) (found {}): it is not a {} model with NMS inside".format(
                         ", ".join(missing), ", ".join(sorted(outputs)), kind),
                         hint="a raw-head model decodes on the host: set [task.postprocess] in_model to what "
                              "the ONNX is")
    found = split_detections(outputs)
    for i, image in enumerate(found):
        rows = np.asarray(outputs[names[0]])[i, :len(image["scores"])].astype(np.float32)
        if kind == "pose":
            image["keypoints"] = rows
        else:
            image["coefficients"], image["prototypes"] = rows, np.asarray(outputs[names[1]][i], np.float32)
    return found


def check_rotated_outputs(boxes: np.ndarray, scores: np.ndarray, boxes_name: str = "boxes",
                          scores_name: str = "scores", classes: Optional[int] = None) -> None:
    """ModelError unless boxes are [N, A, 5] and scores [N, A, C] (the model stage says the usual causes)."""
    if boxes.ndim == 3 and boxes.shape[2] == 5 and scores.ndim == 3 and scores.shape[:2] == boxes.shape[:2] \
            and (classes is None or scores.shape[2] == classes):
        return
    raise ModelError("cannot decode oriented boxes: {} is {} and {} is {}, not [N, A, 5] and [N, A, {}]".format(
        boxes_name, list(boxes.shape), scores_name, list(scores.shape), "C" if classes is None else classes))


def rotated_fast_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Ultralytics' rotated NMS (``TorchNMS.fast_nms`` with ``batch_probiou``, classes apart as its ``max_wh``
    offset keeps them): the indices of the boxes [D, 5] that no better box of their class overlaps above
    ``iou_threshold`` by probabilistic IoU, best first. Unlike greedy NMS, a suppressed box still suppresses."""
    order = np.argsort(-scores, kind="stable")
    ranked, ranked_classes = boxes[order], classes[order]
    dropped = np.zeros(len(order), bool)
    for label in np.unique(ranked_classes):
        members = np.nonzero(ranked_classes == label)[0]  # positions in score order
        rows = max(1, _PAIRS_PER_BLOCK // len(members))
        for start in range(0, len(members), rows):
            iou = probiou(ranked[members[start:start + rows]], ranked[members])
            later = np.arange(len(members))[None, :] > np.arange(start, start + len(iou))[:, None]
            dropped[members] |= ((iou > iou_threshold) & later).any(axis=0)
    return order[~dropped]


def _covariance(xywhr: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, angle = xywhr[:, 2] ** 2 / 12, xywhr[:, 3] ** 2 / 12, xywhr[:, 4]
    cos, sin = np.cos(angle), np.sin(angle)
    return a * cos**2 + b * sin**2, a * sin**2 + b * cos**2, (a - b) * cos * sin


def probiou(true_xywhr: np.ndarray, pred_xywhr: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """[G, D] probabilistic IoU of rotated boxes [cx, cy, w, h, angle] (Ultralytics' batch_probiou)."""
    t, p = np.asarray(true_xywhr, np.float64), np.asarray(pred_xywhr, np.float64)
    x1, y1, x2, y2 = t[:, 0:1], t[:, 1:2], p[None, :, 0], p[None, :, 1]
    a1, b1, c1 = (v[:, None] for v in _covariance(t))
    a2, b2, c2 = (v[None] for v in _covariance(p))
    joint = (a1 + a2) * (b1 + b2) - (c1 + c2) ** 2
    t1 = ((a1 + a2) * (y1 - y2) ** 2 + (b1 + b2) * (x1 - x2) ** 2) / (joint + eps) * 0.25
    t2 = ((c1 + c2) * (x2 - x1) * (y1 - y2)) / (joint + eps) * 0.5
    t3 = np.log(joint / (4 * np.sqrt((a1 * b1 - c1**2).clip(0) * (a2 * b2 - c2**2).clip(0)) + eps) + eps) * 0.5
    distance = (t1 + t2 + t3).clip(eps, 100.0)
    return 1 - np.sqrt(1.0 - np.exp(-distance) + eps)


def keypoint_oks(true_kpts: np.ndarray, pred_kpts: np.ndarray, area: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """[G, D] object keypoint similarity (Ultralytics' kpt_iou): ground truth [G, K, 3] (v = 0: not labelled)."""
    t, p = np.asarray(true_kpts, np.float32), np.asarray(pred_kpts, np.float32)
    d = (t[:, None, :, 0] - p[None, :, :, 0]) ** 2 + (t[:, None, :, 1] - p[None, :, :, 1]) ** 2
    labelled = t[..., 2] != 0
    e = d / ((2 * np.asarray(sigmas, np.float32)) ** 2 * (np.asarray(area, np.float32)[:, None, None] + _OKS_EPS) * 2)
    return (np.exp(-e) * labelled[:, None]).sum(-1) / (labelled.sum(-1).astype(np.float32)[:, None] + _OKS_EPS)


# -- the server's answer ---------------------------------------------------------------------------


def server_decodes(task: Optional[RecipeTask]) -> bool:
    """Whether the server can decode the task's outputs: a raw-head detector's, or the raw outputs of a pose,
    segmentation or OBB model whose recipe names them (one written before its task had them: raw only)."""
    if task is not None and task.outputs == "raw_head":
        return True
    if task is None or task.outputs != "raw" or task.kind not in _TASK_OUTPUTS or task.postprocess.in_model:
        return False
    return all(getattr(task.postprocess, k) is not None for k in _DECODE_SETTINGS + _TASK_OUTPUTS[task.kind])


def instance_metadata(task: RecipeTask, batch: int, raw: List[JsonObject]) -> List[JsonObject]:
    """The v2 metadata tensors of a pose, segmentation or OBB task's ``instance_tensors``; ``raw``: the model's
    outputs' (the keypoints', coefficients' and prototypes' dims where known)."""
    post = task.postprocess
    k = int(post.max_detections or 0)
    tensors = detection_metadata(batch, k)
    if task.kind == "obb":
        tensors[1] = {"name": OBB_NMS_OUTPUTS[1], "datatype": "FP32", "shape": [batch, k, 5]}
    shapes = {str(t["name"]): t for t in raw}

    def dims(key: str, skip: int, unknown: List[int]) -> List[int]:
        found = shapes.get(str(getattr(post, key)), {})
        return list(found["shape"][skip:]) if "shape" in found else unknown

    if task.kind == "pose":
        points = dims("keypoints_output", 2, list(post.kpt_shape or [-1, -1]))
        tensors.append({"name": "detection_keypoints", "datatype": "FP32", "shape": [batch, k] + points})
    elif task.kind == "segmentation":
        tensors.append({"name": "detection_mask_coefficients", "datatype": "FP32",
                        "shape": [batch, k] + dims("coefficients_output", 2, [-1])})
        prototypes = shapes.get(str(post.prototypes_output), {})
        tensors.append({"name": "mask_prototypes", "datatype": prototypes.get("datatype", "FP32"),
                        "shape": [batch] + dims("prototypes_output", 1, [-1, -1, -1])})
    return tensors


def detection_metadata(batch: int, max_detections: int) -> List[JsonObject]:
    """The v2 metadata tensors of detections, as a model with NMS inside returns them."""
    shapes = ([batch, 1], [batch, max_detections, 4], [batch, max_detections], [batch, max_detections])
    return [{"name": n, "datatype": d, "shape": s} for n, d, s in zip(NMS_OUTPUTS, ("INT32", "FP32", "FP32", "FP32"),
                                                                      shapes)]


def detection_tensors(outputs: Dict[str, np.ndarray], settings: JsonObject) -> Dict[str, np.ndarray]:
    """A raw head's outputs decoded (``decode_outputs``) into ``NMS_OUTPUTS``: count [N, 1] int32, boxes
    [N, K, 4], scores [N, K], classes [N, K] float32, K = ``max_detections``, zero past the count."""
    images = decode_outputs(outputs, dict(settings, in_model=False))
    return dict(zip(NMS_OUTPUTS, _rows(images, int(settings["max_detections"]), 4)))


def instance_tensors(outputs: Mapping[str, np.ndarray], kind: str, settings: JsonObject) -> Dict[str, np.ndarray]:
    """A pose, segmentation or OBB model's raw outputs decoded (``decode_instance_outputs``) into
    ``ANSWER_OUTPUTS[kind]``: detection's four (OBB: rotated boxes [N, K, 5]) and pose's keypoints
    [N, K, kpts, D] or segmentation's mask coefficients [N, K, M] and the prototypes, passed through."""
    top_k = int(settings["pre_nms_top_k"]) if "pre_nms_top_k" in settings else DEVICE_PRE_NMS_TOP_K
    images = decode_instance_outputs(outputs, kind, settings, top_k)
    k = int(settings["max_detections"])
    answer = dict(zip(ANSWER_OUTPUTS[kind], _rows(images, k, 5 if kind == "obb" else 4)))
    for key, name, output in (("keypoints", "detection_keypoints", "keypoints_output"),
                              ("coefficients", "detection_mask_coefficients", "coefficients_output")):
        if name in ANSWER_OUTPUTS[kind]:
            rows = np.zeros((len(images), k) + tuple(outputs[str(settings[output])].shape[2:]), np.float32)
            for i, found in enumerate(images):
                n = min(k, len(found[key]))
                rows[i, :n] = found[key][:n]
            answer[name] = rows
    if kind == "segmentation":
        answer["mask_prototypes"] = np.asarray(outputs[str(settings["prototypes_output"])])
    return answer


def _rows(images: List[Dict[str, np.ndarray]], k: int, width: int) -> Tuple[np.ndarray, ...]:
    """count [N, 1] int32, boxes [N, K, width], scores [N, K], classes [N, K] float32, zero past the count."""
    count = np.zeros((len(images), 1), np.int32)
    boxes = np.zeros((len(images), k, width), np.float32)
    scores = np.zeros((len(images), k), np.float32)
    classes = np.zeros((len(images), k), np.float32)
    for i, found in enumerate(images):
        n = min(k, len(found["scores"]))
        count[i, 0] = n
        boxes[i, :n], scores[i, :n], classes[i, :n] = found["boxes"][:n], found["scores"][:n], found["labels"][:n]
    return count, boxes, scores, classes
