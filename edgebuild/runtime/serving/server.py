"""The device runtime's HTTP layer: ``edgebuild serve ARTIFACT_DIR`` / ``python3 edgebuild-device.pyz serve``.

Serves one model folder written by ``edgebuild compile`` (``build/engines/<group>/``: the recipe,
``model.onnx``, and ``engine.plan`` + ``engine.json`` where the engine was built), or a fleet
group's folder with several (``build/groups/<group>/``, ``edgebuild.runtime.base.group``: one model
service each, routed by model name, the server ready once every model is warm and accepted), over
the KServe v2 (Open Inference Protocol) HTTP protocol, after warming it up. Four modules, one job each:

- ``service.py``: the model service: backend, warm-up, worker thread, dynamic batching, metrics;
- ``protocol.py``: v2 requests (JSON and binary tensors), responses and metadata;
- ``httpd.py``: the HTTP/1.1 server (one dispatcher thread owning every socket, a worker pool for
  complete requests, the timeouts and the connection cap), which knows nothing of models;
- here: the endpoints (``/v2/health/live``, ``/v2/health/ready``, ``/v2``, ``/metrics``,
  ``/v2/models/NAME[/versions/V][/ready|/infer]``), ``Server`` (the model service behind the
  HTTP server), and under systemd (``Type=notify``) ``READY=1`` once warm-up is done, so
  ``systemctl start`` waits for it. An inference answers detections where the model or the
  server decodes them (``parameters.detections``), and the time it spent in each stage outside
  the backend goes to ``/metrics`` once its answer is sent.

The port answers ``live`` from the start and ``ready`` after warm-up. Every error is a JSON body
``{"error": "..."}`` with its status: 400 a bad request, 404 an unknown model, version or route,
405 a wrong method, 408 a request that took too long to arrive, 413 a body past the profile's
largest request, 503 not ready (or no room for another connection).

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving import model_answers, protocol
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.http_messages import Answer, Request, error
from edgebuild.runtime.serving.httpd import HTTPServer
from edgebuild.runtime.serving.ports import GRPC_PORT
from edgebuild.runtime.serving.service import ModelService
from edgebuild.runtime.serving.shared_memory import SystemSharedMemory, cuda_http_route, http_route

if TYPE_CHECKING:  # imported where a gRPC port is asked for: grpcio may not be installed
    from edgebuild.runtime.serving.grpc_server import GRPCServer

__all__ = ["serve"]


def _log(message: str) -> None:
    print("serve: " + message, file=sys.stderr, flush=True)


def notify_systemd(message: str) -> bool:
    """Tell systemd (``Type=notify`` units) how the service is doing; False where no one listens."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # an abstract socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode(), address)
    except OSError as exc:
        _log("cannot notify systemd at {}: {}".format(os.environ.get("NOTIFY_SOCKET"), exc))
        return False
    return True


def _notify_ready(backend: str) -> None:
    notify_systemd("READY=1\nSTATUS=ready on {} after warm-up".format(backend))


# -- the endpoints -----------------------------------------------------------------------------

def make_handler(services: Union[ModelService, Dict[str, ModelService]],
                 shared_memory: Optional[SystemSharedMemory] = None,
                 streams: Optional[Callable[[], JsonObject]] = None) -> Callable[[Request], Answer]:
    """``handle(request) -> Answer``: the v2 endpoints of one model service, or of every model of a
    group folder (by name: the server is ready when every one is), and the system shared-memory
    extension's (``shared_memory``: its registered regions). ``streams``: the state of the streams tracked
    beside the server (``/v2/streams``, and its ``state`` as ``tracking`` in ``/v2/health/ready``)."""
    models = "/v2/models/"
    by_name = services if isinstance(services, dict) else {services.name: services}
    memory = shared_memory if shared_memory is not None else SystemSharedMemory()

    def handle(request: Request) -> Answer:
        path, method = request.path, request.method
        if path in ("/v2/health/live", "/v2/health/ready", "/v2", "/metrics", "/v2/streams"):
            if method not in ("GET", "HEAD"):
                return error(405, "{} takes GET, not {}".format(path, method), Allow="GET")
            if path == "/v2/streams":
                return Answer(200, streams()) if streams else error(404, "this server tracks no streams")
            return _server_route(by_name, path, streams)
        if path.startswith(models):
            return _model_route(by_name, request, path[len(models):].split("/"), memory)
        if path.startswith("/v2/systemsharedmemory/"):
            try:
                status, answer = http_route(memory, method, path.split("/")[3:], request.body)
                return Answer(status, json.dumps(answer).encode())  # a list is not an Answer's parts
            except BadRequest as exc:
                return error(400, str(exc))
        if path.startswith("/v2/cudasharedmemory/"):
            status, answer = cuda_http_route(method, path.split("/")[3:])
            return Answer(status, json.dumps(answer).encode())
        if path == "/v2/repository/index":
            if method != "POST":
                return error(405, "{} takes POST, not {}".format(path, method), Allow="POST")
            return Answer(200, json.dumps(model_answers.repository_index(by_name)).encode())
        return error(404, "no such endpoint: {}".format(path))

    return handle


def _server_route(services: Dict[str, ModelService], path: str,
                  streams: Optional[Callable[[], JsonObject]] = None) -> Answer:
    if path == "/v2/health/live":
        return Answer(200, {"live": True})
    if path == "/v2/health/ready":
        # the streams tracked beside the server: waiting (for the warm-up), running, ended or failed
        tracking = {"tracking": streams()["state"]} if streams is not None else {}
        waiting = {n: s.failed or "warming up" for n, s in services.items() if not s.ready.is_set()}
        if len(services) == 1:
            (service,) = services.values()
            if not waiting:
                return Answer(200, dict({"ready": True, "warmup": service.warmup}, **tracking))
            return Answer(503, dict({"ready": False, "error": service.failed or "warming up"}, **tracking))
        if not waiting:  # a group: ready once every model is (warm-up and acceptance, or its fallback)
            return Answer(200, dict({"ready": True, "models": {n: s.warmup for n, s in services.items()}}, **tracking))
        return Answer(503, dict({"ready": False, "error": "; ".join("{}: {}".format(n, w) for n, w in waiting.items()),
                                 "models": {n: n not in waiting for n in services}}, **tracking))
    if path == "/metrics":
        return Answer(200, merged_metrics([s.metrics_text() for s in services.values()]), "text/plain; version=0.0.4")
    return Answer(200, protocol.SERVER_METADATA)


def merged_metrics(texts: List[str]) -> str:
    """Prometheus texts of several models as one exposition: each family's HELP and TYPE once, then the
    samples of every model (each labelled with its model)."""
    families = collections.OrderedDict()  # type: collections.OrderedDict
    for text in texts:
        family = None
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split()[2]
                entry = families.setdefault(family, {"HELP": None, "TYPE": None, "samples": []})
                entry[line.split()[1]] = line
            elif line and family is not None:
                families[family]["samples"].append(line)
    lines = []  # type: List[str]
    for entry in families.values():
        lines += [entry[k] for k in ("HELP", "TYPE") if entry[k]] + entry["samples"]
    return "\n".join(lines) + "\n"


def _model_route(services: Dict[str, ModelService], request: Request, parts: List[str],
                 memory: SystemSharedMemory) -> Answer:
    """``NAME[/versions/V][/ready|/config|/infer]``."""
    name, rest = parts[0], parts[1:]
    service = services.get(name)
    if service is None:
        return error(404, "unknown model {!r}; this server serves {}".format(
            name, ", ".join(repr(n) for n in services)))
    if rest[:1] == ["versions"]:
        if len(rest) < 2:
            return error(404, "no such endpoint: {}".format(request.path))
        if rest[1] != service.version:
            return error(404, "unknown version {!r} of model {!r}; it has version {!r}".format(
                rest[1], name, service.version))
        rest = rest[2:]
    action = rest[0] if len(rest) == 1 else "" if not rest else None
    wanted = {"": "GET", "ready": "GET", "config": "GET", "infer": "POST"}.get(action)  # type: ignore[arg-type]
    if wanted is None:
        return error(404, "no such endpoint: {}".format(request.path))
    if request.method != wanted and not (wanted == "GET" and request.method == "HEAD"):
        return error(405, "{} takes {}, not {}".format(request.path, wanted, request.method), Allow=wanted)
    if action == "":
        return Answer(200, service.metadata())
    if action == "ready":
        if service.ready.is_set():
            return Answer(200, {"name": service.name, "ready": True})
        return Answer(503, {"name": service.name, "ready": False, "error": service.failed or "warming up"})
    if action == "config":
        return Answer(200, model_answers.model_config(service))
    return _infer(service, request, memory)


def _infer(service: ModelService, request: Request, memory: SystemSharedMemory) -> Answer:
    """One inference; its stages' seconds go to ``request.stages`` (recorded once the answer is sent)."""
    if not service.ready.is_set():
        return error(503, service.failed or "warming up; see /v2/health/ready")
    clock = time.perf_counter()
    stages = request.stages
    try:
        length = protocol.header_length(request.headers.get(protocol.HEADER_LENGTH))
        parsed = protocol.parse_inference(request.body, length, service.inputs, service.forms, memory,
                                          service.header_readings)
    except BadRequest as exc:
        service.record("bad_request")
        return error(400, str(exc))
    stages["parse"], clock = _lap(clock)
    try:
        outputs, ms, rows, placed = model_answers.run_inference(service, parsed, memory, stages)
    except model_answers.InferenceFailed as exc:
        stages.clear()
        return error(500, str(exc))
    except BadRequest as exc:
        return error(400, str(exc))
    clock = time.perf_counter()
    parts, content_type, headers = protocol.response_parts(  # sent as they are: the outputs are never copied
        service.name, service.version, outputs, parsed.binary_outputs,
        {"inference_ms": round(ms, 3), "batch_rows": rows, "backend": service.backend,
         "detections": parsed.decode}, parsed.request_id, placed)
    stages["encode"], _ = _lap(clock)  # the HTTP head is added to it by httpd
    return Answer(200, parts, content_type, headers)


def _lap(since: float) -> Tuple[float, float]:
    now = time.perf_counter()
    return now - since, now


def request_threads(workers: int, services: Iterable[ModelService]) -> int:
    """The threads that take requests (HTTP's workers, gRPC's pool): at least ``workers``, and for each
    batching model enough for every instance's batch in its run plus the next batch gathering.

    A request holds its thread while it waits for its batch, so a request past the threads would
    wait for one outside the batching queue: with one instance and ``max_batch_size`` 8, 16
    concurrent requests run as a batch of 8 and gather the next 8, instead of 8 in batches of
    whatever arrived in the delay. More requests than that would wait in the queue for a free
    instance anyway, so they wait for a thread instead, in the order they came.
    """
    needed = sum((s.instance_count + 1) * s.max_batch_size for s in services if s.max_batch_size > 1)
    return max(workers, needed)


#: the HTTP limits ``Server`` takes, with their defaults (see ``httpd.HTTPServer``)
HTTP_LIMITS = {"workers": 8, "max_connections": 2048, "header_timeout_s": 10.0, "body_timeout_s": 30.0,
               "keepalive_timeout_s": 30.0, "send_timeout_s": 30.0}


def _never_blocks(request: Request) -> bool:
    """Every GET (health, readiness, metadata, metrics) reads state and never waits on the backend."""
    return request.method in ("GET", "HEAD")


class Server:
    """The HTTP server and its model service; ``port=0`` picks a free port, None the recipe's.

    ``grpc_port``: the KServe v2 gRPC server's port beside it (``grpc_server.py``; 0 picks a free port,
    None: no gRPC server). Both share the model services and the system shared-memory regions. Without
    ``grpc_required``, a gRPC server that cannot start (grpcio missing, the port taken) is a warning and
    the server answers HTTP only.

    ``workers``, ``max_connections``, ``header_timeout_s``, ``body_timeout_s``, ``keepalive_timeout_s``
    and ``send_timeout_s`` are the HTTP limits (``HTTP_LIMITS``: their defaults; ``httpd.HTTPServer``:
    what each means; HTTP's workers and gRPC's threads are raised to what batching needs:
    ``request_threads``); the other keywords go to ``ModelService``.
    """

    def __init__(self, folder: Path, *, host: str = "0.0.0.0", port: Optional[int] = None,
                 grpc_port: Optional[int] = None, grpc_required: bool = True, **options: Any) -> None:
        from edgebuild.runtime.base.group import model_folders

        self.grpc: Optional[GRPCServer] = None
        if grpc_port is not None and grpc_required:  # before anything starts: a missing grpcio is the user's to fix
            from edgebuild.runtime.serving.grpc_server import require_grpc

            require_grpc()
        limits = {k: options.pop(k, v) for k, v in HTTP_LIMITS.items()}
        on_ready = options.pop("on_ready", _notify_ready)
        self._after_ready = options.pop("after_ready", None)  # type: Optional[Callable[[], Any]]
        streams = options.pop("streams", None)  # type: Optional[Callable[[], JsonObject]]
        folders = model_folders(folder)  # one model folder, or every model of a group folder
        self._ready_left = len(folders)
        self._ready_lock = threading.Lock()
        self._on_ready = on_ready
        self.services = collections.OrderedDict(
            (name, ModelService(path, on_ready=self._one_ready, **options)) for name, path in folders.items())
        self.service = next(iter(self.services.values()))  # the first (the only one of a model folder)
        if port is None:
            port = self.service.recipe.runtime.port
        self.shared_memory = SystemSharedMemory()
        # enough threads for the batcher to see every request it can use (``request_threads``)
        limits["workers"] = request_threads(limits["workers"], self.services.values())
        self.httpd = HTTPServer((host, port), make_handler(dict(self.services), self.shared_memory, streams),
                                max_body=max(s.max_body for s in self.services.values()),
                                on_refused=self._refused, inline=_never_blocks, on_sent=self._sent, **limits)
        self.port = self.httpd.server_address[1]
        self.grpc_port = None  # type: Optional[int]
        if grpc_port is not None:
            self._start_grpc(host, grpc_port, limits["workers"], grpc_required)

    def _start_grpc(self, host: str, port: int, workers: int, required: bool) -> None:
        from edgebuild.errors import EdgebuildError
        from edgebuild.runtime.serving.grpc_server import GRPCServer

        try:
            self.grpc = GRPCServer(dict(self.services), self.shared_memory, host, port, workers=workers)
        except EdgebuildError as exc:
            if required:
                self.httpd.server_close()
                raise
            _log("WARNING: serving HTTP only, no gRPC on port {}: {}".format(port, exc))
            return
        self.grpc_port = self.grpc.port

    def _one_ready(self, backend: str) -> None:
        with self._ready_lock:
            self._ready_left -= 1
            last = self._ready_left == 0
        if last and self._on_ready is not None:  # the server is ready once every model is
            self._on_ready(backend)
        if last and self._after_ready is not None:  # e.g. the streams tracked beside the server
            self._after_ready()

    def _refused(self, status: int) -> None:
        self.service.record("bad_request" if status == 413 else "refused")

    def _sent(self, request: Request) -> None:
        if "parse" in request.stages and "wait_backend" in request.stages:  # an answered inference
            service = self.services.get(request.path[len("/v2/models/"):].split("/")[0], self.service)
            service.observe(request.stages)

    def start_services(self) -> None:
        for service in self.services.values():
            service.start()
        if self.grpc is not None:
            self.grpc.start()

    def start(self) -> "Server":
        self.start_services()
        threading.Thread(target=self.httpd.serve_forever, name="edgebuild-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.close()

    def close(self) -> None:
        """Stop the gRPC server and unmap the shared-memory regions (after the HTTP server)."""
        if self.grpc is not None:
            self.grpc.stop()
        self.shared_memory.close()


def serve(folder: Path, *, host: str = "0.0.0.0", port: Optional[int] = None, grpc_port: Optional[int] = None,
          **options: Any) -> None:
    """Serve until SIGTERM or Ctrl-C (the HTTP port answers ``live`` from the start, ``ready`` after warm-up).

    ``grpc_port``: gRPC beside HTTP on it (0: HTTP only); None: on ``GRPC_PORT`` where grpcio is installed
    and the port is free, else HTTP only with a warning.
    """
    import signal

    server = Server(folder, host=host, port=port, grpc_port=GRPC_PORT if grpc_port is None else grpc_port or None,
                    grpc_required=grpc_port is not None, **options)
    _log("model{} {} from {}, listening on http://{}:{}{} (ready after warm-up)".format(
        "s" if len(server.services) > 1 else "", ", ".join(server.services), folder, host, server.port,
        "" if server.grpc_port is None else " and grpc://{}:{}".format(host, server.grpc_port)))
    server.start_services()
    signal.signal(signal.SIGTERM, lambda *_: server.httpd.stop_soon())
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        server.close()
        _log("stopped")
