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
- ``SystemSharedMemoryRegister/Status/Unregister``; ``CudaSharedMemoryUnregister`` succeeds (no CUDA region is
  ever registered); the rest of CUDA shared memory, ``RepositoryModelLoad/Unload``,
  ``ModelStatistics`` (``/metrics`` has them) and streaming are answered UNIMPLEMENTED with why.

Errors map to gRPC status codes: a bad request INVALID_ARGUMENT (HTTP's 400), an unknown model or
version NOT_FOUND (404), a model not ready UNAVAILABLE (503), a failed inference INTERNAL (500).

The wire types are NVIDIA's own (``tritonclient.grpc.service_pb2``, ``model_config_pb2``), so the
schema cannot drift from Triton's; grpcio and tritonclient[grpc] are imported here only, when a gRPC
port is asked for (``require_grpc`` says what to install when they are missing).

Python 3.8, the standard library and numpy; grpcio and tritonclient[grpc] where gRPC is served.
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
    Tuple,
    TypeVar,
)

import numpy as np

from edgebuild.errors import CapabilityMissing, ConfigError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving import model_answers, protocol
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.protocol import InputSpec
from edgebuild.runtime.serving.service import ModelService
from edgebuild.runtime.serving.shared_memory import CUDA_NOT_SUPPORTED, SystemSharedMemory, shared_memory_place

if TYPE_CHECKING:  # for the annotations (never evaluated); where gRPC is served, the functions import them
    import grpc
    from google.protobuf.message import Message
    from tritonclient.grpc import service_pb2, service_pb2_grpc

__all__ = []

INSTALL = "pip3 install grpcio 'tritonclient[grpc]' (the edgebuild[grpc] extra)"
#: the typed ``InferTensorContents`` field of each datatype (FP16 has none: it comes raw)
_CONTENTS = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents", "INT32": "int_contents",
             "INT8": "int_contents", "UINT8": "uint_contents", "BOOL": "bool_contents"}
_NOT_LOADABLE = ("this server serves the models of its folder, fixed when it starts; a new model comes as an OTA "
                 "update (edgebuild package, then ota-install on the device)")
#: what the call that ``shared`` runs returns
T = TypeVar("T")


class ServicerContext(Protocol):
    """What the handlers use of a call's ``grpc.ServicerContext``: ``abort`` ends the call (it raises)."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...


def require_grpc() -> None:
    """Raise ``CapabilityMissing`` (what to install) unless grpcio and tritonclient's gRPC stubs import."""
    try:
        import grpc  # noqa: F401
        from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc  # noqa: F401
    except ImportError as exc:
        raise CapabilityMissing(
            "serving gRPC needs grpcio and tritonclient[grpc], which are not installed here ({})".format(exc),
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
                  memory: SystemSharedMemory) -> protocol.Inference:
    """A ``ModelInferRequest`` checked against the model as HTTP checks a v2 request (``BadRequest`` if wrong)."""
    raw, used = request.raw_input_contents, 0
    arrays = {}  # type: Dict[str, np.ndarray]
    for tensor in request.inputs:
        shape = [int(d) for d in tensor.shape]
        dtype, count = protocol.check_tensor(tensor.name, tensor.datatype, shape, inputs)
        if tensor.name in arrays:
            raise BadRequest("input {!r} is given twice".format(tensor.name))
        place = shared_memory_place("input {!r}".format(tensor.name), parameters(tensor.parameters))
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
    decode, names = forms.choose(parameters(request.parameters).get("detections"))
    asked = protocol.check_outputs([o.name for o in request.outputs], names) if request.outputs else None
    shared = {}
    for output in request.outputs:
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
        service = services.get(name)
        if service is None:
            context.abort(codes.NOT_FOUND, "unknown model {!r}; this server serves {}".format(
                name, ", ".join(repr(n) for n in services)))
        if version and version != service.version:
            context.abort(codes.NOT_FOUND, "unknown version {!r} of model {!r}; it has version {!r}".format(
                version, name, service.version))
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

        def ModelInfer(self, request: service_pb2.ModelInferRequest,
                       context: ServicerContext) -> service_pb2.ModelInferResponse:
            service = find(request.model_name, request.model_version, context)
            if not service.ready.is_set():
                context.abort(codes.UNAVAILABLE, service.failed or "warming up; see ServerReady")
            response, problem = infer(service, request, memory, pb)
            if problem is not None:
                context.abort(*problem)
            return response

    return Servicer()


def infer(service: ModelService, request: service_pb2.ModelInferRequest, memory: SystemSharedMemory,
          pb: ModuleType) -> Tuple[Optional[service_pb2.ModelInferResponse], Optional[Tuple[grpc.StatusCode, str]]]:
    """(``ModelInferResponse``, None), or (None, (status code, message)) of one inference (``pb``: ``service_pb2``)."""
    import grpc

    stages = {}  # type: Dict[str, float]
    clock = time.perf_counter()
    try:
        parsed = parse_request(request, service.inputs, service.forms, memory)
    except BadRequest as exc:
        service.record("bad_request")
        return None, (grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    stages["parse"] = time.perf_counter() - clock
    try:
        outputs, ms, rows, placed = model_answers.run_inference(service, parsed, memory, stages)
    except model_answers.InferenceFailed as exc:
        return None, (grpc.StatusCode.INTERNAL, str(exc))
    except BadRequest as exc:
        return None, (grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    clock = time.perf_counter()
    response = pb.ModelInferResponse(model_name=service.name, model_version=service.version, id=request.id)
    _set_parameters(response.parameters, {"inference_ms": round(ms, 3), "batch_rows": rows,
                                          "backend": service.backend, "detections": parsed.decode})
    raw = []  # type: List[bytes]
    for name, array in outputs.items():
        response.outputs.add(name=name, datatype=protocol.datatype(array), shape=list(array.shape))
        if name in placed:  # an empty entry keeps raw_output_contents[i] the i-th output's, as Triton's
            raw.append(b"")
        else:
            raw.append(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes())
    response.raw_output_contents.extend(raw)
    stages["encode"] = time.perf_counter() - clock
    service.observe(stages)
    return response, None


class GRPCServer:
    """grpcio's server with the v2 service of ``services`` on ``host:port`` (0: a free port, then ``.port``)."""

    def __init__(self, services: Dict[str, ModelService], memory: SystemSharedMemory, host: str, port: int, *,
                 workers: int = 8) -> None:
        require_grpc()
        from concurrent import futures

        import grpc
        from tritonclient.grpc import service_pb2_grpc

        largest = max(s.max_body for s in services.values())
        self._executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgebuild-grpc")
        # no SO_REUSEPORT: a second server on a taken port must fail, not share its calls with the first
        self.server = grpc.server(self._executor, options=[("grpc.max_receive_message_length", largest),
                                                           ("grpc.max_send_message_length", -1),
                                                           ("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_servicer(services, memory), self.server)
        address = "{}:{}".format("[{}]".format(host) if ":" in host else host, port)
        try:
            bound = self.server.add_insecure_port(address)
        except RuntimeError as exc:
            bound, reason = 0, str(exc)
        else:
            reason = "grpcio could not bind it"
        if not bound:
            raise ConfigError("cannot serve gRPC on {}: {}".format(address, reason),
                              hint="the port may be in use; choose another with --grpc-port (0: no gRPC)")
        self.port = bound  # type: int

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop taking calls, give those in flight ``grace_s`` to finish."""
        self.server.stop(grace_s).wait()
        self._executor.shutdown(wait=False)
