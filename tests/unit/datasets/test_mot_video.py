"""The generated tracking set: the same seed gives the same pixels and tracks; the ground truth agrees with what
is drawn (boxes in the frame and on the shape's pixels, visibility in [0, 1], one row per id and frame); the
shapes move, cross and come and go; the frames are written as PNG and as an MP4 of as many frames."""

from __future__ import annotations

import configparser
from pathlib import Path

import cv2
import numpy as np
import pytest

from edgebuild.datasets.mot_video import MotVideoSpec, render_stream, write_mot_video_set

SPEC = MotVideoSpec(streams=2, frames=60)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_mot_video_set(tmp_path_factory.mktemp("mot"), SPEC)


def _gt(folder: Path) -> np.ndarray:
    return np.loadtxt(folder / "gt" / "gt.txt", delimiter=",", ndmin=2)


def test_the_same_seed_gives_the_same_frames_and_tracks() -> None:
    spec = MotVideoSpec(streams=1, frames=12)
    frames, rows = render_stream(spec, 0)
    again, rows_again = render_stream(spec, 0)
    assert rows == rows_again and all(np.array_equal(a, b) for a, b in zip(frames, again))
    other, other_rows = render_stream(MotVideoSpec(streams=1, frames=12, seed=spec.seed + 1), 0)
    assert other_rows != rows and not np.array_equal(other[0], frames[0])


def test_the_ground_truth_is_consistent_with_the_frames(written: list[Path]) -> None:
    for folder in written:
        rows = _gt(folder)
        frame, ident, x, y, w, h, conf, cls, visibility = rows.T
        assert rows.shape[1] == 9 and (conf == 1).all() and set(cls) <= {1, 2, 3}
        assert (frame >= 1).all() and (frame <= SPEC.frames).all()
        assert (x >= 0).all() and (y >= 0).all() and (w >= 2).all() and (h >= 2).all()
        assert (x + w <= SPEC.width + 1e-6).all() and (y + h <= SPEC.height + 1e-6).all()
        assert ((visibility >= 0) & (visibility <= 1)).all()
        pairs = set(zip(frame.astype(int), ident.astype(int)))
        assert len(pairs) == len(rows), "an id appears twice in a frame"
        # each id keeps its class
        assert all(len(set(cls[ident == i])) == 1 for i in set(ident))


def test_a_fully_visible_box_lies_on_its_shape(written: list[Path]) -> None:
    folder = written[0]
    rows = _gt(folder)
    first = rows[(rows[:, 0] == 1) & (rows[:, 8] > 0.99)]
    image = cv2.imread(str(folder / "img1" / "000001.png")).astype(np.float32)
    for _, _, x, y, w, h, *_ in first:
        inside = image[int(y + h / 2) - 1 : int(y + h / 2) + 2, int(x + w / 2) - 1 : int(x + w / 2) + 2].mean((0, 1))
        above, below = max(int(y) - 4, 0), min(int(y + h) + 3, SPEC.height - 1)
        ring = np.concatenate([image[above, int(x) : int(x + w)], image[below, int(x) : int(x + w)]])
        assert np.abs(inside - ring.mean(0)).max() > 20, "the box's centre looks like the background around it"


def test_the_shapes_move_cross_and_come_and_go(written: list[Path]) -> None:
    rows = np.concatenate([_gt(folder) for folder in written])
    assert (rows[:, 8] < 0.5).any(), "no shape is ever mostly hidden behind another or the edge"
    first_frame = {i: rows[rows[:, 1] == i, 0].min() for i in set(rows[:, 1])}
    assert max(first_frame.values()) > 1, "no shape enters after the first frame"
    track = rows[rows[:, 1] == rows[0, 1]]
    assert np.ptp(track[:, 2]) + np.ptp(track[:, 3]) > 10, "the first shape does not move"


def test_the_sequences_are_written_as_motchallenge_lays_them_out(written: list[Path]) -> None:
    for folder in written:
        info = configparser.ConfigParser()
        info.optionxform = str  # type: ignore[assignment,method-assign]
        info.read(folder / "seqinfo.ini")
        assert dict(info["Sequence"]) == {"name": folder.name, "imDir": "img1", "frameRate": "15",
                                          "seqLength": str(SPEC.frames), "imWidth": "160", "imHeight": "160",
                                          "imExt": ".png"}
        assert len(list((folder / "img1").glob("*.png"))) == SPEC.frames
        capture = cv2.VideoCapture(str(folder / "video.mp4"))
        count, difference = 0, []
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            count += 1
            png = np.asarray(cv2.imread(str(folder / "img1" / f"{count:06d}.png")), np.int16)
            difference.append(np.abs(frame.astype(np.int16) - png).mean())
        capture.release()
        assert count == SPEC.frames
        assert max(difference) < 12, "the MP4 is not the PNG frames (mp4v loses mostly the noise: ~6 grey levels)"
