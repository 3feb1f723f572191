"""A small HTTP/1.1 server for the device runtime: ``HTTPServer(address, handler, ...)``.

It knows nothing of models or of KServe: ``handler(Request) -> Answer`` runs each complete
request (``server.py`` gives it the v2 endpoints). What it does itself: request heads and
bodies (``Content-Length`` only; no chunked bodies), keep-alive and pipelining, ``Expect:
100-continue``, the header, body, keep-alive and send timeouts (408), the largest body (413, before
the body is read), the connection cap (503), and error answers as a JSON body ``{"error": "..."}``.

Why not ``http.server``'s thread per connection: a device has few tasks (the Orin Nano preset
allows 256), and a thread blocked reading an idle or slow client holds one. Here one dispatcher
thread owns every socket (``selectors``, non-blocking): it reads request heads and bodies,
enforces the header, body, keep-alive and send timeouts and the connection cap, and writes the
answers; a fixed pool of ``workers`` threads only ever sees complete requests. An idle keep-alive
connection or a client that sends a byte a minute costs a file descriptor and a few bytes,
never a thread.

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import http.client
import io
import json
import queue
import selectors
import socket
import sys
import threading
import time
from http import HTTPStatus
from typing import Any, Dict, List, Optional, Tuple

__all__ = []

#: what a request head may take at most (request line and headers)
MAX_HEAD_BYTES = 64 * 1024
#: file descriptors kept free for the model, logs and the engine cache when the cap follows RLIMIT_NOFILE
_RESERVED_FDS = 64
_READ_CHUNK = 256 * 1024


def _log(message: str) -> None:
    print("serve: " + message, file=sys.stderr, flush=True)


# -- requests and answers ----------------------------------------------------------------------

class Request:
    """One HTTP request as the dispatcher read it: method, path (no query), headers, body (bytes-like:
    the connection's read buffer itself where it held exactly this body, so no copy is made).

    ``stages``: seconds per stage of its way through the server; the server adds ``wait_worker``
    (from the body's last byte to a worker taking it), ``encode`` (the HTTP head, added to what the
    handler put there) and ``send`` (from the answer being ready to its last byte sent), the
    handler its own; ``on_sent`` gets the request once the answer is sent.
    """

    def __init__(self, method: str, path: str, version: str, headers: http.client.HTTPMessage) -> None:
        self.method, self.path, self.version, self.headers = method, path, version, headers
        self.body = b""
        self.stages = {}  # type: Dict[str, float]
        self.received = 0.0
        connection = (headers.get("Connection") or "").lower()
        self.keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection


class Answer:
    """What a handler returns: status, body (bytes, text or a JSON value), content type, extra headers."""

    def __init__(self, status: int, body: Any, content_type: str = "application/json",
                 headers: Optional[Dict[str, str]] = None, close: bool = False) -> None:
        self.status, self.content_type, self.headers, self.close = status, content_type, dict(headers or {}), close
        if isinstance(body, bytes):
            self.body = body
        else:
            self.body = body.encode() if isinstance(body, str) else json.dumps(body).encode()


def error(status: int, message: str, **headers: str) -> Answer:
    return Answer(status, {"error": message}, headers=headers)


def _encode(answer: Answer, keep_alive: bool) -> bytes:
    try:
        reason = HTTPStatus(answer.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = ["HTTP/1.1 {} {}".format(answer.status, reason), "Server: edgebuild-serve",
             "Content-Type: " + answer.content_type, "Content-Length: {}".format(len(answer.body))]
    lines += ["{}: {}".format(k, v) for k, v in answer.headers.items()]
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer.body


class _HeadError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse_head(head: bytes) -> Request:
    """The request line and headers of a request head (``head`` ends with the blank line)."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _HeadError(400, "not an HTTP/1.x request line: {!r}".format(line[:100].decode("latin-1")))
    method, target, version = parts
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException as exc:
        raise _HeadError(431, "bad request headers: {}".format(exc)) from None
    return Request(method, target.split("?")[0].rstrip("/") or "/", version, headers)


def _body_length(request: Request) -> int:
    if request.headers.get("Transfer-Encoding"):
        raise _HeadError(411, "chunked bodies are not taken; send a Content-Length")
    value = request.headers.get("Content-Length")
    if value is None:
        return 0
    try:
        length = int(value)
    except ValueError:
        length = -1
    if length < 0:
        raise _HeadError(400, "Content-Length {!r} is not a length".format(value))
    return length

# -- the HTTP/1.1 server: one dispatcher thread for the sockets, a worker pool for the requests ---

_HEAD, _BODY, _BUSY, _WRITE, _LINGER = "head", "body", "busy", "write", "linger"
#: how long a connection closed after an error answer is read and discarded, so that the client reads
#: the answer instead of a reset
_LINGER_S = 2.0


class _Connection:
    """One client socket and where its current request stands."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.state = _HEAD
        self.deadline = deadline
        self.idle = True  # no byte of the next request yet (a new or a kept-alive connection)
        self.request = None  # type: Optional[Request]
        self.length = 0
        self.close_after = False
        self.events = 0
        #: the request whose answer is being written, and when that answer was ready
        self.sending = None  # type: Optional[Tuple[Request, float]]


class HTTPServer:
    """HTTP/1.1 with keep-alive on a ``selectors`` loop; ``handler(Request) -> Answer`` runs on the workers.

    Limits (seconds, counts, bytes):

    - ``workers``: threads that run requests; more requests wait in a queue (at most one per connection);
    - ``max_connections``: open client connections; one past it gets a 503 and is closed, without a
      worker; never more than RLIMIT_NOFILE allows (the soft limit is raised towards the hard one);
    - ``header_timeout_s``: from a request's first byte (a new connection: from its accept) to the
      end of its head; ``body_timeout_s``: from the head to the end of the body; a request past
      either gets a 408 and the connection is closed (a connection that sent nothing is just closed);
    - ``keepalive_timeout_s``: how long a connection may sit idle between requests;
    - ``send_timeout_s``: how long a client may take to read an answer;
    - ``max_body``: the largest body; past it, a 413 before the body is read;
    - ``inline(request)``: True for requests that never block (health, metadata, metrics): the
      dispatcher answers them itself, so they answer while every worker waits on an inference;
    - ``on_sent(request)``: called on the dispatcher thread once an answer's last byte is sent
      (``request.stages`` then holds its times); it must be quick.
    """

    def __init__(self, address: Tuple[str, int], handler: Any, *, max_body: int, workers: int = 8,
                 max_connections: int = 2048, header_timeout_s: float = 10.0, body_timeout_s: float = 30.0,
                 keepalive_timeout_s: float = 30.0, send_timeout_s: float = 30.0,
                 on_refused: Any = None, inline: Any = None, on_sent: Any = None) -> None:
        if workers < 1 or max_connections < 1:
            raise ValueError("workers and max_connections must be at least 1")
        self.handler, self.max_body = handler, max_body
        self.workers = workers
        self.max_connections = _connection_cap(max_connections)
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.keepalive_timeout_s, self.send_timeout_s = keepalive_timeout_s, send_timeout_s
        self._on_refused = on_refused or (lambda status: None)
        #: requests the dispatcher answers itself, never waiting for a worker (they must not block)
        self._inline = inline or (lambda request: False)
        self._on_sent = on_sent
        self.socket = socket.create_server(address, backlog=1024, reuse_port=False)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections = set()  # type: set
        self._jobs = queue.Queue()  # type: queue.Queue
        self._done = collections.deque()  # type: collections.deque
        self._threads: List[threading.Thread] = []
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._stopped = threading.Event()
        self.counts = {"accepted": 0, "refused": 0, "timed_out": 0}

    # -- the loop ------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Run the dispatcher on this thread until :meth:`shutdown`."""
        self._started.set()
        self._threads = [threading.Thread(target=self._work, name="edgebuild-http-worker-{}".format(i), daemon=True)
                         for i in range(self.workers)]
        for thread in self._threads:
            thread.start()
        self._selector.register(self.socket, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        sweep = 0.0
        try:
            while not self._stopping.is_set():
                for key, mask in self._selector.select(timeout=0.25):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._ready(key.data, mask)
                self._finish_answers()
                now = time.monotonic()
                if now >= sweep:
                    self._expire(now)
                    sweep = now + 0.2
        finally:
            for conn in list(self._connections):
                self._close(conn)
            for _ in self._threads:
                self._jobs.put(None)
            self._selector.close()
            self._stopped.set()

    def stop_soon(self) -> None:
        """Ask :meth:`serve_forever` to stop (safe in a signal handler: it does not wait)."""
        self._stopping.set()
        self._wake()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait for it."""
        self.stop_soon()
        if self._started.is_set():
            self._stopped.wait(10)

    def server_close(self) -> None:
        self._stopping.set()
        for closable in (self.socket, self._wake_r, self._wake_w):
            closable.close()
        if not self._started.is_set():
            self._selector.close()

    def open_connections(self) -> int:
        return len(self._connections)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is pending already (or the server is closed)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: the backlog keeps them until a descriptor frees up
                _log("cannot accept a connection: {}".format(exc))
                return
            sock.setblocking(False)
            if len(self._connections) >= self.max_connections:
                self.counts["refused"] += 1
                self._on_refused(503)
                _send_once(sock, _encode(error(503, "too many open connections (at most {}); try again "
                                                    "later".format(self.max_connections)), False))
                sock.close()
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            self.counts["accepted"] += 1
            conn = _Connection(sock, time.monotonic() + self.header_timeout_s)
            self._connections.add(conn)
            self._watch(conn)

    def _watch(self, conn: _Connection) -> None:
        """Register the socket for what its state waits on: bytes in, room to write out, or nothing."""
        events = 0
        if conn.outbox:
            events |= selectors.EVENT_WRITE
        elif conn.state in (_HEAD, _BODY, _LINGER):
            events |= selectors.EVENT_READ
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _ready(self, conn: _Connection, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        elif mask & selectors.EVENT_READ:
            try:
                data = conn.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(conn)
                return
            if not data:
                self._close(conn)
                return
            if conn.state == _LINGER:
                return  # what is left of a refused request: read and dropped
            conn.inbox += data
            self._advance(conn)

    def _advance(self, conn: _Connection) -> None:
        """Move the connection's request on with what it has read: head, then body, then to a worker."""
        now = time.monotonic()
        if conn.state == _HEAD:
            if not conn.inbox:
                return
            if conn.idle:
                conn.idle, conn.deadline = False, now + self.header_timeout_s
            end = conn.inbox.find(b"\r\n\r\n")
            if end < 0 or end + 4 > MAX_HEAD_BYTES:
                if end >= 0 or len(conn.inbox) > MAX_HEAD_BYTES:
                    self._refuse(conn, 431, "the request head is over {} bytes".format(MAX_HEAD_BYTES))
                return
            try:
                conn.request = _parse_head(bytes(conn.inbox[:end + 4]))
                conn.length = _body_length(conn.request)
            except _HeadError as exc:
                self._refuse(conn, exc.status, str(exc))
                return
            del conn.inbox[:end + 4]
            if conn.length > self.max_body:
                self._on_refused(413)
                self._refuse(conn, 413, "the body must have a Content-Length of at most {} bytes (the largest "
                                        "request the profile allows); got {}".format(self.max_body, conn.length))
                return
            conn.state, conn.deadline = _BODY, now + self.body_timeout_s
            expect = (conn.request.headers.get("Expect") or "").lower()
            if expect == "100-continue" and len(conn.inbox) < conn.length:
                self._write(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        if conn.state == _BODY and len(conn.inbox) >= conn.length:
            request = conn.request
            assert request is not None
            request.received = time.perf_counter()
            if len(conn.inbox) == conn.length:  # the usual case: hand the buffer over instead of copying it
                request.body, conn.inbox = conn.inbox, bytearray()
            else:
                request.body = bytes(conn.inbox[:conn.length])
                del conn.inbox[:conn.length]
            conn.state = _BUSY
            self._watch(conn)
            if self._inline(request):  # written by the loop's next _finish_answers: no recursion per pipelined request
                self._done.append(self._answer(conn, request))
            else:
                self._jobs.put((conn, request))

    def _refuse(self, conn: _Connection, status: int, message: str) -> None:
        """Answer an error without a worker, then close (what is left of the request cannot be read)."""
        conn.state, conn.close_after = _WRITE, True
        conn.deadline = time.monotonic() + self.send_timeout_s
        self._write(conn, _encode(error(status, message), False))

    def _write(self, conn: _Connection, data: bytes) -> None:
        conn.outbox += data
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            while conn.outbox:
                sent = conn.sock.send(conn.outbox)
                del conn.outbox[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return
        if not conn.outbox and conn.state == _WRITE:
            if conn.sending is not None:
                self._sent(conn)
            if conn.close_after:
                self._linger(conn)
                return
            conn.state, conn.idle = _HEAD, True
            conn.deadline = time.monotonic() + self.keepalive_timeout_s
            self._advance(conn)  # a pipelined request may be waiting in the inbox
            if conn not in self._connections:
                return
        self._watch(conn)

    def _sent(self, conn: _Connection) -> None:
        assert conn.sending is not None
        request, ready = conn.sending
        conn.sending = None
        request.stages["send"] = time.perf_counter() - ready
        if self._on_sent is not None:
            try:
                self._on_sent(request)
            except Exception as exc:  # a bug in the callback must not stop the dispatcher
                _log("ERROR: on_sent: {}: {}".format(type(exc).__name__, exc))

    def _linger(self, conn: _Connection) -> None:
        """Close our side, then read until the client closes its side or ``_LINGER_S`` ends.

        Closing a socket with unread bytes in it resets the connection, and a client reading the
        answer then sees the reset instead (a 413 before a large body, a 408 before the rest).
        """
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state, conn.deadline = _LINGER, time.monotonic() + _LINGER_S
        conn.inbox = bytearray()
        self._watch(conn)

    def _finish_answers(self) -> None:
        while self._done:
            conn, data, close, sending = self._done.popleft()
            if conn not in self._connections:
                continue
            conn.state, conn.close_after, conn.sending = _WRITE, close, sending
            conn.deadline = time.monotonic() + self.send_timeout_s
            self._write(conn, data)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._connections if c.state != _BUSY and c.deadline <= now]:
            if conn.state == _LINGER:
                self._close(conn)
                continue
            self.counts["timed_out"] += 1
            if conn.state == _BODY or (conn.state == _HEAD and not conn.idle):
                which = "body" if conn.state == _BODY else "request head"
                limit = self.body_timeout_s if conn.state == _BODY else self.header_timeout_s
                _send_once(conn.sock, _encode(error(408, "the {} did not arrive within {} s".format(
                    which, limit)), False))
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        self._connections.discard(conn)
        try:
            conn.sock.close()
        except OSError:
            pass

    # -- the workers -----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._done.append(self._answer(*job))
            self._wake()

    def _answer(self, conn: _Connection, request: Request) -> Tuple[_Connection, bytes, bool, Any]:
        """(connection, the answer's bytes, close after it, (request, when its answer was ready)) of one request."""
        if request.received:
            request.stages["wait_worker"] = time.perf_counter() - request.received
        try:
            answer = self.handler(request)
        except Exception as exc:  # a bug in a handler answers 500; the server keeps serving
            _log("ERROR: {} {}: {}: {}".format(request.method, request.path, type(exc).__name__, exc))
            answer = error(500, "{}: {}".format(type(exc).__name__, exc))
        keep = request.keep_alive and not answer.close and not self._stopping.is_set()
        started = time.perf_counter()
        data = _encode(answer, keep)
        if request.method == "HEAD":
            data = data[:len(data) - len(answer.body)]
        ready = time.perf_counter()
        if "encode" in request.stages:
            request.stages["encode"] += ready - started
        return conn, data, not keep, (request, ready)


def _send_once(sock: socket.socket, data: bytes) -> None:
    """One non-blocking try at a short answer to a connection about to be closed."""
    try:
        sock.send(data)
    except OSError:
        pass


def _connection_cap(wanted: int) -> int:
    """``wanted``, or what RLIMIT_NOFILE leaves after raising its soft limit as far as the hard one allows."""
    try:
        import resource
    except ImportError:  # not a Unix
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + _RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft - _RESERVED_FDS < wanted:
        cap = max(1, soft - _RESERVED_FDS)
        _log("WARNING: max_connections {} is past what RLIMIT_NOFILE {} allows; at most {} connections".format(
            wanted, soft, cap))
        return cap
    return wanted
