"""Architectures of published figures that no installed package builds here, in plain torch.

MLPerf Inference's edge vision models: ResNet-50 v1.5 (224x224) and RetinaNet with a
ResNeXt50-32x4d FPN backbone (800x800, 264 OpenImages classes, 9 anchors). Random weights: the
latency plan counts shapes, not values. Used by latency_model_fit.py (torchvision would build them,
but its build in this environment does not import).
"""

from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, width_per_group: int = 64) -> None:
        super().__init__()
        width = int(planes * (width_per_group / 64.0)) * groups
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or cin != planes * 4:
            self.down = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, groups: int = 1, width_per_group: int = 64, classes: int | None = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(cin, planes, stride if i == 0 else 1, groups, width_per_group))
                cin = planes * 4
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.fc = nn.Linear(2048, classes) if classes else None

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        out = []
        for stage in self.stages:
            x = stage(x)
            out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x)[-1], 1), 1))


class RetinaNet(nn.Module):
    """ResNeXt50-32x4d, FPN P3-P7 (256 channels), 4-conv classification and box heads shared across levels."""

    def __init__(self, classes: int = 264, anchors: int = 9) -> None:
        super().__init__()
        self.backbone = ResNet(groups=32, width_per_group=4, classes=None)
        self.lateral = nn.ModuleList(nn.Conv2d(c, 256, 1) for c in (512, 1024, 2048))
        self.smooth = nn.ModuleList(nn.Conv2d(256, 256, 3, 1, 1) for _ in range(3))
        self.p6 = nn.Conv2d(256, 256, 3, 2, 1)
        self.p7 = nn.Conv2d(256, 256, 3, 2, 1)

        def head(out: int) -> nn.Sequential:
            layers: list[nn.Module] = []
            for _ in range(4):
                layers += [nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU()]
            return nn.Sequential(*layers, nn.Conv2d(256, out, 3, 1, 1))

        self.cls_head = head(anchors * classes)
        self.box_head = head(anchors * 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c3, c4, c5 = self.backbone.features(x)[1:]
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + nn.functional.interpolate(p5, size=c4.shape[-2:], mode="nearest")
        p3 = self.lateral[0](c3) + nn.functional.interpolate(p4, size=c3.shape[-2:], mode="nearest")
        p3, p4, p5 = self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5)
        p6 = self.p6(p5)
        p7 = self.p7(nn.functional.relu(p6))
        levels = (p3, p4, p5, p6, p7)
        return tuple(self.cls_head(p) for p in levels) + tuple(self.box_head(p) for p in levels)


MODELS = {"resnet50": lambda: ResNet(), "retinanet_resnext50_32x4d_fpn": lambda: RetinaNet()}
