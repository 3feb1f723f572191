"""What a detector's outputs are called and how its host-side decode is set: names and settings only.

Device side: Python 3.8, and no numpy here: the build host reads these names when it only checks a
project or a stored record (a no-op compile), and ``edgebuild.runtime.base.vision``, which decodes
the outputs, re-exports them.
"""

from dataclasses import dataclass
from typing import Dict, Tuple

__all__ = ["INSTANCE_NMS_OUTPUTS", "NMS_OUTPUTS", "DetectionParams"]

#: a model with NMS inside (``[task.postprocess] in_model``, edgebuild.sources.export.nms_graph) answers
#: these, in this order: count [N, 1] int32, boxes [N, K, 4] xyxy pixels, scores [N, K], classes [N, K]
NMS_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
#: pose and segmentation with NMS inside answer ``NMS_OUTPUTS`` and, after them, per detection its keypoints
#: [N, K, kpts, D] (x, y in input pixels, D = 3: a visibility) or its mask coefficients [N, K, M] with the
#: prototypes [N, M, H/4, W/4] passed through (masks: ``prototype_masks``); zero rows past num_detections
INSTANCE_NMS_OUTPUTS: Dict[str, Tuple[str, ...]] = {
    "pose": NMS_OUTPUTS + ("detection_keypoints",),
    "segmentation": NMS_OUTPUTS + ("detection_mask_coefficients", "mask_prototypes"),
}
#: oriented boxes decoded by the server (rotated NMS: no model has it inside), in this order: count [N, 1]
#: int32, rotated boxes [N, K, 5] (cx, cy, w, h in input pixels, the angle in radians), scores [N, K],
#: classes [N, K]; zero rows past num_detections
OBB_NMS_OUTPUTS = ("num_detections", "detection_rotated_boxes", "detection_scores", "detection_classes")


@dataclass(frozen=True)
class DetectionParams:
    score_threshold: float = 0.001
    nms_iou: float = 0.6
    max_detections: int = 100
    pre_nms_top_k: int = 1000  # the best (box, class) candidates kept before NMS (Ultralytics' max_nms: 30000)
