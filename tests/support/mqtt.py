"""A real mosquitto broker on a loopback port, and a subscriber that keeps what it gets: for the MQTT tests
(tests/integration/test_mqtt.py, test_track.py)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.support.resources import mosquitto_path

PREFIX = "edgebuild-test"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.02)


class Broker:
    """mosquitto 2.x on 127.0.0.1:port, anonymous clients allowed (2.x refuses them unless told)."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.config = folder / "mosquitto.conf"
        self.config.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        self.log = folder / "mosquitto.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([mosquitto_path(), "-c", str(self.config)], stdout=log, stderr=log)
        wait_for(self._listening, 10, f"mosquitto listening on {self.port} ({self.log})")

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
