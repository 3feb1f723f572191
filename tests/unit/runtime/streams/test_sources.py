"""Sources: what a --source is, the GStreamer pipelines, the newest-wins slot, reconnects with backoff."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.streams.sources import (
    Backoff,
    Frame,
    FrameSlot,
    StreamReader,
    gstreamer_pipeline,
    opencv_has_gstreamer,
    parse_source,
)
from tests.unit.runtime.streams.video import write_video


def test_each_kind_of_source_is_told_apart() -> None:
    assert parse_source("rtsp://cam/1", 0).kind == "rtsp"
    assert (parse_source("/dev/video2", 1).kind, parse_source("/dev/video2", 1).camera) == ("v4l2", 2)
    assert parse_source("3", 0).uri == "/dev/video3"
    assert (parse_source("csi://1", 0).kind, parse_source("csi://1", 0).camera) == ("csi", 1)
    assert parse_source("clips/yard.mp4", 4) .kind == "file" and not parse_source("a.mp4", 0).live


def _elements(pipeline: str) -> list[str]:
    """The element names of a gst-launch description, checked for its structure: no empty link, caps or
    elements between every '!', and the BGR appsink at the end."""
    parts = [p.strip() for p in pipeline.split(" ! ")]
    assert all(parts), pipeline
    assert parts[-1].startswith("appsink") and parts[-2] == "video/x-raw,format=BGR", pipeline
    return [p.split()[0] for p in parts if not p.startswith("video/x-raw")]


@pytest.mark.parametrize("jetpack", [5, 6])
def test_the_jetson_pipelines_decode_and_convert_on_the_hardware(jetpack: int) -> None:
    rtsp = _elements(gstreamer_pipeline(parse_source("rtsp://cam/1", 0, codec="h265"), jetpack))
    assert rtsp[:5] == ["rtspsrc", "rtph265depay", "h265parse", "nvv4l2decoder", "nvvidconv"]
    mp4 = _elements(gstreamer_pipeline(parse_source("a clip.mp4", 0), jetpack))
    assert mp4[:5] == ["filesrc", "qtdemux", "h264parse", "nvv4l2decoder", "nvvidconv"]
    assert 'location="a clip.mp4"' in gstreamer_pipeline(parse_source("a clip.mp4", 0), jetpack)
    csi = gstreamer_pipeline(parse_source("csi://1", 0), jetpack)
    assert _elements(csi)[:2] == ["nvarguscamerasrc", "nvvidconv"] and "sensor-id=1" in csi
    assert "memory:NVMM" in csi
    assert _elements(gstreamer_pipeline(parse_source("/dev/video0", 0), jetpack))[:2] == ["v4l2src", "nvvidconv"]


def test_jetpack_4_and_a_host_csi_camera_are_refused() -> None:
    with pytest.raises(CapabilityMissing):
        gstreamer_pipeline(parse_source("a.mp4", 0), 4)
    with pytest.raises(CapabilityMissing):
        gstreamer_pipeline(parse_source("csi://0", 0), None)


def test_opencv_build_information_is_read_for_gstreamer() -> None:
    assert opencv_has_gstreamer("  Video I/O:\n    GStreamer:                   YES (1.20.3)\n")
    assert not opencv_has_gstreamer("    GStreamer:                   NO\n")


@pytest.mark.gstreamer
def test_the_software_pipeline_plays_a_video_with_gst_launch(tmp_path: Path) -> None:
    video = write_video(tmp_path / "clip.avi", frames=5)
    pipeline = gstreamer_pipeline(parse_source(str(video), 0), None)
    head = pipeline.split(" ! appsink")[0]  # appsink needs an application; fakesink plays the same caps
    out = subprocess.run(["gst-launch-1.0", "-q", *head.split(" "), "!", "fakesink"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_slot_keeps_the_newest_frame_and_counts_the_dropped() -> None:
    slot = FrameSlot()
    for n in range(3):
        slot.put(Frame(0, n, None, 0.0, 0.0))
    taken = slot.take()
    assert taken is not None and taken.number == 2 and slot.dropped == 2 and slot.take() is None


class FakeCapture:
    """A capture that opens or not, gives ``frames`` frames, then fails (a dropped stream)."""

    def __init__(self, opened: bool, frames: int) -> None:
        self.opened, self.left = opened, frames

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return self.opened

    def read(self) -> tuple[bool, np.ndarray | None]:
        if self.left <= 0:
            return False, None
        self.left -= 1
        return True, np.zeros((4, 4, 3), np.uint8)

    def release(self) -> None:
        pass


def test_a_dropped_live_stream_is_reopened_after_growing_pauses() -> None:
    captures = [FakeCapture(True, 2), FakeCapture(False, 0), FakeCapture(False, 0), FakeCapture(True, 3)]
    pauses: list[float] = []
    reader = StreamReader(parse_source("rtsp://cam/1", 0), lambda source: captures.pop(0), max_frames=5,
                          backoff=Backoff(0.5, 8.0), sleep=pauses.append)
    taken = []
    reader.slot.put = lambda frame, wait=False, stop=None: taken.append(frame.number)  # type: ignore[method-assign]
    reader.run()
    assert taken == [0, 1, 2, 3, 4] and reader.errors == []
    assert pauses == [0.5, 1.0, 2.0] and reader.reconnects == 3


def test_a_live_stream_that_never_opens_is_given_up_and_reported() -> None:
    pauses: list[float] = []
    reader = StreamReader(parse_source("rtsp://cam/1", 0), lambda source: FakeCapture(False, 0), max_reconnects=3,
                          sleep=pauses.append)
    reader.run()
    assert pauses == [0.5, 1.0, 2.0] and "gave up" in reader.errors[0] and reader.finished.is_set()


def test_a_missing_file_fails_at_once() -> None:
    reader = StreamReader(parse_source("missing.mp4", 1), lambda source: FakeCapture(False, 0), sleep=pytest.fail)
    reader.run()
    assert reader.errors == ["cannot open or read missing.mp4"]
