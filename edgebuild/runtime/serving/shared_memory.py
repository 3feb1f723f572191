"""Triton's system shared-memory extension: a client on the same device hands tensors over in /dev/shm.

A client creates a POSIX shared-memory object (``shm_open(KEY)``: the file ``/dev/shm/KEY``;
``tritonclient.utils.shared_memory.create_shared_memory_region``), registers a part of it with the
server under a region name (``key``, ``offset``, ``byte_size``), and then names the region in an
inference instead of sending the bytes:

- an input with the parameters ``shared_memory_region``, ``shared_memory_byte_size`` and
  (optionally) ``shared_memory_offset`` is read from the region: a read-only numpy view over the
  server's mapping, no copy;
- an output asked with the same parameters is written into the region, and the answer then
  carries its name, datatype and shape only: no data and no parameters, as Triton answers (Triton's
  C++ client, perf_analyzer's, reads ``binary_data_size`` from any HTTP output that has parameters).

``SystemSharedMemory`` keeps the registered regions (one ``mmap`` each, unmapped on unregister
and when the server stops); ``http_route`` answers the extension's HTTP endpoints
(``/v2/systemsharedmemory[/region/NAME]/register|unregister|status``); the gRPC calls
(``SystemSharedMemoryRegister/Status/Unregister``) call the same methods. Every mistake (an unknown
region, a key that is not in /dev/shm, an offset or size past the region, a size that does not fit
the tensor) is a ``BadRequest`` that says what was wrong.

CUDA shared memory (``/v2/cudasharedmemory``) is not supported (``CUDA_NOT_SUPPORTED`` says why
and what to use instead), but unregistering succeeds, with nothing to unregister, as Triton answers
when it has no CUDA region (``cuda_http_route``): clients unregister both kinds when they finish
(perf_analyzer does, and reports a failure).

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
import mmap
import os
import threading
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple, Union

import numpy as np

from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.wire_types import JsonValue

__all__ = []

#: a tensor's parameters that place it in a registered system shared-memory region (``shared_memory_place`` reads them)
SHM_REGION, SHM_OFFSET, SHM_SIZE = "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
#: a shared-memory place: (region, offset, byte_size)
ShmPlace = Tuple[str, int, int]
#: where POSIX shared-memory objects live (``shm_open`` names)
SHM_DIR = Path("/dev/shm")
CUDA_NOT_SUPPORTED = (
    "CUDA shared memory is not supported on this server; on a Jetson the CPU and GPU share memory, so register "
    "the tensors as system shared memory (/v2/systemsharedmemory) instead")


class _Region:
    def __init__(self, name: str, key: str, offset: int, byte_size: int, mapping: mmap.mmap) -> None:
        self.name, self.key, self.offset, self.byte_size, self.mapping = name, key, offset, byte_size, mapping
        #: what inputs are read as views of, made once
        self.view = memoryview(mapping).toreadonly()

    def status(self) -> JsonObject:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SystemSharedMemory:
    """The registered regions by name; safe to use from several threads."""

    def __init__(self, folder: Path = SHM_DIR) -> None:
        self.folder = Path(folder)
        self._regions = {}  # type: Dict[str, _Region]
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the shared-memory object ``key`` as region ``name``."""
        if not isinstance(name, str) or not name:
            raise BadRequest("a shared-memory region needs a name")
        if not isinstance(key, str) or not key.lstrip("/") or "/" in key.lstrip("/") or key.lstrip("/") in (".", ".."):
            raise BadRequest("shared-memory key {!r} is not a POSIX shared-memory name (shm_open's: one name, "
                             "optionally after a /)".format(key))
        for label, value, least in (("offset", offset, 0), ("byte_size", byte_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise BadRequest("shared-memory region {!r}: {} must be a whole number of at least {}, not {!r}".format(
                    name, label, least, value))
        path = self.folder / key.lstrip("/")
        with self._lock:
            if name in self._regions:
                raise BadRequest("shared-memory region {!r} is registered already (key {!r}); unregister it "
                                 "first".format(name, self._regions[name].key))
            try:
                fd = os.open(str(path), os.O_RDWR)
            except OSError as exc:
                raise BadRequest("shared-memory region {!r}: cannot open key {!r} ({}): {}".format(
                    name, key, path, exc.strerror or exc)) from None
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise BadRequest("shared-memory region {!r}: offset {} + byte_size {} is past the end of key {!r} "
                                     "({} bytes)".format(name, offset, byte_size, key, size))
                mapping = mmap.mmap(fd, offset + byte_size, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)  # the mapping keeps its own reference
            self._regions[name] = _Region(name, key, offset, byte_size, mapping)

    def status(self, name: Optional[str] = None) -> List[JsonObject]:
        """``[{name, key, offset, byte_size}]`` of one region or of every one."""
        with self._lock:
            if name is None:
                return [r.status() for r in self._regions.values()]
            return [self._region(name).status()]

    def unregister(self, name: Optional[str] = None) -> None:
        """Unmap one region (unknown: an error), or every one (``None``)."""
        with self._lock:
            names = list(self._regions) if name is None else [self._region(name).name]
            for each in names:
                _unmap(self._regions.pop(each))

    def _region(self, name: str) -> _Region:
        region = self._regions.get(name)
        if region is None:
            raise BadRequest("no shared-memory region {!r} is registered (registered: {})".format(
                name, sorted(self._regions) or "none"))
        return region

    def _span(self, tensor: str, name: str, offset: int, byte_size: int) -> Tuple[_Region, int]:
        """(region, offset in its mapping) of ``byte_size`` bytes at ``offset`` of region ``name``."""
        region = self._region(name)
        if offset + byte_size > region.byte_size:
            raise BadRequest("{}: shared_memory_offset {} + shared_memory_byte_size {} is past the end of region "
                             "{!r} ({} bytes)".format(tensor, offset, byte_size, name, region.byte_size))
        return region, region.offset + offset

    @staticmethod
    def check_read(tensor: str, byte_size: int, dtype: np.dtype, shape: List[int]) -> None:
        """That ``byte_size`` bytes hold input ``tensor`` (``shape`` of ``dtype``), else a ``BadRequest``."""
        count = 1
        for size in shape:
            count *= size
        needed = count * np.dtype(dtype).itemsize
        if byte_size != needed:
            raise BadRequest("input {!r}: shared_memory_byte_size {} does not fit shape {} of {}, which needs {} "
                             "bytes".format(tensor, byte_size, shape, np.dtype(dtype).name, needed))

    def read(self, tensor: str, name: str, offset: int, byte_size: int, dtype: np.dtype,
             shape: List[int]) -> np.ndarray:
        """Input ``tensor`` from the region: a read-only view (little-endian, C order) of the region's mapping
        (mapped once, at register), no copy."""
        self.check_read(tensor, byte_size, dtype, shape)
        with self._lock:
            region, start = self._span("input {!r}".format(tensor), name, offset, byte_size)
            view = region.view
        return np.frombuffer(view, dtype=np.dtype(dtype).newbyteorder("<"), count=byte_size // np.dtype(dtype).itemsize,
                             offset=start).reshape(shape)

    def write(self, tensor: str, name: str, offset: int, byte_size: int, array: np.ndarray) -> None:
        """Output ``tensor`` into the region (little-endian, C order); the region must hold all of it."""
        raw = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        if raw.nbytes > byte_size:
            raise BadRequest("output {!r}: shared_memory_byte_size {} is too small for its {} bytes (shape {})".format(
                tensor, byte_size, raw.nbytes, list(array.shape)))
        with self._lock:
            region, start = self._span("output {!r}".format(tensor), name, offset, byte_size)
            region.mapping[start:start + raw.nbytes] = raw.reshape(-1).view(np.uint8).data

    def write_outputs(self, asked: Dict[str, Tuple[str, int, int]], outputs: Dict[str, np.ndarray]) -> FrozenSet[str]:
        """Write each output ``asked`` (name -> region, offset, byte_size) there; the names written, whose
        answers carry no data."""
        for name, (region, offset, size) in asked.items():
            self.write(name, region, offset, size, outputs[name])
        return frozenset(asked)

    def close(self) -> None:
        """Unmap every region (the server stops)."""
        self.unregister(None)


def _unmap(region: _Region) -> None:
    try:
        region.view.release()
        region.mapping.close()
    except BufferError:
        pass  # an inference still holds a view: the mapping goes with the last one


def shared_memory_place(where: str, parameters: JsonValue) -> Optional[ShmPlace]:
    """(region, offset, byte_size) a tensor's parameters give in system shared memory; None where they name no
    region (``where``: the tensor, for the message)."""
    if not isinstance(parameters, dict) or parameters.get(SHM_REGION) is None:
        return None
    region, offset, size = parameters[SHM_REGION], parameters.get(SHM_OFFSET, 0), parameters.get(SHM_SIZE)
    if not isinstance(region, str):
        raise BadRequest("{}: {} must be a region's name, not {!r}".format(where, SHM_REGION, region))
    return region, _byte_count(where, SHM_OFFSET, offset), _byte_count(where, SHM_SIZE, size)


def _byte_count(where: str, key: str, value: JsonValue) -> int:
    """``value`` where it is a whole number of bytes, else a ``BadRequest`` naming the tensor and ``key``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest("{}: {} must be a whole number of bytes (at least 0), not {!r}".format(where, key, value))
    return value


def _action(parts: List[str]) -> Tuple[Optional[str], Optional[str]]:
    """(region name or None, action or None) of a shared-memory route's ``[region, NAME,] ACTION``."""
    name = None  # type: Optional[str]
    if len(parts) == 3 and parts[0] == "region":
        name, parts = parts[1], parts[2:]
    return name, parts[0] if len(parts) == 1 else None


def cuda_http_route(method: str, parts: List[str]) -> Tuple[int, JsonValue]:
    """(status, JSON answer) of ``/v2/cudasharedmemory/`` + ``parts``: unregistering (all regions or one)
    succeeds, since no CUDA region is ever registered, as Triton answers when it has none; everything else
    is 501 with ``CUDA_NOT_SUPPORTED``."""
    if _action(parts)[1] == "unregister" and method == "POST":
        return 200, {}
    return 501, {"error": CUDA_NOT_SUPPORTED}


def http_route(memory: SystemSharedMemory, method: str, parts: List[str],
               body: Union[bytes, bytearray]) -> Tuple[int, JsonValue]:
    """(status, JSON answer) of ``/v2/systemsharedmemory/`` + ``parts`` (``[region, NAME,] ACTION``).

    Raises ``BadRequest`` for a request the registry refuses; 404 for an unknown route, 405 a wrong method.
    """
    name, action = _action(parts)
    wanted = {"status": "GET", "register": "POST", "unregister": "POST"}.get(action or "")
    if wanted is None or (action == "register" and name is None):
        return 404, {"error": "no such endpoint: /v2/systemsharedmemory/{}".format("/".join(parts))}
    if method != wanted and not (wanted == "GET" and method == "HEAD"):
        return 405, {"error": "{} takes {}, not {}".format(action, wanted, method)}
    if action == "status":
        return 200, memory.status(name)
    if action == "unregister":
        memory.unregister(name)
        return 200, {}
    try:
        request = json.loads(bytes(body) or b"{}")
    except ValueError as exc:
        raise BadRequest("the body is not valid JSON: {}".format(exc)) from None
    if not isinstance(request, dict) or not isinstance(request.get("key"), str):
        raise BadRequest('register takes {"key": KEY, "offset": N, "byte_size": N}')
    assert name is not None
    byte_size = request.get("byte_size")  # type: JsonValue
    memory.register(name, request["key"], request.get("offset", 0), byte_size)  # which checks both numbers
    return 200, {}
