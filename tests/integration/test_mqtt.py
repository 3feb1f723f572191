"""MqttPublisher against a real mosquitto broker on a loopback port: every message arrives on its topic with the
exact JSON line, and a broker stopped and started again mid-run is reconnected to, the frames published while it
was away are counted as dropped, and later ones arrive."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgebuild.runtime.streams.publish import MqttPublisher
from edgebuild.runtime.streams.records import RegionEvent, Track, TrackedFrame
from tests.support.mqtt import PREFIX, Broker, Subscriber, wait_for

pytestmark = pytest.mark.mqtt



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
        wait_for(lambda: len(subscriber.messages) >= len(expected), 20, "every message at the subscriber")
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
        wait_for(lambda: len(subscriber.messages) == 20, 10, "the first 20 frames")

        broker.stop()
        wait_for(lambda: not publisher.connected.is_set(), 10, "the publisher seeing the broker go")
        wait_for(lambda: not subscriber.subscribed.is_set(), 10, "the subscriber seeing the broker go")
        started = time.monotonic()
        for n in range(20, 30):  # the broker is away: dropped at once, counted
            publisher.on_frame(_frame(n, 0))
        assert time.monotonic() - started < 0.5 and publisher.dropped_offline == 10

        broker.start()
        wait_for(publisher.connected.is_set, 15, "the publisher reconnecting")
        assert subscriber.subscribed.wait(15), "the subscriber did not resubscribe"
        after = [_frame(n, 1) for n in range(30, 50)]
        for frame in after:
            publisher.on_frame(frame)
        wait_for(lambda: len(subscriber.messages) == 40, 10, "the 20 frames after the restart")
        assert [p for _, p in subscriber.messages] == [f.json_line().encode() for f in before + after]
        assert publisher.connects == 2 and publisher.sent == 40
    finally:
        publisher.close()
        subscriber.close()
    assert "10 dropped (10 while the broker was not connected" in publisher.summary()
    assert publisher.summary().endswith("2 connections")
