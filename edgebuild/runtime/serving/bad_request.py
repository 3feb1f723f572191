"""``BadRequest``: a request the server refuses with a 400 (gRPC: INVALID_ARGUMENT), whichever part of
the server finds the mistake: the v2 protocol (``protocol.py``), the shared-memory extension
(``shared_memory.py``) or the gRPC reading of a request (``grpc_server.py``).

Its own module, below all of them, so that none has to import another to refuse a request.

Python 3.8 and the standard library.
"""

__all__ = []  # used only inside the runtime layer


class BadRequest(Exception):
    """A request the server refuses with a 400."""
