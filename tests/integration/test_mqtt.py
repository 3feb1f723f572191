"""MqttPublisher against a real mosquitto broker on a loopback port: every message arrives on its topic with the
exact JSON line, and a broker stopped and started again mid-run is reconnected to, the frames published while it
was away are counted as dropped, and later ones arrive."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from edgebuild.runtime.streams.publish import MqttPublisher
from edgebuild.runtime.streams.records import RegionEvent, Track, TrackedFrame
from tests.support.resources import mosquitto_path

pytestmark = pytest.mark.mqtt

PREFIX = "edgebuild-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.02)


class Broker:
    """mosquitto 2.x on 127.0.0.1:port, anonymous clients allowed (2.x refuses them unless told)."""

    def __init__(self, folder: Path) -> None:
        self.port = _free_port()
        self.config = folder / "mosquitto.conf"
        self.config.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        self.log = folder / "mosquitto.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([mosquitto_path(), "-c", str(self.config)], stdout=log, stderr=log)
        _wait_for(self._listening, 10, f"mosquitto listening on {self.port} ({self.log})")

    def _listening(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class Subscriber:
    """A second paho client subscribed to PREFIX/#, (re)subscribing at every connection; keeps what it gets."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, bytes]] = []
        self.subscribed = threading.Event()
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(f"{PREFIX}/#", qos=1)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.client.on_disconnect = lambda c, u, f, rc, p: self.subscribed.clear()
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload))
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.client.connect_async("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the subscriber did not subscribe"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def broker(tmp_path: Path):
    running = Broker(tmp_path)
    running.start()
    yield running
    running.stop()


def _frame(number: int, stream: int) -> TrackedFrame:
    return TrackedFrame(stream, number, [Track(number % 7, [number, 2.5, number + 40, 80.75], 1, 0.5)],
                        time=1700000000.0 + number, name=f"cam{stream}")


def test_every_frame_and_region_event_arrives_on_its_topic_as_its_json_line(broker: Broker) -> None:
    subscriber = Subscriber(broker.port)
    publisher = MqttPublisher("127.0.0.1", broker.port, topic_prefix=PREFIX, qos=1)
    try:
        assert publisher.connected.wait(10)
        expected = []
        for n in range(300):
            frame = _frame(n, stream=n % 3)
            publisher.on_frame(frame)
            expected.append((f"{PREFIX}/stream/{n % 3}/tracks", frame.json_line().encode()))
            if n % 50 == 0:
                event = RegionEvent(n % 3, n, "door", "enter", frame.tracks[0], frame.time)
                publisher.on_event(event)
                expected.append((f"{PREFIX}/stream/{n % 3}/events", event.json_line().encode()))
        _wait_for(lambda: len(subscriber.messages) >= len(expected), 20, "every message at the subscriber")
        for topic in {t for t, _ in expected}:  # MQTT keeps the order per topic
            assert [m for m in subscriber.messages if m[0] == topic] == [m for m in expected if m[0] == topic]
        assert len(subscriber.messages) == len(expected)
        assert (publisher.sent, publisher.dropped_offline, publisher.dropped_backlog) == (306, 0, 0)
    finally:
        publisher.close()
        subscriber.close()
    assert publisher.summary().startswith(f"mqtt 127.0.0.1:{broker.port} ({PREFIX}/stream/<i>/...): 306 messages "
                                          "published, 0 dropped, 1 connection")


def test_the_publisher_reconnects_after_the_broker_restarts_and_counts_what_it_dropped(broker: Broker) -> None:
    publisher = MqttPublisher("127.0.0.1", broker.port, topic_prefix=PREFIX, qos=0, reconnect_min_s=1,
                              reconnect_max_s=1)
    subscriber = Subscriber(broker.port)
    try:
        assert publisher.connected.wait(10)
        before = [_frame(n, 0) for n in range(20)]
        for frame in before:
            publisher.on_frame(frame)
        _wait_for(lambda: len(subscriber.messages) == 20, 10, "the first 20 frames")

        broker.stop()
        _wait_for(lambda: not publisher.connected.is_set(), 10, "the publisher seeing the broker go")
        _wait_for(lambda: not subscriber.subscribed.is_set(), 10, "the subscriber seeing the broker go")
        started = time.monotonic()
        for n in range(20, 30):  # the broker is away: dropped at once, counted
            publisher.on_frame(_frame(n, 0))
        assert time.monotonic() - started < 0.5 and publisher.dropped_offline == 10

        broker.start()
        _wait_for(publisher.connected.is_set, 15, "the publisher reconnecting")
        assert subscriber.subscribed.wait(15), "the subscriber did not resubscribe"
        after = [_frame(n, 1) for n in range(30, 50)]
        for frame in after:
            publisher.on_frame(frame)
        _wait_for(lambda: len(subscriber.messages) == 40, 10, "the 20 frames after the restart")
        assert [p for _, p in subscriber.messages] == [f.json_line().encode() for f in before + after]
        assert publisher.connects == 2 and publisher.sent == 40
    finally:
        publisher.close()
        subscriber.close()
    assert "10 dropped (10 while the broker was not connected" in publisher.summary()
    assert publisher.summary().endswith("2 connections")
