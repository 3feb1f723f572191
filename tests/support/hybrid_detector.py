"""A trained detector with GEMMs, for NVFP4: the shapes example's detector with a token MLP on its stride-32 map.

TensorRT runs FP4 only in GEMMs, and the shapes detector is convolutions only, so it has no NVFP4
candidate. This one adds what hybrid detectors (RT-DETR's AIFI encoder) put on their coarsest level:
the stride-32 features as tokens ([N, H*W, 32]) through Linear(32, 64) -> ReLU -> Linear(64, 32) with a
residual, then back to the map. The ONNX export has two MatMuls with constant [32, 64] and [64, 32]
weights over a 3-D activation, both ones TensorRT can run in NVFP4.

``fine_tune`` starts from the example's trained weights with the MLP's output projection at zero (the
detector exactly as trained) and trains the whole model on the example's synthetic data with the
example's own loss (examples/shapes-detector/train.py) for a number of steps, so the MLP carries
learned weights. This file is copied into a project folder beside the example's ``shapes_detector``
package, where ``hybrid_detector:build_model`` is its entry point.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

try:  # in a project folder: the example's package beside this file
    from shapes_detector.model import ShapesDetector
except ImportError:  # imported from tests/support: the example in the repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "shapes-detector"))
    from shapes_detector.model import ShapesDetector

ENTRY_POINT = "hybrid_detector:build_model"


class TokenMLP(nn.Module):
    """x + MLP(x) over the tokens of a feature map, the map's shape kept."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(channels, hidden)
        self.fc2 = nn.Linear(hidden, channels)
        nn.init.zeros_(self.fc2.weight)  # the block starts as the identity: the detector as trained
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)  # [N, H*W, C]
        tokens = tokens + self.fc2(F.relu(self.fc1(tokens)))
        return tokens.transpose(1, 2).reshape(n, c, h, w)


class HybridShapesDetector(ShapesDetector):
    def __init__(self) -> None:
        super().__init__()
        self.mixer = TokenMLP(32, 64)  # the neck's width

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        c3 = self.stage2(self.stage1(self.stem(images)))
        c4 = self.stage3(c3)
        c5 = self.stage4(c4)
        p5 = self.mixer(self.lat5(c5))
        p4 = self.smooth4(self.lat4(c4) + F.interpolate(p5, scale_factor=2.0, mode="nearest"))
        p3 = self.smooth3(self.lat3(c3) + F.interpolate(p4, scale_factor=2.0, mode="nearest"))
        return [p3, p4, p5]


def build_model() -> nn.Module:
    return HybridShapesDetector()


def _train_module(example: Path):
    """The example's train.py as a module (its loss and its synthetic batches)."""
    spec = importlib.util.spec_from_file_location("shapes_train", example / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(example))
    spec.loader.exec_module(module)
    return module


def fine_tune(example: Path, out: Path, steps: int, batch_size: int = 16, seed: int = 7) -> Path:
    """The hybrid detector from ``example``'s trained weights, fine-tuned ``steps`` steps, saved to ``out``."""
    train = _train_module(example)
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    model = HybridShapesDetector()
    trained = torch.load(example / "weights" / "shapes_detector.pt", map_location="cpu", weights_only=True)
    missing, unexpected = model.load_state_dict(trained, strict=False)
    assert not unexpected and all(k.startswith("mixer.") for k in missing), (missing, unexpected)
    model.train()
    mixer = list(model.mixer.parameters())
    rest = [p for n, p in model.named_parameters() if not n.startswith("mixer.")]
    optimizer = torch.optim.AdamW([{"params": mixer, "lr": 3e-3}, {"params": rest, "lr": 3e-4}], weight_decay=0.0)
    batches = iter(train.SyntheticBatches(batch_size, seed))
    for _ in range(steps):
        images, boxes, labels, mask = next(batches)
        loss, _ = train.detection_loss(model, images, boxes, labels, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out)
    return out
