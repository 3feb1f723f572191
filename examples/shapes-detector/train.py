"""Train the shapes detector from scratch on synthetic data and write weights/shapes_detector.pt.

    python train.py            # about 6 minutes on 2 CPU cores, then evaluates on data/val

Samples are rendered on the fly (shapes_detector.data.render_sample, seeded) and preprocessed
with edgebuild.runtime.base.vision.preprocess exactly as evaluation and the device do. Assignment is
task-aligned (TOOD / YOLOv8 style: top-k anchors inside each box ranked by score^a * IoU^b), the
classification target is the normalised alignment (IoU-aware BCE) and boxes use GIoU + L1.
The saved weights are an exponential moving average of the trained ones.
"""

import argparse
import copy
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import edgebuild  # noqa: F401
except ImportError:  # running from a source checkout without edgebuild installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from evaluate_fp32 import evaluate  # noqa: E402
from shapes_detector import INPUT_SIZE, MEAN, RESIZE, STD, build_model, prepare  # noqa: E402
from shapes_detector.data import TRAIN_SEED, render_sample  # noqa: E402

from edgebuild.runtime.base.vision import PreprocessSpec, preprocess  # noqa: E402

SPEC = PreprocessSpec(input_size=INPUT_SIZE, resize=RESIZE, mean=MEAN, std=STD)


# ----------------------------------------------------------------------------------------- data
def dihedral(image: np.ndarray, boxes: np.ndarray, k: int):
    """One of the 8 flips/rotations of a square image (k in 0..7) and its xyxy boxes."""
    size = image.shape[1]
    boxes = boxes.copy()
    if k & 1:  # horizontal flip
        image = image[:, ::-1]
        boxes[:, [0, 2]] = size - boxes[:, [2, 0]]
    if k & 2:  # vertical flip
        image = image[::-1]
        boxes[:, [1, 3]] = image.shape[0] - boxes[:, [3, 1]]
    if k & 4:  # transpose
        image = image.transpose(1, 0, 2)
        boxes = boxes[:, [1, 0, 3, 2]]
    return np.ascontiguousarray(image), boxes


class SyntheticBatches(torch.utils.data.IterableDataset):
    """Endless batches of rendered + preprocessed samples; boxes padded to the batch maximum.

    Rendering costs about as much CPU as a third of a training step, so each rendered sample is
    used twice: as drawn in one batch and flipped/rotated (dihedral group) in the next.
    """

    def __init__(self, batch_size: int, seed: int):
        self.batch_size = batch_size
        self.seed = seed

    def _sample(self, image, boxes, labels):
        tensor, tf = preprocess(image, SPEC)
        boxes = boxes.copy()
        boxes[:, [0, 2]] = boxes[:, [0, 2]] * tf.scale_x + tf.pad_x
        boxes[:, [1, 3]] = boxes[:, [1, 3]] * tf.scale_y + tf.pad_y
        return tensor, boxes, labels

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        rng = np.random.default_rng([self.seed, worker])
        previous = []
        while True:
            fresh = [render_sample(rng) for _ in range(self.batch_size - len(previous))]
            samples = [self._sample(*s) for s in fresh]
            for image, boxes, labels in previous:
                image, boxes = dihedral(image, boxes, int(rng.integers(1, 8)))
                samples.append(self._sample(image, boxes, labels))
            previous = fresh[: self.batch_size // 2]
            order = rng.permutation(len(samples))
            samples = [samples[i] for i in order]
            g = max(1, max(len(s[2]) for s in samples))
            gt_boxes = np.zeros((self.batch_size, g, 4), np.float32)
            gt_labels = np.zeros((self.batch_size, g), np.int64)
            gt_mask = np.zeros((self.batch_size, g), bool)
            for i, (_, b, lab) in enumerate(samples):
                gt_boxes[i, : len(lab)] = b
                gt_labels[i, : len(lab)] = lab
                gt_mask[i, : len(lab)] = True
            yield (
                torch.from_numpy(np.stack([s[0] for s in samples])),
                torch.from_numpy(gt_boxes),
                torch.from_numpy(gt_labels),
                torch.from_numpy(gt_mask),
            )


# ----------------------------------------------------------------------------------------- loss
def box_iou_giou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7):
    """Element-wise IoU and GIoU of broadcastable xyxy boxes [..., 4]."""
    iw = (torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp(min=0)
    ih = (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp(min=0)
    inter = iw * ih
    area_a = (a[..., 2] - a[..., 0]).clamp(min=0) * (a[..., 3] - a[..., 1]).clamp(min=0)
    area_b = (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)
    union = area_a + area_b - inter + eps
    iou = inter / union
    cw = torch.maximum(a[..., 2], b[..., 2]) - torch.minimum(a[..., 0], b[..., 0])
    ch = torch.maximum(a[..., 3], b[..., 3]) - torch.minimum(a[..., 1], b[..., 1])
    hull = cw * ch + eps
    return iou, iou - (hull - union) / hull


@torch.no_grad()
def assign(scores, pred_boxes, points, gt_boxes, gt_labels, gt_mask, topk=10, alpha=0.5, beta=6.0):
    """Task-aligned assignment. Returns fg [B, A], target boxes [B, A, 4], target scores [B, A, C]."""
    b, a, c = scores.shape
    lt = points[None, None] - gt_boxes[:, :, None, :2]
    rb = gt_boxes[:, :, None, 2:] - points[None, None]
    valid = (torch.cat([lt, rb], -1).amin(-1) > 0.01) & gt_mask[:, :, None]  # [B, G, A]
    iou, _ = box_iou_giou(gt_boxes[:, :, None, :], pred_boxes[:, None, :, :])
    iou = iou.clamp(min=0) * valid
    cls = scores.gather(2, gt_labels[:, None, :].expand(b, a, -1)).permute(0, 2, 1)  # [B, G, A]
    align = cls.pow(alpha) * iou.pow(beta) * valid
    k = min(topk, a)
    top = align.topk(k, dim=-1).indices
    cand = torch.zeros_like(valid).scatter_(-1, top, True) & valid
    # An anchor claimed by several boxes keeps the one it overlaps most.
    multi = cand.sum(1, keepdim=True) > 1
    best = F.one_hot((iou * cand).argmax(1), cand.shape[1]).permute(0, 2, 1).bool()
    cand = torch.where(multi, cand & best, cand)
    fg = cand.any(1)
    gt_idx = cand.float().argmax(1)  # [B, A]
    align = align * cand
    norm = align * (iou * cand).amax(-1, keepdim=True) / (align.amax(-1, keepdim=True) + 1e-9)
    norm = norm.amax(1) * fg  # [B, A]
    labels = gt_labels.gather(1, gt_idx)
    boxes = gt_boxes.gather(1, gt_idx[..., None].expand(b, a, 4))
    target_scores = F.one_hot(labels, c).float() * norm[..., None]
    return fg, boxes, target_scores


def detection_loss(model, images, gt_boxes, gt_labels, gt_mask, weights=(1.0, 2.0, 0.25)):
    logits, pred_boxes, points, strides = model.raw(images)
    fg, t_boxes, t_scores = assign(logits.detach().sigmoid(), pred_boxes.detach(), points, gt_boxes, gt_labels, gt_mask)
    norm = t_scores.sum().clamp(min=1.0)
    cls_loss = F.binary_cross_entropy_with_logits(logits, t_scores, reduction="sum") / norm
    if fg.any():
        w = t_scores.sum(-1)[fg]
        _, giou = box_iou_giou(pred_boxes[fg], t_boxes[fg])
        giou_loss = ((1.0 - giou) * w).sum() / norm
        s = strides.expand(fg.shape)[fg][:, None]
        l1_loss = ((pred_boxes[fg] - t_boxes[fg]).abs() / s * w[:, None]).sum() / norm
    else:
        giou_loss = l1_loss = pred_boxes.sum() * 0.0
    total = weights[0] * cls_loss + weights[1] * giou_loss + weights[2] * l1_loss
    return total, {"cls": cls_loss.item(), "giou": giou_loss.item(), "l1": l1_loss.item()}


# ------------------------------------------------------------------------------------- training
class EMA:
    def __init__(self, model, decay=0.9995, tau=250.0):
        self.model = copy.deepcopy(model).eval()
        self.decay, self.tau, self.updates = decay, tau, 0
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        src = model.state_dict()
        for name, value in self.model.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(d).add_(src[name].detach(), alpha=1 - d)
            else:
                value.copy_(src[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--workers", type=int, default=1, help="data processes (0: render in the main process)")
    parser.add_argument("--out", default=os.path.join(HERE, "weights", "shapes_detector.pt"))
    parser.add_argument("--no-eval", action="store_true")
    args = parser.parse_args()

    start = time.time()
    torch.set_num_threads(2)
    torch.manual_seed(TRAIN_SEED)
    np.random.seed(TRAIN_SEED)
    prepare(HERE)  # evaluation data, written once (fixed seeds, distinct from training's)

    model = build_model()
    model.train()
    ema = EMA(model)
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.ndim == 4 else no_decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.99),
    )
    warmup = min(200, args.steps // 10)

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * t)))

    loader = torch.utils.data.DataLoader(
        SyntheticBatches(args.batch_size, TRAIN_SEED),
        batch_size=None,
        num_workers=args.workers,
        prefetch_factor=4 if args.workers else None,
        persistent_workers=False,
    )
    avg = None
    bar = tqdm(total=args.steps, desc="train", unit="step", dynamic_ncols=True)
    for step, (images, gt_boxes, gt_labels, gt_mask) in enumerate(loader):
        if step >= args.steps:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss, parts = detection_loss(model, images, gt_boxes, gt_labels, gt_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        ema.update(model)
        parts["loss"] = loss.item()
        avg = parts if avg is None else {k: 0.98 * avg[k] + 0.02 * v for k, v in parts.items()}
        bar.set_postfix({k: f"{v:.3f}" for k, v in avg.items()}, refresh=False)
        bar.update(1)
    bar.close()

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in ema.model.state_dict().items()}
    tmp = args.out + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1024:.0f} kB) after {time.time() - start:.0f} s")

    if not args.no_eval:
        check = build_model()
        check.load_state_dict(torch.load(args.out, map_location="cpu", weights_only=True), strict=True)
        metrics = evaluate(check, HERE, verbose=False)
        print("FP32 on data/val: mAP50-95 {:.4f}  mAP50 {:.4f}".format(metrics["mAP50-95"], metrics["mAP50"]))
    print(f"total time {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
