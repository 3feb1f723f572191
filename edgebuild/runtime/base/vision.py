"""Image pre- and post-processing shared by the build host and the device.

Device side: Python 3.8 and numpy only. The same functions feed training, evaluation on the
build host and inference on a Jetson, so an image is turned into a tensor in exactly one way.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edgebuild.errors import ModelError
from edgebuild.runtime.base.model_outputs import INSTANCE_NMS_OUTPUTS, NMS_OUTPUTS, DetectionParams
from edgebuild.runtime.base.preprocess_spec import PreprocessSpec

__all__ = ["INSTANCE_NMS_OUTPUTS", "NMS_OUTPUTS", "DetectionParams", "ImageTransform", "PreprocessSpec",
           "check_detection_outputs", "decode_detections", "decode_outputs", "preprocess", "stack_batch", "top_k"]

RESIZE_MODES = ("letterbox", "resize")
CHANNEL_ORDERS = ("RGB", "BGR", "GRAY")


@dataclass(frozen=True)
class ImageTransform:
    """Maps coordinates in the network input back to the original image."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    original_width: int
    original_height: int

    def boxes_to_original(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        out = np.asarray(boxes_xyxy, dtype=np.float32).copy()
        out[..., [0, 2]] = (out[..., [0, 2]] - self.pad_x) / self.scale_x
        out[..., [1, 3]] = (out[..., [1, 3]] - self.pad_y) / self.scale_y
        out[..., [0, 2]] = out[..., [0, 2]].clip(0, self.original_width)
        out[..., [1, 3]] = out[..., [1, 3]].clip(0, self.original_height)
        return out


def _opencv() -> Any:
    """OpenCV where it is installed (on a device image it may not be), else None; imported on first use."""
    global _CV2
    if _CV2 is False:
        try:
            import cv2
        except ImportError:
            _CV2 = None
        else:
            _CV2 = cv2
    return _CV2


_CV2: Any = False  # not looked for yet


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize with half-pixel centres (as cv2.INTER_LINEAR), HxW or HxWxC, float32 out.

    OpenCV's resize of the float32 pixels where OpenCV is installed (4 to 5 times faster on a 640x480
    frame), else the same arithmetic in numpy: the two agree within 0.02 of a grey level
    (tests/unit/runtime/test_vision_resize.py), so the gate's numbers hold whichever ran.
    """
    src = np.asarray(image, dtype=np.float32)
    in_h, in_w = src.shape[:2]
    if (in_h, in_w) == (height, width):
        return src.copy()
    cv2 = _opencv()
    if cv2 is not None and (src.ndim == 2 or (src.ndim == 3 and 1 <= src.shape[2] <= 4)):
        out = cv2.resize(src, (width, height), interpolation=cv2.INTER_LINEAR)
        return out.reshape(height, width, *src.shape[2:])  # OpenCV drops a single channel's axis
    return _resize_bilinear_numpy(src, height, width)


def _resize_bilinear_numpy(src: np.ndarray, height: int, width: int) -> np.ndarray:
    in_h, in_w = src.shape[:2]
    ys = (np.arange(height, dtype=np.float32) + 0.5) * (in_h / height) - 0.5
    xs = (np.arange(width, dtype=np.float32) + 0.5) * (in_w / width) - 0.5
    ys = ys.clip(0, in_h - 1)
    xs = xs.clip(0, in_w - 1)
    y0 = np.floor(ys).astype(np.int64)
    x0 = np.floor(xs).astype(np.int64)
    y1 = np.minimum(y0 + 1, in_h - 1)
    x1 = np.minimum(x0 + 1, in_w - 1)
    wy = (ys - y0)[:, None]
    wx = (xs - x0)[None, :]
    if src.ndim == 3:
        wy = wy[..., None]
        wx = wx[..., None]
    top = src[y0][:, x0] * (1 - wx) + src[y0][:, x1] * wx
    bottom = src[y1][:, x0] * (1 - wx) + src[y1][:, x1] * wx
    return top * (1 - wy) + bottom * wy


def preprocess(image: np.ndarray, spec: PreprocessSpec,
               image_order: str = "RGB") -> Tuple[np.ndarray, ImageTransform]:
    """Turn one decoded image into a CHW float32 tensor and the transform that undoes it.

    ``image_order``: the channel order of ``image`` ("RGB", or "BGR" as OpenCV decodes); the channels are
    put in the model's order (``spec.channel_order``) after the resize, on the small image (a resize is
    per channel, so the order of the two does not change a value, and a flipped view of a large frame
    is slow to read).
    """
    pixels = np.asarray(image)
    flip = False
    if spec.channel_order == "GRAY":
        if pixels.ndim == 3 and pixels.shape[2] >= 3:
            weights = [0.299, 0.587, 0.114] if image_order == "RGB" else [0.114, 0.587, 0.299]
            pixels = pixels[..., :3].astype(np.float32) @ np.array(weights, np.float32)
        pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], 1)
    else:
        if pixels.ndim == 2:
            pixels = np.repeat(pixels[..., None], 3, axis=2)
        pixels = pixels[..., :3]
        flip = spec.channel_order != image_order
    orig_h, orig_w = pixels.shape[:2]
    out_h, out_w = spec.input_size
    if spec.resize == "letterbox":
        scale = min(out_h / orig_h, out_w / orig_w)
        new_h, new_w = max(1, round(orig_h * scale)), max(1, round(orig_w * scale))
        resized = resize_bilinear(pixels, new_h, new_w)
        pad_y, pad_x = (out_h - new_h) // 2, (out_w - new_w) // 2
        canvas = np.full((out_h, out_w, pixels.shape[2]), float(spec.pad_value), np.float32)
        canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = resized
        transform = ImageTransform(new_w / orig_w, new_h / orig_h, pad_x, pad_y, orig_w, orig_h)
    elif spec.resize == "resize":
        canvas = resize_bilinear(pixels, out_h, out_w)
        transform = ImageTransform(out_w / orig_w, out_h / orig_h, 0.0, 0.0, orig_w, orig_h)
    else:
        raise ValueError("resize must be one of %s, not %r" % (RESIZE_MODES, spec.resize))
    if flip:
        canvas = canvas[..., ::-1]
    mean = np.asarray(spec.mean, np.float32)[: canvas.shape[2]]
    std = np.asarray(spec.std, np.float32)[: canvas.shape[2]]
    tensor = (canvas / 255.0 - mean) / std
    return np.ascontiguousarray(tensor.transpose(2, 0, 1), dtype=np.float32), transform


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, limit: Optional[int] = None) -> np.ndarray:
    """Greedy non-maximum suppression; returns indices of kept boxes, best score first.

    A box is suppressed by a better one whose IoU with it is above ``iou_threshold`` (as
    torchvision's ``nms``). With ``limit`` it stops after that many: greedy NMS keeps boxes in
    score order, so the first ``limit`` are the same as those of a full run cut to ``limit``.
    """
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    keep: List[int] = []
    while order.size and (limit is None or len(keep) < limit):
        best = order[0]
        keep.append(int(best))
        rest = order[1:]
        iw = (np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest])).clip(0)
        ih = (np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest])).clip(0)
        inter = iw * ih
        iou = inter / np.maximum(areas[best] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def class_aware_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float,
                    limit: int) -> np.ndarray:
    """Greedy NMS within each class: the indices of the ``limit`` best survivors of all classes, best first.

    One NMS over boxes offset by class (as Ultralytics' ``max_wh``), in float64 so that the offset
    costs no precision. It runs on the best candidates first (4 x ``limit``, then 4 times as many):
    a worse candidate never suppresses a better one, so once a prefix keeps ``limit`` boxes the
    rest cannot change them, and tens of thousands of candidates cost about what a thousand do.
    """
    if not scores.size:
        return np.zeros(0, np.int64)
    span = float(boxes.max() - boxes.min()) + 1
    shifted = boxes.astype(np.float64) + classes[:, None].astype(np.float64) * span
    order = np.argsort(-scores, kind="stable")
    prefix = 4 * limit
    while True:
        chosen = order[:prefix]
        keep = nms(shifted[chosen], scores[chosen], iou_threshold, limit=limit)
        if len(keep) >= limit or prefix >= order.size:
            return chosen[keep]
        prefix *= 4


def best_first_cut(scores: np.ndarray, count: int) -> np.ndarray:
    """The positions of the ``count`` best ``scores``, in their original order; of equal scores at the
    cut, the lower positions.

    This is the tie rule of ONNX's TopK (the lower index first), which the appended NMS graph uses;
    ``np.argpartition`` alone would pick among equal scores by its selection algorithm, which numpy
    does not promise from one release to the next.
    """
    if scores.size <= count:
        return np.arange(scores.size)
    kth = np.partition(scores, scores.size - count)[scores.size - count]  # the count-th best score
    above = np.flatnonzero(scores > kth)
    at = np.flatnonzero(scores == kth)[: count - above.size]
    return np.sort(np.concatenate([above, at]))


def in_canonical_order(detections: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """One image's detections best first; equal scores by class, then box (x1, y1, x2, y2).

    Which of two equally scored detections comes first is promised by neither TensorRT's TopK and
    NMS layers nor ONNX Runtime's NonMaxSuppression: lists of detections are compared in this order
    (the gate's NMS parity, the tests), so a tie never decides a comparison.
    """
    scores = np.asarray(detections["scores"]).reshape(-1)
    boxes = np.asarray(detections["boxes"]).reshape(len(scores), -1)
    order = np.lexsort(tuple(boxes[:, i] for i in reversed(range(boxes.shape[1])))
                       + (np.asarray(detections["labels"]).reshape(-1), -scores))
    return {k: (np.asarray(v)[order] if np.ndim(v) and len(v) == len(order) else np.asarray(v))
            for k, v in detections.items()}


def decode_detections(
    boxes: np.ndarray, scores: np.ndarray, params: DetectionParams
) -> Dict[str, np.ndarray]:
    """Dense per-anchor outputs of one image -> final detections (class-aware NMS).

    boxes: [A, 4] xyxy in network-input pixels; scores: [A, C] per-class probabilities.
    Every (anchor, class) pair above the threshold is a candidate, as in COCO evaluation of
    multi-label heads (Ultralytics' val: ``multi_label=True``); the ``pre_nms_top_k`` best of them
    go through NMS. Returns boxes [K, 4], scores [K], labels [K] (0-based class index), best first.
    """
    anchor_idx, class_idx = np.nonzero(scores > params.score_threshold)  # in flat (anchor, class) order
    cand_scores = scores[anchor_idx, class_idx]
    if cand_scores.size > params.pre_nms_top_k:
        top = best_first_cut(cand_scores, params.pre_nms_top_k)
        anchor_idx, class_idx, cand_scores = anchor_idx[top], class_idx[top], cand_scores[top]
    cand_boxes = boxes[anchor_idx].astype(np.float32)
    keep = class_aware_nms(cand_boxes, cand_scores, class_idx, params.nms_iou, params.max_detections)
    return {
        "boxes": cand_boxes[keep],
        "scores": cand_scores[keep].astype(np.float32),
        "labels": class_idx[keep].astype(np.int64),
    }


def decode_outputs(outputs: Mapping[str, np.ndarray], settings: Mapping[str, Any]) -> List[Dict[str, np.ndarray]]:
    """Every image's detections from one batch of outputs, raw head or NMS inside.

    ``settings``: ``boxes_output``, ``scores_output``, ``score_threshold``, ``nms_iou``,
    ``max_detections``, optionally ``pre_nms_top_k`` and ``in_model`` (what the host's
    ``edgebuild.accuracy.evaluate.detection_settings`` gives, also when it arrives on a device as JSON
    or inside an .npz; one written before a key existed decodes with its default). With
    ``in_model`` the outputs are ``NMS_OUTPUTS`` and are read as they are: the model did the decode.
    """
    if bool(settings["in_model"]) if "in_model" in settings else False:
        check_nms_outputs(outputs)
        return split_detections(outputs)
    top_k = settings["pre_nms_top_k"] if "pre_nms_top_k" in settings else DetectionParams.pre_nms_top_k
    params = DetectionParams(float(settings["score_threshold"]), float(settings["nms_iou"]),
                             int(settings["max_detections"]), int(top_k))
    boxes, scores = outputs[str(settings["boxes_output"])], outputs[str(settings["scores_output"])]
    check_detection_outputs(boxes, scores, str(settings["boxes_output"]), str(settings["scores_output"]))
    return [decode_detections(boxes[i], scores[i], params) for i in range(boxes.shape[0])]


def split_detections(outputs: Mapping[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
    """Every image's detections from the fixed-size ``NMS_OUTPUTS``, in ``decode_detections``' form
    (boxes [k, 4], scores [k], labels [k] int64)."""
    count = np.asarray(outputs[NMS_OUTPUTS[0]]).reshape(-1)
    boxes, scores, classes = (np.asarray(outputs[n]) for n in NMS_OUTPUTS[1:])
    return [{"boxes": boxes[i, :n].astype(np.float32), "scores": scores[i, :n].astype(np.float32),
             "labels": classes[i, :n].astype(np.int64)} for i, n in enumerate(int(c) for c in count)]


def check_nms_outputs(outputs: Mapping[str, np.ndarray]) -> None:
    """The outputs of a model with NMS inside, or a ModelError saying what is missing or misshaped."""
    missing = [n for n in NMS_OUTPUTS if n not in outputs]
    if missing:
        raise ModelError("the model has no {} output(s) (found {}): it is not a model with NMS inside".format(
            ", ".join(missing), ", ".join(sorted(outputs)) or "none"),
            hint="a raw-head model decodes on the host: set [task.postprocess] in_model to what the ONNX is")
    count, boxes, scores, classes = (np.asarray(outputs[n]) for n in NMS_OUTPUTS)
    images, k = boxes.shape[0], boxes.shape[1] if boxes.ndim == 3 else -1
    if (count.shape not in ((images, 1), (images,)) or boxes.shape != (images, k, 4) or scores.shape != (images, k)
            or classes.shape != (images, k)):
        raise ModelError("NMS outputs of the wrong shapes: num_detections {}, detection_boxes {}, detection_scores "
                         "{}, detection_classes {} (want [N, 1], [N, K, 4], [N, K], [N, K])".format(
                             list(count.shape), list(boxes.shape), list(scores.shape), list(classes.shape)))
    if count.size and (int(count.min()) < 0 or int(count.max()) > k):
        raise ModelError("num_detections holds {}..{}, outside 0..{} (K, the rows of detection_boxes)".format(
            int(count.min()), int(count.max()), k))


def check_detection_outputs(boxes: np.ndarray, scores: np.ndarray, boxes_name: str = "boxes",
                            scores_name: str = "scores", classes: Optional[int] = None) -> None:
    """Raise ModelError unless boxes are [N, A, 4] and scores [N, A, C] (C = ``classes`` where given).

    Decoding other shapes would index the wrong axes and fail far from the cause; the build host's
    model stage explains the usual causes, this only stops a model folder that slipped past it.
    """
    fits = (boxes.ndim == 3 and boxes.shape[2] == 4 and scores.ndim == 3
            and scores.shape[:2] == boxes.shape[:2] and (classes is None or scores.shape[2] == classes))
    if not fits:
        wanted = "C" if classes is None else str(classes)
        raise ModelError("cannot decode detections: %s is %s and %s is %s, not [N, A, 4] and [N, A, %s]"
                         % (boxes_name, list(boxes.shape), scores_name, list(scores.shape), wanted),
                         hint="the model must return boxes [N, A, 4] and scores [N, A, C]; `edgebuild compile` "
                              "checks this in its model stage and says what the shapes look like")


def prototype_masks(prototypes: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray,
                    input_size: Tuple[int, int]) -> np.ndarray:
    """Instance masks of one image from a YOLO-seg head, as Ultralytics' val makes them (``ops.process_mask``).

    prototypes [C, mh, mw]; coefficients [N, C] of the detections kept; boxes [N, 4] xyxy in
    network-input pixels; input_size (height, width) of the network input. Returns [N, mh, mw]
    bool at the prototypes' resolution (a quarter of the input's): the mask logit above 0, inside
    the box scaled to that resolution (pixel columns x1 <= c < x2, rows y1 <= r < y2). Not
    upsampled: the mask metric compares masks at this resolution, in the network input's frame.
    """
    channels, mask_h, mask_w = prototypes.shape
    logits = np.asarray(coefficients, np.float32) @ np.asarray(prototypes, np.float32).reshape(channels, -1)
    masks = logits.reshape(-1, mask_h, mask_w) > 0
    scaled = np.asarray(boxes, np.float32).reshape(-1, 4) * np.array(
        [mask_w / input_size[1], mask_h / input_size[0]] * 2, np.float32)
    cols, rows = np.arange(mask_w, dtype=np.float32), np.arange(mask_h, dtype=np.float32)
    inside_x = (cols >= scaled[:, 0:1]) & (cols < scaled[:, 2:3])
    inside_y = (rows >= scaled[:, 1:2]) & (rows < scaled[:, 3:4])
    return masks & inside_y[:, :, None] & inside_x[:, None, :]


def top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries per row, best first: [N, C] -> [N, k]."""
    k = min(k, logits.shape[-1])
    part = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    order = np.argsort(-np.take_along_axis(logits, part, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(part, order, axis=-1)


def stack_batch(tensors: Sequence[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.stack(tensors, axis=0), dtype=np.float32)
