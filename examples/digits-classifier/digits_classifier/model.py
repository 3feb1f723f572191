"""The network: Conv2d+BatchNorm2d+ReLU blocks, global average pooling, Linear to 10 logits."""

import torch
from torch import nn

NUM_CLASSES = 10


def _block(in_ch: int, out_ch: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_ch),
        nn.ReLU(inplace=True),
    )


class DigitsNet(nn.Module):
    """float32 [N, 1, H, W] (nominally 16x16, any H, W >= 1 works) -> logits [N, 10]."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(1, 16),
            _block(16, 32, stride=2),  # 16 -> 8
            _block(32, 32),
            _block(32, 64, stride=2),  # 8 -> 4
            _block(64, 64),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)  # global average pooling: spatial size may vary
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build_model() -> nn.Module:
    """A freshly initialised network; load weights/digits_classifier.pt into it (strict)."""
    return DigitsNet()
