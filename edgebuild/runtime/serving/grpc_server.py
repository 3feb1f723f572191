"""KServe v2 over gRPC (``inference.GRPCInferenceService``) beside the HTTP server: ``serve --grpc-port``.

What Triton's gRPC clients speak (``tritonclient.grpc``, DeepStream's ``nvinferserver``), answered by
the same model services, the same v2 checks (``protocol.py``) and the same system shared-memory
regions (``shared_memory.py``) as HTTP:

- ``ServerLive``, ``ServerReady`` (every model warm and accepted), ``ModelReady``, ``ServerMetadata``,
  ``ModelMetadata``, ``ModelConfig`` (Triton's ``ModelConfig``, as ``GET /v2/models/NAME/config``),
  ``RepositoryIndex`` (the models served, READY, LOADING or UNAVAILABLE with the reason);
- ``ModelInfer``: inputs as ``raw_input_contents`` (what tritonclient sends), typed ``contents``, or a
  registered shared-memory region; outputs as ``raw_output_contents`` (one entry per output, in order;
  an output written to shared memory has an empty entry and no parameters, as Triton answers), with
  ``parameters.detections`` choosing detections or the raw head, as over HTTP;
- ``ModelStreamInfer`` (what ``start_stream``/``async_stream_infer`` and ``perf_analyzer --streaming``
  use): a ``ModelInfer`` answer per request, in order; an error is an answer with ``error_message``;
- ``SystemSharedMemoryRegister/Status/Unregister``; ``CudaSharedMemoryUnregister`` succeeds (no CUDA region is
  ever registered); the rest of CUDA shared memory, ``RepositoryModelLoad/Unload`` and ``ModelStatistics``
  (``/metrics`` has them) are answered UNIMPLEMENTED with why.

``ModelInfer`` and ``ModelStreamInfer`` read and write their tensors' bytes in place (``read_request``,
``write_reply``): protobuf's parser and writer copy each tensor two or three times.

Errors map to gRPC status codes: a bad request INVALID_ARGUMENT (HTTP's 400), an unknown model or
version NOT_FOUND (404), a model not ready UNAVAILABLE (503), a failed inference INTERNAL (500).

The wire types are NVIDIA's own (``tritonclient.grpc.service_pb2``, ``model_config_pb2``), so the
schema cannot drift from Triton's; tritonclient[grpc] (and grpcio under it) is imported here only, when a gRPC
port is asked for (``require_grpc`` says what to install when they are missing).

The transport is ``grpc_http2.py`` (edgebuild's HTTP/2, not grpcio's server: see there why).

Python 3.8, the standard library and numpy; grpcio, tritonclient[grpc] and hpack where gRPC is served.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

import time
from types import ModuleType
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    List,
    Mapping,
    MutableMapping,
    NoReturn,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import numpy as np

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving import model_answers, protocol
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.grpc_http2 import GRPCTransport
from edgebuild.runtime.serving.http2_wire import CallEnded, Method
from edgebuild.runtime.serving.protocol import InputSpec
from edgebuild.runtime.serving.service import ModelService
from edgebuild.runtime.serving.shared_memory import CUDA_NOT_SUPPORTED, SystemSharedMemory, shared_memory_place

if TYPE_CHECKING:  # for the annotations (never evaluated); where gRPC is served, the functions import them
    import grpc
    from google.protobuf.message import Message
    from tritonclient.grpc import service_pb2, service_pb2_grpc

__all__ = []

INSTALL = "pip3 install grpcio 'tritonclient[grpc]' hpack (the edgebuild[grpc] extra)"
#: the typed ``InferTensorContents`` field of each datatype (FP16 has none: it comes raw)
_CONTENTS = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents", "INT32": "int_contents",
             "INT8": "int_contents", "UINT8": "uint_contents", "BOOL": "bool_contents"}
_NOT_LOADABLE = ("this server serves the models of its folder, fixed when it starts; a new model comes as an OTA "
                 "update (edgebuild package, then ota-install on the device)")
#: what the call that ``shared`` runs returns
T = TypeVar("T")
#: why a call failed: its gRPC status code and message
Problem = Tuple["grpc.StatusCode", str]


#: a tensor's bytes as they go on or come off the wire: bytes, or a view of them or of an array's memory
Buffer = Union[bytes, memoryview]
#: the field numbers of ``raw_input_contents`` (ModelInferRequest), ``raw_output_contents`` (ModelInferResponse)
#: and ``infer_response`` (ModelStreamInferResponse) in Triton's grpc_service.proto
_RAW_INPUT_FIELD, _RAW_OUTPUT_FIELD, _STREAM_RESPONSE_FIELD = 7, 6, 2


class Received:
    """A ``ModelInferRequest`` as read off the wire (``read_request``): the message without its
    ``raw_input_contents``, and those entries as views of the bytes received (no copy)."""

    __slots__ = ("message", "raw")

    def __init__(self, message: service_pb2.ModelInferRequest, raw: List[memoryview]) -> None:
        self.message = message
        self.raw = raw


class Reply:
    """An answer as it goes on the wire (``write_reply``): the message, and the outputs'
    ``raw_output_contents`` beside it; ``whole``: the message is the answer as it is (on a stream: a
    ``ModelStreamInferResponse`` with an error), not a ``ModelInferResponse`` to wrap in one."""

    __slots__ = ("message", "raw", "whole")

    def __init__(self, message: Message, raw: List[Buffer], whole: bool = False) -> None:
        self.message = message
        self.raw = raw
        self.whole = whole


def _varint(data: Buffer, at: int) -> Tuple[int, int]:
    """The protobuf varint at ``data[at:]`` and where it ends."""
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a truncated or overlong varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _key(field: int, length: int) -> bytes:
    """A length-delimited field's tag and length, as protobuf writes them."""
    out, value = bytearray([field << 3 | 2]), length
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_request(data: Buffer, parse: Callable[[bytes], service_pb2.ModelInferRequest]) -> Received:
    """A serialized ``ModelInferRequest`` read with its ``raw_input_contents`` left where they are.

    Protobuf's parser would copy each tensor twice (into the message, then into a ``bytes`` on access):
    the top-level fields are walked here (a handful), the tensors' bytes kept as views of ``data``, and the
    rest (names, shapes, parameters: small) parsed by ``parse`` (``ModelInferRequest.FromString``).
    """
    view, at, end = memoryview(data), 0, len(data)
    raw, rest = [], []  # type: List[memoryview], List[memoryview]
    while at < end:
        start = at
        key, at = _varint(data, at)
        kind = key & 7
        if kind == 2:
            length, at = _varint(data, at)
            if key >> 3 == _RAW_INPUT_FIELD:
                raw.append(view[at:at + length])
                at += length
                if at > end:
                    raise ValueError("a truncated raw_input_contents entry")
                continue
            at += length
        elif kind == 0:
            _, at = _varint(data, at)
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            raise ValueError("wire type {} of field {}".format(kind, key >> 3))
        rest.append(view[start:at])
    if at != end:
        raise ValueError("a truncated field")
    return Received(parse(bytes(data) if not raw else b"".join(rest)), raw)


def write_reply(reply: Reply) -> bytes:
    """A ``ModelInferResponse`` as one ``bytes`` (``reply_parts`` joined): what protobuf would write."""
    return b"".join(reply_parts(reply))


def write_stream_reply(reply: Reply) -> bytes:
    """A ``ModelStreamInferResponse``: the inference's reply as its ``infer_response``, or the error reply."""
    return b"".join(reply_parts(reply, stream=True))


def read_infer_request(data: Buffer) -> Received:
    """``read_request`` with Triton's ``ModelInferRequest``."""
    from tritonclient.grpc import service_pb2

    return read_request(data, service_pb2.ModelInferRequest.FromString)


class ServicerContext(Protocol):
    """What the handlers use of a call's ``grpc.ServicerContext``: ``abort`` ends the call (it raises)."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...


def require_grpc() -> None:
    """Raise ``CapabilityMissing`` (what to install) unless grpcio, tritonclient's gRPC stubs and hpack import."""
    try:
        import grpc  # noqa: F401
        import hpack  # noqa: F401
        from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc  # noqa: F401
    except ImportError as exc:
        raise CapabilityMissing(
            "serving gRPC needs grpcio, tritonclient[grpc] and hpack, which are not installed here ({})".format(exc),
            hint="install them ({}), or serve HTTP only with --grpc-port 0".format(INSTALL)) from None


def parameters(entries: Mapping[str, service_pb2.InferParameter]) -> JsonObject:
    """A ``map<string, InferParameter>`` as a dict of Python values."""
    found = {}
    for key, value in entries.items():
        which = value.WhichOneof("parameter_choice")
        found[key] = getattr(value, which) if which else None
    return found


def _set_parameters(entries: MutableMapping[str, service_pb2.InferParameter], values: JsonObject) -> None:
    for key, value in values.items():
        if isinstance(value, bool):
            entries[key].bool_param = value
        elif isinstance(value, int):
            entries[key].int64_param = value
        elif isinstance(value, float):
            entries[key].double_param = value
        elif value is not None:
            entries[key].string_param = str(value)


def parse_request(request: service_pb2.ModelInferRequest, inputs: Dict[str, InputSpec], forms: protocol.AnswerForms,
                  memory: SystemSharedMemory, raw: Optional[Sequence[Buffer]] = None) -> protocol.Inference:
    """A ``ModelInferRequest`` checked against the model as HTTP checks a v2 request (``BadRequest`` if wrong).

    ``raw``: its ``raw_input_contents`` as read off the wire (``read_request``), else the message's."""
    raw = request.raw_input_contents if raw is None else raw
    used = 0
    arrays = {}  # type: Dict[str, np.ndarray]
    for tensor in request.inputs:
        shape = [int(d) for d in tensor.shape]
        dtype, count = protocol.check_tensor(tensor.name, tensor.datatype, shape, inputs)
        if tensor.name in arrays:
            raise BadRequest("input {!r} is given twice".format(tensor.name))
        # parameters only where there are some (most requests have none: no dict, no message string)
        place = shared_memory_place("input {!r}".format(tensor.name),
                                    parameters(tensor.parameters)) if tensor.parameters else None
        if place is not None:
            arrays[tensor.name] = memory.read(tensor.name, place[0], place[1], place[2], dtype, shape)
        elif used < len(raw):  # raw_input_contents: one entry per input not in shared memory, in order
            data, used = raw[used], used + 1
            if len(data) != count * dtype.itemsize:
                raise BadRequest("input {!r}: raw_input_contents holds {} bytes; shape {} of {} needs {}".format(
                    tensor.name, len(data), shape, tensor.datatype, count * dtype.itemsize))
            arrays[tensor.name] = np.frombuffer(data, dtype=dtype.newbyteorder("<"), count=count).reshape(shape)
        else:
            arrays[tensor.name] = _typed(tensor, dtype, count, shape)
    if used != len(raw):
        raise BadRequest("raw_input_contents has {} entries for the {} inputs that take one".format(len(raw), used))
    missing = sorted(set(inputs) - set(arrays))
    if missing:
        raise BadRequest("inputs {} are missing".format(missing))
    decode, names = forms.choose(parameters(request.parameters).get("detections") if request.parameters else None)
    asked = protocol.check_outputs([o.name for o in request.outputs], names) if request.outputs else None
    shared = {}
    for output in request.outputs:
        if output.parameters:
            place = shared_memory_place("output {!r}".format(output.name), parameters(output.parameters))
            if place is not None:
                shared[output.name] = place
    return protocol.Inference(arrays, asked, [], request.id or None, decode, shared)


def _typed(tensor: service_pb2.ModelInferRequest.InferInputTensor, dtype: np.dtype, count: int,
           shape: List[int]) -> np.ndarray:
    field = _CONTENTS.get(tensor.datatype)
    values = getattr(tensor.contents, field) if field else ()
    if len(values) != count:
        raise BadRequest("input {!r}: {} holds {} values, shape {} needs {} (or send raw_input_contents)".format(
            tensor.name, "contents." + (field or "<none for {}>".format(tensor.datatype)), len(values), shape, count))
    return np.asarray(values, dtype=dtype).reshape(shape)


def _servicer(services: Dict[str, ModelService],
              memory: SystemSharedMemory) -> service_pb2_grpc.GRPCInferenceServiceServicer:
    import grpc
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2, service_pb2_grpc
    from tritonclient.grpc import service_pb2 as pb

    codes = grpc.StatusCode

    def find(name: str, version: str, context: ServicerContext) -> ModelService:
        service, problem = lookup(services, name, version, codes)
        if problem is not None:
            context.abort(*problem)
        return service

    def tensors(described: List[JsonObject]) -> List[service_pb2.ModelMetadataResponse.TensorMetadata]:
        return [pb.ModelMetadataResponse.TensorMetadata(name=t["name"], datatype=t.get("datatype", ""),
                                                        shape=t.get("shape") or []) for t in described]

    def shared(call: Callable[[], T], context: ServicerContext) -> T:
        try:
            return call()
        except BadRequest as exc:
            context.abort(codes.INVALID_ARGUMENT, str(exc))

    def not_supported(message: str) -> Callable[[object, Message, ServicerContext], None]:
        def answer(self: object, request: Message, context: ServicerContext) -> None:
            context.abort(codes.UNIMPLEMENTED, message)
        return answer

    class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request: service_pb2.ServerLiveRequest,
                       context: ServicerContext) -> service_pb2.ServerLiveResponse:
            return pb.ServerLiveResponse(live=True)

        def ServerReady(self, request: service_pb2.ServerReadyRequest,
                        context: ServicerContext) -> service_pb2.ServerReadyResponse:
            return pb.ServerReadyResponse(ready=all(s.ready.is_set() for s in services.values()))

        def ModelReady(self, request: service_pb2.ModelReadyRequest,
                       context: ServicerContext) -> service_pb2.ModelReadyResponse:
            service = services.get(request.name)
            return pb.ModelReadyResponse(ready=service is not None and service.ready.is_set()
                                         and request.version in ("", service.version))

        def ServerMetadata(self, request: service_pb2.ServerMetadataRequest,
                           context: ServicerContext) -> service_pb2.ServerMetadataResponse:
            meta = protocol.SERVER_METADATA
            return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"],
                                             extensions=meta["extensions"])

        def ModelMetadata(self, request: service_pb2.ModelMetadataRequest,
                          context: ServicerContext) -> service_pb2.ModelMetadataResponse:
            meta = find(request.name, request.version, context).metadata()
            return pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                                            inputs=tensors(meta["inputs"]), outputs=tensors(meta["outputs"]))

        def ModelConfig(self, request: service_pb2.ModelConfigRequest,
                        context: ServicerContext) -> service_pb2.ModelConfigResponse:
            config = model_answers.model_config(find(request.name, request.version, context))
            return pb.ModelConfigResponse(config=json_format.ParseDict(config, model_config_pb2.ModelConfig()))

        def RepositoryIndex(self, request: service_pb2.RepositoryIndexRequest,
                            context: ServicerContext) -> service_pb2.RepositoryIndexResponse:
            index = [m for m in model_answers.repository_index(services) if not request.ready or m["state"] == "READY"]
            return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**m) for m in index])

        RepositoryModelLoad = not_supported(_NOT_LOADABLE)
        RepositoryModelUnload = not_supported(_NOT_LOADABLE)
        ModelStatistics = not_supported("model statistics are not served over gRPC here; GET /metrics on the "
                                        "HTTP port has them (Prometheus text)")
        CudaSharedMemoryStatus = not_supported(CUDA_NOT_SUPPORTED)
        CudaSharedMemoryRegister = not_supported(CUDA_NOT_SUPPORTED)

        def CudaSharedMemoryUnregister(self, request: service_pb2.CudaSharedMemoryUnregisterRequest,
                                       context: ServicerContext) -> service_pb2.CudaSharedMemoryUnregisterResponse:
            return pb.CudaSharedMemoryUnregisterResponse()  # none is ever registered: as Triton answers then

        def SystemSharedMemoryStatus(self, request: service_pb2.SystemSharedMemoryStatusRequest,
                                     context: ServicerContext) -> service_pb2.SystemSharedMemoryStatusResponse:
            regions = shared(lambda: memory.status(request.name or None), context)
            return pb.SystemSharedMemoryStatusResponse(regions={
                r["name"]: pb.SystemSharedMemoryStatusResponse.RegionStatus(**r) for r in regions})

        def SystemSharedMemoryRegister(self, request: service_pb2.SystemSharedMemoryRegisterRequest,
                                       context: ServicerContext) -> service_pb2.SystemSharedMemoryRegisterResponse:
            shared(lambda: memory.register(request.name, request.key, request.offset, request.byte_size), context)
            return pb.SystemSharedMemoryRegisterResponse()

        def SystemSharedMemoryUnregister(self, request: service_pb2.SystemSharedMemoryUnregisterRequest,
                                         context: ServicerContext) -> service_pb2.SystemSharedMemoryUnregisterResponse:
            shared(lambda: memory.unregister(request.name or None), context)
            return pb.SystemSharedMemoryUnregisterResponse()

    return Servicer()


def lookup(services: Dict[str, ModelService], name: str, version: str,
           codes: Type[grpc.StatusCode]) -> Tuple[ModelService, Optional[Problem]]:
    """(the service of model ``name``, None), or (a stand-in, (NOT_FOUND, why)) when there is none of that
    name or version."""
    service = services.get(name)
    if service is None:
        return next(iter(services.values())), (codes.NOT_FOUND, "unknown model {!r}; this server serves {}".format(
            name, ", ".join(repr(n) for n in services)))
    if version and version != service.version:
        return service, (codes.NOT_FOUND, "unknown version {!r} of model {!r}; it has version {!r}".format(
            version, name, service.version))
    return service, None


def answer(services: Dict[str, ModelService], received: Received, memory: SystemSharedMemory,
           pb: ModuleType, codes: Type[grpc.StatusCode]) -> Tuple[Reply, Optional[Problem]]:
    """``ModelInfer``'s answer, unary or on a stream: (reply, None), or (an empty reply, (code, message))."""
    request = received.message
    service, problem = lookup(services, request.model_name, request.model_version, codes)
    if problem is None and not service.ready.is_set():
        problem = (codes.UNAVAILABLE, service.failed or "warming up; see ServerReady")
    if problem is None:
        reply, problem = infer(service, received, memory, pb, codes)
        if reply is not None:
            return reply, None
    return Reply(pb.ModelInferResponse(), []), problem


def infer(service: ModelService, received: Received, memory: SystemSharedMemory, pb: ModuleType,
          codes: Type[grpc.StatusCode]) -> Tuple[Optional[Reply], Optional[Problem]]:
    """(``Reply``, None), or (None, (status code, message)) of one inference (``pb``: ``service_pb2``,
    ``codes``: ``grpc.StatusCode``)."""
    request = received.message
    stages = {}  # type: Dict[str, float]
    clock = time.perf_counter()
    try:
        parsed = parse_request(request, service.inputs, service.forms, memory, received.raw)
    except BadRequest as exc:
        service.record("bad_request")
        return None, (codes.INVALID_ARGUMENT, str(exc))
    stages["parse"] = time.perf_counter() - clock
    try:
        outputs, ms, rows, placed = model_answers.run_inference(service, parsed, memory, stages)
    except model_answers.InferenceFailed as exc:
        return None, (codes.INTERNAL, str(exc))
    except BadRequest as exc:
        return None, (codes.INVALID_ARGUMENT, str(exc))
    clock = time.perf_counter()
    response = pb.ModelInferResponse(model_name=service.name, model_version=service.version, id=request.id)
    _set_parameters(response.parameters, {"inference_ms": round(ms, 3), "batch_rows": rows,
                                          "backend": service.backend, "detections": parsed.decode})
    raw = []  # type: List[Buffer]
    for name, array in outputs.items():
        response.outputs.add(name=name, datatype=protocol.datatype(array), shape=list(array.shape))
        if name in placed:  # an empty entry keeps raw_output_contents[i] the i-th output's, as Triton's
            raw.append(b"")
        else:
            # the array's own memory (a view, no copy) where it is little-endian and contiguous already
            raw.append(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).data.cast("B"))
    stages["encode"] = time.perf_counter() - clock
    service.observe(stages)
    return Reply(response, raw), None


class _Context:
    """What a servicer method gets for its ``context``: ``abort`` ends the call with a status (it raises);
    ``set_code``/``set_details`` are what the generated base servicer's unimplemented methods use."""

    def __init__(self) -> None:
        self.code, self.details = None, ""  # type: Optional[grpc.StatusCode], str

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise CallEnded(code.value[0], details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


def reply_parts(reply: Reply, stream: bool = False) -> List[Buffer]:
    """An answer's bytes as parts to write one after the other (``write_reply``, ``write_stream_reply``
    without joining them): the message without its raw outputs, then each output's own memory."""
    if reply.whole:
        return [reply.message.SerializeToString()]
    head = reply.message.SerializeToString()
    parts = [head]  # type: List[Buffer]
    for data in reply.raw:
        parts.append(_key(_RAW_OUTPUT_FIELD, len(data)))
        parts.append(data)
    if stream:
        parts.insert(0, _key(_STREAM_RESPONSE_FIELD, sum(len(p) for p in parts)))
    return parts


def methods(services: Dict[str, ModelService], memory: SystemSharedMemory) -> Dict[str, Method]:
    """The service's methods by path (``/inference.GRPCInferenceService/NAME``) for the HTTP/2 transport."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    codes, servicer = grpc.StatusCode, _servicer(services, memory)
    prefix = "/inference.GRPCInferenceService/"

    def unary(name: str, request_type: Type[Message]) -> Method:
        handler = getattr(servicer, name)

        def run(message: memoryview, reply: Callable[[object], None]) -> None:
            context = _Context()
            try:
                response = handler(request_type.FromString(bytes(message)), context)
            except NotImplementedError:
                raise CallEnded(codes.UNIMPLEMENTED.value[0], context.details or "not implemented") from None
            except DecodeError as exc:
                raise CallEnded(codes.INVALID_ARGUMENT.value[0], "the request does not parse: {}".format(exc)) \
                    from None
            reply(response.SerializeToString())
        return Method(run)

    def model_infer(message: memoryview, reply: Callable[[object], None]) -> None:
        received = read_message(message)
        answered, problem = answer(services, received, memory, pb, codes)
        if problem is not None:
            raise CallEnded(problem[0].value[0], problem[1])
        reply(reply_parts(answered))

    def stream_infer(message: memoryview, reply: Callable[[object], None]) -> None:
        # one answer a request, in order; an error is an answer on the stream (error_message), as Triton's,
        # and the stream goes on
        received = read_message(message)
        answered, problem = answer(services, received, memory, pb, codes)
        if problem is not None:
            asked = received.message
            answered = Reply(pb.ModelStreamInferResponse(error_message=problem[1], infer_response=pb.ModelInferResponse(
                model_name=asked.model_name, model_version=asked.model_version, id=asked.id)), [], whole=True)
        reply(reply_parts(answered, stream=True))

    def read_message(message: memoryview) -> Received:
        try:
            return read_infer_request(message)
        except (ValueError, DecodeError) as exc:
            raise CallEnded(codes.INVALID_ARGUMENT.value[0], "the request does not parse: {}".format(exc)) from None

    def direct() -> bool:  # no model batches: a call may run on its connection's thread
        return all(s.max_batch_size <= 1 for s in services.values())

    from google.protobuf.message import DecodeError

    table = {prefix + "ModelInfer": Method(model_infer, direct=direct),
             prefix + "ModelStreamInfer": Method(stream_infer, streaming=True, direct=direct)}
    for described in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        if prefix + described.name not in table:
            table[prefix + described.name] = unary(described.name, getattr(pb, described.input_type.name))
    return table


class GRPCServer(GRPCTransport):
    """The v2 service of ``services`` over gRPC on ``host:port`` (0: a free port, then ``.port``)."""

    def __init__(self, services: Dict[str, ModelService], memory: SystemSharedMemory, host: str, port: int, *,
                 workers: int = 8) -> None:
        require_grpc()
        super().__init__(methods(services, memory), host, port, workers=workers,
                         max_message=max(s.max_body for s in services.values()))
