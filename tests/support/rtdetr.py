"""A small Ultralytics RT-DETR trained here on the zoo's generated rectangles, cached between runs.

``rtdetr-l.yaml`` (32 M parameters) does not train on two CPU cores in minutes. ``TINY_RTDETR`` is derived
from it, every block kept in its place and kind (HGStem, HGBlock, DWConv backbone; AIFI, the CCFM's RepC3 and
convolutions; RTDETRDecoder over P3-P5), only narrower and shallower: backbone widths about a quarter and
one HGBlock per stage (6 in rtdetr-l), hidden dim 64 (256), AIFI feed-forward 256 with 4 heads (1024, 8),
3 decoder layers (6) with 4 heads and feed-forward 256, 100 queries (300): 0.9 M parameters. Trained from
scratch (100 epochs, AdamW, lr 0.003, no mosaic or warm-up, no val between epochs) it reaches mAP50-95 about
0.5 on the 64 held-out images (60 epochs at lr 0.004: 0.22); the decoder, its deformable attention
(GridSample), the encoder's query selection and the decoder's top-k are rtdetr-l's own code.

The trained checkpoint lives under ``build/bench-models/rtdetr-tiny-<key>/`` (``build/`` is git-ignored), the
key hashing the yaml, the training settings, the data generator's counts and the torch and Ultralytics
versions, as the benchmarks' trained models do (``benchmarks/_trained_models.py``): the first run trains (about
five minutes on 2 cores), every later run reuses it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "bench-models"
SIZE = 128

#: rtdetr-l.yaml, narrower and shallower (the module docstring says by how much); nc is the data's
TINY_RTDETR = """\
nc: 2
scales:
  n: [1.00, 1.00, 1024]
backbone:
  - [-1, 1, HGStem, [16, 32]] # 0-P2/4
  - [-1, 1, HGBlock, [32, 64, 3]] # stage 1
  - [-1, 1, DWConv, [64, 3, 2, 1, False]] # 2-P3/8
  - [-1, 1, HGBlock, [48, 128, 3]] # stage 2
  - [-1, 1, DWConv, [128, 3, 2, 1, False]] # 4-P4/16
  - [-1, 1, HGBlock, [64, 256, 5, True, False]] # stage 3
  - [-1, 1, DWConv, [256, 3, 2, 1, False]] # 6-P5/32
  - [-1, 1, HGBlock, [128, 256, 5, True, False]] # stage 4
head:
  - [-1, 1, Conv, [64, 1, 1, None, 1, 1, False]] # 8 input_proj.2
  - [-1, 1, AIFI, [256, 4]]
  - [-1, 1, Conv, [64, 1, 1]] # 10, Y5, lateral_convs.0
  - [-1, 1, nn.Upsample, [None, 2, "nearest"]]
  - [5, 1, Conv, [64, 1, 1, None, 1, 1, False]] # 12 input_proj.1
  - [[-2, -1], 1, Concat, [1]]
  - [-1, 1, RepC3, [64]] # 14, fpn_blocks.0
  - [-1, 1, Conv, [64, 1, 1]] # 15, Y4, lateral_convs.1
  - [-1, 1, nn.Upsample, [None, 2, "nearest"]]
  - [3, 1, Conv, [64, 1, 1, None, 1, 1, False]] # 17 input_proj.0
  - [[-2, -1], 1, Concat, [1]]
  - [-1, 1, RepC3, [64]] # 19, X3, fpn_blocks.1
  - [-1, 1, Conv, [64, 3, 2]] # 20, downsample_convs.0
  - [[-1, 15], 1, Concat, [1]]
  - [-1, 1, RepC3, [64]] # 22, F4, pan_blocks.0
  - [-1, 1, Conv, [64, 3, 2]] # 23, downsample_convs.1
  - [[-1, 10], 1, Concat, [1]]
  - [-1, 1, RepC3, [64]] # 25, F5, pan_blocks.1
  - [[19, 22, 25], 1, RTDETRDecoder, [nc, 64, 100, 4, 4, 3, 256]] # hidden 64, 100 queries, 3 layers
"""

#: how it is trained: the zoo's parity tests' settings (tests.support.zoo.train_briefly) with RT-DETR's own trainer
TRAINING = {"epochs": 100, "optimizer": "AdamW", "lr0": 0.003, "mosaic": 0.0, "warmup_epochs": 0, "batch": 8,
            "imgsz": SIZE, "amp": False}
TRAIN_IMAGES, VAL_IMAGES = 48, 64


def trained_rtdetr(monkeypatch: object, epochs: int | None = None) -> tuple[Path, Path, dict]:
    """(best.pt, data.yaml, facts) of ``TINY_RTDETR`` trained on the zoo's rectangles, from the cache if there."""
    import pytest

    from tests.support.zoo import import_torchvision
    from tests.zoo.test_ultralytics_source import _shapes_dataset

    settings = {**TRAINING, **({"epochs": epochs} if epochs else {})}
    key = hashlib.sha256(json.dumps([TINY_RTDETR, settings, TRAIN_IMAGES, VAL_IMAGES, _version("ultralytics"),
                                     _version("torch")]).encode()).hexdigest()[:10]
    folder = CACHE / f"rtdetr-tiny-{key}"
    done = folder / "done.json"
    if done.exists():
        return folder / "best.pt", folder / "shapes" / "data.yaml", {**json.loads(done.read_text()), "reused": True}
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    data = _shapes_dataset(folder / "shapes", train=TRAIN_IMAGES, val=VAL_IMAGES)
    (folder / "rtdetr-tiny.yaml").write_text(TINY_RTDETR)
    import_torchvision()
    from ultralytics import RTDETR
    from ultralytics.engine.trainer import BaseTrainer

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(BaseTrainer, "read_results_csv", lambda self: {})  # polars only reads results.csv
    monkeypatch.chdir(folder)
    started = time.perf_counter()
    RTDETR(str(folder / "rtdetr-tiny.yaml")).train(
        data=str(data), device="cpu", workers=0, plots=False, project=str(folder / "runs"), name="t", exist_ok=True,
        verbose=False, val=False, **settings)
    shutil.copy(folder / "runs" / "t" / "weights" / "last.pt", folder / "best.pt")
    facts = {"train_s": round(time.perf_counter() - started, 1), **settings, "train_images": TRAIN_IMAGES}
    done.write_text(json.dumps(facts))
    return folder / "best.pt", data, facts


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
