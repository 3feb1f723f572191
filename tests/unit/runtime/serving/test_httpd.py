"""The HTTP/1.1 layer's pieces without the model: request heads, answers as parts, the send that leaves a
rest, the worker pool's hand-off, and a server that writes an answer larger than a socket takes at once."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from edgebuild.runtime.serving import httpd, protocol
from edgebuild.runtime.serving.http_messages import (
    Answer,
    HeadError,
    encode_answer,
    joined,
    parse_head,
    read_request,
    send_parts,
)
from edgebuild.runtime.serving.http_pool import Pool, Worker
from edgebuild.runtime.serving.httpd import HTTPServer


def _head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_a_request_head_gives_its_headers_by_any_case() -> None:
    request = parse_head(_head("POST /v2/models/m/infer/?x=1 HTTP/1.1", "Content-Length: 12",
                               "Inference-Header-Content-Length:  7 ", "X-Folded: a", "  b", "content-length: 12"))
    assert (request.method, request.path, request.version) == ("POST", "/v2/models/m/infer", "HTTP/1.1")
    assert request.headers.get("CONTENT-LENGTH") == "12" and request.headers["inference-header-content-length"] == "7"
    assert request.headers.get("x-folded") == "a b" and "X-FOLDED" in request.headers
    assert request.headers.get("missing", "none") == "none" and request.keep_alive
    assert not parse_head(_head("GET / HTTP/1.0")).keep_alive
    assert not parse_head(_head("GET / HTTP/1.1", "Connection: close")).keep_alive


@pytest.mark.parametrize(("lines", "status"), [
    (("GET /",), 400),
    (("GET / HTTP/1.1", "no colon here"), 400),
    (("GET / HTTP/1.1", "Bad : spaced"), 400),
    (("GET / HTTP/1.1", " folded before any header"), 400),
    (("POST / HTTP/1.1", "Content-Length: 3", "Content-Length: 4"), 400),
    (("GET / HTTP/1.1", *[f"X-{i}: {i}" for i in range(101)]), 431),
])
def test_a_bad_request_head_is_refused_with_its_status(lines: tuple[str, ...], status: int) -> None:
    with pytest.raises(HeadError) as refused:
        parse_head(_head(*lines))
    assert refused.value.status == status


def test_an_answer_goes_out_as_parts_never_joined() -> None:
    array = np.arange(1000, dtype=np.float32)
    part = memoryview(array).cast("B")
    answer = Answer(200, [b'{"a": 1}', part], "application/octet-stream", {"X-One": "1"})
    parts = encode_answer(answer, keep_alive=True)
    assert parts[1:] == answer.parts and parts[2] is part  # the array's own memory, not a copy
    head = parts[0].decode("latin-1")
    assert head.startswith("HTTP/1.1 200 OK\r\n") and f"Content-Length: {8 + 4000}\r\n" in head
    assert "X-One: 1\r\n" in head and head.endswith("Connection: keep-alive\r\n\r\n")
    assert encode_answer(answer, keep_alive=False, head_only=True) == [parts[0].replace(b"keep-alive", b"close")]
    assert Answer(200, {"live": True}).body == b'{"live": true}' and Answer(599, "x").status == 599
    assert "599 Unknown" in encode_answer(Answer(599, "x"), True)[0].decode()


def test_a_send_the_socket_does_not_take_whole_leaves_the_rest() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        parts = [b"head", bytes(range(256)) * 40000]  # far more than a socket buffer
        rest = send_parts(ours, parts)
        assert rest is not None and 0 < len(rest) < len(joined(parts))
        received = bytearray()
        while len(received) < len(joined(parts)) - len(rest):
            received += theirs.recv(1 << 20)
        assert bytes(received) + rest == joined(parts)
    finally:
        ours.close()
        theirs.close()


def test_the_worker_that_went_idle_last_takes_the_next_request_and_a_busy_pool_keeps_a_backlog() -> None:
    pool = Pool()
    taken: dict[str, object] = {}
    idle = threading.Semaphore(0)
    original_take = pool.take

    def take(worker: Worker) -> object:
        idle.release()  # about to go idle (or take from the backlog)
        return original_take(worker)

    def work(name: str) -> None:
        taken[name] = take(Worker())

    first = threading.Thread(target=work, args=("first",))
    first.start()
    idle.acquire()
    while len(pool._idle) < 1:  # the first worker is blocked on its wake-up lock
        threading.Event().wait(0.001)
    second = threading.Thread(target=work, args=("second",))
    second.start()
    idle.acquire()
    while len(pool._idle) < 2:
        threading.Event().wait(0.001)
    pool.submit("job 1")
    second.join()
    assert taken == {"second": "job 1"}  # last in, first out: its caches are the warm ones
    pool.submit("job 2")
    first.join()
    assert taken["first"] == "job 2"
    pool.submit("job 3")  # nobody idle: it waits for the next take
    assert pool.take(Worker()) == "job 3"


def test_parse_and_answer_copy_no_tensor() -> None:
    array = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    head = (b'{"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 768}}]}')
    body = bytearray(head + array.tobytes())
    spec = {"images": protocol.InputSpec("images", [1, 3, 8, 8], [1, 3, 8, 8], [1, 3, 8, 8])}
    parsed = protocol.parse_inference(body, len(head), spec, ["scores"])
    assert np.array_equal(parsed.inputs["images"], array)
    assert np.shares_memory(parsed.inputs["images"], np.frombuffer(body, np.uint8))  # a view of the body
    outputs = {"scores": np.arange(6, dtype=np.float32).reshape(2, 3)}
    parts, content_type, headers = protocol.response_parts("m", "1", outputs, ["scores"], {})
    assert content_type == "application/octet-stream" and int(headers[protocol.HEADER_LENGTH]) == len(parts[0])
    assert np.shares_memory(np.frombuffer(parts[1], np.float32), outputs["scores"])
    assert protocol.encode_response("m", "1", outputs, ["scores"], {})[0] == b"".join(parts)


def _read_answer(sock: socket.socket, buffered: bytearray) -> bytes:
    while b"\r\n\r\n" not in buffered:
        buffered += sock.recv(65536)
    head, _, _ = bytes(buffered).partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    end = len(head) + 4 + length
    while len(buffered) < end:
        buffered += sock.recv(1 << 20)
    answer = bytes(buffered[:end])
    del buffered[:end]
    return answer


def test_an_answer_past_what_the_socket_takes_is_finished_by_the_dispatcher_then_keep_alive_goes_on(
        monkeypatch) -> None:
    big = bytes(range(256)) * 32768  # 8 MiB: the worker's one sendmsg cannot place it all
    rests = []

    def send(sock, parts):
        rest = send_parts(sock, parts)
        rests.append(rest is not None)
        return rest

    monkeypatch.setattr(httpd, "send_parts", send)

    def handle(request):
        return Answer(200, [b"start", big] if request.path == "/big" else b"small", "application/octet-stream")

    server = HTTPServer(("127.0.0.1", 0), handle, max_body=1024, workers=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address, timeout=30) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            buffered = bytearray()
            for path in ("/big", "/small", "/big"):
                sock.sendall(f"POST {path} HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".encode())
                answer = _read_answer(sock, buffered)
                assert answer.endswith(b"start" + big if path == "/big" else b"small"), path
        assert rests == [True, False, True]  # the big ones were finished by the dispatcher
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _post(path: str, body: bytes, *extra: str) -> bytes:
    return _head(f"POST {path} HTTP/1.1", f"Content-Length: {len(body)}", *extra) + body


def test_a_worker_reads_a_whole_request_and_leaves_a_pipelined_one_in_the_inbox() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        inbox = bytearray(_post("/a", b"first") + _post("/b", b"sec"))
        request, body = read_request(ours, inbox, 1024, lambda: False)
        assert (request.path, bytes(body)) == ("/a", b"first")
        assert bytes(inbox) == _post("/b", b"sec")
        request, body = read_request(ours, inbox, 1024, lambda: False)
        assert (request.path, bytes(body), bytes(inbox)) == ("/b", b"sec", b"")
    finally:
        ours.close()
        theirs.close()


def test_a_request_not_whole_in_time_or_not_plain_goes_back_with_what_came_of_it() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    waits = iter([True, False])  # the first part comes; then the worker stops waiting
    try:
        sent = _post("/slow", b"x" * 100)[:-40]
        theirs.sendall(sent)
        inbox = bytearray()
        assert read_request(ours, inbox, 1024, lambda: next(waits)) is False
        assert bytes(inbox) == sent  # the dispatcher reads on from here
        for refused in (_post("/big", b"y" * 2000), _post("/ask", b"z", "Expect: 100-continue"), b"GET\r\n\r\n"):
            inbox = bytearray(refused)
            assert read_request(ours, inbox, 1024, lambda: True) is False
            assert bytes(inbox) == refused
        theirs.close()
        assert read_request(ours, bytearray(), 1024, lambda: True) is None  # the client closed
    finally:
        ours.close()


def test_a_worker_reads_its_connections_next_requests_itself_and_gives_way_to_another_connection(
        monkeypatch) -> None:
    dispatched, handled = [], []
    original = HTTPServer._dispatch

    def dispatch(self, conn, request, body):
        dispatched.append(request.path)
        return original(self, conn, request, body)

    monkeypatch.setattr(HTTPServer, "_dispatch", dispatch)

    def handle(request):
        handled.append((request.path, threading.current_thread().name))
        return Answer(200, bytes(request.body), "application/octet-stream")

    # one worker that would wait a minute for its connection's next request: it must give way at once
    server = HTTPServer(("127.0.0.1", 0), handle, max_body=1024, workers=1, follow_s=60.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address, timeout=30) as first, \
                socket.create_connection(server.server_address, timeout=30) as second:
            buffered = bytearray()
            for i in range(3):
                first.sendall(_post(f"/first/{i}", b"abc"))
                assert _read_answer(first, buffered).endswith(b"abc")
            assert dispatched == ["/first/0"]  # the next two were read by the worker, not the dispatcher
            second.sendall(_post("/second", b"def"))  # the only worker lingers on the first connection
            assert _read_answer(second, bytearray()).endswith(b"def")
            first.sendall(_post("/first/3", b"ghi"))
            assert _read_answer(first, buffered).endswith(b"ghi")
        assert [path for path, _ in handled] == ["/first/0", "/first/1", "/first/2", "/second", "/first/3"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_worker_whose_connection_the_stopping_server_closed_gives_it_back_instead_of_raising() -> None:
    """A stopping server closes every socket, a worker's too; the worker waiting for that connection's next
    request must not die on the closed socket (select.poll refuses fd -1 with a ValueError)."""
    server = HTTPServer(("127.0.0.1", 0), lambda request: Answer(200, b"", "text/plain"), max_body=1024, workers=1,
                        follow_s=60.0)
    ours, theirs = socket.socketpair()
    try:
        conn = httpd._Connection(ours, deadline=0.0)
        ours.close()
        assert server._next_request(conn) is None
        assert list(server._done) == [(conn, False, True)]  # to be closed by the dispatcher
    finally:
        theirs.close()
        server.server_close()
