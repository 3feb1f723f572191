"""The results out: JSON lines on disk, server-sent events read by real HTTP clients (http.client, curl -N),
an MQTT publisher with no broker, an annotated MP4 read back by OpenCV, and the fan-out that feeds them.
The publisher against a real broker is in tests/integration/test_mqtt.py."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.streams.publish import (
    AnnotatedVideo,
    EventStream,
    JsonLinesWriter,
    MqttPublisher,
    Publisher,
    ResultsOut,
)
from edgebuild.runtime.streams.records import RegionEvent, Track, TrackedFrame
from edgebuild.runtime.streams.regions import Region, RegionWatcher


def _frame(number: int, stream: int = 0, tracks: int = 2) -> TrackedFrame:
    return TrackedFrame(stream, number, [Track(i + 1, [10.0 * i, 20.0, 10.0 * i + 30.5, 60.25], i % 3, 0.875)
                                         for i in range(tracks)], time=1700000000.0 + number / 4, name=f"cam{stream}")


def _event(number: int, stream: int = 0) -> RegionEvent:
    return RegionEvent(stream, number, "door", "enter", Track(1, [1, 2, 3, 4], 0, 0.5), 1700000000.0)


# JSON lines

def test_json_lines_are_the_records_own_lines_flushed_per_frame_and_appended(tmp_path) -> None:
    path = tmp_path / "tracks.jsonl"
    with JsonLinesWriter(str(path)) as writer:
        writer.on_frame(_frame(0))
        assert path.read_text() == _frame(0).json_line() + "\n"  # on disk before the next frame, not at close
        writer.on_event(_event(0))
        writer.on_frame(_frame(1, stream=1))
    with JsonLinesWriter(str(path)) as writer:
        writer.on_frame(_frame(2))
        assert writer.summary() == f"jsonl {path}: 1 lines"
    lines = path.read_text().splitlines()
    assert lines == [_frame(0).json_line(), _event(0).json_line(), _frame(1, stream=1).json_line(),
                     _frame(2).json_line()]
    assert TrackedFrame.from_dict(json.loads(lines[2])) == _frame(1, stream=1)
    assert "event" in json.loads(lines[1]) and "tracks" not in json.loads(lines[1])


def test_json_lines_to_standard_output(capsys) -> None:
    writer = JsonLinesWriter("-")
    writer.on_frame(_frame(3))
    writer.close()
    assert capsys.readouterr().out == _frame(3).json_line() + "\n" and not sys.stdout.closed


# the fan-out

class _Recorder(Publisher):
    def __init__(self, wants_image: bool) -> None:
        self.wants_image, self.seen, self.closed = wants_image, [], False

    def on_frame(self, frame, image=None) -> None:
        self.seen.append(("frame", frame.frame, image is not None))

    def on_event(self, event) -> None:
        self.seen.append((event.kind, event.frame, event.region))

    def close(self) -> None:
        self.closed = True


def test_results_out_gives_each_publisher_the_frame_then_its_region_events_and_the_image_only_if_wanted() -> None:
    plain, drawing = _Recorder(False), _Recorder(True)
    out = ResultsOut([plain, drawing], RegionWatcher([Region.rectangle("door", 0, 0, 100, 100)]))
    assert out.wants_image
    image = np.zeros((4, 4, 3), np.uint8)
    inside = Track(1, [40, 40, 60, 90], 0, 0.9)
    out.on_frame(TrackedFrame(0, 0, []), image)
    out.on_frame(TrackedFrame(0, 1, [inside]), image)
    out.close()
    out.close()
    assert plain.seen == [("frame", 0, False), ("frame", 1, False), ("enter", 1, "door"), ("leave", 1, "door")]
    assert [s[2] for s in drawing.seen[:2]] == [True, True] and plain.closed and drawing.closed
    assert not ResultsOut([plain]).wants_image


# server-sent events

class _SSE:
    """A client reading an event stream with http.client, block by block."""

    def __init__(self, port: int, path: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.connection.request("GET", path)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "text/event-stream"
        assert self.block() == [f": edgebuild {path}"]  # registered: what is published from now on comes

    def block(self) -> list[str]:
        lines = []
        while True:
            line = self.response.readline().decode("utf-8")
            assert line, "the server closed the stream"
            if line == "\n":
                return lines
            lines.append(line.rstrip("\n"))

    def events(self, count: int) -> tuple[list[tuple[str, str]], list[str]]:
        """The next ``count`` events as (event, data), and the comments among them."""
        events, comments = [], []
        while len(events) < count:
            block = self.block()
            if block[0].startswith(":"):
                comments += block
            else:
                assert block[0].startswith("event: ") and block[1].startswith("data: ") and len(block) == 2
                events.append((block[0][7:], block[1][6:]))
        return events, comments

    def close(self) -> None:
        self.response.close()  # the response holds the socket (an HTTP/1.0 stream ends when it closes)
        self.connection.close()


def _get(port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path)
    response = connection.getresponse()
    try:
        return response.status, response.read().decode("utf-8")
    finally:
        connection.close()


@pytest.fixture
def sse():
    servers = []

    def start(**options) -> EventStream:
        servers.append(EventStream(0, host="127.0.0.1", **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_tracks_and_region_events_reach_each_client_whole_and_in_order(sse) -> None:
    server = sse()
    tracks, events = _SSE(server.port, "/tracks"), _SSE(server.port, "/events")
    for n in range(50):
        server.on_frame(_frame(n, stream=n % 2))
        if n % 10 == 0:
            server.on_event(_event(n))
    got, comments = tracks.events(50)
    assert got == [("tracks", _frame(n, stream=n % 2).json_line()) for n in range(50)] and comments == []
    got, _ = events.events(5)
    assert got == [("region", _event(n).json_line()) for n in range(0, 50, 10)]
    health = json.loads(_get(server.port, "/health")[1])
    assert health == {"ok": True, "clients": 2, "published": {"tracks": 50, "events": 5}, "dropped": 0}
    tracks.close()
    events.close()


def test_a_stream_filter_sends_that_streams_events_only(sse) -> None:
    server = sse()
    one = _SSE(server.port, "/tracks?stream=1")
    for n in range(6):
        server.on_frame(_frame(n, stream=n % 3))
    got, _ = one.events(2)
    assert got == [("tracks", _frame(1, stream=1).json_line()), ("tracks", _frame(4, stream=1).json_line())]
    one.close()


@pytest.mark.parametrize(("path", "status", "says"), [
    ("/nothing", 404, "GET /tracks"), ("/tracks?stream=x", 400, "stream's index"), ("/events?stream=-1", 400, "-1"),
])
def test_unknown_paths_and_bad_filters_are_refused(sse, path, status, says) -> None:
    got_status, body = _get(sse().port, path)
    assert got_status == status and says in body


def test_a_quiet_stream_sends_keep_alive_comments(sse) -> None:
    server = sse(keepalive_s=0.2)
    client = _SSE(server.port, "/events")
    started = time.monotonic()
    assert client.block() == [": keep-alive"] and client.block() == [": keep-alive"]
    assert time.monotonic() - started >= 0.3
    client.close()


def test_a_client_that_does_not_read_never_holds_the_publisher_up_and_is_told_what_it_lost(sse) -> None:
    server = sse(queue=8)
    slow = _SSE(server.port, "/tracks")  # connected, then reads nothing while 20000 frames go out
    started = time.monotonic()
    count = 20000
    for n in range(count):
        server.on_frame(_frame(n, tracks=5))
    assert time.monotonic() - started < 5.0  # a few microseconds a frame; a blocked publisher would hang here
    received, dropped, last = 0, 0, -1
    while last != count - 1:
        block = slow.block()
        if block[0].startswith(": dropped "):
            dropped = int(block[0].split()[-1])
        else:
            frame = json.loads(block[1][6:])["frame"]
            assert frame > last  # the oldest go, the order stays
            received, last = received + 1, frame
    assert dropped > 0 and received + dropped == count  # every frame either came or was counted
    assert json.loads(_get(server.port, "/health")[1])["dropped"] == dropped
    slow.close()


def test_a_client_that_goes_is_forgotten(sse) -> None:
    server = sse()
    client = _SSE(server.port, "/tracks")
    client.close()
    deadline = time.monotonic() + 5
    while server.health()["clients"] and time.monotonic() < deadline:
        server.on_frame(_frame(0))  # a write to the gone client fails, and its thread ends
        time.sleep(0.02)
    assert server.health()["clients"] == 0
    assert "1 clients served" in server.summary()


def test_closing_the_server_ends_its_clients_streams(sse) -> None:
    server = sse()
    client = _SSE(server.port, "/tracks")
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    assert client.response.readline() == b""
    client.close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reads_the_event_stream(sse) -> None:
    server = sse()
    curl = subprocess.Popen(["curl", "-sN", "--max-time", "2", f"http://127.0.0.1:{server.port}/tracks?stream=0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert curl.stdout.readline() == ": edgebuild /tracks?stream=0\n"
        for n in range(3):
            server.on_frame(_frame(n))
        out = curl.communicate(timeout=10)[0]
    finally:
        curl.kill()
    expected = "".join(f"event: tracks\ndata: {_frame(n).json_line()}\n\n" for n in range(3))
    assert out.strip("\n") == expected.strip("\n")


# MQTT without a broker

def test_mqtt_without_paho_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", None)
    with pytest.raises(CapabilityMissing) as missing:
        MqttPublisher("127.0.0.1", 1883)
    assert "paho-mqtt" in missing.value.message and missing.value.hint == "pip install paho-mqtt"


def test_mqtt_with_no_broker_drops_and_counts_without_waiting() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    publisher = MqttPublisher("127.0.0.1", port, topic_prefix="site/", reconnect_min_s=1)
    try:
        started = time.monotonic()
        for n in range(100):
            publisher.on_frame(_frame(n))
        publisher.on_event(_event(0))
        assert time.monotonic() - started < 1.0
        assert (publisher.sent, publisher.dropped_offline) == (0, 101)
        assert publisher.topic(3, "tracks") == "site/stream/3/tracks"
        assert publisher.summary() == (f"mqtt 127.0.0.1:{port} (site/stream/<i>/...): 0 messages published, 101 "
                                       "dropped (101 while the broker was not connected, 0 over the backlog of "
                                       "1000), 0 connections")
    finally:
        publisher.close()
    with pytest.raises(ValueError, match="qos"):
        MqttPublisher("127.0.0.1", port, qos=3)


# the annotated video

def test_an_annotated_video_has_every_frame_at_its_size(tmp_path) -> None:
    path = tmp_path / "out.mp4"
    video = AnnotatedVideo(str(path), fps=10, class_names=["person", "car"],
                           regions=[Region.rectangle("door", 5, 5, 50, 50)])
    for n in range(10):
        image = np.full((120, 160, 3), 40, np.uint8)
        video.on_frame(_frame(n), image)
        video.on_frame(_frame(n, stream=1), image)  # another stream's: not in this video
    video.close()
    assert video.summary() == f"video {path}: 10 frames of stream 0"
    cv2 = pytest.importorskip("cv2")
    capture = cv2.VideoCapture(str(path))
    try:
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 10
        frames = 0
        while True:
            ok, image = capture.read()
            if not ok:
                break
            assert image.shape == (120, 160, 3)
            frames += 1
        assert frames == 10
    finally:
        capture.release()


def test_the_drawing_marks_the_boxes_and_leaves_the_picture_alone(tmp_path) -> None:
    video = AnnotatedVideo(str(tmp_path / "x.mp4"), fps=5)
    image = np.zeros((100, 100, 3), np.uint8)
    drawn = video.draw(TrackedFrame(0, 0, [Track(3, [20, 30, 70, 90], 1, 0.5)]), image)
    assert not image.any() and drawn.shape == image.shape
    assert drawn[60, 20].any() and drawn[60, 70].any() and drawn[90, 45].any()  # the box's edges
    assert not drawn[60, 45].any() and not drawn[5, 95].any()  # inside and away from it: untouched


def test_an_annotated_video_without_opencv_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(CapabilityMissing, match="OpenCV"):
        AnnotatedVideo(str(tmp_path / "x.mp4"), fps=5)
