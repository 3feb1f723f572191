"""HTTP/2's and gRPC's bytes on the wire (RFC 9113, RFC 7541, gRPC's PROTOCOL-HTTP2) for the gRPC transport
(``grpc_http2.py``): frame types, flags, error codes and settings; frames; the header blocks the server
writes (HPACK literals without indexing: no table to keep in step with the client); status trailers; and
what a method of the served service is (``Method``, ``CallEnded``).

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

import socket
import struct
from typing import Any, Callable, List, Optional, Tuple, Union

__all__ = []

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
#: HTTP/2 error codes (RFC 9113 7)
NO_ERROR, PROTOCOL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, COMPRESSION_ERROR = 0, 1, 6, 7, 9
#: settings (RFC 9113 6.5.2)
HEADER_TABLE_SIZE, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 1, 3, 4, 5, 6
#: the receive window of the connection and of each stream (bytes in flight before a WINDOW_UPDATE)
WINDOW = 16 << 20
#: the largest frame a client may send us (the protocol's largest): a 1x3x160x160 image in one frame
MAX_FRAME = (1 << 24) - 1
#: concurrent streams a connection may open; one more is refused (REFUSED_STREAM: the client retries it)
MAX_STREAMS = 256
MAX_HEADER_LIST = 64 << 10
FRAME = struct.Struct(">IBI")  # a frame's head: (length << 8 | type), flags, stream id
PREFIX = struct.Struct(">BI")  # a gRPC message's prefix: compressed flag, length
#: gRPC status codes used here (grpc.StatusCode's numbers)
OK, UNKNOWN, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 2, 8, 12, 13


def _hpack_int(value: int, bits: int, first: int) -> bytes:
    """HPACK's integer with a ``bits``-bit prefix, ``first`` holding the bits above it (RFC 7541 5.1)."""
    top = (1 << bits) - 1
    if value < top:
        return bytes([first | value])
    out, value = bytearray([first | top]), value - top
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: Union[bytes, int], value: bytes) -> bytes:
    """A header field as a literal without indexing (RFC 7541 6.2.2): by its static-table name index, or
    a new name; no Huffman coding. It leaves the client's dynamic table as it was."""
    head = _hpack_int(name, 4, 0x00) if isinstance(name, int) else b"\x00" + _hpack_int(len(name), 7, 0) + name
    return head + _hpack_int(len(value), 7, 0) + value


#: ``:status: 200`` (static index 8) and ``content-type: application/grpc`` (name index 31)
RESPONSE_HEADERS = b"\x88" + literal(31, b"application/grpc")


def grpc_message(details: str) -> bytes:
    """``grpc-message``'s value: UTF-8, percent-encoded outside printable ASCII and '%' (gRPC's HTTP/2 spec)."""
    out = bytearray()
    for byte in details.encode("utf-8")[:4096]:
        out += b"%%%02X" % byte if byte < 0x20 or byte > 0x7E or byte == 0x25 else bytes([byte])
    return bytes(out)


def trailers(code: int, details: str = "", *, only: bool = False) -> bytes:
    """The header block that ends a call: ``grpc-status`` (and ``grpc-message``); ``only``: a call answered
    with no message (Trailers-Only: the response headers in the same block)."""
    block = (RESPONSE_HEADERS if only else b"") + literal(b"grpc-status", str(code).encode())
    return block + literal(b"grpc-message", grpc_message(details)) if details else block


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(len(payload) << 8 | kind, flags, stream) + payload


def send_all(sock: socket.socket, parts: List[Any]) -> None:
    """Write ``parts`` one after the other in as few ``sendmsg`` calls as the socket takes."""
    parts = [p for p in parts if len(p)]
    while parts:
        sent = sock.sendmsg(parts)
        while parts and sent >= len(parts[0]):
            sent -= len(parts[0])
            parts.pop(0)
        if sent:
            parts[0] = memoryview(parts[0]).cast("B")[sent:]


class CallEnded(Exception):
    """A call ends with a status (``code``, ``details``): raised by a handler, written as its trailers."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Method:
    """One method of the service: its handler and how its messages are read and written.

    ``run(message, reply)`` reads a request message (a bytes-like view) and calls ``reply(payload)`` once
    per answer; raises ``CallEnded`` for a status other than OK. ``streaming``: a request stream, answered
    per message in order; ``direct``: cheap enough (or never batched) to run on the connection's thread
    whenever nothing else of the connection runs; a method that is not direct always runs on the pool.
    """

    __slots__ = ("run", "streaming", "direct")

    def __init__(self, run: Callable[[memoryview, Callable[[Any], None]], None], *, streaming: bool = False,
                 direct: Callable[[], bool] = lambda: True) -> None:
        self.run, self.streaming, self.direct = run, streaming, direct


class Call:
    """A call (an HTTP/2 stream): the bytes of its messages as they come, its send window, whether it ended
    either side, its requests waiting to run and a unary call's answer held for its trailers."""

    __slots__ = ("id", "method", "chunks", "pending", "window", "unacked", "ended", "answered", "reset",
                 "queue", "running", "started", "skip", "held")

    def __init__(self, stream_id: int, method: Optional[Method], window: int) -> None:
        self.id, self.method = stream_id, method
        self.chunks = []  # type: List[memoryview]
        self.pending = 0  # bytes in chunks
        self.window, self.unacked = window, 0
        self.ended = self.answered = self.reset = self.running = self.started = False
        self.queue = []  # type: List[memoryview]
        self.skip = 0  # bytes of a refused message still to drop
        self.held: Optional[Tuple[List[Any], int]] = None  # a unary call's answer until its trailers

    def peek(self, size: int) -> memoryview:
        """The next ``size`` bytes received: a view where they are in one frame's payload, else joined."""
        if not size:
            return memoryview(b"")
        first = self.chunks[0]
        if len(first) >= size:
            return first[:size]
        joined, parts, need = bytearray(), iter(self.chunks), size
        while need:
            part = next(parts)
            joined += part[:need]
            need -= min(need, len(part))
        return memoryview(bytes(joined))

    def drop(self, size: int) -> None:
        """Forget the next ``size`` bytes received."""
        self.pending -= size
        while size:
            first = self.chunks[0]
            if len(first) > size:
                self.chunks[0] = first[size:]
                return
            size -= len(first)
            self.chunks.pop(0)
