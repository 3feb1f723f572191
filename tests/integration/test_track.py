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
    assert "latency, read to result: p50" in result.output


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
    latency = summary["latency_ms"]  # from the start of each frame's read to its tracks
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"] < 5000, latency
    assert streams[2]["frames"] == 0 and streams[2]["reconnects"] >= 1  # retried until --seconds ended the run
    assert sorted(f.frame for f in _lines(out) if f.stream == 1) == list(range(10))
    assert {f.stream for f in _lines(out)} == {1}
    assert "FAILED: cannot open or read" in captured.err


@pytest.mark.mqtt
def test_track_publishes_region_events_mqtt_and_an_annotated_video(model_folder: Path, videos: list[Path],
                                                                   tmp_path: Path) -> None:
    """The results out on the command line: region events in the JSON lines, every frame's line on MQTT (a real
    mosquitto) exactly as in the file, and stream 1's frames drawn into an MP4 that reads back whole."""
    import cv2

    from tests.support.mqtt import PREFIX, Broker, Subscriber, wait_for

    regions = tmp_path / "regions.json"
    regions.write_text(json.dumps({"regions": [{"name": "yard", "box": [0, 0, WIDTH, HEIGHT]}]}))
    broker = Broker(tmp_path)
    broker.start()
    subscriber = Subscriber(broker.port)
    try:
        out, video = tmp_path / "tracks.jsonl", tmp_path / "cam1.mp4"
        result = CliRunner().invoke(main, [
            "track", str(model_folder), "--source", str(videos[0]), "--source", str(videos[1]), "--jsonl", str(out),
            "--backend", "onnxruntime", "--regions", str(regions), "--mqtt", f"127.0.0.1:{broker.port}",
            "--mqtt-topic", PREFIX, "--video", str(video), "--video-stream", "1"])
        assert result.exit_code == 0, result.output
        lines = out.read_text().splitlines()
        frames = [line for line in lines if '"event"' not in line]
        events = [json.loads(line) for line in lines if '"event"' in line]
        assert len(frames) == 2 * FRAMES
        tracked = {(json.loads(f)["stream"], t["id"]) for f in frames for t in json.loads(f)["tracks"]}
        # the region is the whole frame: every track enters it once, and leaves it once (lost or at the end)
        assert sorted((e["stream"], e["track"]["id"]) for e in events if e["event"] == "enter") == sorted(tracked)
        assert sorted((e["stream"], e["track"]["id"]) for e in events if e["event"] == "leave") == sorted(tracked)
        wait_for(lambda: len(subscriber.messages) >= len(lines), 10, "every line on MQTT")
        by_topic = {}
        for topic, payload in subscriber.messages:
            by_topic.setdefault(topic, []).append(payload.decode())
        for stream in (0, 1):
            assert by_topic[f"{PREFIX}/stream/{stream}/tracks"] == [
                f for f in frames if json.loads(f)["stream"] == stream]
        capture = cv2.VideoCapture(str(video))
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == FRAMES
        size = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        capture.release()
        assert size == (WIDTH, HEIGHT)
        assert f"out: mqtt 127.0.0.1:{broker.port} ({PREFIX}/stream/<i>/...): {len(lines)} messages published, " \
               "0 dropped" in result.output, result.output
        assert f"out: video {video}: {FRAMES} frames of stream 1" in result.output
    finally:
        subscriber.close()
        broker.stop()
