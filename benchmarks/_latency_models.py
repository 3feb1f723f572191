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


# -- the DLA's published figures: NVIDIA's "prepared" graphs (github:NVIDIA/Deep-Learning-Accelerator-SW
# scripts/prepare_models: NMS and Top-K cut off, heads fused) and the Jetson DLA tutorial's two CNNs --------

class ResNet50Prepared(ResNet):
    """ResNet-50 as prepare_models/resnet50.py leaves it: ReduceMean -> AveragePool 7x7, the dense layer -> a
    1x1 convolution (both run on the DLA; GlobalAveragePool and Flatten would not)."""

    def __init__(self) -> None:
        super().__init__(classes=None)
        self.pool = nn.AvgPool2d(7)
        self.head = nn.Conv2d(2048, 1001, 1)  # the MLPerf TensorFlow export's 1001 classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)[-1]))


def _basic(cin: int, cout: int, stride: int) -> nn.Module:
    class Basic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    return Basic()


class SSDResNet34(nn.Module):
    """MLPerf's SSD-ResNet-34 at 1200x1200 (mlcommons/inference vision/classification_and_detection ssd_r34):
    ResNet-34 to conv4_x with conv4_x's stride removed (256 channels at 1/8), five extra blocks, and per level
    a location and a confidence 3x3 convolution (4, 6, 6, 6, 4, 4 boxes, 81 classes), which prepare_models
    fuses into one convolution per level."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 1)):
            for i in range(count):
                blocks.append(_basic(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.backbone = nn.Sequential(*blocks)
        channels = (256, 512, 512, 256, 256, 256)
        extras = []
        for i, (cin, cout, mid) in enumerate(zip(channels[:-1], channels[1:], (256, 256, 128, 128, 128))):
            stride, pad = (2, 1) if i < 3 else (1, 0)
            extras.append(nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                        nn.Conv2d(mid, cout, 3, stride, pad, bias=False), nn.BatchNorm2d(cout),
                                        nn.ReLU()))
        self.extras = nn.ModuleList(extras)
        self.heads = nn.ModuleList(nn.Conv2d(c, n * (4 + 81), 3, 1, 1) for c, n in zip(channels, (4, 6, 6, 6, 4, 4)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.backbone(self.stem(x))
        levels = [x]
        for extra in self.extras:
            x = extra(x)
            levels.append(x)
        return tuple(head(level) for head, level in zip(self.heads, levels))


class SSDMobileNetV1(nn.Module):
    """TensorFlow's ssd_mobilenet_v1_coco (MLPerf's 300x300 SSD-MobileNet): MobileNet V1 (13 depthwise-separable
    blocks, ReLU6), four extra 1x1 + 3x3/2 layers, and per level a 1x1 box encoding and class predictor
    (3, 6, 6, 6, 6, 6 anchors, 91 classes), fused into one 1x1 convolution per level by prepare_models."""

    def __init__(self) -> None:
        super().__init__()

        def unit(cin: int, cout: int, kernel: int, stride: int, groups: int = 1) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU6())

        layers, cin = [unit(3, 32, 3, 2)], 32
        for cout, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
                             (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)):
            layers += [unit(cin, cin, 3, stride, cin), unit(cin, cout, 1, 1)]
            cin = cout
        self.to_conv11 = nn.Sequential(*layers[:24])
        self.to_conv13 = nn.Sequential(*layers[24:])
        self.extras = nn.ModuleList(nn.Sequential(unit(c, mid, 1, 1), unit(mid, out, 3, 2))
                                    for c, mid, out in ((1024, 256, 512), (512, 128, 256), (256, 128, 256),
                                                        (256, 64, 128)))
        self.heads = nn.ModuleList(nn.Conv2d(c, n * (4 + 91), 1) for c, n in
                                   zip((512, 1024, 512, 256, 256, 128), (3, 6, 6, 6, 6, 6)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c11 = self.to_conv11(x)
        x = self.to_conv13(c11)
        levels = [c11, x]
        for extra in self.extras:
            x = extra(x)
            levels.append(x)
        return tuple(head(level) for head, level in zip(self.heads, levels))


class TutorialCNN(nn.Module):
    """github:NVIDIA-AI-IOT/jetson_dla_tutorial models.py: four 3x3/2 convolutions (64-512 channels) with
    GroupNorm(8) (``ModelGN``, which the DLA cannot run) or BatchNorm (``ModelBN``), ReLU, a global average
    pool and a 10-class linear layer, at 32x32 (CIFAR10)."""

    def __init__(self, group_norm: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for cout in (64, 128, 256, 512):
            layers += [nn.Conv2d(cin, cout, 3, 2, 1), nn.GroupNorm(8, cout) if group_norm else nn.BatchNorm2d(cout),
                       nn.ReLU()]
            cin = cout
        self.cnn = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.linear = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.cnn(x))
        return self.linear(x.view(x.shape[0], -1))


MODELS.update({
    "resnet50_dla_prepared": ResNet50Prepared, "ssd_resnet34": SSDResNet34, "ssd_mobilenet_v1": SSDMobileNetV1,
    "dla_tutorial_gn": lambda: TutorialCNN(True), "dla_tutorial_bn": lambda: TutorialCNN(False),
})
