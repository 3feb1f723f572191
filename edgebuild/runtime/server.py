"""The device runtime: ``edgebuild serve ARTIFACT_DIR`` / ``python3 edgebuild-device.pyz serve``.

Serves one model folder written by ``edgebuild compile`` (``build/engines/<group>/``: the recipe,
``model.onnx``, and ``engine.plan`` + ``engine.json`` where the engine was built) over the
KServe / Triton v2 HTTP protocol, after warming it up:

- backend: the TensorRT engine when it exists and matches this device; in ``deferred`` placement
  the engine is built once from the recipe into an engine cache keyed by TensorRT version and
  compute capability; ONNX Runtime on the CPU where no engine can be used (said in the log, in
  ``/v2/models/NAME`` and in ``/metrics``);
- warm-up before ready: inference at the min, opt and max shapes of the profile until the opt
  shape's latency settles (the median of the last 5 runs within 10% of the 5 before) or the
  warm-up budget runs out; the cold first call, the warm-up time and the warmed latency are kept;
  under systemd (``Type=notify``) ``READY=1`` is sent then, so ``systemctl start`` waits for it;
- one worker thread owns the backend (a CUDA context belongs to the thread that made it); HTTP
  handler threads hand it requests through a queue;
- dynamic batching (``max_batch_size`` > 1): the worker takes the first waiting request, then for
  up to ``max_queue_delay_ms`` gathers others whose inputs have the same non-batch dimensions,
  stacks them on axis 0 (at most ``max_batch_size`` rows, never past the profile's max), runs them
  once and hands each request its own rows of the outputs;
- tensors as JSON, or raw in the body with the v2 binary tensor extension
  (``Inference-Header-Content-Length``; ``binary_data_size`` per input, ``binary_data`` /
  ``binary_data_output`` for outputs), which spares the JSON encoding of an image;
- a bad request gets a 400 with a message and the server keeps serving.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import json
import math
import os
import queue
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from edgebuild.errors import CapabilityMissing, ConfigError, EdgebuildError
from edgebuild.runtime import device

#: KServe v2 datatypes for the numpy types a vision model takes and returns
DATATYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32,
             "INT8": np.int8, "UINT8": np.uint8, "BOOL": np.bool_}
NUMPY_TO_DATATYPE = {np.dtype(v).name: k for k, v in DATATYPES.items()}
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
SETTLE_WINDOW = 5
SETTLE_TOLERANCE = 0.10


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


class InputSpec:
    def __init__(self, name: str, min_shape: List[int], opt_shape: List[int], max_shape: List[int],
                 datatype: str = "FP32") -> None:
        self.name, self.datatype = name, datatype
        self.min_shape, self.opt_shape, self.max_shape = list(min_shape), list(opt_shape), list(max_shape)

    def as_dict(self) -> Dict[str, Any]:
        shape = [-1 if lo != hi else lo for lo, hi in zip(self.min_shape, self.max_shape)]
        return {"name": self.name, "datatype": self.datatype, "shape": shape, "min_shape": self.min_shape,
                "opt_shape": self.opt_shape, "max_shape": self.max_shape}


class BadRequest(Exception):
    """A request the server refuses with a 400."""


def load_backend(folder: Path, choice: str = "auto", engine_cache: Optional[Path] = None,
                 report: Callable[[str], None] = _log) -> Tuple[Any, str]:
    """(runner, why this backend) for an artifact folder."""
    recipe = json.loads((folder / device.RECIPE_FILE).read_text())
    onnx_path = folder / recipe["onnx"]
    if choice in ("auto", "tensorrt"):
        try:
            return _tensorrt_runner(folder, recipe, engine_cache, report)
        except EdgebuildError as exc:
            if choice == "tensorrt":
                raise
            reason = exc.message
    else:
        reason = "--backend onnxruntime was asked for"
    try:
        from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

        runner = OnnxRuntimeRunner(onnx_path)  # imports onnxruntime itself
    except ImportError:
        raise CapabilityMissing("neither the TensorRT engine nor ONNX Runtime can be used: " + reason,
                                hint="install JetPack's TensorRT, or `pip install onnxruntime`") from None
    why = "ONNX Runtime on the CPU, NOT TensorRT: " + reason
    report("WARNING: serving with " + why)
    return runner, why


def _tensorrt_runner(folder: Path, recipe: Dict[str, Any], engine_cache: Optional[Path],
                     report: Callable[[str], None]) -> Tuple[Any, str]:
    from edgebuild.runtime.backends.tensorrt import TensorRTRunner

    facts = device.probe()
    if facts.tensorrt is None:
        raise CapabilityMissing("TensorRT is not installed here ({})".format(facts.tensorrt_problem))
    plan, engine_json = folder / device.ENGINE_FILE, folder / device.ENGINE_JSON
    if plan.is_file() and engine_json.is_file():
        return TensorRTRunner(plan, engine_json), "TensorRT engine {} built for {}".format(plan, recipe["target"])
    if facts.compute_capability is None:
        raise CapabilityMissing(facts.tensorrt_problem)
    key = "trt{}-sm{}".format(facts.tensorrt, facts.compute_capability.replace(".", ""))
    cache = Path(engine_cache or os.environ.get("EDGEBUILD_ENGINE_CACHE") or folder / "engine-cache") / key
    if not (cache / device.ENGINE_JSON).is_file():
        report("no engine for {} yet: building it from the recipe into {} (this takes minutes, once)".format(
            key, cache))
        cache.mkdir(parents=True, exist_ok=True)
        for name in (device.RECIPE_FILE, recipe["onnx"]):
            staged = cache / name
            if not staged.exists():
                staged.write_bytes((folder / name).read_bytes())
        device.build_from_recipe(cache / device.RECIPE_FILE, facts, report=report)
    return (TensorRTRunner(cache / device.ENGINE_FILE, cache / device.ENGINE_JSON),
            "TensorRT engine built on this device from the recipe, cached in {}".format(cache))


class ModelService:
    """The backend, its warm-up, the request queue of its worker thread, and the metrics."""

    def __init__(self, folder: Path, *, backend: str = "auto", warmup_budget_s: Optional[float] = None,
                 engine_cache: Optional[Path] = None, warmup: bool = True, max_batch_size: Optional[int] = None,
                 max_queue_delay_ms: Optional[float] = None) -> None:
        self.folder = Path(folder)
        recipe_path = self.folder / device.RECIPE_FILE
        if not recipe_path.is_file():
            raise ConfigError("{}: no {} here; serve the folder `edgebuild compile` wrote for a fleet group "
                              "(build/engines/<group>/)".format(self.folder, device.RECIPE_FILE))
        self.recipe = json.loads(recipe_path.read_text())
        self.name = self.recipe.get("model_name") or self.recipe["group"]
        self.version = str(self.recipe.get("model_version") or "1")
        self.inputs = {n: InputSpec(n, *shapes) for n, shapes in self.recipe["profiles"].items()}
        runtime = self.recipe.get("runtime") or {}
        self.warmup_budget_s = float(warmup_budget_s if warmup_budget_s is not None
                                     else runtime.get("warmup_budget_s", 30.0))
        self.max_batch_size, self.max_queue_delay_ms = self._batching(
            int(max_batch_size if max_batch_size is not None else runtime.get("max_batch_size", 1)),
            float(max_queue_delay_ms if max_queue_delay_ms is not None else runtime.get("max_queue_delay_ms", 2.0)))
        self.max_body = sum(64 + 24 * int(np.prod(s.max_shape)) for s in self.inputs.values()) + 65536
        self._backend_choice, self._engine_cache, self._do_warmup = backend, engine_cache, warmup
        self._jobs = queue.Queue()  # type: queue.Queue
        self._lock = threading.Lock()
        self.ready = threading.Event()
        self.failed = None  # type: Optional[str]
        self.backend = "loading"
        self.backend_reason = ""
        self.output_names = []  # type: List[str]
        self.warmup = {}  # type: Dict[str, Any]
        self.requests = {"success": 0, "failure": 0, "bad_request": 0}
        self.latency_counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.latency_sum_ms = 0.0
        self.batches = {"runs": 0, "requests": 0, "rows": 0}
        self._worker = threading.Thread(target=self._work, name="edgebuild-backend", daemon=True)

    def _batching(self, size: int, delay_ms: float) -> Tuple[int, float]:
        """The batch size the profile allows: axis 0 of every input must be dynamic and reach it."""
        if size < 1 or delay_ms < 0:
            raise ConfigError("max_batch_size must be at least 1 and max_queue_delay_ms at least 0, "
                              "not {} and {}".format(size, delay_ms))
        if size == 1:
            return 1, delay_ms
        room = min(s.max_shape[0] for s in self.inputs.values())
        if room < 2:
            _log("WARNING: dynamic batching is off: the profile's max batch (axis 0 of max_shape) is {}".format(room))
            return 1, delay_ms
        if size > room:
            _log("WARNING: max_batch_size {} is past the profile's max batch {}; batching up to {}".format(
                size, room, room))
        return min(size, room), delay_ms

    # -- the worker thread -------------------------------------------------------------------

    def start(self) -> None:
        self._worker.start()

    def _work(self) -> None:
        try:
            runner, why = load_backend(self.folder, self._backend_choice, self._engine_cache)
            self.backend, self.backend_reason = runner.backend, why
            self.output_names = list(getattr(runner, "output_names", []))
            _log("backend {} ({})".format(runner.backend, why))
            if self._do_warmup:
                self.warmup = self._warm_up(runner)
            self.ready.set()
            _log("ready: {}".format(json.dumps(self.warmup)))
            notify_systemd("READY=1\nSTATUS=ready on {} after warm-up".format(self.backend))
        except Exception as exc:  # reported by /v2/health/ready and the log; the process stays up to say so
            self.failed = "{}: {}".format(type(exc).__name__, exc)
            _log("cannot serve: " + self.failed)
            return
        waiting = collections.deque()  # type: collections.deque
        while True:
            first = waiting.popleft() if waiting else self._jobs.get()
            batch = self._gather(first, waiting) if self.max_batch_size > 1 else [first]
            self._run_batch(runner, batch)

    def _gather(self, first: Tuple[Any, Any], waiting: "collections.deque") -> List[Tuple[Any, Any]]:
        """``first`` and the requests that can share its batch: same non-batch dims, within the delay."""
        key = _batch_key(first[0])
        if key is None:
            return [first]
        batch, rows = [first], _rows(first[0])
        skipped = collections.deque()  # type: collections.deque
        while waiting and rows < self.max_batch_size:  # requests set aside by an earlier batch come first
            job = waiting.popleft()
            if _batch_key(job[0]) == key and rows + _rows(job[0]) <= self.max_batch_size:
                batch.append(job)
                rows += _rows(job[0])
            else:
                skipped.append(job)
        skipped.extend(waiting)
        waiting.clear()
        waiting.extend(skipped)
        deadline = time.perf_counter() + self.max_queue_delay_ms / 1000.0
        while rows < self.max_batch_size:
            left = deadline - time.perf_counter()
            try:
                job = self._jobs.get(timeout=left) if left > 0 else self._jobs.get_nowait()
            except queue.Empty:
                break
            if _batch_key(job[0]) == key and rows + _rows(job[0]) <= self.max_batch_size:
                batch.append(job)
                rows += _rows(job[0])
            else:
                waiting.append(job)
        return batch

    def _run_batch(self, runner: Any, batch: List[Tuple[Any, Any]]) -> None:
        started = time.perf_counter()
        try:
            if len(batch) == 1:
                results = [runner.run(batch[0][0])]
            else:
                results = self._run_stacked(runner, [inputs for inputs, _ in batch])
        except Exception as exc:
            for _, answer in batch:
                answer.put((None, 0.0, 0, exc))
            return
        ms = (time.perf_counter() - started) * 1000.0
        rows = sum(_rows(inputs) for inputs, _ in batch)
        with self._lock:
            self.batches["runs"] += 1
            self.batches["requests"] += len(batch)
            self.batches["rows"] += rows
        for (_, answer), outputs in zip(batch, results):
            answer.put((outputs, ms, rows, None))

    def _run_stacked(self, runner: Any, requests: List[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
        """One run over the requests stacked on axis 0, split back per request."""
        stacked = {n: np.concatenate([r[n] for r in requests], axis=0) for n in requests[0]}
        outputs = runner.run(stacked)
        total = sum(_rows(r) for r in requests)
        if any(a.ndim == 0 or a.shape[0] != total for a in outputs.values()):
            _log("WARNING: dynamic batching is off: the outputs {} do not carry the batch on axis 0".format(
                {n: list(a.shape) for n, a in outputs.items()}))
            self.max_batch_size = 1
            return [runner.run(r) for r in requests]
        results, start = [], 0
        for request in requests:
            end = start + _rows(request)
            results.append({n: a[start:end] for n, a in outputs.items()})
            start = end
        return results

    def _example(self, which: str) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        return {n: rng.random(getattr(s, which), dtype=np.float32).astype(DATATYPES[s.datatype])
                for n, s in self.inputs.items()}

    def _warm_up(self, runner: Any) -> Dict[str, Any]:
        """Run the profile's shapes until the opt shape's latency settles or the budget ends."""
        examples = {w: self._example(w) for w in ("min_shape", "opt_shape", "max_shape")}
        started = time.perf_counter()
        runner.run(examples["opt_shape"])
        cold_ms = (time.perf_counter() - started) * 1000.0
        opt_ms = []  # type: List[float]
        settled = False
        deadline = started + self.warmup_budget_s
        while time.perf_counter() < deadline:
            for which in ("min_shape", "max_shape"):
                runner.run(examples[which])
            for _ in range(SETTLE_WINDOW):
                t0 = time.perf_counter()
                runner.run(examples["opt_shape"])
                opt_ms.append((time.perf_counter() - t0) * 1000.0)
            if len(opt_ms) >= 2 * SETTLE_WINDOW:
                last = float(np.median(opt_ms[-SETTLE_WINDOW:]))
                before = float(np.median(opt_ms[-2 * SETTLE_WINDOW:-SETTLE_WINDOW]))
                if abs(last - before) <= SETTLE_TOLERANCE * before:
                    settled = True
                    break
        return {"cold_first_call_ms": round(cold_ms, 3), "warmup_s": round(time.perf_counter() - started, 3),
                "warm_p50_ms": round(float(np.median(opt_ms[-SETTLE_WINDOW:])), 3) if opt_ms else None,
                "runs": len(opt_ms) + 1, "settled": settled, "budget_s": self.warmup_budget_s,
                "shapes": {w: {n: s for n, s in ((n, getattr(i, w)) for n, i in self.inputs.items())}
                           for w in ("min_shape", "opt_shape", "max_shape")}}

    # -- requests ----------------------------------------------------------------------------

    def parse_request(self, body: bytes, header_length: Optional[int] = None
                      ) -> Tuple[Dict[str, np.ndarray], List[str]]:
        """(input arrays, names of the outputs to send as binary) of a v2 inference request.

        With ``header_length`` (the ``Inference-Header-Content-Length`` header of the binary tensor
        extension) the body is that many bytes of JSON followed by the raw tensors, in the order of
        the inputs that give ``parameters.binary_data_size`` (little-endian, C order).
        """
        binary = b""
        if header_length is not None:
            if not 0 <= header_length <= len(body):
                raise BadRequest("Inference-Header-Content-Length {} is outside the body of {} bytes".format(
                    header_length, len(body)))
            body, binary = body[:header_length], body[header_length:]
        try:
            request = json.loads(body)
        except ValueError as exc:
            raise BadRequest("the body is not valid JSON: {}".format(exc)) from None
        if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
            raise BadRequest('the body must be an object with an "inputs" list (KServe v2 inference request)')
        arrays = {}
        offset = 0
        for item in request["inputs"]:
            if not isinstance(item, dict):
                raise BadRequest("every entry of inputs must be an object with name, shape, datatype, data")
            name = item.get("name")
            spec = self.inputs.get(name)
            if spec is None:
                raise BadRequest("unknown input {!r}; the model's inputs are {}".format(name, sorted(self.inputs)))
            if item.get("datatype") != spec.datatype:
                raise BadRequest("input {!r} has datatype {!r}; the model takes {}".format(
                    name, item.get("datatype"), spec.datatype))
            shape = item.get("shape")
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                      for d in shape):
                raise BadRequest("input {!r}: shape must be a list of integers".format(name))
            if len(shape) != len(spec.min_shape) or any(d < lo or d > hi for d, lo, hi in
                                                        zip(shape, spec.min_shape, spec.max_shape)):
                raise BadRequest("input {!r} shape {} is outside the profile: from {} to {}".format(
                    name, shape, spec.min_shape, spec.max_shape))
            dtype = np.dtype(DATATYPES[spec.datatype])
            size = (item.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                needed = int(np.prod(shape)) * dtype.itemsize
                if header_length is None:
                    raise BadRequest("input {!r} gives binary_data_size but the request has no "
                                     "Inference-Header-Content-Length header".format(name))
                if size != needed or offset + size > len(binary):
                    raise BadRequest("input {!r}: binary_data_size {} with {} binary bytes left; shape {} of {} "
                                     "needs {}".format(name, size, len(binary) - offset, shape, spec.datatype,
                                                       needed))
                arrays[name] = np.frombuffer(binary, dtype=dtype.newbyteorder("<"), count=int(np.prod(shape)),
                                             offset=offset).reshape(shape)
                offset += size
                continue
            data = item.get("data")
            if not isinstance(data, list):
                raise BadRequest("input {!r}: data must be a flat list of numbers".format(name))
            try:
                array = np.asarray(data, dtype=dtype)
            except (TypeError, ValueError):
                raise BadRequest("input {!r}: data holds values that are not {} numbers".format(
                    name, spec.datatype)) from None
            if array.ndim != 1 or array.size != int(np.prod(shape)):
                raise BadRequest("input {!r}: data has {} values, shape {} needs {}".format(
                    name, array.size, shape, int(np.prod(shape))))
            arrays[name] = array.reshape(shape)
        if offset != len(binary):
            raise BadRequest("{} binary bytes after the inputs' binary_data_size; they must add up".format(
                len(binary) - offset))
        missing = sorted(set(self.inputs) - set(arrays))
        if missing:
            raise BadRequest("inputs {} are missing".format(missing))
        return arrays, self._binary_outputs(request)

    def _binary_outputs(self, request: Dict[str, Any]) -> List[str]:
        everything = bool((request.get("parameters") or {}).get("binary_data_output"))
        asked = request.get("outputs")
        if not isinstance(asked, list):
            return list(self.output_names) if everything else []
        return [o.get("name") for o in asked if isinstance(o, dict)
                and (o.get("parameters") or {}).get("binary_data", everything)]

    def infer(self, inputs: Dict[str, np.ndarray]) -> Tuple[Dict[str, np.ndarray], float, int]:
        """(outputs, backend ms of the run that held this request, rows in that run)."""
        answer = queue.Queue(maxsize=1)  # type: queue.Queue
        self._jobs.put((inputs, answer))
        outputs, ms, rows, error = answer.get()
        if error is not None:
            raise error
        return outputs, ms, rows

    def record(self, outcome: str, ms: float = 0.0) -> None:
        with self._lock:
            self.requests[outcome] += 1
            if outcome == "success":
                self.latency_sum_ms += ms
                index = next((i for i, b in enumerate(LATENCY_BUCKETS_MS) if ms <= b), len(LATENCY_BUCKETS_MS))
                self.latency_counts[index] += 1

    def metadata(self) -> Dict[str, Any]:
        return {"name": self.name, "versions": [self.version], "platform": self.backend,
                "inputs": [s.as_dict() for s in self.inputs.values()],
                "outputs": [{"name": n} for n in self.output_names],
                "parameters": {"backend": self.backend, "backend_reason": self.backend_reason,
                               "target": self.recipe.get("target"), "warmup": self.warmup,
                               "dynamic_batching": {"max_batch_size": self.max_batch_size,
                                                    "max_queue_delay_ms": self.max_queue_delay_ms}}}

    def metrics_text(self) -> str:
        """Prometheus text exposition format."""
        lines = ["# HELP edgebuild_requests_total Inference requests by outcome.",
                 "# TYPE edgebuild_requests_total counter"]
        with self._lock:
            for outcome, count in self.requests.items():
                lines.append('edgebuild_requests_total{{model="{}",outcome="{}"}} {}'.format(self.name, outcome, count))
            lines += ["# HELP edgebuild_inference_latency_ms Backend time per successful request.",
                      "# TYPE edgebuild_inference_latency_ms histogram"]
            total = 0
            for bucket, count in zip(list(LATENCY_BUCKETS_MS) + ["+Inf"], self.latency_counts):
                total += count
                lines.append('edgebuild_inference_latency_ms_bucket{{model="{}",le="{}"}} {}'.format(
                    self.name, bucket, total))
            lines.append('edgebuild_inference_latency_ms_sum{{model="{}"}} {:.3f}'.format(self.name,
                                                                                        self.latency_sum_ms))
            lines.append('edgebuild_inference_latency_ms_count{{model="{}"}} {}'.format(self.name, total))
            lines += ["# HELP edgebuild_backend_runs_total Backend runs (one per batch).",
                      "# TYPE edgebuild_backend_runs_total counter",
                      'edgebuild_backend_runs_total{{model="{}"}} {}'.format(self.name, self.batches["runs"]),
                      "# HELP edgebuild_batched_requests_total Requests answered by those runs.",
                      "# TYPE edgebuild_batched_requests_total counter",
                      'edgebuild_batched_requests_total{{model="{}"}} {}'.format(self.name, self.batches["requests"]),
                      "# HELP edgebuild_batch_rows_total Rows (axis 0) those runs took.",
                      "# TYPE edgebuild_batch_rows_total counter",
                      'edgebuild_batch_rows_total{{model="{}"}} {}'.format(self.name, self.batches["rows"])]
        gauges = (("warmup_seconds", "warmup_s", "Time from the first warm-up call to ready."),
                  ("cold_first_call_ms", "cold_first_call_ms", "The first inference after loading."),
                  ("warm_p50_ms", "warm_p50_ms", "Median latency at the opt shape when warm-up ended."))
        for metric, key, text in gauges:
            value = self.warmup.get(key)
            if value is not None:
                lines += ["# HELP edgebuild_{} {}".format(metric, text), "# TYPE edgebuild_{} gauge".format(metric),
                          'edgebuild_{}{{model="{}"}} {}'.format(metric, self.name, value)]
        lines += ["# HELP edgebuild_ready 1 once warm-up is done.", "# TYPE edgebuild_ready gauge",
                  'edgebuild_ready{{model="{}",backend="{}"}} {}'.format(self.name, self.backend,
                                                                          int(self.ready.is_set()))]
        return "\n".join(lines) + "\n"


def _rows(inputs: Dict[str, np.ndarray]) -> int:
    return int(next(iter(inputs.values())).shape[0])


def _batch_key(inputs: Dict[str, np.ndarray]) -> Optional[Tuple[Any, ...]]:
    """What requests must share to be stacked: every input's non-batch dims (None: not batchable)."""
    if len({a.shape[0] for a in inputs.values()}) != 1:
        return None
    return tuple(sorted((n, a.shape[1:]) for n, a in inputs.items()))


def _datatype(array: np.ndarray) -> str:
    return NUMPY_TO_DATATYPE.get(array.dtype.name, "FP32")


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
                self._send(200, {"name": "edgebuild", "extensions": ["binary_tensor_data"]})
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
                header = self.headers.get("Inference-Header-Content-Length")
                try:
                    header_length = int(header) if header is not None else None
                except ValueError:
                    raise BadRequest("Inference-Header-Content-Length {!r} is not a number".format(header)) from None
                inputs, binary_outputs = service.parse_request(body, header_length)
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
            described, tail = [], []
            for name, array in outputs.items():
                entry = {"name": name, "shape": list(array.shape), "datatype": _datatype(array)}
                if name in binary_outputs:
                    raw = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
                    entry["parameters"] = {"binary_data_size": len(raw)}
                    tail.append(raw)
                else:
                    entry["data"] = _flat(array)
                described.append(entry)
            answer = {"model_name": service.name, "model_version": service.version, "outputs": described,
                      "parameters": {"inference_ms": round(ms, 3), "batch_rows": rows, "backend": service.backend}}
            if not tail:
                self._send(200, answer)
                return
            head = json.dumps(answer).encode()
            self._send(200, head + b"".join(tail), "application/octet-stream",
                       {"Inference-Header-Content-Length": str(len(head))})

        def _drain(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if 0 < length <= service.max_body:
                self.rfile.read(length)
            else:
                self.close_connection = True

    return Handler


def _flat(array: np.ndarray) -> List[Any]:
    values = array.reshape(-1).tolist()
    if array.dtype.kind == "f":
        return [v if math.isfinite(v) else None for v in values]
    return values


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 resets connections when a few dozen clients connect at once


class Server:
    """The HTTP server and its model service; ``port=0`` picks a free port, None the recipe's."""

    def __init__(self, folder: Path, *, host: str = "0.0.0.0", port: Optional[int] = None,
                 **service_options: Any) -> None:
        self.service = ModelService(folder, **service_options)
        if port is None:
            port = int((self.service.recipe.get("runtime") or {}).get("port", 8000))
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
