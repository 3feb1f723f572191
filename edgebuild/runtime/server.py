"""The device runtime's HTTP layer: ``edgebuild serve ARTIFACT_DIR`` / ``python3 edgebuild-device.pyz serve``.

Serves one model folder written by ``edgebuild compile`` (``build/engines/<group>/``: the recipe,
``model.onnx``, and ``engine.plan`` + ``engine.json`` where the engine was built) over the
KServe / Triton v2 HTTP protocol, after warming it up. Three modules, one job each:

- ``service.py``: the model service: backend, warm-up, worker thread, dynamic batching, metrics;
- ``protocol.py``: v2 requests (JSON and binary tensors), responses and metadata;
- here: the endpoints (``/v2/health/live``, ``/v2/health/ready``, ``/v2/models/NAME[/ready|/infer]``,
  ``/metrics``, ``/v2``), the threaded HTTP server, and under systemd (``Type=notify``) ``READY=1``
  once warm-up is done, so ``systemctl start`` waits for it.

The port answers ``live`` from the start and ``ready`` after warm-up; a bad request gets a 400
with a message and the server keeps serving.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Optional

from edgebuild.runtime import protocol
from edgebuild.runtime.protocol import BadRequest
from edgebuild.runtime.service import ModelService


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


def make_handler(service: ModelService) -> Any:
    model_path = "/v2/models/" + service.name

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "edgebuild-serve"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass  # one line per request would drown the device's journal; /metrics counts them

        def _send(self, code: int, body: Any, content_type: str = "application/json",
                  headers: Optional[Dict[str, str]] = None) -> None:
            if isinstance(body, bytes):
                data = body
            else:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?")[0].rstrip("/")
            if path == "/v2/health/live":
                self._send(200, {"live": True})
            elif path == "/v2/health/ready":
                if service.ready.is_set():
                    self._send(200, {"ready": True, "warmup": service.warmup})
                else:
                    self._send(503, {"ready": False, "error": service.failed or "warming up"})
            elif path in (model_path, model_path + "/versions/" + service.version):
                self._send(200, service.metadata())
            elif path == model_path + "/ready":
                self._send(200 if service.ready.is_set() else 503, {"ready": service.ready.is_set()})
            elif path == "/metrics":
                self._send(200, service.metrics_text(), "text/plain; version=0.0.4")
            elif path == "/v2":
                self._send(200, protocol.SERVER_METADATA)
            else:
                self._send(404, {"error": "no such endpoint: {}".format(path)})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0].rstrip("/")
            if path not in (model_path + "/infer", model_path + "/versions/" + service.version + "/infer"):
                self._drain()
                self._send(404, {"error": "no such endpoint: {} (the model is {})".format(path, service.name)})
                return
            try:
                length = int(self.headers.get("Content-Length") or "-1")
            except ValueError:
                length = -1
            if length < 0 or length > service.max_body:
                service.record("bad_request")
                self.close_connection = True
                self._send(400, {"error": "the body must have a Content-Length of at most {} bytes (the largest "
                                          "request the profile allows); got {}".format(service.max_body, length)})
                return
            body = self.rfile.read(length)
            if not service.ready.is_set():
                self._send(503, {"error": service.failed or "warming up; see /v2/health/ready"})
                return
            try:
                header_length = protocol.header_length(self.headers.get(protocol.HEADER_LENGTH))
                inputs, binary_outputs = protocol.parse_request(body, header_length, service.inputs,
                                                                service.output_names)
            except BadRequest as exc:
                service.record("bad_request")
                self._send(400, {"error": str(exc)})
                return
            try:
                outputs, ms, rows = service.infer(inputs)
            except Exception as exc:
                service.record("failure")
                self._send(500, {"error": "inference failed: {}".format(exc)})
                return
            service.record("success", ms)
            self._send(200, *protocol.encode_response(
                service.name, service.version, outputs, binary_outputs,
                {"inference_ms": round(ms, 3), "batch_rows": rows, "backend": service.backend}))

        def _drain(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if 0 < length <= service.max_body:
                self.rfile.read(length)
            else:
                self.close_connection = True

    return Handler


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 resets connections when a few dozen clients connect at once


class Server:
    """The HTTP server and its model service; ``port=0`` picks a free port, None the recipe's."""

    def __init__(self, folder: Path, *, host: str = "0.0.0.0", port: Optional[int] = None,
                 **service_options: Any) -> None:
        service_options.setdefault("on_ready", _notify_ready)
        self.service = ModelService(folder, **service_options)
        if port is None:
            port = self.service.recipe.runtime.port
        self.httpd = _HTTPServer((host, port), make_handler(self.service))
        self.port = self.httpd.server_address[1]

    def start(self) -> "Server":
        self.service.start()
        threading.Thread(target=self.httpd.serve_forever, name="edgebuild-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve(folder: Path, *, host: str = "0.0.0.0", port: Optional[int] = None, **service_options: Any) -> None:
    """Serve until SIGTERM or Ctrl-C (the HTTP port answers ``live`` from the start, ``ready`` after warm-up)."""
    import signal

    server = Server(folder, host=host, port=port, **service_options)
    _log("model {} from {}, listening on http://{}:{} (ready after warm-up)".format(
        server.service.name, folder, host, server.port))
    server.service.start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.httpd.shutdown).start())
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        _log("stopped")
