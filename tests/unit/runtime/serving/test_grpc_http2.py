"""The gRPC transport (``grpc_http2.py``) by itself, with tiny methods and no model: grpcio's own client (what
users run) for the calls, python-hyper's ``h2`` as a raw HTTP/2 client for what grpcio never sends (a small
window granted as it reads, a PING, a bad preface, a RST_STREAM), and the raw frames the server wrote."""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

grpc = pytest.importorskip("grpc")
h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_settings = pytest.importorskip("h2.settings")

from edgebuild.runtime.serving.grpc_http2 import GRPCTransport  # noqa: E402
from edgebuild.runtime.serving.http2_wire import CallEnded, Method  # noqa: E402

SERVICE = "/test.Transport/"
ECHO, MAKE, MAKE_ON_POOL, FAIL, CRASH, SLOW, QUICK, STREAM, STREAM_ON_POOL = (SERVICE + name for name in (
    "Echo", "Make", "MakeOnPool", "Fail", "Crash", "Slow", "Quick", "Stream", "StreamOnPool"))
#: the client's limits off: grpcio's client takes at most 4 MB answers by default, and may read a proxy from the env
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
           ("grpc.enable_http_proxy", 0)]
DATA, HEADERS, RST_STREAM = 0x0, 0x1, 0x3  # frame types
END_STREAM = 0x1
#: details that only come back as they were where grpc-message is percent-encoded (grpcio decodes "%20")
DETAILS = "why ü% (100%20)"


def _pattern(size: int) -> bytes:
    """``size`` bytes that are not all alike, so a byte out of place shows."""
    return (bytes(range(251)) * (size // 251 + 1))[:size]


class Handlers:
    """The test methods and what they saw: how many slow calls ran at once, which started and ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.slow_started = threading.Event()
        self.slow_ended = threading.Event()

    def echo(self, message: memoryview, reply: Callable[[Any], None]) -> None:
        reply(message)  # the request's own view: the transport must not need a copy

    def make(self, message: memoryview, reply: Callable[[Any], None]) -> None:
        size = int(bytes(message))
        reply([_pattern(size)[: size // 2], _pattern(size)[size // 2:]])  # an answer in parts, as ModelInfer's

    def fail(self, message: memoryview, reply: Callable[[Any], None]) -> None:
        raise CallEnded(int(bytes(message)), DETAILS)

    def crash(self, message: memoryview, reply: Callable[[Any], None]) -> None:
        raise ValueError("a bug in the handler")

    def slow(self, message: memoryview, reply: Callable[[Any], None]) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        self.slow_started.set()
        try:
            time.sleep(float(bytes(message) or b"0.2"))
        finally:
            with self.lock:
                self.running -= 1
            self.slow_ended.set()
        reply(b"slept " + bytes(message))

    def methods(self) -> dict[str, Method]:
        never = lambda: False  # noqa: E731 - never on the connection's thread: always on the pool
        return {ECHO: Method(self.echo), MAKE: Method(self.make), MAKE_ON_POOL: Method(self.make, direct=never),
                FAIL: Method(self.fail), CRASH: Method(self.crash), QUICK: Method(self.slow),
                SLOW: Method(self.slow, direct=never), STREAM: Method(self.echo, streaming=True),
                STREAM_ON_POOL: Method(self.echo, streaming=True, direct=never)}


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def serve(handlers: Handlers) -> Iterator[Callable[..., GRPCTransport]]:
    """Start a transport on a free loopback port with the test methods: ``serve(max_message=1000)``."""
    started: list[GRPCTransport] = []

    def start(workers: int = 4, port: int = 0, **options: Any) -> GRPCTransport:
        transport = GRPCTransport(handlers.methods(), "127.0.0.1", port, workers=workers, **options)
        transport.start()
        started.append(transport)
        return transport

    yield start
    for transport in started:
        transport.stop(0)


@pytest.fixture
def channel(serve: Callable[..., GRPCTransport]) -> Iterator[Any]:
    """A grpcio channel to a transport with the defaults (its transport as ``channel.transport``)."""
    transport = serve()
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}", options=OPTIONS) as opened:
        opened.transport = transport
        yield opened


def _unary(channel: Any, path: str) -> Any:
    return channel.unary_unary(path, request_serializer=None, response_deserializer=None)


def _message(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


def _frames(raw: bytes) -> list[tuple[int, int, int, bytes]]:
    """The frames in what a server wrote: (type, flags, stream, payload)."""
    out, at = [], 0
    while at + 9 <= len(raw):
        length, kind, flags = int.from_bytes(raw[at:at + 3], "big"), raw[at + 3], raw[at + 4]
        stream = int.from_bytes(raw[at + 5:at + 9], "big") & 0x7FFFFFFF
        out.append((kind, flags, stream, bytes(raw[at + 9:at + 9 + length])))
        at += 9 + length
    return out


class RawClient:
    """An HTTP/2 client of python-hyper's ``h2`` over a socket; every byte the server wrote kept in ``raw``."""

    def __init__(self, port: int, settings: dict[int, int] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=True, header_encoding=None))
        if settings:
            self.conn.local_settings = h2_settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.flush()
        self.raw = bytearray()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def events(self) -> list[Any]:
        """The events of what the server writes next (waits for it)."""
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.raw += data
        events = self.conn.receive_data(data)
        self.flush()
        return events

    def open(self, path: str, body: bytes = b"", end: bool = True) -> int:
        """A call to ``path`` with ``body`` (gRPC messages); ``end``: the client's side ends with it."""
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                        (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                                        ("te", "trailers")], end_stream=end and not body)
        self.flush()
        while body:  # within the server's windows and frame size, waiting for its WINDOW_UPDATEs
            room = min(self.conn.local_flow_control_window(stream), self.conn.max_outbound_frame_size, len(body))
            if room <= 0:
                self.events()
                continue
            self.conn.send_data(stream, body[:room], end_stream=end and room == len(body))
            body = body[room:]
            self.flush()
        return stream

    def answer(self, stream: int, grant: bool = True) -> tuple[dict[bytes, bytes], bytes, dict[bytes, bytes]]:
        """Read until ``stream`` ends: its headers, the bytes of its DATA, its trailers (the window given
        back as the bytes are read, where ``grant``)."""
        headers, data, trailer = {}, bytearray(), {}  # type: dict[bytes, bytes], bytearray, dict[bytes, bytes]
        while True:
            for event in self.events():
                if getattr(event, "stream_id", None) != stream:
                    continue
                if isinstance(event, h2_events.ResponseReceived):
                    headers = dict(event.headers)
                elif isinstance(event, h2_events.DataReceived):
                    data += event.data
                    if grant and event.flow_controlled_length:
                        self.conn.acknowledge_received_data(event.flow_controlled_length, stream)
                        self.flush()
                elif isinstance(event, h2_events.TrailersReceived):
                    trailer = dict(event.headers)
                elif isinstance(event, h2_events.StreamReset):
                    raise AssertionError(f"stream {stream} reset: {event.error_code}")
                if isinstance(event, h2_events.StreamEnded):
                    return headers, bytes(data), trailer

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_client(serve: Callable[..., GRPCTransport]) -> Iterator[Callable[..., RawClient]]:
    clients: list[RawClient] = []

    def connect(transport: GRPCTransport, settings: dict[int, int] | None = None) -> RawClient:
        clients.append(RawClient(transport.port, settings))
        return clients[-1]

    yield connect
    for client in clients:
        client.close()


# -- 1. unary calls: exact bytes, flow control both ways -------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 100 << 10, 5 << 20], ids=["0B", "1B", "100KB", "5MB"])
def test_a_unary_echo_round_trips_the_exact_bytes(channel: Any, size: int) -> None:
    request = _pattern(size)
    assert _unary(channel, ECHO)(request, timeout=10) == request


def test_echoes_past_the_servers_receive_window_go_on_by_its_window_updates(channel: Any) -> None:
    # 4 x 5 MB on one connection: more than its 16 MB window, so the server must give the window back
    requests = [bytes([n]) * (5 << 20) for n in range(4)]
    echo = _unary(channel, ECHO)
    for request in requests:
        assert echo(request, timeout=10) == request
    assert len(channel.transport.connections) == 1


def test_a_request_larger_than_a_streams_window_arrives_whole(serve: Callable[..., GRPCTransport],
                                                             raw_client: Callable[..., RawClient]) -> None:
    # one 20 MB message: more than the 16 MB the server gives a stream, so it must give that stream's window back
    transport = serve(max_message=32 << 20)
    client = raw_client(transport, {h2_settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
    request = _pattern(20 << 20)
    stream = client.open(ECHO, _message(request))
    headers, data, trailer = client.answer(stream)
    assert headers[b":status"] == b"200" and trailer[b"grpc-status"] == b"0"
    assert data == _message(request)
    updates = [f for f in _frames(bytes(client.raw)) if f[0] == 0x8 and f[2] == stream]
    assert updates, "no WINDOW_UPDATE on the stream"


# -- 2. an answer larger than the client's window --------------------------------------------------------------


@pytest.mark.parametrize("window", [1000, 1 << 20])
@pytest.mark.parametrize("path", [MAKE, MAKE_ON_POOL], ids=["direct", "pool"])
def test_an_answer_larger_than_the_clients_window_comes_as_the_window_is_granted(
        serve: Callable[..., GRPCTransport], raw_client: Callable[..., RawClient], window: int, path: str) -> None:
    # direct: the connection's thread reads the WINDOW_UPDATEs itself; pool: a worker waits for them
    transport = serve()
    client = raw_client(transport, {h2_settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    size = 200 << 10
    stream = client.open(path, _message(str(size).encode()))
    # the windows as the client keeps them: each DATA frame must fit both, and the frame size (16384, h2's default)
    stream_window, connection_window = window, 65535
    data, trailer, done = bytearray(), {}, False
    while not done:
        events = client.events()
        ending = any(isinstance(e, h2_events.StreamEnded) and e.stream_id == stream for e in events)
        for event in events:
            if isinstance(event, h2_events.DataReceived) and event.stream_id == stream:
                length = event.flow_controlled_length
                assert 0 < length <= min(16384, stream_window, connection_window)
                stream_window -= length
                connection_window -= length
                data += event.data
                # give back only what was read, one WINDOW_UPDATE per frame on the stream and the connection
                if not ending:  # no window for a stream that is over
                    client.conn.increment_flow_control_window(length, stream)
                client.conn.increment_flow_control_window(length)
                client.flush()
                stream_window += length
                connection_window += length
            elif isinstance(event, h2_events.TrailersReceived) and event.stream_id == stream:
                trailer = dict(event.headers)
            elif isinstance(event, h2_events.StreamEnded) and event.stream_id == stream:
                done = True
            assert not isinstance(event, h2_events.StreamReset)
    assert data == _message(_pattern(size))
    assert trailer[b"grpc-status"] == b"0"
    sizes = [len(f[3]) for f in _frames(bytes(client.raw)) if f[0] == DATA and f[2] == stream]
    assert max(sizes) <= min(window, 16384) and sum(sizes) == 5 + size


# -- 3. status codes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                                  grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INTERNAL])
def test_a_handlers_call_ended_gives_its_code_and_details(channel: Any, code: Any) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _unary(channel, FAIL)(str(code.value[0]).encode(), timeout=5)
    assert raised.value.code() == code
    assert raised.value.details() == DETAILS  # grpc-message's percent-encoding read back


def test_grpc_message_is_percent_encoded_outside_printable_ascii_and_percent(
        serve: Callable[..., GRPCTransport], raw_client: Callable[..., RawClient]) -> None:
    client = raw_client(serve())
    headers, data, trailer = client.answer(client.open(FAIL, _message(b"9")))
    assert data == b"" and trailer == {}  # Trailers-Only
    assert headers[b"grpc-status"] == b"9" and headers[b"grpc-message"] == b"why %C3%BC%25 (100%2520)"


def test_an_unknown_method_is_unimplemented(channel: Any) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _unary(channel, SERVICE + "Nothing")(b"x", timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert SERVICE + "Nothing" in raised.value.details()
    assert _unary(channel, ECHO)(b"still", timeout=5) == b"still"


def test_a_handler_that_raises_gives_unknown_and_the_connection_serves_on(channel: Any) -> None:
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as raised:
            _unary(channel, CRASH)(b"x", timeout=5)
        assert raised.value.code() == grpc.StatusCode.UNKNOWN
        assert raised.value.details() == "ValueError: a bug in the handler"
        assert _unary(channel, ECHO)(b"after", timeout=5) == b"after"
    assert len(channel.transport.connections) == 1  # the same connection all along


# -- 4. refused messages ---------------------------------------------------------------------------------------


def test_a_message_over_max_message_is_resource_exhausted(serve: Callable[..., GRPCTransport]) -> None:
    transport = serve(max_message=1000)
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}", options=OPTIONS) as opened:
        echo = _unary(opened, ECHO)
        assert echo(_pattern(1000), timeout=5) == _pattern(1000)
        for size in (1001, 1 << 20):
            with pytest.raises(grpc.RpcError) as raised:
                echo(_pattern(size), timeout=5)
            assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"{size} vs. 1000" in raised.value.details()
        assert echo(b"fits", timeout=5) == b"fits"


def test_a_compressed_message_is_unimplemented_asking_for_identity(channel: Any) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _unary(channel, ECHO)(b"a" * 1000, timeout=5, compression=grpc.Compression.Gzip)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "identity" in raised.value.details()
    assert _unary(channel, ECHO)(b"plain", timeout=5) == b"plain"


# -- 5. many calls on one connection ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [QUICK, SLOW], ids=["direct", "pool"])
def test_concurrent_calls_on_one_channel_run_together_on_the_pool(channel: Any, handlers: Handlers,
                                                                  path: str) -> None:
    call = _unary(channel, path)
    assert call(b"0", timeout=5) == b"slept 0"  # connected before the clock starts
    began = time.monotonic()
    calls = [call.future(b"0.2", timeout=10) for _ in range(16)]
    assert [c.result() for c in calls] == [b"slept 0.2"] * 16
    took = time.monotonic() - began
    assert 2 <= handlers.peak <= 4  # overlapped, never more than the workers
    assert took < 16 * 0.2 * 0.6, f"16 calls of 0.2 s on 4 workers took {took:.2f} s"
    assert len(channel.transport.connections) == 1


# -- 6. streams ------------------------------------------------------------------------------------------------


def test_a_stream_answers_each_message_in_order_and_ends_ok_on_the_clients_half_close(channel: Any) -> None:
    requests = queue.Queue()  # type: queue.Queue[bytes | None]
    answers = channel.stream_stream(STREAM, request_serializer=None, response_deserializer=None)(
        iter(requests.get, None), timeout=10)
    for n in range(5):  # each answer before the next request is sent: answered as it comes, not at the end
        requests.put(b"m%d" % n * (n * 1000 + 1))
        assert next(answers) == b"m%d" % n * (n * 1000 + 1)
    burst = [_pattern(n * 997) for n in range(50)]
    for request in burst:
        requests.put(request)
    assert [next(answers) for _ in burst] == burst
    requests.put(None)  # the client's half-close
    assert list(answers) == []
    assert answers.code() == grpc.StatusCode.OK


def test_a_stream_with_no_message_ends_ok(channel: Any) -> None:
    answers = channel.stream_stream(STREAM, request_serializer=None, response_deserializer=None)(iter([]), timeout=5)
    assert list(answers) == [] and answers.code() == grpc.StatusCode.OK


# -- 7. what only a raw client does ----------------------------------------------------------------------------


def test_a_ping_is_answered_with_its_own_bytes(serve: Callable[..., GRPCTransport],
                                              raw_client: Callable[..., RawClient]) -> None:
    client = raw_client(serve())
    for opaque in (b"12345678", b"\x00\xff" * 4):
        client.conn.ping(opaque)
        client.flush()
        acks: list[bytes] = []
        while not acks:
            acks = [e.ping_data for e in client.events() if isinstance(e, h2_events.PingAckReceived)]
        assert acks == [opaque]


@pytest.mark.parametrize("preface", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r?"])
def test_a_bad_preface_closes_the_connection_with_nothing_written(serve: Callable[..., GRPCTransport],
                                                                 preface: bytes) -> None:
    transport = serve()
    with socket.create_connection(("127.0.0.1", transport.port), timeout=5) as sock:
        sock.sendall(preface)
        written = b""
        try:
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                written += data
        except ConnectionResetError:  # closed with our unread bytes in its buffer
            pass
    assert written == b""
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}", options=OPTIONS) as opened:
        assert _unary(opened, ECHO)(b"next", timeout=5) == b"next"  # the server itself goes on


def test_padded_data_and_headers_with_priority_are_read(serve: Callable[..., GRPCTransport],
                                                       raw_client: Callable[..., RawClient]) -> None:
    client = raw_client(serve())
    stream = client.conn.get_next_available_stream_id()
    client.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", ECHO),
                                      (":authority", "127.0.0.1"), ("content-type", "application/grpc")],
                             priority_weight=200, priority_depends_on=0)
    body = _message(b"padded")
    client.conn.send_data(stream, body[:3], pad_length=7)
    client.conn.send_data(stream, body[3:], pad_length=250, end_stream=True)
    client.flush()
    headers, data, trailer = client.answer(stream)
    assert data == body and trailer[b"grpc-status"] == b"0"


def test_a_client_that_sends_no_preface_is_closed_after_the_preface_timeout(
        serve: Callable[..., GRPCTransport]) -> None:
    transport = serve(preface_timeout_s=0.2)
    with socket.create_connection(("127.0.0.1", transport.port), timeout=5) as sock:
        began = time.monotonic()
        assert sock.recv(4096) == b""
        assert 0.1 < time.monotonic() - began < 3


def test_a_connection_over_max_connections_is_closed(serve: Callable[..., GRPCTransport],
                                                     raw_client: Callable[..., RawClient]) -> None:
    transport = serve(max_connections=1)
    first = raw_client(transport)
    first.conn.ping(b"pingpong")
    first.flush()
    while not any(isinstance(e, h2_events.PingAckReceived) for e in first.events()):
        pass
    with socket.create_connection(("127.0.0.1", transport.port), timeout=5) as sock:
        assert sock.recv(4096) == b""
    answered = first.open(ECHO, _message(b"first"))  # the first one is served on
    assert first.answer(answered)[1] == _message(b"first")


def test_a_call_the_client_resets_is_answered_no_more_and_the_connection_serves_on(
        serve: Callable[..., GRPCTransport], raw_client: Callable[..., RawClient], handlers: Handlers) -> None:
    transport = serve()
    client = raw_client(transport)
    slow = client.open(SLOW, _message(b"0.3"))
    assert handlers.slow_started.wait(5)
    client.conn.reset_stream(slow)
    client.flush()
    quick = client.open(ECHO, _message(b"meanwhile"))
    headers, data, trailer = client.answer(quick)
    assert data == _message(b"meanwhile") and trailer[b"grpc-status"] == b"0"
    assert handlers.slow_ended.wait(5)
    connection = next(iter(transport.connections))
    deadline = time.monotonic() + 5
    while connection.running and time.monotonic() < deadline:  # the slow call's worker is through
        time.sleep(0.01)
    assert not connection.running
    after = client.open(ECHO, _message(b"after"))  # an answer written after anything of the slow call's
    assert client.answer(after)[1] == _message(b"after")
    written = [(kind, stream) for kind, _, stream, _ in _frames(bytes(client.raw)) if stream == slow]
    assert written == [], f"the server wrote {written} on the stream the client reset"


def test_a_stream_the_server_ends_while_its_answer_waits_for_the_window_frees_its_worker(
        serve: Callable[..., GRPCTransport], raw_client: Callable[..., RawClient]) -> None:
    # the one worker writes an answer of 3005 bytes into a window of 1000 and waits; the next message is
    # compressed, so the server ends the call (UNIMPLEMENTED): the worker must stop writing and be free again
    transport = serve(workers=1)
    client = raw_client(transport, {h2_settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    stream = client.open(STREAM_ON_POOL, _message(_pattern(3000)), end=False)
    received = 0
    while received < 1000:
        received += sum(e.flow_controlled_length for e in client.events() if isinstance(e, h2_events.DataReceived))
    client.conn.send_data(stream, b"\x01\x00\x00\x00\x01x")
    client.flush()
    trailer: dict[bytes, bytes] = {}
    while not trailer:
        trailer = next((dict(e.headers) for e in client.events() if isinstance(e, h2_events.TrailersReceived)), {})
    assert trailer[b"grpc-status"] == b"12"
    client.conn.increment_flow_control_window(1 << 20)  # the connection's window open again
    client.flush()
    client.sock.settimeout(3)  # the next call needs the worker: it never came while the worker hung
    after = client.open(SLOW, _message(b"0"))
    assert client.answer(after)[1] == _message(b"slept 0")
    frames = [(kind, flags) for kind, flags, s, _ in _frames(bytes(client.raw)) if s == stream]
    ended = frames.index((HEADERS, 0x4 | END_STREAM))
    assert [kind for kind, _ in frames[ended + 1:]] in ([], [RST_STREAM]), frames  # no DATA after the trailers


def test_an_unknown_method_is_answered_with_trailers_only(serve: Callable[..., GRPCTransport],
                                                         raw_client: Callable[..., RawClient]) -> None:
    client = raw_client(serve())
    stream = client.open(SERVICE + "Nothing", _message(b"x"))
    headers, data, trailer = client.answer(stream)
    assert data == b"" and trailer == {}
    assert headers[b":status"] == b"200" and headers[b"grpc-status"] == b"12"
    on_stream = [(kind, flags) for kind, flags, s, _ in _frames(bytes(client.raw)) if s == stream]
    assert on_stream[0] == (HEADERS, 0x4 | END_STREAM)


# -- 8. stop ---------------------------------------------------------------------------------------------------


def test_stop_lets_a_call_in_flight_finish_within_the_grace_then_refuses_connections(
        serve: Callable[..., GRPCTransport], handlers: Handlers) -> None:
    transport = serve()
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}", options=OPTIONS) as opened:
        call = _unary(opened, SLOW).future(b"0.3", timeout=5)
        assert handlers.slow_started.wait(5)
        began = time.monotonic()
        transport.stop(grace_s=1.5)
        took = time.monotonic() - began
        assert call.result() == b"slept 0.3"
        assert took < 1.4, f"stop waited {took:.2f} s for a call of 0.3 s"
        with pytest.raises(grpc.RpcError) as raised:
            _unary(opened, ECHO)(b"late", timeout=2)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", transport.port), timeout=2).close()


def test_stop_frees_the_port_at_once(serve: Callable[..., GRPCTransport]) -> None:
    for _ in range(3):
        transport = serve()
        transport.stop(0)
        with pytest.raises(ConnectionRefusedError):  # refused, not taken and then reset
            socket.create_connection(("127.0.0.1", transport.port), timeout=2).close()
        serve(port=transport.port).stop(0)  # and the port can be served again (a restart)


def test_stop_cuts_a_call_still_running_when_the_grace_ends(serve: Callable[..., GRPCTransport],
                                                           handlers: Handlers) -> None:
    transport = serve()
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}", options=OPTIONS) as opened:
        call = _unary(opened, SLOW).future(b"1.0", timeout=5)
        assert handlers.slow_started.wait(5)
        began = time.monotonic()
        transport.stop(grace_s=0.2)
        assert time.monotonic() - began < 0.9
        with pytest.raises(grpc.RpcError) as raised:
            call.result()
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
