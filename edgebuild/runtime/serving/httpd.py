"""A small HTTP/1.1 server for the device runtime: ``HTTPServer(address, handler, ...)``.

It knows nothing of models or of KServe: ``handler(Request) -> Answer`` runs each complete
request (``server.py`` gives it the v2 endpoints). What it does itself: request heads and
bodies (``Content-Length`` only; no chunked bodies), keep-alive and pipelining, ``Expect:
100-continue``, the header, body, keep-alive and send timeouts (408), the largest body (413, before
the body is read), the connection cap (503), and error answers as a JSON body ``{"error": "..."}``.

Why not ``http.server``'s thread per connection: a device has few tasks (the Orin Nano preset
allows 256), and a thread blocked reading an idle or slow client holds one. Here one dispatcher
thread owns every socket (``selectors``, non-blocking): it reads request heads and bodies,
enforces the header, body, keep-alive and send timeouts and the connection cap, and answers the
requests that never block; a fixed pool of ``workers`` threads only ever sees complete requests,
and a worker writes its own answer, then reads the connection's next request itself when it comes
at once (``HTTPServer``: the way of a request). An idle keep-alive
connection or a client that sends a byte a minute costs a file descriptor and a few bytes,
never a thread.

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import select
import selectors
import socket
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple, Union

from edgebuild.runtime.serving.http_messages import (
    MAX_HEAD_BYTES,
    READ_CHUNK,
    Answer,
    HeadError,
    Request,
    body_length,
    encode_answer,
    error,
    joined,
    parse_head,
    read_request,
    send_parts,
)
from edgebuild.runtime.serving.http_pool import Pool, Worker
from edgebuild.runtime.serving.wire_types import BodyPart

__all__ = []

#: file descriptors kept free for the model, logs and the engine cache when the cap follows RLIMIT_NOFILE
_RESERVED_FDS = 64
#: how long a worker that answered a request waits for the connection's next one before handing it back to the
#: dispatcher (``HTTPServer.follow_s``), and in what slices (between them it looks for requests waiting for a worker)
FOLLOW_S = 0.002
_FOLLOW_SLICE_S = 0.0005
_poll = getattr(select, "poll", None)  # not on Windows: there the dispatcher reads every request
_POLLIN = getattr(select, "POLLIN", 1)


def _log(message: str) -> None:
    print("serve: " + message, file=sys.stderr, flush=True)


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
        #: the body being read (``_BODY``): a buffer of its length, filled by ``recv_into``, and how much is in
        self.body = None  # type: Optional[bytearray]
        self.got = 0
        self.close_after = False
        self.events = 0


class HTTPServer:
    """HTTP/1.1 with keep-alive on a ``selectors`` loop; ``handler(Request) -> Answer`` runs on the workers.

    Limits (seconds, counts, bytes):

    - ``workers``: threads that run requests; more requests wait in a backlog (at most one per connection);
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
    - ``on_sent(request)``: called as an answer goes out, just before its first bytes are handed to
      the kernel (``request.stages`` then holds its times), on the thread that sends it; it must be
      quick. Before, not after: a client that reads ``/metrics`` once it has its answer finds it counted;
    - ``follow_s``: how long a worker that answered a request waits for that connection's next one (0: never).

    The way of a request: the dispatcher reads its head, then its body straight into a buffer of
    its ``Content-Length`` (``recv_into``, no other copy), and hands it to the worker that went
    idle last (``Pool``); that worker runs the handler and writes the answer itself, head and body
    parts with one ``sendmsg`` on the non-blocking socket, then tells the dispatcher, which waits for
    the connection's next request (or writes what the socket did not take at once). Before that, the
    worker waits up to ``follow_s`` for the connection's next request and reads it itself, whole, and
    runs it (a client that sends its next request as soon as it has an answer): one thread from
    request to answer, no wake-up of the dispatcher. A request that is not whole in that time (a slow
    client), or not plain (a bad or large head, ``Expect: 100-continue``), goes back to the dispatcher
    with what came of it, and so does the connection when requests from other connections wait for a
    worker.
    """

    def __init__(self, address: Tuple[str, int], handler: Callable[[Request], Answer], *, max_body: int,
                 workers: int = 8, max_connections: int = 2048, header_timeout_s: float = 10.0,
                 body_timeout_s: float = 30.0, keepalive_timeout_s: float = 30.0, send_timeout_s: float = 30.0,
                 on_refused: Optional[Callable[[int], None]] = None, inline: Optional[Callable[[Request], bool]] = None,
                 on_sent: Optional[Callable[[Request], None]] = None, follow_s: float = FOLLOW_S) -> None:
        if workers < 1 or max_connections < 1:
            raise ValueError("workers and max_connections must be at least 1")
        self.handler, self.max_body = handler, max_body
        self.workers = workers
        self.max_connections = _connection_cap(max_connections)
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.keepalive_timeout_s, self.send_timeout_s = keepalive_timeout_s, send_timeout_s
        self.follow_s = follow_s
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
        self._pool = Pool()  # type: Pool[Tuple[_Connection, Request]]
        #: (connection, what is left to write: None all sent, bytes the rest, False the socket failed, close after)
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
                self._pool.submit(None)
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
                _send_once(sock, joined(encode_answer(error(503, "too many open connections (at most {}); try again "
                                                            "later".format(self.max_connections)), False)))
                sock.close()
                continue
            try:  # an answer goes out in one sendmsg: nothing for Nagle to hold back waiting for an ACK
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
            if conn.state == _BODY:
                self._read_body(conn)
                return
            try:
                data = conn.sock.recv(READ_CHUNK)
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

    def _read_body(self, conn: _Connection) -> None:
        """Read what has come of the body into its buffer; hand the request over once it is all there."""
        assert conn.body is not None
        view, got = memoryview(conn.body), -1
        try:
            while conn.got < conn.length:
                got = conn.sock.recv_into(view[conn.got:])
                if not got:
                    break
                conn.got += got
        except (BlockingIOError, InterruptedError):
            got = -1
        except OSError:
            got = 0
        view.release()
        if not got:  # the client closed (or the socket failed) before the whole body came
            self._close(conn)
        elif conn.got == conn.length:
            body, conn.body = conn.body, None
            assert conn.request is not None
            self._dispatch(conn, conn.request, body)

    def _advance(self, conn: _Connection) -> None:
        """Move the connection's request on with what it has read: head, then body, then to a worker."""
        if conn.state != _HEAD or not conn.inbox:
            return
        now = time.monotonic()
        if conn.idle:
            conn.idle, conn.deadline = False, now + self.header_timeout_s
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0 or end + 4 > MAX_HEAD_BYTES:
            if end >= 0 or len(conn.inbox) > MAX_HEAD_BYTES:
                self._refuse(conn, 431, "the request head is over {} bytes".format(MAX_HEAD_BYTES))
            return
        try:
            conn.request = request = parse_head(bytes(conn.inbox[:end + 4]))
            conn.length = body_length(request)
        except HeadError as exc:
            self._refuse(conn, exc.status, str(exc))
            return
        del conn.inbox[:end + 4]
        if conn.length > self.max_body:
            self._on_refused(413)
            self._refuse(conn, 413, "the body must have a Content-Length of at most {} bytes (the largest "
                                    "request the profile allows); got {}".format(self.max_body, conn.length))
            return
        conn.deadline = now + self.body_timeout_s
        if len(conn.inbox) == conn.length:  # the usual case: hand the buffer over instead of copying it
            body, conn.inbox = conn.inbox, bytearray()
        elif len(conn.inbox) > conn.length:  # pipelined: the next request's bytes stay in the inbox
            body = conn.inbox[:conn.length]
            del conn.inbox[:conn.length]
        else:  # the rest of the body goes straight into a buffer of its length
            if (request.headers.get("Expect") or "").lower() == "100-continue":
                self._write(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
            conn.state, conn.body, conn.got = _BODY, bytearray(conn.length), len(conn.inbox)
            conn.body[:conn.got] = conn.inbox
            conn.inbox = bytearray()
            self._watch(conn)
            self._read_body(conn)  # what has come of it already, without waiting for the next event
            return
        self._dispatch(conn, request, body)

    def _dispatch(self, conn: _Connection, request: Request, body: Union[bytes, bytearray]) -> None:
        """A complete request: answered here (``inline``) or handed to a worker."""
        request.body, request.received = body, time.perf_counter()
        conn.state = _BUSY
        self._watch(conn)
        if self._inline(request):  # written by the loop's next _finish_answers: no recursion per pipelined request
            parts, close, ready = self._answer(request)
            self._going(request, ready)
            self._done.append((conn, joined(parts), close))
        else:
            self._pool.submit((conn, request))

    def _refuse(self, conn: _Connection, status: int, message: str) -> None:
        """Answer an error without a worker, then close (what is left of the request cannot be read)."""
        conn.state, conn.close_after = _WRITE, True
        conn.deadline = time.monotonic() + self.send_timeout_s
        self._write(conn, joined(encode_answer(error(status, message), False)))

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
            if conn.close_after:
                self._linger(conn)
                return
            conn.state, conn.idle = _HEAD, True
            conn.deadline = time.monotonic() + self.keepalive_timeout_s
            self._advance(conn)  # a pipelined request may be waiting in the inbox
            if conn not in self._connections:
                return
        self._watch(conn)

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
        conn.inbox, conn.body = bytearray(), None
        self._watch(conn)

    def _finish_answers(self) -> None:
        """The answers the workers sent (or began to): the connections wait for their next request."""
        while self._done:
            conn, rest, close = self._done.popleft()
            if conn not in self._connections:
                continue
            if rest is False:  # the worker's send failed: the client is gone
                self._close(conn)
                continue
            conn.state, conn.close_after = _WRITE, close
            conn.deadline = time.monotonic() + self.send_timeout_s
            if rest:
                conn.outbox += rest
            self._flush(conn)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._connections if c.state != _BUSY and c.deadline <= now]:
            if conn.state == _LINGER:
                self._close(conn)
                continue
            self.counts["timed_out"] += 1
            if conn.state == _BODY or (conn.state == _HEAD and not conn.idle):
                which = "body" if conn.state == _BODY else "request head"
                limit = self.body_timeout_s if conn.state == _BODY else self.header_timeout_s
                _send_once(conn.sock, joined(encode_answer(error(408, "the {} did not arrive within {} s".format(
                    which, limit)), False)))
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
        worker = Worker()  # type: Worker[Tuple[_Connection, Request]]
        while True:
            job = self._pool.take(worker)
            if job is None:
                return
            conn, request = job  # type: _Connection, Optional[Request]
            while request is not None:
                parts, close, ready = self._answer(request)
                self._going(request, ready)
                try:  # the connection is the worker's until it hands it back (BUSY: nobody else touches it)
                    rest = send_parts(conn.sock, parts)  # type: Union[bytes, bool, None]
                except OSError:
                    rest = False
                if rest is not None or close:
                    self._done.append((conn, rest, close))
                    self._wake()
                    break
                request = self._next_request(conn)

    def _next_request(self, conn: _Connection) -> Optional[Request]:
        """The connection's next request, read by the worker that answered the one before when it comes whole
        and plain within ``follow_s`` (a client in a loop sends it a fraction of a millisecond after its
        answer): no dispatcher wake-up, no hand-off, no re-watching the socket. Else None: the connection went
        back to the dispatcher with what came of it (``_hand_back``), or to be closed (the client closed)."""
        if not self.follow_s or _poll is None:
            self._hand_back(conn)
            return None
        deadline = time.perf_counter() + self.follow_s
        poller = _poll()
        try:
            poller.register(conn.sock, _POLLIN)
        except (ValueError, OSError):  # the server stopped and closed the socket under the worker
            self._done.append((conn, False, True))
            self._wake()
            return None
        read = read_request(conn.sock, conn.inbox, self.max_body, lambda: self._readable(poller, deadline))
        if read is None:
            self._done.append((conn, False, True))
            self._wake()
            return None
        if read is False:
            self._hand_back(conn)
            return None
        request, body = read
        request.body, request.received = body, time.perf_counter()
        return request

    def _readable(self, poller: "select.poll", deadline: float) -> bool:
        """Whether the socket ``poller`` watches has bytes to read before ``deadline``; False at once when
        other requests wait for a worker or the server stops. It waits in slices, so that a request that
        comes in meanwhile waits one slice at most for this worker."""
        while True:
            if self._pool.waiting() or self._stopping.is_set():
                return False
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            if poller.poll(min(left, _FOLLOW_SLICE_S) * 1000.0):
                return True

    def _hand_back(self, conn: _Connection) -> None:
        """The connection back to the dispatcher: watched for its next request, or with the bytes of one
        begun in its inbox (the dispatcher reads the rest under its timeouts, as if it had read them)."""
        if conn.inbox or not self._rearm(conn):
            self._done.append((conn, None, False))
            self._wake()
        return None

    def _rearm(self, conn: _Connection) -> bool:
        """The usual end of a request, done by the worker with no wake-up of the dispatcher: its answer all
        sent, the connection kept alive, nothing pipelined behind it. The connection waits for its next
        request (its deadline and state set before its socket is watched again, so that the dispatcher
        sees them once it can see the socket). False: the dispatcher does it (the server is stopping)."""
        conn.deadline, conn.idle = time.monotonic() + self.keepalive_timeout_s, True
        conn.state, conn.events = _HEAD, selectors.EVENT_READ
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (KeyError, ValueError, OSError, RuntimeError):  # the dispatcher closed it, or the selector
            conn.state, conn.events = _BUSY, 0
            return False
        return True

    def _answer(self, request: Request) -> Tuple[List[BodyPart], bool, float]:
        """(the answer's parts to send, close after it, when it was ready) of one request."""
        if request.received:
            request.stages["wait_worker"] = time.perf_counter() - request.received
        try:
            answer = self.handler(request)
        except Exception as exc:  # a bug in a handler answers 500; the server keeps serving
            _log("ERROR: {} {}: {}: {}".format(request.method, request.path, type(exc).__name__, exc))
            answer = error(500, "{}: {}".format(type(exc).__name__, exc))
        keep = request.keep_alive and not answer.close and not self._stopping.is_set()
        started = time.perf_counter()
        parts = encode_answer(answer, keep, head_only=request.method == "HEAD")
        ready = time.perf_counter()
        if "encode" in request.stages:
            request.stages["encode"] += ready - started
        return parts, not keep, ready

    def _going(self, request: Request, ready: float) -> None:
        """The answer goes out now: its ``send`` stage, then ``on_sent``."""
        request.stages["send"] = time.perf_counter() - ready
        if self._on_sent is not None:
            try:
                self._on_sent(request)
            except Exception as exc:  # a bug in the callback must not stop the server
                _log("ERROR: on_sent: {}: {}".format(type(exc).__name__, exc))


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
