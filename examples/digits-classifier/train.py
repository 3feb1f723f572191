"""Train the digits example and evaluate it on data/val.

    python train.py [--epochs 30] [--out weights/digits_classifier.pt]

Deterministic (fixed seeds, 2 CPU threads); about half a minute on 2 cores.
Every image, in training and in evaluation, goes through edgebuild.runtime.base.vision.preprocess.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
from PIL import Image
from torch import nn
from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import edgebuild  # noqa: F401
except ImportError:  # running from a source checkout without edgebuild installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from edgebuild.runtime.base.vision import PreprocessSpec, preprocess, stack_batch, top_k  # noqa: E402

sys.path.insert(0, HERE)
from digits_classifier import (  # noqa: E402
    CHANNEL_ORDER,
    CLASS_NAMES,
    INPUT_SIZE,
    MEAN,
    RESIZE,
    STD,
)
from digits_classifier.data import prepare, train_split  # noqa: E402
from digits_classifier.model import build_model  # noqa: E402

SEED = 0
SPEC = PreprocessSpec(input_size=INPUT_SIZE, resize=RESIZE, channel_order=CHANNEL_ORDER,
                      mean=MEAN, std=STD)
SHIFTS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]  # in 8x8 source pixels


def shift(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Translate an HxW image by whole pixels, filling with 0 (background)."""
    out = np.zeros_like(image)
    h, w = image.shape
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = \
        image[max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)]
    return out


def augmented_inputs(images: np.ndarray) -> torch.Tensor:
    """[S, N, 1, H, W]: every training image under every shift, preprocessed once up front."""
    return torch.from_numpy(np.stack([
        stack_batch([preprocess(shift(img, dy, dx), SPEC)[0] for img in images])
        for dy, dx in SHIFTS
    ]))


def load_val(project_dir: str) -> tuple[np.ndarray, np.ndarray]:
    tensors: list[np.ndarray] = []
    labels: list[int] = []
    val_dir = os.path.join(project_dir, "data", "val")
    for label, name in enumerate(CLASS_NAMES):
        class_dir = os.path.join(val_dir, name)
        for fname in sorted(os.listdir(class_dir)):
            with Image.open(os.path.join(class_dir, fname)) as im:
                pixels = np.asarray(im.convert("L"))
            tensors.append(preprocess(pixels, SPEC)[0])
            labels.append(label)
    return stack_batch(tensors), np.asarray(labels, np.int64)


@torch.no_grad()
def evaluate(model: nn.Module, project_dir: str) -> tuple[float, float, int]:
    inputs, labels = load_val(project_dir)
    model.eval()
    logits = model(torch.from_numpy(inputs)).numpy()
    top5 = top_k(logits, 5)
    top1 = float((top5[:, 0] == labels).mean())
    top5_acc = float((top5 == labels[:, None]).any(axis=1).mean())
    return top1, top5_acc, len(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--out", default=os.path.join(HERE, "weights", "digits_classifier.pt"))
    args = parser.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    start = time.perf_counter()

    prepare(HERE)
    images, labels_np = train_split()
    inputs = augmented_inputs(images)  # [9, N, 1, 16, 16]
    labels = torch.from_numpy(labels_np)
    n = len(labels)

    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=5e-4)
    steps_per_epoch = (n + args.batch_size - 1) // args.batch_size
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    gen = torch.Generator().manual_seed(SEED)

    bar = tqdm(range(args.epochs), desc="train", unit="epoch")
    for _ in bar:
        model.train()
        order = torch.randperm(n, generator=gen)
        which_shift = torch.randint(len(SHIFTS), (n,), generator=gen)
        total, correct, loss_sum = 0, 0, 0.0
        for b in range(steps_per_epoch):
            idx = order[b * args.batch_size : (b + 1) * args.batch_size]
            x = inputs[which_shift[idx], idx]
            y = labels[idx]
            logits = model(x)
            loss = loss_fn(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            total += len(y)
            correct += int((logits.argmax(1) == y).sum())
            loss_sum += loss.item() * len(y)
        bar.set_postfix(loss=f"{loss_sum / total:.3f}", acc=f"{correct / total:.3f}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, args.out)
    train_s = time.perf_counter() - start

    # Evaluate the saved file, loaded the way edgebuild loads it.
    model = build_model()
    model.load_state_dict(torch.load(args.out, map_location="cpu", weights_only=True), strict=True)
    top1, top5, n_val = evaluate(model, HERE)
    params = sum(p.numel() for p in model.parameters())
    print(f"params: {params}, weights: {args.out} ({os.path.getsize(args.out)} bytes), time: {train_s:.1f} s")
    print(f"val ({n_val} images): top-1 {top1:.4f}  top-5 {top5:.4f}")


if __name__ == "__main__":
    main()
