"""Pre/post-processing shared by host and device: letterbox, normalization, resize, NMS, top-k."""

from __future__ import annotations

import numpy as np
import pytest

from edgebuild.runtime.base.vision import (
    DetectionParams,
    PreprocessSpec,
    decode_detections,
    nms,
    preprocess,
    resize_bilinear,
    top_k,
)


def test_letterbox_keeps_aspect_and_maps_boxes_back() -> None:
    image = np.zeros((100, 200, 3), np.uint8)
    image[20:60, 40:120] = 255  # a white box at x 40..120, y 20..60
    tensor, transform = preprocess(image, PreprocessSpec((160, 160), "letterbox", pad_value=0))
    assert tensor.shape == (3, 160, 160) and tensor.dtype == np.float32
    assert (transform.scale_x, transform.scale_y, transform.pad_x, transform.pad_y) == (0.8, 0.8, 0, 40)
    ys, xs = np.nonzero(tensor[0] > 0.5)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    np.testing.assert_allclose(transform.boxes_to_original(found), [[40, 20, 120, 60]], atol=1.5)


def test_normalization_gray_and_bgr() -> None:
    image = np.full((8, 8, 3), (255, 0, 0), np.uint8)
    rgb, _ = preprocess(image, PreprocessSpec((8, 8), "resize", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)))
    np.testing.assert_allclose(rgb[:, 0, 0], [1.0, -1.0, -1.0])
    bgr, _ = preprocess(image, PreprocessSpec((8, 8), "resize", channel_order="BGR"))
    np.testing.assert_allclose(bgr[:, 0, 0], [0.0, 0.0, 1.0])
    gray, _ = preprocess(np.full((4, 4), 255, np.uint8), PreprocessSpec((8, 8), "resize", channel_order="GRAY",
                                                                          mean=(0.0,), std=(1.0,)))
    assert gray.shape == (1, 8, 8)
    np.testing.assert_allclose(gray, 1.0, atol=1e-6)


def test_bilinear_resize_matches_half_pixel_convention() -> None:
    image = np.array([[0, 10], [20, 30]], np.float32)
    up = resize_bilinear(image, 4, 4)
    np.testing.assert_allclose(up[0], [0, 2.5, 7.5, 10])
    np.testing.assert_allclose(resize_bilinear(np.full((7, 9, 3), 42.0), 3, 5), 42.0)


def test_nms_and_class_aware_decode() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], np.float32)
    assert nms(boxes, np.array([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]
    scores = np.array([[0.9, 0.0], [0.0, 0.8], [0.7, 0.0]], np.float32)
    out = decode_detections(boxes, scores, DetectionParams(score_threshold=0.1, nms_iou=0.5))
    # the overlapping box survives because it is another class
    assert out["labels"].tolist() == [0, 1, 0] and out["scores"].tolist() == pytest.approx([0.9, 0.8, 0.7])
    capped = decode_detections(boxes, scores, DetectionParams(score_threshold=0.1, max_detections=1))
    assert len(capped["scores"]) == 1


def test_top_k() -> None:
    logits = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]])
    assert top_k(logits, 2).tolist() == [[1, 2], [0, 2]]


def test_nms_with_a_limit_keeps_the_same_first_boxes_as_a_full_run() -> None:
    from edgebuild.runtime.base.vision import nms

    rng = np.random.default_rng(5)
    corners = rng.uniform(0, 100, (400, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(5, 30, (400, 2)).astype(np.float32)], axis=1)
    scores = rng.random(400).astype(np.float32)
    full = nms(boxes, scores, 0.5)
    assert len(full) > 20
    for limit in (1, 7, 20, len(full) + 5):
        assert nms(boxes, scores, 0.5, limit=limit).tolist() == full[:limit].tolist()


def test_class_aware_nms_is_each_class_s_own_nms_merged_by_score_and_cut() -> None:
    from edgebuild.runtime.base.vision import class_aware_nms

    rng = np.random.default_rng(7)
    corners = rng.uniform(0, 200, (3000, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(5, 60, (3000, 2)).astype(np.float32)], axis=1)
    scores = rng.random(3000).astype(np.float32)
    classes = rng.integers(0, 5, 3000)
    alone = [np.flatnonzero(classes == c)[nms(boxes[classes == c], scores[classes == c], 0.5)] for c in range(5)]
    merged = np.concatenate(alone)
    merged = merged[np.argsort(-scores[merged], kind="stable")]
    assert len(merged) > 1300  # the last limit needs more than the first prefix of 4 x limit candidates
    for limit in (1, 50, 300, len(merged) + 10):
        assert class_aware_nms(boxes, scores, classes, 0.5, limit).tolist() == merged[:limit].tolist()
    assert class_aware_nms(boxes[:0], scores[:0], classes[:0], 0.5, 10).size == 0


def test_decode_outputs_takes_pre_nms_top_k_from_the_settings_also_from_an_npz(tmp_path) -> None:
    from edgebuild.runtime.base.vision import decode_outputs

    corners = np.arange(50, dtype=np.float32)[:, None] * 20  # 50 boxes apart from each other
    boxes = np.concatenate([corners, corners, corners + 10, corners + 10], axis=1)[None]
    scores = np.linspace(0.9, 0.4, 50, dtype=np.float32).reshape(1, 50, 1)
    outputs = {"boxes": boxes, "scores": scores}
    settings = {"boxes_output": "boxes", "scores_output": "scores", "score_threshold": 0.001, "nms_iou": 0.7,
                "max_detections": 300}
    assert len(decode_outputs(outputs, settings)[0]["scores"]) == 50  # without the key: the default, 1000
    capped = decode_outputs(outputs, {**settings, "pre_nms_top_k": 10})[0]
    assert capped["scores"].tolist() == pytest.approx(scores[0, :10, 0].tolist())
    np.savez(tmp_path / "settings.npz", **{k: np.asarray(v) for k, v in {**settings, "pre_nms_top_k": 10}.items()})
    stored = np.load(tmp_path / "settings.npz")  # as an acceptance set carries them to the device
    assert len(decode_outputs(outputs, stored)[0]["scores"]) == 10
