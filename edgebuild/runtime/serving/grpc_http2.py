"""gRPC's transport, HTTP/2 (RFC 9113), for the v2 service of ``grpc_server.py``: ``serve --grpc-port``.

Why not grpcio's server: profiled against Triton (docs/server.md, "What a gRPC inference costs"), its
synchronous server moves each call across three threads (its polling thread, a pool thread that waits
for the polling thread to deliver the message, the polling thread again for the status), about 0.6 ms
a call over HTTP on a 2-core host; its asyncio server measured the same. Here a connection's own thread
reads its frames and, when the connection has nothing else running, runs the call and writes the answer
itself: no hand-off at all for a client that makes one call at a time on a connection (``perf_analyzer``,
``tritonclient.grpc``, a camera loop). A call that comes while another of the connection's calls runs
(gRPC channels multiplex streams), or to a model that batches (its batcher gathers rows from concurrent
calls), runs on the worker pool, and its answer is written by the worker.

What is served: unary calls and bidirectional streams (``ModelStreamInfer``: a request's answer per
request, in order), gRPC's length-prefixed messages over DATA frames, trailers with ``grpc-status`` and
``grpc-message``; flow control both ways (a window of ``WINDOW`` bytes for requests, the client's windows
for answers), PING, SETTINGS, WINDOW_UPDATE, RST_STREAM (a call the client cancels is answered no more) and
GOAWAY (on stop: calls in flight finish within the grace). Refused with a status: an unknown method
(UNIMPLEMENTED), a compressed message (UNIMPLEMENTED: send identity, tritonclient's default), a message over
the largest request the profiles allow (RESOURCE_EXHAUSTED). No TLS (as Triton's default; keep the port on
loopback or a trusted network); ``grpc-timeout`` is not enforced (a call runs to its end).

The header blocks it writes use HPACK's literals without indexing (no table to keep in step with the
client); the client's header blocks are decoded by the ``hpack`` library (python-hyper's, as ``h2`` uses).

Python 3.8, the standard library, numpy and ``hpack``.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from concurrent import futures
from typing import Any, Dict, List, Optional

from edgebuild.errors import ConfigError
from edgebuild.runtime.serving import http2_wire as wire
from edgebuild.runtime.serving.http2_wire import Call, CallEnded, Method, frame, send_all, trailers

__all__ = []

class Connection:
    """One client connection: its reader thread, HPACK decoder, streams and flow-control windows."""

    def __init__(self, server: "GRPCTransport", sock: socket.socket) -> None:
        from hpack import Decoder

        self.server, self.sock = server, sock
        self.decoder = Decoder()
        self.decoder.max_header_list_size = wire.MAX_HEADER_LIST
        self.streams = {}  # type: Dict[int, Call]
        self.last_stream = 0
        self.lock = threading.Condition()  # the socket's writes, the send windows, the streams' state
        self.window = 65535  # what we may send on the connection before its next WINDOW_UPDATE
        self.peer_window, self.peer_frame = 65535, 16384  # the client's initial stream window, largest frame
        self.unacked = 0  # bytes received on the connection not yet given back by a WINDOW_UPDATE
        self.running = 0  # calls of this connection running on the pool or this thread
        self.buffer = bytearray()
        self.closed = self.going_away = False
        self.reader = threading.current_thread()

    # -- reading ----------------------------------------------------------------------------------

    def serve(self) -> None:
        """Read and answer frames until the client goes, the connection fails or the server stops."""
        self.reader = threading.current_thread()
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._read_exactly(len(wire.PREFACE), self.server.preface_timeout_s) != wire.PREFACE:
                return
            settings = ((wire.MAX_CONCURRENT_STREAMS, wire.MAX_STREAMS), (wire.INITIAL_WINDOW_SIZE, wire.WINDOW),
                        (wire.MAX_FRAME_SIZE, wire.MAX_FRAME), (wire.MAX_HEADER_LIST_SIZE, wire.MAX_HEADER_LIST))
            self._send(frame(wire.SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in settings))
                       + frame(wire.WINDOW_UPDATE, 0, 0, struct.pack(">I", wire.WINDOW - 65535)))
            while not self.closed:
                if not self._next_frame(self.server.idle_timeout_s):
                    break
        except ConnectionError:
            pass
        except OSError:
            pass
        finally:
            self.close()

    def _fill(self, size: int, timeout_s: Optional[float]) -> bool:
        """At least ``size`` bytes in the buffer (False: the client closed, or nothing came in ``timeout_s``)."""
        while len(self.buffer) < size:
            if timeout_s is not None and not select.select([self.sock], [], [], timeout_s)[0]:
                return False
            data = self.sock.recv(max(65536, size - len(self.buffer)))
            if not data:
                return False
            self.buffer += data
        return True

    def _read_exactly(self, size: int, timeout_s: Optional[float]) -> bytes:
        if not self._fill(size, timeout_s):
            return b""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _payload(self, length: int) -> memoryview:
        """The next ``length`` bytes, as a buffer of their own (a large one read straight into it)."""
        have = len(self.buffer)
        if length > 65536 and have < length:
            out = bytearray(length)
            out[:have] = self.buffer
            self.buffer = bytearray()
            view = memoryview(out)
            while have < length:
                got = self.sock.recv_into(view[have:])
                if not got:
                    raise ConnectionError("the client closed within a frame")
                have += got
            return view
        if not self._fill(length, None):
            raise ConnectionError("the client closed within a frame")
        data = bytes(self.buffer[:length])
        del self.buffer[:length]
        return memoryview(data)

    def _next_frame(self, idle_s: Optional[float]) -> bool:
        """Read and handle one frame; False when the connection is done."""
        if not self._fill(9, idle_s if not self.streams else None):
            return False
        head, flags, stream_id = wire.FRAME.unpack_from(self.buffer)
        del self.buffer[:9]
        length, kind, stream_id = head >> 8, head & 0xFF, stream_id & 0x7FFFFFFF
        if length > wire.MAX_FRAME:
            self.go_away(wire.FRAME_SIZE_ERROR, "a frame of {} bytes".format(length))
            return False
        payload = self._payload(length)
        if kind == wire.DATA:
            self._on_data(stream_id, flags, payload)
        elif kind == wire.HEADERS:
            self._on_headers(stream_id, flags, payload)
        elif kind == wire.SETTINGS:
            self._on_settings(flags, payload)
        elif kind == wire.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == wire.PING:
            if not flags & wire.ACK and length == 8:
                self._send(frame(wire.PING, wire.ACK, 0, bytes(payload)))
        elif kind == wire.RST_STREAM:
            with self.lock:
                stream = self.streams.pop(stream_id, None)
                if stream is not None:
                    stream.reset = True
                    self.lock.notify_all()
        elif kind == wire.GOAWAY:
            self.going_away = True
            return bool(self.streams)
        elif kind in (wire.PUSH_PROMISE, wire.CONTINUATION):
            unexpected = "PUSH_PROMISE" if kind == wire.PUSH_PROMISE else "CONTINUATION"
            self.go_away(wire.PROTOCOL_ERROR, "an unexpected {} frame".format(unexpected))
            return False
        return not self.closed  # PRIORITY and unknown frame types are ignored, as the protocol asks

    def _on_settings(self, flags: int, payload: memoryview) -> None:
        if flags & wire.ACK:
            return
        with self.lock:
            for at in range(0, len(payload) - len(payload) % 6, 6):
                key, value = struct.unpack_from(">HI", payload, at)
                if key == wire.INITIAL_WINDOW_SIZE:
                    for stream in self.streams.values():
                        stream.window += value - self.peer_window
                    self.peer_window = value
                elif key == wire.MAX_FRAME_SIZE:
                    self.peer_frame = max(16384, min(value, wire.MAX_FRAME))
            self.lock.notify_all()
        self._send(frame(wire.SETTINGS, wire.ACK, 0))

    def _on_window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            return
        grow = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
        with self.lock:
            if stream_id == 0:
                self.window += grow
            elif stream_id in self.streams:
                self.streams[stream_id].window += grow
            self.lock.notify_all()

    def _header_block(self, stream_id: int, flags: int, payload: memoryview) -> bytes:
        """The whole header block of a HEADERS frame (its CONTINUATION frames read too), padding and
        priority taken off."""
        at, end = 0, len(payload)
        if flags & wire.PADDED:
            end -= payload[0]
            at = 1
        if flags & wire.PRIORITY_FLAG:
            at += 5
        block = bytes(payload[at:end])
        while not flags & wire.END_HEADERS:
            if not self._fill(9, None):
                raise ConnectionError("the client closed within a header block")
            head, flags, continued = wire.FRAME.unpack_from(self.buffer)
            del self.buffer[:9]
            if head & 0xFF != wire.CONTINUATION or continued & 0x7FFFFFFF != stream_id:
                raise ValueError("a header block not followed by its CONTINUATION")
            block += bytes(self._payload(head >> 8))
            if len(block) > wire.MAX_HEADER_LIST:
                raise ValueError("a header block over {} bytes".format(wire.MAX_HEADER_LIST))
        return block

    def _on_headers(self, stream_id: int, flags: int, payload: memoryview) -> None:
        from hpack import HPACKError

        try:
            block = self._header_block(stream_id, flags, payload)
            headers = dict(self.decoder.decode(block, raw=True))
        except (HPACKError, ValueError) as exc:
            self.go_away(wire.COMPRESSION_ERROR if isinstance(exc, HPACKError) else wire.PROTOCOL_ERROR, str(exc))
            return
        stream = self.streams.get(stream_id)
        if stream is not None:  # the client's trailers: its side of the call ends
            if flags & wire.END_STREAM:
                self._end_of_requests(stream)
            return
        if stream_id % 2 == 0:
            self.go_away(wire.PROTOCOL_ERROR, "stream {} cannot open a call".format(stream_id))
            return
        if stream_id <= self.last_stream:  # a call ended already (its trailers after ours): ignored (RFC 9113 5.1)
            return
        self.last_stream = stream_id
        if self.going_away or len(self.streams) >= wire.MAX_STREAMS:
            self._send(frame(wire.RST_STREAM, 0, stream_id, struct.pack(">I", wire.REFUSED_STREAM)))
            return
        path = headers.get(b":path", b"").decode("latin-1")
        method = self.server.methods.get(path)
        with self.lock:
            stream = self.streams[stream_id] = Call(stream_id, method, self.peer_window)
        if headers.get(b":method") != b"POST" or not headers.get(b"content-type", b"").startswith(b"application/grpc"):
            self._finish(stream, wire.UNKNOWN, "a gRPC call is a POST of content-type application/grpc")
        elif method is None:
            self._finish(stream, wire.UNIMPLEMENTED, "Method not found: {}".format(path))
        if flags & wire.END_STREAM:
            self._end_of_requests(stream)

    def _on_data(self, stream_id: int, flags: int, payload: memoryview) -> None:
        length = len(payload)
        if flags & wire.PADDED and length:
            payload = payload[1:length - payload[0]]
        self._received(stream_id, length)
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self.last_stream or stream_id == 0:
                self.go_away(wire.PROTOCOL_ERROR, "DATA on stream {} never opened".format(stream_id))
            return  # a call cancelled or answered already: its bytes are dropped
        if not stream.answered and payload:
            stream.chunks.append(payload)
            stream.pending += len(payload)
            self._messages(stream)
        if flags & wire.END_STREAM:
            self._end_of_requests(stream)

    def _received(self, stream_id: int, length: int) -> None:
        """Give ``length`` bytes of the windows back once half of one is used: the client never stalls."""
        self.unacked += length
        updates = b""
        if self.unacked >= wire.WINDOW // 2:
            updates, self.unacked = frame(wire.WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacked)), 0
        stream = self.streams.get(stream_id)
        if stream is not None and not stream.ended:
            stream.unacked += length
            if stream.unacked >= wire.WINDOW // 2:
                updates += frame(wire.WINDOW_UPDATE, 0, stream_id, struct.pack(">I", stream.unacked))
                stream.unacked = 0
        if updates:
            self._send(updates)

    def _messages(self, stream: Call) -> None:
        """Cut the stream's bytes into gRPC messages; run each (a unary call's once its side has ended)."""
        while True:
            if stream.skip:
                drop = min(stream.skip, stream.pending)
                stream.drop(drop)
                stream.skip -= drop
                if stream.skip:
                    return
            if stream.pending < 5:
                return
            head = bytes(stream.peek(5))
            compressed, size = wire.PREFIX.unpack(head)
            if compressed:
                self._finish(stream, wire.UNIMPLEMENTED, "a compressed message: this server takes identity "
                                                    "(uncompressed) messages only")
                return
            if size > self.server.max_message:
                self._finish(stream, wire.RESOURCE_EXHAUSTED, "Received message larger than max ({} vs. {})".format(
                    size, self.server.max_message))
                return
            if stream.pending < 5 + size:
                return
            stream.drop(5)
            message = stream.peek(size)
            stream.drop(size)
            stream.queue.append(message)
            if stream.method is not None and stream.method.streaming:
                self._schedule(stream)

    def _end_of_requests(self, stream: Call) -> None:
        stream.ended = True
        if stream.answered:
            return
        if stream.pending:
            self._finish(stream, wire.INTERNAL, "the call's last message is truncated")
        elif stream.method is not None and not stream.method.streaming and len(stream.queue) != 1:
            self._finish(stream, wire.UNIMPLEMENTED if stream.queue else wire.INTERNAL,
                         "a unary call takes one request message; got {}".format(len(stream.queue)))
        else:
            self._schedule(stream)

    # -- running calls ----------------------------------------------------------------------------

    def _schedule(self, stream: Call) -> None:
        """Run the stream's waiting messages: here when nothing else of the connection runs, the method
        may and a slot is free (no hand-off); else on the pool."""
        with self.lock:
            if stream.running or stream.answered:
                return
            stream.running = True
            self.running += 1
            here = self.running == 1 and len(self.buffer) < 9
        assert stream.method is not None
        if here and stream.method.direct() and self.server.slots.acquire(blocking=False):
            self._run(stream, held=True)
        else:
            self.server.pool.submit(self._run, stream, False)

    def _run(self, stream: Call, held: bool) -> None:
        if not held:
            self.server.slots.acquire()
        try:
            method = stream.method
            assert method is not None
            while True:
                with self.lock:
                    if stream.reset or stream.answered or not stream.queue:
                        stream.running = False
                        self.running -= 1
                        done = stream.ended and not stream.answered and not stream.reset
                        break
                    message = stream.queue.pop(0)
                try:
                    method.run(message, lambda payload: self._reply(stream, payload))
                except CallEnded as ended:
                    self._finish(stream, ended.code, ended.details)
                except Exception as exc:  # a bug in a handler ends its call, never the connection
                    self._finish(stream, wire.UNKNOWN, "{}: {}".format(type(exc).__name__, exc))
                if not method.streaming:
                    with self.lock:
                        stream.running = False
                        self.running -= 1
                    done = not stream.answered
                    break
            if done:
                self._finish(stream, wire.OK)
        except OSError:
            self.close()
        finally:
            self.server.slots.release()

    # -- writing ----------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        with self.lock:
            if not self.closed:
                self.sock.sendall(data)

    def _reply(self, stream: Call, payload: Any) -> None:
        """One answer message: on a stream, sent now (its response headers first); a unary call's is held
        and sent with the call's headers and trailers in one write by ``_finish``."""
        parts = payload if isinstance(payload, list) else [payload]
        size = sum(len(p) for p in parts)
        message = [wire.PREFIX.pack(0, size)] + parts
        assert stream.method is not None
        if not stream.method.streaming:
            stream.held = (message, 5 + size)
            return
        with self.lock:
            if stream.reset or stream.answered or self.closed:
                return
            head = b"" if stream.started else frame(wire.HEADERS, wire.END_HEADERS, stream.id, wire.RESPONSE_HEADERS)
            stream.started = True
        self._send_data(stream, message, 5 + size, head)

    def _send_data(self, stream: Call, parts: List[Any], size: int, head: bytes = b"", tail: bytes = b"") -> None:
        """``size`` bytes of ``parts`` as DATA frames within the windows, ``head`` before the first and ``tail``
        after the last frame in the same writes: one ``sendmsg`` when the windows hold it all."""
        queue = [memoryview(p).cast("B") if not isinstance(p, bytes) else p for p in parts]
        while True:
            with self.lock:
                while size and min(self.window, stream.window) <= 0 and not (stream.reset or self.closed):
                    if threading.current_thread() is self.reader:
                        break  # the reader waits by reading: the WINDOW_UPDATE comes that way
                    self.lock.wait(1.0)
                if stream.reset or self.closed:
                    return
                room = min(self.window, stream.window, size)
                if room > 0 or not size:
                    out = [head] if head else []  # type: List[Any]
                    head = b""
                    self.window -= room
                    stream.window -= room
                    size -= room
                    while room:
                        length = min(room, self.peer_frame)
                        out.append(wire.FRAME.pack(length << 8 | wire.DATA, 0, stream.id))
                        room -= length
                        while length:
                            first = queue[0]
                            use = min(len(first), length)
                            out.append(first[:use])
                            length -= use
                            if use == len(first):
                                queue.pop(0)
                            else:
                                queue[0] = first[use:]
                    if not size and tail:
                        out.append(tail)
                    send_all(self.sock, out)
                    if not size:
                        return
                    continue
            if not self._next_frame(None):  # the reader itself: read until the client opens its window
                self.close()
                return

    def _finish(self, stream: Call, code: int, details: str = "") -> None:
        """End the call with its status: trailers (Trailers-Only when no answer went out), after a unary
        call's held answer, in the same write."""
        with self.lock:
            if stream.answered or stream.reset or self.closed:
                return
            stream.answered = True
            held, stream.held = stream.held, None
            if code != wire.OK:
                held = None
            only = not stream.started and held is None
            head = b"" if stream.started or only else \
                frame(wire.HEADERS, wire.END_HEADERS, stream.id, wire.RESPONSE_HEADERS)
            stream.started = True
            ending = trailers(code, details, only=only)
            tail = frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM, stream.id, ending)
            if not stream.ended:  # the client may go on sending: a RST_STREAM says we read no more (as gRPC servers do)
                tail += frame(wire.RST_STREAM, 0, stream.id, struct.pack(">I", wire.NO_ERROR))
            if held is None:
                send_all(self.sock, [head, tail])
                # nothing more goes on this stream: a worker writing a stream's answer (waiting for a window
                # that can no longer open, the stream being forgotten below) stops
                stream.reset = True
                self.lock.notify_all()
        if held is not None:
            self._send_data(stream, held[0], held[1], head, tail)
        with self.lock:
            self.streams.pop(stream.id, None)
            if self.going_away and not self.streams:
                self.closed = True
                self._shut()

    def go_away(self, code: int = wire.NO_ERROR, why: str = "") -> None:
        """Tell the client no new call is taken (``code`` other than NO_ERROR: and why, then close)."""
        with self.lock:
            if self.closed:
                return
            try:
                reason = struct.pack(">II", self.last_stream, code) + why.encode()[:256]
                self.sock.sendall(frame(wire.GOAWAY, 0, 0, reason))
            except OSError:
                pass
            self.going_away = True
            if code != wire.NO_ERROR or not self.streams:
                self.closed = True
                self._shut()

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for stream in self.streams.values():
                stream.reset = True
            self.streams.clear()
            self.lock.notify_all()
        self._shut()  # wakes this connection's reader where another thread closes it
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.forget(self)


class GRPCTransport:
    """gRPC on ``host:port`` (0: a free port, then ``.port``) for ``methods`` (``/package.Service/Method``
    to ``Method``): a thread per connection, ``workers`` threads for the calls that cannot run on it."""

    def __init__(self, methods: Dict[str, Method], host: str, port: int, *, workers: int = 8,
                 max_message: int = 64 << 20, max_connections: int = 256, preface_timeout_s: float = 10.0,
                 idle_timeout_s: Optional[float] = None, send_timeout_s: float = 60.0) -> None:
        self.methods, self.max_message = methods, max_message
        self.max_connections, self.preface_timeout_s, self.idle_timeout_s = max_connections, preface_timeout_s, \
            idle_timeout_s
        self.send_timeout_s = send_timeout_s
        self.pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgebuild-grpc")
        self.slots = threading.BoundedSemaphore(workers)
        self.connections = set()  # type: set
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        try:
            family, kind, proto, _, address = socket.getaddrinfo(host or None, port, 0, socket.SOCK_STREAM, 0,
                                                                socket.AI_PASSIVE)[0]
            self.socket = socket.socket(family, kind, proto)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except OSError as exc:
            raise ConfigError("cannot serve gRPC on {}:{}: {}".format(host, port, exc),
                              hint="the port may be in use; choose another with --grpc-port (0: no gRPC)") from None
        self.port = self.socket.getsockname()[1]  # type: int
        self._acceptor = threading.Thread(target=self._accept, name="edgebuild-grpc-accept", daemon=True)

    def start(self) -> None:
        self._acceptor.start()

    def _accept(self) -> None:
        self.socket.settimeout(0.25)
        while not self._stopping.is_set():
            try:
                sock, _ = self.socket.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # out of descriptors for a moment: the client retries
                continue
            sock.settimeout(None)
            timeval = struct.pack("ll", int(self.send_timeout_s), int(self.send_timeout_s % 1 * 1e6))
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            except OSError:
                pass
            with self._lock:
                if len(self.connections) >= self.max_connections:
                    sock.close()
                    continue
                connection = Connection(self, sock)
                self.connections.add(connection)
            threading.Thread(target=connection.serve, name="edgebuild-grpc-conn", daemon=True).start()

    def forget(self, connection: Connection) -> None:
        with self._lock:
            self.connections.discard(connection)

    def stop(self, grace_s: float = 1.0) -> None:
        """Take no new connection or call; give the calls in flight ``grace_s`` to finish, then close."""
        self._stopping.set()
        try:  # the acceptor's poll holds the socket open past close(): listening ends at shutdown (on Linux)
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._acceptor.is_alive():  # no connection taken after this (nor missed by the GOAWAYs below)
            self._acceptor.join(1.0)
        try:
            self.socket.close()
        except OSError:
            pass
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            connection.go_away()
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(c.streams for c in connections):
            time.sleep(0.01)
        for connection in connections:
            connection.close()
        self.pool.shutdown(wait=False)

