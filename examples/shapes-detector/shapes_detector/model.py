"""A compact anchor-free (FCOS / YOLOX-style) detector for the shapes example.

Backbone: plain Conv2d + BatchNorm2d + ReLU blocks down to stride 32. Neck: a small FPN that
merges strides 32 -> 16 -> 8. Head: one decoupled head per level (strides 8, 16 and 32) that
predicts per-class logits and the four distances from each grid point to the box sides.

``forward`` decodes everything with plain tensor ops, so the graph exports to ONNX with dynamic
batch, height and width (any multiple of 32):

    boxes:  [N, A, 4] float32, xyxy in input-tensor pixels
    scores: [N, A, C] float32, per-class sigmoid probabilities

A = sum over levels of (H / s) * (W / s) for s in STRIDES, levels concatenated in stride order,
each level flattened row-major (y, then x).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 3
STRIDES = (8, 16, 32)


class ConvBNAct(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1, act: bool = True):
        super().__init__(
            nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True) if act else nn.Identity(),
        )


class ResBlock(nn.Module):
    """x + conv3x3(conv3x3(x)) with a half-width middle."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = ConvBNAct(c, c // 2, 3)
        self.conv2 = ConvBNAct(c // 2, c, 3, act=False)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x + self.conv2(self.conv1(x)))


class Head(nn.Module):
    def __init__(self, c: int, num_classes: int):
        super().__init__()
        self.cls_conv = ConvBNAct(c, c, 3)
        self.reg_conv = ConvBNAct(c, c, 3)
        self.cls_pred = nn.Conv2d(c, num_classes, 1)
        self.reg_pred = nn.Conv2d(c, 4, 1)
        nn.init.constant_(self.cls_pred.bias, -math.log((1 - 0.01) / 0.01))
        nn.init.normal_(self.reg_pred.weight, std=0.01)
        nn.init.constant_(self.reg_pred.bias, 0.0)

    def forward(self, x: torch.Tensor):
        return self.cls_pred(self.cls_conv(x)), self.reg_pred(self.reg_conv(x))


class ShapesDetector(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, widths=(16, 32, 48, 64, 80), neck: int = 32):
        super().__init__()
        w0, w1, w2, w3, w4 = widths
        self.num_classes = num_classes
        self.strides = STRIDES
        self.stem = ConvBNAct(3, w0, 3, 2)  # /2
        self.stage1 = nn.Sequential(ConvBNAct(w0, w1, 3, 2), ResBlock(w1))  # /4
        self.stage2 = nn.Sequential(ConvBNAct(w1, w2, 3, 2), ResBlock(w2), ResBlock(w2))  # /8
        self.stage3 = nn.Sequential(ConvBNAct(w2, w3, 3, 2), ResBlock(w3), ResBlock(w3))  # /16
        self.stage4 = nn.Sequential(ConvBNAct(w3, w4, 3, 2), ResBlock(w4))  # /32
        self.lat3 = ConvBNAct(w2, neck, 1)
        self.lat4 = ConvBNAct(w3, neck, 1)
        self.lat5 = ConvBNAct(w4, neck, 1)
        self.smooth3 = ConvBNAct(neck, neck, 3)
        self.smooth4 = ConvBNAct(neck, neck, 3)
        self.heads = nn.ModuleList(Head(neck, num_classes) for _ in STRIDES)

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        c3 = self.stage2(self.stage1(self.stem(images)))
        c4 = self.stage3(c3)
        c5 = self.stage4(c4)
        p5 = self.lat5(c5)
        p4 = self.smooth4(self.lat4(c4) + F.interpolate(p5, scale_factor=2.0, mode="nearest"))
        p3 = self.smooth3(self.lat3(c3) + F.interpolate(p4, scale_factor=2.0, mode="nearest"))
        return [p3, p4, p5]

    def raw(self, images: torch.Tensor):
        """Per-anchor (class logits [N, A, C], box xyxy [N, A, 4], grid points [A, 2], strides [A])."""
        logits, boxes, points, strides = [], [], [], []
        for feat, head, stride in zip(self.features(images), self.heads, self.strides):
            cls, reg = head(feat)
            n = cls.shape[0]
            h, w = cls.shape[2], cls.shape[3]
            ys = (torch.arange(h, dtype=torch.float32, device=cls.device) + 0.5) * stride
            xs = (torch.arange(w, dtype=torch.float32, device=cls.device) + 0.5) * stride
            grid_y = ys.view(-1, 1).expand(h, w).reshape(-1)
            grid_x = xs.view(1, -1).expand(h, w).reshape(-1)
            centre = torch.stack([grid_x, grid_y, grid_x, grid_y], dim=-1)  # [hw, 4]
            dist = torch.exp(reg.clamp(max=8.0)).flatten(2).transpose(1, 2) * stride  # [N, hw, 4]
            sign = torch.tensor([-1.0, -1.0, 1.0, 1.0], dtype=torch.float32, device=cls.device)
            boxes.append(centre.unsqueeze(0) + dist * sign)
            logits.append(cls.flatten(2).transpose(1, 2).reshape(n, -1, self.num_classes))
            points.append(centre[:, :2])
            strides.append(torch.full_like(grid_x, float(stride)))
        return torch.cat(logits, 1), torch.cat(boxes, 1), torch.cat(points, 0), torch.cat(strides, 0)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        logits, boxes, _, _ = self.raw(images)
        return {"boxes": boxes, "scores": torch.sigmoid(logits)}


def build_model() -> nn.Module:
    """The shapes detector with freshly initialised weights (the caller loads the state_dict)."""
    return ShapesDetector()
