"""The KServe / Triton v2 inference protocol: requests in, responses and metadata out.

No sockets here: the HTTP layer (``server.py``) hands this module a body and headers and sends
what it returns; the model service (``service.py``) runs the arrays, and ``model_answers.py`` joins the
two (it knows the model service; this module does not).

- tensors as JSON (``data``: a flat list in C order), or raw in the body with the binary tensor
  extension: the body is ``Inference-Header-Content-Length`` bytes of JSON followed by the
  tensors of the inputs that give ``parameters.binary_data_size`` (little-endian, C order);
  outputs go back raw when the request asks (``binary_data_output`` for all, ``binary_data``
  per output), which spares the JSON encoding of an image;
- ``parameters.detections`` (true or false) chooses, for a raw-head detector or a pose, segmentation or
  OBB model's raw outputs, between the detections the server decodes and the raw tensors (``AnswerForms``:
  what a model can answer);
- a request that does not fit the model (unknown input, datatype, shape outside the profile,
  sizes that do not add up) is a ``BadRequest`` with a message, which the server answers with 400.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
import math
import sys
from typing import AbstractSet, Dict, List, Optional, Tuple, Union

import numpy as np

from edgebuild import __version__
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.shared_memory import ShmPlace, SystemSharedMemory, shared_memory_place
from edgebuild.runtime.serving.wire_types import BodyPart, JsonValue

__all__ = []

#: KServe v2 datatypes for the numpy types a vision model takes and returns
DATATYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32,
             "INT8": np.int8, "UINT8": np.uint8, "BOOL": np.bool_}
NUMPY_TO_DATATYPE = {np.dtype(v).name: k for k, v in DATATYPES.items()}
HEADER_LENGTH = "Inference-Header-Content-Length"
#: the answer to ``GET /v2`` ($metadata_server_response)
SERVER_METADATA = {"name": "edgebuild", "version": __version__,
                   "extensions": ["binary_tensor_data", "model_configuration", "system_shared_memory"]}
#: the v2 ``platform`` of a backend, by the start of its name (Triton's platform names)
PLATFORMS = (("tensorrt", "tensorrt_plan"), ("onnxruntime", "onnxruntime_onnx"))


class InputSpec:
    """One model input: its v2 datatype and the profile's min, opt and max shapes."""

    def __init__(self, name: str, min_shape: List[int], opt_shape: List[int], max_shape: List[int],
                 datatype: str = "FP32") -> None:
        self.name, self.datatype = name, datatype
        self.min_shape, self.opt_shape, self.max_shape = list(min_shape), list(opt_shape), list(max_shape)

    def as_dict(self) -> JsonObject:
        """The v2 ``$metadata_tensor``: name, datatype, shape with -1 for a dynamic axis."""
        shape = [-1 if lo != hi else lo for lo, hi in zip(self.min_shape, self.max_shape)]
        return {"name": self.name, "datatype": self.datatype, "shape": shape}

    def profile(self) -> Dict[str, List[int]]:
        return {"min_shape": self.min_shape, "opt_shape": self.opt_shape, "max_shape": self.max_shape}


class AnswerForms:
    """What a model can answer: its raw outputs and, for a raw-head detector or a pose, segmentation or OBB
    model's raw outputs, the detections the server decodes.

    ``decoded``: the outputs' names when the server decodes (None: it cannot: a classifier, NMS inside, a
    recipe that does not name the outputs); ``decode``: whether it does when a request does not say;
    ``detects``: the raw outputs are detections already (NMS inside), so a request asking for detections
    gets them as they are.
    """

    def __init__(self, raw: List[str], decoded: Optional[List[str]] = None, decode: bool = False,
                 detects: bool = False) -> None:
        self.raw, self.decoded, self.detects = list(raw), decoded, detects
        self.decode = bool(decode and decoded is not None)

    def choose(self, asked: JsonValue) -> Tuple[bool, List[str]]:
        """(decode, the answer's output names) for a request's ``parameters.detections`` (None: not given)."""
        if asked is None:
            asked = self.decode
        if not isinstance(asked, bool):
            raise BadRequest('parameters.detections must be true or false, not {!r}'.format(asked))
        if asked and self.decoded is not None:
            return True, list(self.decoded)
        if asked and not self.detects:
            raise BadRequest("parameters.detections: this model answers {} and the server cannot decode them into "
                             "detections (a classifier's logits, or a model folder whose recipe does not name its "
                             "task's outputs: compile it again with this edgebuild); leave it out".format(self.raw))
        return False, list(self.raw)


class Inference:
    """A parsed v2 inference request: input arrays, the outputs asked for (None: all), which go back binary,
    whether the server decodes the outputs into detections (``decode``), and the outputs asked into system
    shared memory (``shared_outputs``: name -> (region, offset, byte_size))."""

    def __init__(self, inputs: Dict[str, np.ndarray], outputs: Optional[List[str]], binary_outputs: List[str],
                 request_id: Optional[str], decode: bool = False,
                 shared_outputs: Optional[Dict[str, Tuple[str, int, int]]] = None) -> None:
        self.inputs, self.outputs, self.binary_outputs, self.request_id = inputs, outputs, binary_outputs, request_id
        self.decode = decode
        self.shared_outputs = shared_outputs or {}


def header_length(value: Optional[str]) -> Optional[int]:
    """The ``Inference-Header-Content-Length`` header as a number (None: no binary tensors)."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        raise BadRequest("{} {!r} is not a number".format(HEADER_LENGTH, value)) from None


def parse_request(body: bytes, header_length: Optional[int], inputs: Dict[str, InputSpec],
                  output_names: List[str]) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """(input arrays, names of the outputs to send as binary) of a v2 inference request."""
    parsed = parse_inference(body, header_length, inputs, output_names)
    return parsed.inputs, parsed.binary_outputs


#: the largest JSON header whose checked reading is kept for the next request with the same header
_CACHED_HEADER_BYTES = 4096
#: readings kept per cache (a client sends the same header every time; past this many, the cache starts over)
_READINGS_KEPT = 64
#: one input of a reading: (name, dtype, element count, shape, where its array comes from: an offset into the binary
#: tensors, a shared-memory place, or the array of its JSON data)
_Source = Tuple[str, np.dtype, int, List[int], Union[int, ShmPlace, np.ndarray]]


class _HeaderReading:
    """A request header read and checked: where each input's array comes from, and what goes back. The same
    header and body length give the same reading, so the server keeps it (``parse_inference``'s ``cache``) and
    the next such request only makes its arrays."""

    __slots__ = ("sources", "asked", "binary", "request_id", "decode", "shared", "cacheable")
    sources: List[_Source]
    asked: Optional[List[str]]
    binary: List[str]
    request_id: Optional[str]
    decode: bool
    shared: Dict[str, ShmPlace]
    cacheable: bool

    def inference(self, binary: Union[bytes, memoryview], shared_memory: Optional[SystemSharedMemory]) -> Inference:
        arrays = {}
        for name, dtype, count, shape, where in self.sources:
            if isinstance(where, int):  # an offset into the binary tensors: a view of the body
                arrays[name] = np.frombuffer(binary, dtype=dtype, count=count, offset=where).reshape(shape)
            elif isinstance(where, tuple):  # (region, offset, byte_size) of system shared memory: a view of it
                if shared_memory is None:  # not met: a reading that takes shared memory is made only where it is taken
                    raise BadRequest("input {!r} asks for shared memory, which this server does not take here".format(
                        name))
                arrays[name] = shared_memory.read(name, where[0], where[1], where[2], dtype, shape)
            else:  # JSON data, read already (a reading with any is not kept)
                arrays[name] = where
        return Inference(arrays, self.asked, self.binary, self.request_id, self.decode, self.shared)


#: one model's header readings by (JSON header, binary bytes, whether shared memory is taken):
#: ``parse_inference``'s ``cache``
HeaderReadingCache = Dict[Tuple[bytes, int, bool], _HeaderReading]


def parse_inference(body: Union[bytes, bytearray], header_length: Optional[int], inputs: Dict[str, InputSpec],
                    output_names: Union[List[str], AnswerForms], shared_memory: Optional[SystemSharedMemory] = None,
                    cache: Optional[HeaderReadingCache] = None) -> Inference:
    """A v2 inference request ($inference_request), checked against the model's inputs and outputs.

    ``output_names``: the outputs, or the forms a model can answer (then ``parameters.detections`` chooses);
    ``shared_memory``: the registered system shared-memory regions (``shared_memory.SystemSharedMemory``)
    inputs may be read from; ``cache``: a dict kept for one model (its inputs and forms), where the checked
    reading of a JSON header is kept for the next request with the same header (binary tensors and shared
    memory: a client sends the same header every time; the arrays are made anew each time).
    """
    binary = b""  # type: Union[bytes, memoryview]
    if header_length is not None:
        if not 0 <= header_length <= len(body):
            raise BadRequest("{} {} is outside the body of {} bytes".format(HEADER_LENGTH, header_length, len(body)))
        view = memoryview(body)  # the tensors are read where they lie: the arrays are views of the body
        body, binary = bytes(view[:header_length]), view[header_length:]
    key = None
    if len(body) <= _CACHED_HEADER_BYTES:  # the JSON (a whole body without binary tensors: the buffer it was read in)
        body = body if isinstance(body, bytes) else bytes(body)
        key = (body, len(binary), shared_memory is not None)
    reading = cache.get(key) if cache is not None and key is not None else None
    if reading is None:
        reading = _read_header(body, len(binary), header_length is not None, inputs, output_names, shared_memory)
        if cache is not None and key is not None and reading.cacheable:
            if len(cache) >= _READINGS_KEPT:
                cache.clear()
            cache[key] = reading
    return reading.inference(binary, shared_memory)


def _read_header(body: Union[bytes, bytearray], binary_size: int, has_header: bool, inputs: Dict[str, InputSpec],
                 output_names: Union[List[str], AnswerForms],
                 shared_memory: Optional[SystemSharedMemory]) -> _HeaderReading:
    try:
        request = json.loads(body)
    except ValueError as exc:
        raise BadRequest("the body is not valid JSON: {}".format(exc)) from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise BadRequest('the body must be an object with an "inputs" list (KServe v2 inference request)')
    reading = _HeaderReading()
    reading.sources, reading.cacheable = [], True
    offset, seen = 0, set()
    for item in request["inputs"]:
        source, used = _input(item, inputs, binary_size, offset, has_header, shared_memory)
        reading.sources.append(source)
        reading.cacheable = reading.cacheable and isinstance(source[4], (int, tuple))
        seen.add(source[0])
        offset += used
    if offset != binary_size:
        raise BadRequest("{} binary bytes after the inputs' binary_data_size; they must add up".format(
            binary_size - offset))
    missing = sorted(set(inputs) - seen)
    if missing:
        raise BadRequest("inputs {} are missing".format(missing))
    reading.request_id = request.get("id")
    if reading.request_id is not None and not isinstance(reading.request_id, str):
        raise BadRequest('"id" must be a string')
    parameters = request.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BadRequest('"parameters" must be an object')
    forms = output_names if isinstance(output_names, AnswerForms) else AnswerForms(output_names)
    reading.decode, names = forms.choose(parameters.get("detections"))
    reading.asked = _asked_outputs(request, names)
    reading.shared = {}
    for item in request.get("outputs") or []:
        place = shared_memory_place("output {!r}".format(item["name"]), item.get("parameters"))
        if place is not None:
            if shared_memory is None:
                raise BadRequest("output {!r} asks for shared memory, which this server does not take here".format(
                    item["name"]))
            reading.shared[item["name"]] = place
    reading.binary = [n for n in _binary_outputs(request, names) if n not in reading.shared]
    return reading


def check_outputs(asked: List[str], output_names: List[str]) -> List[str]:
    """``asked``, each an output the model answers (else a ``BadRequest`` naming the others)."""
    unknown = [n for n in asked if n not in output_names]
    if unknown and output_names:
        raise BadRequest("unknown outputs {}; the model's outputs are {}".format(unknown, output_names))
    return asked


def _asked_outputs(request: JsonObject, output_names: List[str]) -> Optional[List[str]]:
    """The outputs a request names (None: it names none, so all of them), each one the model has."""
    asked = request.get("outputs")
    if asked is None:
        return None
    if not isinstance(asked, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in asked):
        raise BadRequest('"outputs" must be a list of objects with a "name"')
    return check_outputs([o["name"] for o in asked], output_names)


def _input(item: JsonValue, inputs: Dict[str, InputSpec], binary_size: int, offset: int,
           has_header: bool, shared_memory: Optional[SystemSharedMemory] = None) -> Tuple[_Source, int]:
    """((name, dtype, element count, shape, where its array comes from), binary bytes used) of one entry of
    ``inputs``; where: an offset into the binary tensors, a shared-memory (region, offset, byte_size), or
    the array of its JSON data."""
    if not isinstance(item, dict):
        raise BadRequest("every entry of inputs must be an object with name, shape, datatype, data")
    name = item.get("name")  # type: JsonValue
    shape = item.get("shape")  # type: JsonValue
    dtype, count = check_tensor(name, item.get("datatype"), shape, inputs)  # an input's name, a list of integers
    place = shared_memory_place("input {!r}".format(name), item.get("parameters"))
    if place is not None:
        if shared_memory is None:
            raise BadRequest("input {!r} asks for shared memory, which this server does not take here".format(name))
        shared_memory.check_read(name, place[2], dtype, shape)
        return (name, dtype, count, shape, place), 0
    size = (item.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        needed = count * dtype.itemsize
        if not has_header:
            raise BadRequest("input {!r} gives binary_data_size but the request has no {} header".format(
                name, HEADER_LENGTH))
        if size != needed or offset + size > binary_size:
            raise BadRequest("input {!r}: binary_data_size {} with {} binary bytes left; shape {} of {} "
                             "needs {}".format(name, size, binary_size - offset, shape, inputs[name].datatype, needed))
        return (name, dtype.newbyteorder("<"), count, shape, offset), size
    data = item.get("data")
    if not isinstance(data, list):
        raise BadRequest("input {!r}: data must be a flat list of numbers".format(name))
    try:
        array = np.asarray(data, dtype=dtype)
    except (TypeError, ValueError):
        raise BadRequest("input {!r}: data holds values that are not {} numbers".format(
            name, inputs[name].datatype)) from None
    if array.ndim != 1 or array.size != count:
        raise BadRequest("input {!r}: data has {} values, shape {} needs {}".format(name, array.size, shape, count))
    return (name, dtype, count, shape, array.reshape(shape)), 0


def check_tensor(name: JsonValue, datatype: JsonValue, shape: JsonValue,
                 inputs: Dict[str, InputSpec]) -> Tuple[np.dtype, int]:
    """(numpy dtype, element count) of an input tensor as a request gives it (unchecked), checked against the
    model's inputs and profile."""
    spec = inputs.get(name)
    if spec is None:
        raise BadRequest("unknown input {!r}; the model's inputs are {}".format(name, sorted(inputs)))
    if datatype != spec.datatype:
        raise BadRequest("input {!r} has datatype {!r}; the model takes {}".format(name, datatype, spec.datatype))
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise BadRequest("input {!r}: shape must be a list of integers".format(name))
    if len(shape) != len(spec.min_shape) or any(d < lo or d > hi for d, lo, hi in
                                                zip(shape, spec.min_shape, spec.max_shape)):
        raise BadRequest("input {!r} shape {} is outside the profile: from {} to {}".format(
            name, shape, spec.min_shape, spec.max_shape))
    count = 1
    for size in shape:
        count *= size
    return np.dtype(DATATYPES[spec.datatype]), count


def _binary_outputs(request: JsonObject, output_names: List[str]) -> List[str]:
    everything = bool((request.get("parameters") or {}).get("binary_data_output"))
    asked = request.get("outputs")
    if not isinstance(asked, list):
        return list(output_names) if everything else []
    # _asked_outputs found a name in every output asked for
    return [o["name"] for o in asked if isinstance(o, dict)
            and (o.get("parameters") or {}).get("binary_data", everything)]


def encode_response(model_name: str, model_version: str, outputs: Dict[str, np.ndarray], binary_outputs: List[str],
                    parameters: JsonObject, request_id: Optional[str] = None,
                    placed: AbstractSet[str] = frozenset()) -> Tuple[bytes, str, Dict[str, str]]:
    """(body, content type, extra headers) of a v2 inference response (``request_id``: the request's ``id``;
    ``placed``: the outputs written into shared memory, described by name, datatype and shape only: no data
    and no parameters, as Triton answers them; its C++ client reads ``binary_data_size`` from any output
    that has parameters)."""
    parts, content_type, headers = response_parts(model_name, model_version, outputs, binary_outputs, parameters,
                                                  request_id, placed)
    return b"".join(parts), content_type, headers


def response_parts(model_name: str, model_version: str, outputs: Dict[str, np.ndarray], binary_outputs: List[str],
                   parameters: JsonObject, request_id: Optional[str] = None,
                   placed: AbstractSet[str] = frozenset()) -> Tuple[List[BodyPart], str, Dict[str, str]]:
    """``encode_response`` as the parts of the body to send one after the other, never joined: the JSON,
    then each binary output's memory (the array itself where it is C-ordered little-endian, no copy)."""
    described, tail = [], []  # type: List[JsonObject], List[BodyPart]
    for name, array in outputs.items():
        entry = {"name": name, "shape": list(array.shape), "datatype": datatype(array)}  # type: JsonObject
        if name in placed:  # in shared memory: name, datatype and shape, nothing else
            described.append(entry)
            continue
        if name in binary_outputs:
            raw = array if array.flags.c_contiguous and array.dtype.byteorder in _LITTLE else \
                np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
            entry["parameters"] = {"binary_data_size": raw.nbytes}
            tail.append(raw.data.cast("B"))
        else:
            entry["data"] = _flat(array)
        described.append(entry)
    response = {"model_name": model_name, "model_version": model_version, "outputs": described,
                "parameters": parameters}  # type: JsonObject
    if request_id is not None:
        response["id"] = request_id
    head = json.dumps(response).encode()
    if not tail:
        return [head], "application/json", {}
    return [head] + tail, "application/octet-stream", {HEADER_LENGTH: str(len(head))}


def platform(backend: str) -> str:
    """The v2 ``platform`` of a backend name (``tensorrt 10.3.0`` -> ``tensorrt_plan``); ONNX until one is loaded."""
    return next((p for prefix, p in PLATFORMS if backend.startswith(prefix)), "onnxruntime_onnx")


def model_metadata(name: str, version: str, backend: str, inputs: Dict[str, InputSpec],
                   outputs: List[JsonObject], parameters: JsonObject) -> JsonObject:
    """The answer to ``GET /v2/models/NAME`` ($metadata_model_response).

    ``outputs`` are ``$metadata_tensor`` objects; the profile's min, opt and max shapes of each
    input and the backend's details go under ``parameters``, outside the tensors clients parse.
    """
    return {"name": name, "versions": [version], "platform": platform(backend),
            "inputs": [s.as_dict() for s in inputs.values()], "outputs": outputs,
            "parameters": dict(parameters, profiles={n: s.profile() for n, s in inputs.items()})}


#: byte orders that are little-endian on this machine (or do not matter: one byte)
_LITTLE = ("<", "|") + (("=",) if sys.byteorder == "little" else ())
#: the v2 datatype by numpy dtype (``dtype.name`` is a Python property in numpy 2: slow per request)
_DATATYPE_OF = {np.dtype(v): k for k, v in DATATYPES.items()}


def datatype(array: np.ndarray) -> str:
    found = _DATATYPE_OF.get(array.dtype)
    return found if found is not None else NUMPY_TO_DATATYPE.get(array.dtype.name, "FP32")


def _flat(array: np.ndarray) -> List[Union[bool, int, float, None]]:
    values = array.reshape(-1).tolist()
    if array.dtype.kind == "f":
        return [v if math.isfinite(v) else None for v in values]
    return values
