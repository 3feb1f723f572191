"""``edgebuild track`` end to end: the compiled example detector over two synthetic videos, on the host's CLI and
the device's, and a source that fails beside them."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.cli import main as device_main
from edgebuild.runtime.streams.records import TrackedFrame
from tests.unit.runtime.streams.video import write_video

FRAMES = 20
WIDTH, HEIGHT = 320, 240


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("videos")
    return [write_video(folder / f"cam{i}.mp4", frames=FRAMES, width=WIDTH, height=HEIGHT) for i in range(2)]


@pytest.fixture
def model_folder(compiled_example) -> Path:
    return compiled_example("shapes-detector", "yard-cams") / "build" / "engines" / "yard-cams"


def _lines(path: Path) -> list[TrackedFrame]:
    return [TrackedFrame.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


def _refused_url() -> str:
    with socket.socket() as free:  # a port nothing listens on: the connection is refused
        free.bind(("127.0.0.1", 0))
        return f"rtsp://127.0.0.1:{free.getsockname()[1]}/none"


def test_track_writes_every_stream_and_frame_with_stable_ids(model_folder: Path, videos: list[Path],
                                                               tmp_path: Path) -> None:
    out = tmp_path / "tracks.jsonl"
    result = CliRunner().invoke(main, ["track", str(model_folder), "--source", str(videos[0]), "--source",
                                       str(videos[1]), "--jsonl", str(out), "--backend", "onnxruntime"])
    assert result.exit_code == 0, result.output
    frames = _lines(out)
    assert sorted((f.stream, f.frame) for f in frames) == [(s, n) for s in (0, 1) for n in range(FRAMES)]
    for frame in frames:
        for track in frame.tracks:
            x1, y1, x2, y2 = track.box
            assert 0 <= x1 < x2 <= WIDTH and 0 <= y1 < y2 <= HEIGHT, frame
    for stream in (0, 1):  # the circle (class 0) moves 2 px a frame: one id from its first track to the last
        ordered = sorted((f for f in frames if f.stream == stream), key=lambda f: f.frame)
        circle = [(f.frame, t) for f in ordered for t in f.tracks if t.cls == 0]
        assert len(circle) >= FRAMES - 3 and len({t.id for _, t in circle}) == 1, circle
        (first, a), (last, b) = circle[0], circle[-1]
        assert (b.box[0] + b.box[2] - a.box[0] - a.box[2]) / 2 == pytest.approx(2 * (last - first), abs=4)
    assert "ms per frame: video_decode" in result.output and "stream 1 (file" in result.output


def test_a_failing_source_is_reported_and_the_others_are_whole(model_folder: Path, videos: list[Path],
                                                               tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "tracks.jsonl"
    code = device_main(["track", str(model_folder), "--source", str(tmp_path / "missing.mp4"), "--source",
                        str(videos[1]), "--source", _refused_url(), "--jsonl", str(out), "--tracker", "ocsort",
                        "--backend", "onnxruntime", "--frames", "10", "--seconds", "5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.splitlines()[-1])["track"]
    streams = {s["stream"]: s for s in summary["streams"]}
    assert streams[0]["errors"] == [f"cannot open or read {tmp_path / 'missing.mp4'}"]
    assert streams[1]["frames"] == 10 and streams[1]["errors"] == []
    assert streams[2]["frames"] == 0 and streams[2]["reconnects"] >= 1  # retried until --seconds ended the run
    assert sorted(f.frame for f in _lines(out) if f.stream == 1) == list(range(10))
    assert {f.stream for f in _lines(out)} == {1}
    assert "FAILED: cannot open or read" in captured.err
