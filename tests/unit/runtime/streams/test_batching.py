"""The streams' frames cut into the batch sizes the engine's profile allows, letterboxed as the recipe says."""

from __future__ import annotations

import numpy as np
import pytest

from edgebuild.runtime.base.vision import PreprocessSpec
from edgebuild.runtime.streams.batching import BatchLimits, batch_sizes, prepare_batch


@pytest.mark.parametrize(("frames", "low", "high", "runs"), [
    (3, 1, 8, [(3, 3)]),
    (11, 1, 8, [(8, 8), (3, 3)]),
    (3, 4, 4, [(3, 4)]),  # a fixed batch of 4: padded
    (5, 4, 4, [(4, 4), (1, 4)]),
    (2, 1, 1, [(1, 1), (1, 1)]),  # a fixed batch of 1: a run per frame
    (1, 2, 8, [(1, 2)]),  # below the profile's min: padded up to it
])
def test_frames_run_in_sizes_within_the_profile(frames: int, low: int, high: int, runs: list) -> None:
    limits = BatchLimits("images", low, high)
    assert batch_sizes(frames, limits) == runs
    assert all(low <= size <= high for _, size in runs)


def test_a_batch_is_letterboxed_padded_and_maps_boxes_back_to_each_source() -> None:
    spec = PreprocessSpec((160, 160), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    wide, tall = np.zeros((240, 320, 3), np.uint8), np.zeros((320, 160, 3), np.uint8)
    wide[..., 2] = 255  # red in BGR: the model's channel 0 (RGB)
    runs, seconds = prepare_batch([(0, wide), (3, tall)], spec, BatchLimits("images", 4, 4))
    (run,) = runs
    assert run.inputs["images"].shape == (4, 3, 160, 160) and run.padded == 2 and run.streams == [0, 3]
    assert run.inputs["images"][0, 0, 80, 80] == pytest.approx((1.0 - 0.5) / 0.25)  # red, in RGB order
    box = np.array([[0.0, 20.0, 160.0, 140.0]])  # the whole letterboxed wide frame, in network pixels
    assert run.transforms[0].boxes_to_original(box).tolist() == [[0.0, 0.0, 320.0, 240.0]]
    assert run.transforms[1].boxes_to_original(np.array([[40.0, 0.0, 120.0, 160.0]])).tolist() == \
        [[0.0, 0.0, 160.0, 320.0]]
    assert seconds >= 0
