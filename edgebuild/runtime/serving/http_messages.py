"""HTTP/1.1 requests and answers as bytes, for ``httpd.py``: a request head parsed into a ``Request``
(its ``Headers``), an ``Answer`` encoded into the parts one ``sendmsg`` sends, and that send.

No sockets are kept here and no state: ``httpd.py`` reads and writes them. Python 3.8 and the
standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
import socket
from http import HTTPStatus
from typing import Callable, Dict, List, Literal, Optional, Tuple, Union

from edgebuild.runtime.serving.wire_types import BodyPart, JsonValue

__all__ = []

class Headers(dict):
    """A request's headers by lower-case name; ``get`` and ``in`` take any case. A repeated header keeps
    its first value (a repeated ``Content-Length`` must repeat it: ``parse_head``)."""

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


class Request:
    """One HTTP request as the dispatcher read it: method, path (no query), headers, body (bytes-like:
    a buffer the dispatcher read it into and handed over, never copied again).

    ``stages``: seconds per stage of its way through the server; the server adds ``wait_worker``
    (from the body's last byte to a worker taking it), ``encode`` (the HTTP head, added to what the
    handler put there) and ``send`` (from the answer being ready to its first bytes handed to the
    kernel), the handler its own; ``on_sent`` gets the request as its answer goes out.
    """

    def __init__(self, method: str, path: str, version: str, headers: Headers) -> None:
        self.method, self.path, self.version, self.headers = method, path, version, headers
        self.body = b""  # type: Union[bytes, bytearray]
        self.stages = {}  # type: Dict[str, float]
        self.received = 0.0
        connection = (headers.get("Connection") or "").lower()
        self.keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection


class Answer:
    """What a handler returns: status, body, content type, extra headers.

    ``body``: bytes, text or a JSON value, or a list of bytes-like parts (numpy arrays' memory, say),
    sent one after the other with one ``sendmsg`` and never joined into one buffer.
    """

    def __init__(self, status: int, body: Union[BodyPart, str, List[BodyPart], JsonValue],
                 content_type: str = "application/json",
                 headers: Optional[Dict[str, str]] = None, close: bool = False) -> None:
        self.status, self.content_type, self.headers, self.close = status, content_type, dict(headers or {}), close
        if isinstance(body, list):
            self.parts = body
        elif isinstance(body, (bytes, bytearray, memoryview)):
            self.parts = [body]
        else:
            self.parts = [body.encode() if isinstance(body, str) else json.dumps(body).encode()]

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


def error(status: int, message: str, **headers: str) -> Answer:
    return Answer(status, {"error": message}, headers=headers)


REASONS = {int(s): s.phrase for s in HTTPStatus}


def reason(status: int) -> str:
    return REASONS.get(status, "Unknown")


def encode_answer(answer: Answer, keep_alive: bool, head_only: bool = False) -> List[BodyPart]:
    """The answer as the parts to send: its HTTP head, then its body's parts (none for a HEAD request)."""
    length = sum(len(p) if isinstance(p, bytes) else memoryview(p).nbytes for p in answer.parts)
    head = "HTTP/1.1 {} {}\r\nServer: edgebuild-serve\r\nContent-Type: {}\r\nContent-Length: {}\r\n".format(
        answer.status, reason(answer.status), answer.content_type, length)
    for name, value in answer.headers.items():
        head += "{}: {}\r\n".format(name, value)
    head += "Connection: keep-alive\r\n\r\n" if keep_alive else "Connection: close\r\n\r\n"
    return [head.encode("latin-1")] if head_only else [head.encode("latin-1")] + answer.parts


def joined(parts: List[BodyPart]) -> bytes:
    return b"".join(parts)


class HeadError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: what a request head may take at most (request line and headers)
MAX_HEAD_BYTES = 64 * 1024
#: what one read takes while a request head is awaited: a head and the start of its body; the rest
#: of a body is read straight into a buffer of its length, not through the inbox
READ_CHUNK = 16 * 1024
#: more header lines than this is a 431 (as ``http.client`` counts)
MAX_HEADERS = 100


def parse_head(head: bytes) -> Request:
    """The request line and headers of a request head (``head`` ends with the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HeadError(400, "not an HTTP/1.x request line: {!r}".format(lines[0][:100]))
    method, target, version = parts
    headers, last = Headers(), ""
    fields = [line for line in lines[1:] if line]
    if len(fields) > MAX_HEADERS:
        raise HeadError(431, "bad request headers: got more than {} headers".format(MAX_HEADERS))
    for line in fields:
        if line[0] in " \t":  # obsolete line folding: the previous header goes on
            if not last:
                raise HeadError(400, "bad request headers: a continuation line before any header")
            dict.__setitem__(headers, last, dict.__getitem__(headers, last) + " " + line.strip())
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name[-1] in " \t":
            raise HeadError(400, "bad request headers: {!r} is not a header line".format(line[:100]))
        last, value = name.lower(), value.strip()
        if last not in headers:
            dict.__setitem__(headers, last, value)
        elif last == "content-length" and dict.__getitem__(headers, last) != value:
            raise HeadError(400, "two different Content-Length headers")
    return Request(method, target.split("?")[0].rstrip("/") or "/", version, headers)


def body_length(request: Request) -> int:
    if request.headers.get("Transfer-Encoding"):
        raise HeadError(411, "chunked bodies are not taken; send a Content-Length")
    value = request.headers.get("Content-Length")
    if value is None:
        return 0
    try:
        length = int(value)
    except ValueError:
        length = -1
    if length < 0:
        raise HeadError(400, "Content-Length {!r} is not a length".format(value))
    return length


def send_parts(sock: socket.socket, parts: List[BodyPart]) -> Optional[bytes]:
    """Send what the socket takes now (one ``sendmsg``); None when all of it went, else the rest."""
    try:
        sent = sock.sendmsg(parts)
    except (BlockingIOError, InterruptedError):
        sent = 0
    total = sum(memoryview(p).nbytes for p in parts)
    if sent == total:
        return None
    return joined(parts)[sent:]


def read_request(sock: socket.socket, inbox: bytearray, max_body: int,
                 readable: Callable[[], bool]) -> Union[None, Literal[False], Tuple[Request, bytearray]]:
    """The next request of a non-blocking socket whose earlier bytes are in ``inbox``, read whole while
    ``readable()`` says more may come: (request, body), the bytes of a pipelined request after it left in
    ``inbox``; None when the client closed; False when it is not a plain request that came whole in time (a
    bad or large head, ``Expect: 100-continue``, a body still coming): what came of it is in ``inbox``, for
    the dispatcher to read on (``httpd.py``), as if it had read it itself."""
    end = inbox.find(b"\r\n\r\n")
    while end < 0:
        if len(inbox) > MAX_HEAD_BYTES or not readable():
            return False
        try:
            data = sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            data = b""
        if not data:
            return None
        inbox += data
        end = inbox.find(b"\r\n\r\n", max(0, len(inbox) - len(data) - 3))
    try:
        request = parse_head(bytes(inbox[:end + 4]))
        length = body_length(request)
    except HeadError:  # refused by the dispatcher, with its status
        return False
    if length > max_body or (request.headers.get("Expect") or "").lower() == "100-continue":
        return False
    start = end + 4
    if len(inbox) - start >= length:  # all here (and maybe the next request, pipelined: it stays in the inbox)
        body = inbox[start:start + length]
        del inbox[:start + length]
        return request, body
    body, got = bytearray(length), len(inbox) - start
    body[:got] = memoryview(inbox)[start:]
    with memoryview(body) as view:
        while got < length and readable():
            try:
                more = sock.recv_into(view[got:])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                more = 0
            if not more:
                return None
            got += more
    if got < length:  # a slow body: back in the inbox, the dispatcher reads the rest (under the body timeout)
        del inbox[start:]
        inbox += memoryview(body)[:got]
        return False
    del inbox[:]
    return request, body
