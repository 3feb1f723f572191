"""Model entry points for the zoo projects: the packages' own definitions, random weights, no downloads.

test_zoo.py copies this file into each project as ``<package>/model.py``, as a user's wrapper
module would be, and names one of these functions in ``model.entry_point``.
"""

from __future__ import annotations

import torch

from tests.support.zoo import import_torchvision

NUM_CLASSES = 3


def resnet18() -> torch.nn.Module:
    return import_torchvision().models.resnet18(weights=None, num_classes=NUM_CLASSES)


def mobilenet_v3_small() -> torch.nn.Module:
    return import_torchvision().models.mobilenet_v3_small(weights=None, num_classes=NUM_CLASSES)


def vit_tiny() -> torch.nn.Module:
    import_torchvision()  # timm's norm layers import torchvision.ops.misc
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=NUM_CLASSES)


class SSDliteRaw(torch.nn.Module):
    """torchvision's SSDlite without its transform and NMS: boxes [N, A, 4] xyxy in input pixels, scores [N, A, C].

    The anchors come from the model's own generator for the input size; scores are the softmax over
    background + C classes with the background column dropped. Normalisation is edgebuild's
    preprocess (task.preprocess mean/std), not the model's GeneralizedRCNNTransform.
    """

    def __init__(self, detector: torch.nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        from torchvision.models.detection.image_list import ImageList

        features = list(self.detector.backbone(images).values())
        head = self.detector.head(features)
        anchors = self.detector.anchor_generator(ImageList(images, [tuple(images.shape[-2:])]), features)[0]
        deltas = head["bbox_regression"]  # [N, A, 4]
        boxes = self.detector.box_coder.decode_single(deltas.reshape(-1, 4), anchors.repeat(deltas.shape[0], 1))
        scores = torch.softmax(head["cls_logits"], dim=-1)[..., 1:]
        return {"boxes": boxes.reshape(deltas.shape), "scores": scores}


def ssdlite() -> torch.nn.Module:
    detection = import_torchvision().models.detection
    detector = detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                       num_classes=NUM_CLASSES + 1)  # + background
    return SSDliteRaw(detector)
