"""The results out: each stream's ``TrackedFrame`` and ``RegionEvent`` s to a JSON-lines file
(``JsonLinesWriter``), to HTTP clients as server-sent events (``EventStream``), to an MQTT broker
(``MqttPublisher``), and drawn on the frames into an MP4 for a person to look at (``AnnotatedVideo``).
``ResultsOut`` hands each frame to all of them, with the region events a ``RegionWatcher`` finds in it.

None of them may hold the pipeline up: the file is written and flushed per frame (a local disk), an HTTP client
that reads slower than frames come loses its oldest events, and MQTT messages are handed to paho's own thread,
dropped (and counted) while the broker is away or the backlog is full. Each says what it did in ``summary()``.

Python 3.8 with numpy; paho-mqtt and OpenCV are imported by the classes that need them.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Deque, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, urlsplit

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.streams.records import RegionEvent, TrackedFrame
from edgebuild.runtime.streams.regions import Region, RegionWatcher

__all__ = []


class Publisher:
    """What the pipeline calls: ``on_frame`` for each stream's frame (with its picture, a HxWx3 BGR uint8
    array, only where ``wants_image``), ``on_event`` for each region event, ``close`` once at the end."""

    wants_image = False

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        pass

    def on_event(self, event: RegionEvent) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self) -> str:
        return ""

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ResultsOut(Publisher):
    """Hands each frame to every publisher, and the region events ``watcher`` finds in it after it; at
    ``close``, the leaves of the tracks still inside a region (``RegionWatcher.finish``), then closes them."""

    def __init__(self, publishers: Sequence[Publisher], watcher: Optional[RegionWatcher] = None) -> None:
        self.publishers = list(publishers)
        self.watcher = watcher
        self.wants_image = any(p.wants_image for p in self.publishers)
        self._closed = False

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        events = self.watcher.update(frame) if self.watcher is not None else []
        for publisher in self.publishers:
            publisher.on_frame(frame, image if publisher.wants_image else None)
        for event in events:
            self.on_event(event)

    def on_event(self, event: RegionEvent) -> None:
        for publisher in self.publishers:
            publisher.on_event(event)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for event in self.watcher.finish() if self.watcher is not None else []:
            self.on_event(event)
        for publisher in self.publishers:
            publisher.close()

    def summary(self) -> str:
        return "\n".join(s for s in (p.summary() for p in self.publishers) if s)


class JsonLinesWriter(Publisher):
    """Appends each frame's JSON line, and each region event's (the lines with ``"event"``), to ``path``
    (``-``: standard output), flushed per line so a reader (``tail -f``) sees every frame as it is tracked."""

    def __init__(self, path: str, *, fresh: bool = False) -> None:
        """``fresh``: start the file anew (``edgebuild track --jsonl``: this run's frames only), else append."""
        self.path = path
        self._file: IO[str] = sys.stdout if path == "-" else open(path, "w" if fresh else "a", encoding="utf-8")
        self.lines = 0

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        self._write(frame.json_line())

    def on_event(self, event: RegionEvent) -> None:
        self._write(event.json_line())

    def _write(self, line: str) -> None:
        self._file.write(line + "\n")
        self._file.flush()
        self.lines += 1

    def close(self) -> None:
        if self._file is not sys.stdout and not self._file.closed:
            self._file.close()

    def summary(self) -> str:
        return "jsonl {}: {} lines".format(self.path, self.lines)


class _Client:
    """One SSE client's queue: at most ``size`` events; a full queue drops its oldest (and counts it)."""

    def __init__(self, kind: str, stream: Optional[int], size: int) -> None:
        self.kind, self.stream = kind, stream
        self.queue: Deque[str] = collections.deque(maxlen=size)
        self.dropped = 0
        self.ready = threading.Condition()

    def put(self, text: str) -> None:
        with self.ready:
            if len(self.queue) == self.queue.maxlen:
                self.dropped += 1
            self.queue.append(text)
            self.ready.notify()

    def take(self, timeout: float) -> Tuple[List[str], int]:
        """The events queued (waiting up to ``timeout`` for one) and the drops so far, at once."""
        with self.ready:
            if not self.queue:
                self.ready.wait(timeout)
            items = list(self.queue)
            self.queue.clear()
            return items, self.dropped


class EventStream(Publisher):
    """Server-sent events over HTTP (the standard library's server, a thread per client):

    - ``GET /tracks``: every frame, ``event: tracks`` then ``data: <its JSON line>``;
    - ``GET /events``: region events, ``event: region``;
    - ``?stream=i`` on either: that stream only;
    - ``GET /health``: JSON: clients, events published, events dropped.

    A client gets ``: edgebuild <path>`` once connected, ``: keep-alive`` after ``keepalive_s`` without
    events, and ``: dropped N`` (its total so far) before the events that follow a drop: each client has a
    queue of ``queue`` events and, when it reads slower than they come, loses the oldest.
    """

    def __init__(self, port: int, host: str = "0.0.0.0", queue: int = 256, keepalive_s: float = 15.0) -> None:
        if queue < 1:
            raise ValueError("an SSE client's queue holds at least 1 event; got {}".format(queue))
        self.queue, self.keepalive_s = queue, keepalive_s
        self._clients: List[_Client] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.published = {"tracks": 0, "events": 0}
        self.dropped = 0  # by clients gone since; the live ones' are added in health()
        self.served = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="edgebuild-sse", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        self._publish("tracks", frame.stream, "event: tracks\ndata: {}\n\n".format(frame.json_line()))

    def on_event(self, event: RegionEvent) -> None:
        self._publish("events", event.stream, "event: region\ndata: {}\n\n".format(event.json_line()))

    def _publish(self, kind: str, stream: int, text: str) -> None:
        self.published[kind] += 1
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            if client.kind == kind and client.stream in (None, stream):
                client.put(text)

    def health(self) -> Dict[str, Any]:
        with self._lock:
            clients = list(self._clients)
        return {"ok": True, "clients": len(clients), "published": dict(self.published),
                "dropped": self.dropped + sum(c.dropped for c in clients)}

    def _serve(self, client: _Client, send: Any, hello: str) -> None:
        """Send ``hello``, then ``client``'s events until it goes or the server stops (``send`` raises
        ``OSError`` when it goes). The hello goes once the client is registered: what is published after a
        client has read it reaches that client."""
        with self._lock:
            self._clients.append(client)
            self.served += 1
        try:
            send(hello)
            told, quiet_since = 0, time.monotonic()
            while not self._stopping.is_set():
                items, dropped = client.take(min(1.0, self.keepalive_s))
                if dropped != told:
                    send(": dropped {}\n\n".format(dropped))
                    told = dropped
                if items:
                    send("".join(items))
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= self.keepalive_s:
                    send(": keep-alive\n\n")
                    quiet_since = time.monotonic()
        finally:
            with self._lock:
                self._clients.remove(client)
                self.dropped += client.dropped

    def close(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            with client.ready:
                client.ready.notify()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def summary(self) -> str:
        health = self.health()
        return ("sse :{}: {} clients served, {} frames and {} region events published, {} dropped by slow clients"
                .format(self.port, self.served, health["published"]["tracks"], health["published"]["events"],
                        health["dropped"]))


def _handler(events: EventStream) -> type:
    class Handler(BaseHTTPRequestHandler):
        # a client that stops reading for this long is let go (its thread would otherwise wait on it for ever)
        timeout = 60
        server_version = "edgebuild-sse"

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            url = urlsplit(self.path)
            if url.path == "/health":
                self._answer(200, "application/json", json.dumps(events.health()))
                return
            if url.path not in ("/tracks", "/events"):
                self._answer(404, "text/plain", "not found: GET /tracks, /events (?stream=i) or /health\n")
                return
            stream = parse_qs(url.query).get("stream", [None])[-1]
            if stream is not None and not stream.isdigit():
                self._answer(400, "text/plain", "stream is a stream's index, 0 or more: got {!r}\n".format(stream))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("X-Queue-Size", str(events.queue))
            self.end_headers()
            client = _Client(url.path[1:], int(stream) if stream is not None else None, events.queue)
            try:
                events._serve(client, self._send, ": edgebuild {}\n\n".format(self.path))
            except OSError:
                pass  # the client went: nothing to tell it

        def _send(self, text: str) -> None:
            self.wfile.write(text.encode("utf-8"))
            self.wfile.flush()

        def _answer(self, status: int, content_type: str, body: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the standard library's name)
            pass  # a request per client, not worth a line on the pipeline's output

    return Handler


class MqttPublisher(Publisher):
    """Each frame to ``PREFIX/stream/<i>/tracks`` and each region event to ``PREFIX/stream/<i>/events``, their
    JSON lines as payloads, through paho-mqtt 2.x's network thread (``loop_start``).

    ``publish`` only queues a message for that thread, so the pipeline never waits on the broker. While the
    broker is not connected, messages are dropped (counted as ``dropped_offline``): old tracks are of no use
    once the broker is back, and a queue would grow without bound. So are those beyond ``backlog`` messages
    handed to paho and not yet written (``dropped_backlog``). paho reconnects by itself, waiting
    ``reconnect_min_s`` then twice as long each time up to ``reconnect_max_s``.
    """

    def __init__(self, host: str, port: int = 1883, topic_prefix: str = "edgebuild", qos: int = 0,
                 backlog: int = 1000, reconnect_min_s: int = 1, reconnect_max_s: int = 30,
                 client_id: str = "") -> None:
        mqtt = _paho()
        if qos not in (0, 1, 2):
            raise ValueError("MQTT's qos is 0, 1 or 2; got {}".format(qos))
        self.host, self.port, self.prefix, self.qos, self.backlog = host, port, topic_prefix.rstrip("/"), qos, backlog
        self.sent = 0
        self.dropped_offline = 0
        self.dropped_backlog = 0
        self.connects = 0
        self._pending = 0
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self._success = mqtt.MQTT_ERR_SUCCESS
        self._client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_publish = self._on_publish
        self._client.reconnect_delay_set(min_delay=reconnect_min_s, max_delay=reconnect_max_s)
        self._client.max_queued_messages_set(backlog)
        self._client.connect_async(host, port, keepalive=30)
        self._client.loop_start()

    def topic(self, stream: int, kind: str) -> str:
        return "{}/stream/{}/{}".format(self.prefix, stream, kind)

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        self._publish(self.topic(frame.stream, "tracks"), frame.json_line())

    def on_event(self, event: RegionEvent) -> None:
        self._publish(self.topic(event.stream, "events"), event.json_line())

    def _publish(self, topic: str, payload: str) -> None:
        if not self.connected.is_set():
            self.dropped_offline += 1
            return
        with self._lock:
            if self._pending >= self.backlog:
                self.dropped_backlog += 1
                return
            self._pending += 1
        info = self._client.publish(topic, payload.encode("utf-8"), qos=self.qos)
        if info.rc == self._success:
            self.sent += 1
            return
        with self._lock:
            self._pending -= 1
        self.dropped_offline += 1  # the connection went between the check and the publish

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        if not reason_code.is_failure:
            self.connects += 1
            with self._lock:
                self._pending = 0  # what was queued before is sent or gone with the old connection
            self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        self.connected.clear()

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason_code: Any, properties: Any) -> None:
        with self._lock:
            self._pending = max(0, self._pending - 1)

    def close(self) -> None:
        """Give paho a moment to write what it holds, then disconnect and stop its thread."""
        deadline = time.monotonic() + 2.0
        while self.connected.is_set() and self._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        self._client.disconnect()
        self._client.loop_stop()

    def summary(self) -> str:
        dropped = self.dropped_offline + self.dropped_backlog
        text = "mqtt {}:{} ({}/stream/<i>/...): {} messages published, {} dropped".format(
            self.host, self.port, self.prefix, self.sent, dropped)
        if dropped:
            text += " ({} while the broker was not connected, {} over the backlog of {})".format(
                self.dropped_offline, self.dropped_backlog, self.backlog)
        return text + ", {} connection{}".format(self.connects, "" if self.connects == 1 else "s")


def _paho() -> Any:
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise CapabilityMissing("publishing to MQTT needs paho-mqtt, which is not installed here",
                                hint="pip install paho-mqtt") from None
    if not hasattr(mqtt, "CallbackAPIVersion"):
        raise CapabilityMissing("publishing to MQTT needs paho-mqtt 2.x; this is an older one",
                                hint="pip install 'paho-mqtt>=2'")
    return mqtt


class AnnotatedVideo(Publisher):
    """One stream's frames with their tracks drawn (box, id, class name, score) and the regions outlined,
    written to an MP4 (OpenCV's mp4v) at ``fps``: for a person to look at, written only when asked for."""

    wants_image = True

    def __init__(self, path: str, fps: float, stream: int = 0, class_names: Sequence[str] = (),
                 regions: Sequence[Region] = ()) -> None:
        self.cv2 = _cv2()
        self.path, self.fps, self.stream = path, fps, stream
        self.class_names = list(class_names)
        self.regions = [r for r in regions if r.stream in (None, stream)]
        self.frames = 0
        self._writer: Any = None
        self._size: Optional[Tuple[int, int]] = None

    def on_frame(self, frame: TrackedFrame, image: Any = None) -> None:
        if frame.stream != self.stream or image is None:
            return
        height, width = image.shape[:2]
        if self._writer is None:
            self._size = (width, height)
            self._writer = self.cv2.VideoWriter(self.path, self.cv2.VideoWriter_fourcc(*"mp4v"), self.fps,
                                                self._size)
            if not self._writer.isOpened():
                raise CapabilityMissing("OpenCV cannot write an mp4v video to {}".format(self.path))
        elif (width, height) != self._size:
            image = self.cv2.resize(image, self._size)
        self._writer.write(self.draw(frame, image))
        self.frames += 1

    def draw(self, frame: TrackedFrame, image: Any) -> Any:
        """A copy of ``image`` with the regions and ``frame``'s tracks drawn on it."""
        import numpy as np

        cv2, out = self.cv2, image.copy()
        for region in self.regions:
            points = np.array([[round(x), round(y)] for x, y in region.points], dtype=np.int32)
            cv2.polylines(out, [points], True, (255, 255, 0), 2)
            cv2.putText(out, region.name, tuple(points[0]), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 0), 1)
        for track in frame.tracks:
            x1, y1, x2, y2 = (int(round(float(v))) for v in track.box)
            color = _color(int(track.id))
            cv2.rectangle(out, (x1, y1), (x2, y2), color, 2)
            name = self.class_names[track.cls] if 0 <= track.cls < len(self.class_names) else str(track.cls)
            label = "#{} {} {:.2f}".format(track.id, name, track.score)
            cv2.putText(out, label, (x1, max(y1 - 4, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)
        return out

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def summary(self) -> str:
        return "video {}: {} frames of stream {}".format(self.path, self.frames, self.stream)


#: a colour per track id (BGR), the same in every run: id modulo ten
_PALETTE = ((56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72),
            (23, 204, 146), (134, 219, 61), (211, 188, 0), (255, 115, 100))


def _color(track_id: int) -> Tuple[int, int, int]:
    return _PALETTE[track_id % len(_PALETTE)]


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:
        raise CapabilityMissing("an annotated video needs OpenCV, which is not installed here",
                                hint="pip install opencv-python-headless (or the L4T image's python3-opencv)") from None
    return cv2
