"""The types of what the server's requests and answers carry besides JSON objects (``json_object.py``):
any JSON value, and the parts of a body sent as they lie.

The HTTP layer (``http_messages.py``, ``httpd.py``), the v2 protocol (``protocol.py``) and the
shared-memory extension (``shared_memory.py``) share them.

Python 3.8 and the standard library.
"""

# ruff: noqa: UP007, UP035
# (typing.Union on purpose: these aliases are evaluated on the device's Python 3.8)

from typing import Any, Union

__all__: list = []  # used by the runtime's modules only, the same layer

#: a value as ``json.loads`` gives it or ``json.dumps`` takes it (an object, a list, a string, a number,
#: a bool, None): a request's, unchecked until its reader checks it, or an answer's
JsonValue = Any
#: one part of a body sent as it lies (``socket.sendmsg`` takes a list of them): the JSON head, or a
#: binary tensor's memory (a view of a numpy array, never copied into one buffer)
BodyPart = Union[bytes, bytearray, memoryview]
