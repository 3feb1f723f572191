"""``edgebuild init``: the preprocessing of a model whose file says none, chosen by measuring.

An ONNX file without Ultralytics metadata or a TorchScript file says nothing of how its pixels were
prepared, and a wrong guess scores a wrong FP32 that every candidate then "keeps". So init measures
the FP32 metric on a small, evenly spread sample of the validation set (``SAMPLE_IMAGES``) under the
usual conventions and writes the best:

- pixel scale and normalization: 0-1 (mean 0, std 1), ImageNet's mean/std (the gray equivalent for
  a one-channel model), 0-255 (std 1/255), and the sample's own mean/std (what a model trained on
  its own data usually normalizes with);
- channel order: RGB and BGR (not for a one-channel model);
- detectors: letterbox and resize, tried with the best of the above.

A flag the user gave (``--mean``, ``--std``, ``--channel-order``, ``--resize``) is kept and only the
rest is measured. BGR replaces the convention (RGB) only where the sample resolves the difference
(``channel_order_resolved``); otherwise RGB stays and init says it could not tell.
What each convention scored, and why the best was chosen, is said in init's output
and written as a comment above ``[task.preprocess]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.jsontypes import JsonObject

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.project.template import FoundProject

__all__ = []

#: validation images each convention is measured on (evenly spread over the set; class folders: balanced)
SAMPLE_IMAGES = 64
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
GRAY_IMAGENET_MEAN, GRAY_IMAGENET_STD = [0.449], [0.226]  # the mean of ImageNet's three channels
PIXELS_255 = round(1 / 255, 8)


@dataclass(frozen=True)
class Convention:
    name: str  # "0-1", "ImageNet", "0-255"
    mean: list[float]
    std: list[float]
    channel_order: str
    resize: str

    def label(self, detection: bool) -> str:
        return f"{self.name} {self.channel_order}" + (f" {self.resize}" if detection else "")

    def keys(self) -> JsonObject:
        return {"mean": self.mean, "std": self.std, "channel_order": self.channel_order, "resize": self.resize}


@dataclass(frozen=True)
class Measured:
    """Every convention measured and the one chosen, with the lines that say so."""

    chosen: Convention
    scores: list[tuple[Convention, float]]
    metric: str
    images: int
    said: str  # the comment above [task.preprocess]
    lines: list[str]  # init's output


def _scales(order: str, stats: dict[str, tuple[list[float], list[float]]]) -> list[tuple[str, list[float],
                                                                                       list[float]]]:
    if order == "GRAY":
        scales = [("0-1", [0.0], [1.0]), ("ImageNet", GRAY_IMAGENET_MEAN, GRAY_IMAGENET_STD),
                  ("0-255", [0.0], [PIXELS_255])]
    else:
        scales = [("0-1", [0.0] * 3, [1.0] * 3), ("ImageNet", IMAGENET_MEAN, IMAGENET_STD),
                  ("0-255", [0.0] * 3, [PIXELS_255] * 3)]
    if order in stats:
        scales.append(("data", *stats[order]))
    return scales


def conventions(channels: int, resize: str, given: JsonObject,
                stats: dict[str, tuple[list[float], list[float]]] | None = None) -> list[Convention]:
    """The conventions to measure at ``resize``, in order of preference on a tie (edgebuild's default first);
    a key in ``given`` (the user's flags) is fixed. ``stats``: the sample's own mean and std by channel order."""
    orders = ["GRAY"] if channels == 1 else ["RGB", "BGR"]
    if given.get("channel_order"):
        orders = [given["channel_order"]]
    found: list[Convention] = []
    for order in orders:
        for name, mean, std in _scales(order, stats or {}):
            has_mean, has_std = given.get("mean") is not None, given.get("std") is not None
            if has_mean or has_std:  # the given key fixed, the other one named by the convention it comes from
                mean, std = given.get("mean") or mean, given.get("std") or std
                name = ("given" if has_mean and has_std else f"{name} std, given mean" if has_mean
                        else f"{name} mean, given std")
            convention = Convention(name, list(mean), list(std), order, given.get("resize") or resize)
            if all(c.keys() != convention.keys() for c in found):  # one given key: the same values, once
                found.append(convention)
    return found


#: conventions preferred where scores tie (edgebuild's default and the commonest training convention)
CONVENTIONAL = ("0-1", "ImageNet", "given")


def tie_margin(images: int) -> float:
    """How far apart two conventions' scores on ``images`` images must be to tell them apart: the larger of
    0.01 and two images' worth (2/images; a one- or two-image difference is noise on a small sample)."""
    return max(0.01, 2.0 / max(images, 1))


def choose(scores: list[tuple[Convention, float]], images: int, detection: bool = False) -> tuple[Convention, str]:
    """The convention to write and a note where the choice is not clear: where others come within
    ``tie_margin`` of the best score, the note says the scores do not tell them apart.

    A classifier's top-k counts images, so a win by one or two images is noise: among the conventions
    within the margin a conventional one (0-1, ImageNet, or the flags given; the highest of those) is
    preferred. A detector's mAP moves continuously, and a small difference there is often systematic
    (the data's own mean/std against ImageNet's), so it keeps the best; conventional only on an equal score."""
    top = max(v for _, v in scores)
    margin = tie_margin(images)
    tied = [(c, v) for c, v in scores if top - v <= (1e-9 if detection else margin + 1e-9)]
    conventional = [(c, v) for c, v in tied if c.name.split()[0] in CONVENTIONAL]
    chosen, picked = max(conventional or tied, key=lambda s: s[1])  # the earliest of equal scores
    near = [(c, v) for c, v in scores if c != chosen and top - v <= margin + 1e-9]
    if not near:
        return chosen, ""
    others = ", ".join(f"{c.label(detection)} {v:.3f}" for c, v in near)
    reason = ("the conventional one among them" if picked < top - 1e-9
              else "the highest, conventional" if conventional else "the highest")
    return chosen, (f"{len(near) + 1} conventions score within {margin:.3f} ({max(1, round(margin * images))} "
                    f"of {images} images) of the best {top:.3f}, not a meaningful margin on {images} images: "
                    f"chosen {chosen.label(detection)} {picked:.3f} ({reason}) over {others}")


#: the fewest images a paired comparison may decide the channel order from
MIN_PAIRED_IMAGES = 10
#: how many standard errors the mean per-image difference must exceed
PAIRED_STANDARD_ERRORS = 2.0


def channel_order_resolved(differences: list[float]) -> tuple[bool, str]:
    """Whether per-image score differences (a BGR convention minus its RGB rival, image by image on the same
    sample) show BGR better beyond the sample's noise, and the numbers that say so.

    The rule is a paired comparison: both conventions score the same images, so each image's difference
    cancels what the images themselves contribute (easy or hard), and the mean difference is judged against
    its standard error (the differences' standard deviation / sqrt(n)). BGR is taken only where the mean
    exceeds ``PAIRED_STANDARD_ERRORS`` (2) standard errors (about 97.5% one-sided, a paired t-test's
    threshold for tens of images) and at least ``MIN_PAIRED_IMAGES`` (10) images were compared (below that
    the standard error itself is too uncertain to trust). A model trained on BGR scores far below on RGB
    image after image, which passes easily; two conventions within noise of each other (0.7509 against
    0.7247 on 5 images) do not, and the convention stays: RGB, what torchvision, timm, Ultralytics and PIL
    give a model. A classifier's per-image score is its top-1 hit; a detector's its box mAP50-95 on that
    image alone."""
    import numpy as np

    d = np.asarray(differences, np.float64)
    n = len(d)
    if n < MIN_PAIRED_IMAGES:
        return False, f"{n} images, too few to compare (at least {MIN_PAIRED_IMAGES})"
    mean = float(d.mean())
    error = float(d.std(ddof=1) / np.sqrt(n))
    words = f"per-image difference {mean:+.4f} +- {error:.4f} (standard error) over {n} images"
    if mean > 0 and mean > PAIRED_STANDARD_ERRORS * error:
        return True, words
    return False, f"{words}, not above {PAIRED_STANDARD_ERRORS:g} standard errors"


def _with(project: Project, convention: Convention) -> Project:
    pre = project.task.preprocess.model_copy(update=convention.keys())
    return project.model_copy(update={"task": project.task.model_copy(update={"preprocess": pre})})


def _runner(project: Project) -> Any:
    from edgebuild.project.config import model_source_kind

    if model_source_kind(project)[0] == "onnx":
        from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

        return OnnxRuntimeRunner(project.path(project.model.source or ""))
    from edgebuild.sources.torch_source import source_runner

    return source_runner(project)


def sample_statistics(project: Project, images: int) -> dict[str, tuple[list[float], list[float]]]:
    """The validation sample's own per-channel mean and std of pixels / 255, by channel order."""
    import numpy as np

    from edgebuild.datasets.project_data import load_validation_set, read_image

    gray = project.task.preprocess.channel_order == "GRAY"
    total, squares, count = 0.0, 0.0, 0
    for sample in load_validation_set(project, images)[1]:
        pixels = read_image(sample.path, gray).astype(np.float64) / 255.0
        pixels = pixels.reshape(-1, 1 if gray else 3)
        total, squares, count = total + pixels.sum(0), squares + (pixels ** 2).sum(0), count + len(pixels)
    if not count:
        return {}
    mean = np.asarray(total) / count
    std = np.sqrt(np.maximum(np.asarray(squares) / count - mean ** 2, 1e-6))
    rgb = ([round(float(v), 3) for v in mean], [max(round(float(v), 3), 0.001) for v in std])  # std > 0
    if gray:
        return {"GRAY": rgb}
    return {"RGB": rgb, "BGR": (rgb[0][::-1], rgb[1][::-1])}


def _score(project: Project, runner: Any, convention: Convention, images: int) -> tuple[float, int, tuple[float, ...]]:
    """(the metric, the images scored, each image's own score) under ``convention``."""
    from edgebuild.accuracy.evaluate import ValidationSet, evaluate

    variant = _with(project, convention)
    data = ValidationSet(variant, limit=images)
    result = evaluate(variant, runner, data=data, progress=False, per_image=True)
    return float(result.value), len(data), result.per_image


def measure_conventions(project: Project, given: JsonObject, images: int = SAMPLE_IMAGES) -> Measured:
    """FP32 on ``images`` validation images under each convention; the best (earliest on a tie) chosen."""
    detection = project.task.kind == "detection"
    pre = project.task.preprocess
    runner = _runner(project)
    scores: list[tuple[Convention, float]] = []
    per_image: list[tuple[float, ...]] = []  # scores' order
    count = 0
    stats = sample_statistics(project, images)
    for convention in conventions(pre.channels, pre.resize, given, stats):
        value, count, each = _score(project, runner, convention, images)
        scores.append((convention, value))
        per_image.append(each)
    best = max(scores, key=lambda s: s[1])[0]
    if detection and not given.get("resize"):
        other = "resize" if best.resize == "letterbox" else "letterbox"
        alternative = Convention(best.name, best.mean, best.std, best.channel_order, other)
        value, count, each = _score(project, runner, alternative, images)
        scores.append((alternative, value))
        per_image.append(each)
    best, tie_note = choose(scores, count, detection)
    order_note = ""
    rgb = [i for i, (c, _) in enumerate(scores) if c.channel_order == "RGB"]
    if best.channel_order == "BGR" and rgb:  # measured, not given: BGR only where the sample resolves it
        rival, _ = choose([scores[i] for i in rgb], count, detection)
        mine = next(i for i, (c, _) in enumerate(scores) if c == best)
        theirs = next(i for i, (c, _) in enumerate(scores) if c == rival)
        resolved, words = channel_order_resolved([a - b for a, b in zip(per_image[mine], per_image[theirs])])
        if not resolved:
            order_note = (f"could not tell the channel order from {count} validation images: "
                          f"{best.label(detection)} {scores[mine][1]:.4f} against {rival.label(detection)} "
                          f"{scores[theirs][1]:.4f}, {words}; kept the convention, RGB")
            best, tie_note = rival, ""
    metric = project.metric
    table = ", ".join(f"{c.label(detection)} {v:.3f}" for c, v in scores)
    top = next(v for c, v in scores if c == best)
    runner_up = max((v for c, v in scores if c != best), default=None)
    margin = f", {top - runner_up:+.3f} over the next best" if runner_up is not None else ""
    given_keys = ", ".join(f"--{k.replace('_', '-')}" for k in ("mean", "std", "channel_order", "resize")
                           if given.get(k) is not None)
    lead = f"the highest FP32 {metric} ({top:.3f}{margin})"
    if runner_up is not None and runner_up > top:  # a conventional one within noise of the best
        lead = f"conventional, and within noise of the highest FP32 {metric} ({top:.3f}, {top - runner_up:+.3f})"
    if order_note:
        lead = f"RGB, the convention: the sample could not tell BGR's higher FP32 {metric} from noise ({top:.3f})"
    why = lead + (f"; kept as given: {given_keys}" if given_keys else "")
    said = (f"measured by init (the model file does not say): FP32 {metric} on {count} validation images under "
            f"each convention (data: the images' own mean/std): {table}; chosen {best.label(detection)} "
            f"({best.mean} / {best.std}): {why}. Check it against how the model was trained")
    lines = [f"preprocessing: the model file does not say; FP32 {metric} measured on {count} validation images "
             "(data: the images' own mean/std):"]
    lines += [f"  {c.label(detection):<24} mean {c.mean} std {c.std}: {v:.4f}" + ("  <- chosen" if c == best else "")
              for c, v in scores]
    lines.append(f"  chosen {best.label(detection)}: {why}")
    from edgebuild.accuracy.baseline import judge_baseline, validation_majority

    majority, majority_said = validation_majority(project, images)
    highest = max(v for _, v in scores)
    check = judge_baseline(highest, metric=metric, classes=len(project.task.classes), backend=str(runner.backend),
                           images=count, dataset="the sample", majority=majority, majority_said=majority_said)
    if check.verdict == "chance":
        said += (f". Even the best is at chance ({metric} {highest:.3f}, floor {check.floor:.3f}): the model may be "
                 "untrained, or its classes or data differ; validate refuses it unless accuracy.baseline = \"accept\"")
        lines.append(f"  note: even the best is at chance ({metric} {highest:.3f}; at or below {check.floor:.3f} is "
                     "chance-level): the model may be untrained, or its classes or data differ; `edgebuild validate` "
                     "refuses it unless accuracy.baseline = \"accept\"")
    if tie_note:
        lines.append(f"  note: {tie_note}: check [task.preprocess] against how the model was trained")
        said += f". Note: {tie_note}"
    if order_note:
        lines.append(f"  note: {order_note}: set task.preprocess.channel_order = \"BGR\" (or pass "
                     "--channel-order BGR) if the model was trained on BGR (OpenCV) images")
        said += f". Note: {order_note}; set channel_order = \"BGR\" if the model was trained on BGR (OpenCV) images"
    return Measured(chosen=best, scores=scores, metric=metric, images=count, said=said, lines=lines)


# -- init's use of it ----------------------------------------------------------------------------------

GIVEN_KEYS = ("mean", "std", "channel_order", "resize")


def given_preprocess(found: FoundProject, given: JsonObject) -> FoundProject:
    """The project init found with the user's --mean/--std/--channel-order/--resize in it (they win)."""
    keys = {k: given[k] for k in GIVEN_KEYS if given.get(k) is not None}
    if not keys:
        return found
    order = keys.get("channel_order", found.channel_order)
    channels = 1 if order == "GRAY" else 3
    for key in ("mean", "std"):
        if key in keys and len(keys[key]) != channels:
            from edgebuild.errors import ConfigError

            raise ConfigError(f"--{key}: {keys[key]} has {len(keys[key])} value(s); the model takes {channels} "
                              f"channel(s) ({order})", hint=f"give {channels} value(s) separated by commas")
    shown = ", ".join(f"{k} {v}" for k, v in keys.items())
    return replace(found, **keys, preprocess_said=f"{found.preprocess_said}; given to init: {shown}")


def measured_preprocess(loaded: Project, found: FoundProject, given: JsonObject, draft: Path,
                        target: Path) -> tuple[FoundProject, list[str]]:
    """Measure the conventions on the loaded draft (the model file says no preprocessing), rewrite the draft
    with the best, and return the project and what init says of it. Nothing to measure when every key is given."""
    from edgebuild.errors import EdgebuildError
    from edgebuild.project.template import render_project

    keys = [k for k in GIVEN_KEYS if given.get(k) is None]
    if loaded.task.kind != "detection":
        keys = [k for k in keys if k != "resize"]
    if not keys:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        return found, [f"preprocessing: as given ({flags}), not measured"]
    from edgebuild.datasets.project_data import load_validation_set

    try:
        if not load_validation_set(loaded, SAMPLE_IMAGES)[1]:
            return found, ["note: preprocessing not measured (the validation set has no images): edgebuild's "
                           "defaults are written; check [task.preprocess]"]
        measured = measure_conventions(loaded, given)
    except EdgebuildError as exc:  # say it of the file it would have been, which is not written
        said = exc.message.replace(str(draft), str(target))
        raise type(exc)(f"not written: {said}" if said != exc.message else said, hint=exc.hint) from None
    chosen = replace(found, **measured.chosen.keys(), preprocess_said=measured.said)
    draft.write_text(render_project(chosen), encoding="utf-8")
    return chosen, measured.lines
