"""The letterbox's resize: OpenCV's where it is installed, numpy's where not, the same numbers either way (the gate
measures with one, a device may run the other)."""

from __future__ import annotations

import numpy as np
import pytest

from edgebuild.runtime.base import vision


@pytest.mark.parametrize("shape", [(480, 640, 3), (480, 640, 1), (480, 640), (37, 53, 3), (160, 160, 4)])
@pytest.mark.parametrize("size", [(120, 160), (160, 213), (200, 150), (320, 427), (960, 1280)])
def test_opencv_and_numpy_resize_agree_within_a_fiftieth_of_a_grey_level(shape, size) -> None:
    pytest.importorskip("cv2")
    image = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    with_opencv = vision.resize_bilinear(image, *size)
    with_numpy = vision._resize_bilinear_numpy(np.asarray(image, np.float32), *size)
    assert with_opencv.shape == with_numpy.shape == size + shape[2:]
    assert with_opencv.dtype == np.float32
    assert np.abs(with_opencv - with_numpy).max() < 0.02


def test_without_opencv_numpy_resizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vision, "_CV2", None)
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    out = vision.resize_bilinear(image, 2, 3)
    assert out.shape == (2, 3, 3)
    assert np.array_equal(out, vision._resize_bilinear_numpy(image.astype(np.float32), 2, 3))


@pytest.mark.parametrize("order", ["RGB", "BGR", "GRAY"])
@pytest.mark.parametrize("resize", ["letterbox", "resize"])
def test_a_bgr_frame_told_as_such_gives_the_tensor_of_its_rgb_image(order: str, resize: str) -> None:
    """The streams hand OpenCV's BGR frames with image_order="BGR" (flipped after the resize, on the small
    image): the same tensor as the RGB image gives, for every model channel order."""
    rgb = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    spec = vision.PreprocessSpec(input_size=(32, 32), resize=resize, channel_order=order, mean=(0.5, 0.4, 0.3),
                                 std=(0.2, 0.25, 0.3))
    expected, transform = vision.preprocess(rgb, spec)
    got, same = vision.preprocess(np.ascontiguousarray(rgb[..., ::-1]), spec, image_order="BGR")
    assert got.shape == expected.shape and got.dtype == np.float32
    assert np.allclose(got, expected, atol=1e-5)
    assert same == transform
