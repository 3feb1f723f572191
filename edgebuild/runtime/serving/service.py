"""The model service: one model folder's backend behind a worker thread, with warm-up and metrics.

What ``edgebuild serve`` runs behind HTTP (``server.py``) and what the OTA health check runs alone:

- backend: chosen by ``backends.select.load_backend`` (the TensorRT engine, a deferred build into
  the engine cache, or ONNX Runtime on the CPU, with the reason);
- warm-up before ready: inference at the min, opt and max shapes of the profile until the opt
  shape's latency settles (the median of the last 5 runs within 10% of the 5 before) or the
  warm-up budget runs out; the cold first call, the warm-up time and the warmed latency are kept;
- model instances (``[runtime] instance_count``, Triton's ``instance_group`` count): one worker thread
  per instance, each with its own runner (``runner.instance``: another ONNX Runtime session, the
  cores split between the instances' intra-op threads; another TensorRT execution context of the
  same engine, with its own stream and buffers); a worker owns its runner (a CUDA context is made
  current on the thread that runs it); callers hand requests to the instances through one queue
  (``infer``); a backend whose runs may overlap (ONNX Runtime's ``InferenceSession.run`` is
  thread-safe) runs on the callers' threads instead when batching is off, as a bare multi-threaded
  loop would, without two thread handoffs a request;
- detections: a raw-head detector's outputs decoded on the device (``decode_outputs``, the host's
  decode and class-aware NMS) into the four outputs of a model with NMS inside, a pose, segmentation or
  OBB model's raw outputs into theirs (``task_decode``, the host gate's decode), when the recipe says
  so (``[runtime] detections``) or a request asks (``AnswerForms``);
- dynamic batching (``max_batch_size`` > 1), as Triton's dynamic batcher: a free instance takes the
  oldest waiting request and gathers others whose inputs have the same non-batch dimensions until
  ``max_batch_size`` rows (never past the profile's max), a ``preferred_batch_size`` reached with
  nothing more already waiting, or ``max_queue_delay_ms`` after the oldest request arrived; one
  instance gathers at a time (the others run their batches meanwhile); the batch is stacked on
  axis 0, run once, and each request gets its own rows of the outputs;
- counters of requests, latency and batches, and histograms of the time a request spends in the
  server outside the backend, per stage, as Prometheus text (``metrics_text``).

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import bisect
import collections
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple  # noqa: F401 (Deque: a type comment)

import numpy as np

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import ACCEPTANCE_FILE, Recipe, RecipeTask
from edgebuild.runtime.base.task_decode import (
    ANSWER_OUTPUTS,
    ROTATED_BOX_CONVENTION,
    detection_metadata,
    detection_tensors,
    instance_metadata,
    instance_tensors,
    server_decodes,
)
from edgebuild.runtime.engines.backends.select import load_backend
from edgebuild.runtime.serving.batcher import Answer, Job, Runner, gather, instances, preferred_sizes
from edgebuild.runtime.serving.batcher import rows as _rows
from edgebuild.runtime.serving.protocol import DATATYPES, AnswerForms, HeaderReadingCache, InputSpec, model_metadata

__all__ = []

LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
#: where a request spends its time in the server outside the backend, in the order it passes them:
#: waiting for an HTTP worker, parsing the body, waiting for the backend (its queue), decoding
#: detections, encoding the answer (JSON, tensors, HTTP head), and sending it (from the answer being
#: ready to its last byte handed to the kernel, including the wait for the dispatcher thread)
STAGES = ("wait_worker", "parse", "wait_backend", "decode", "encode", "send")
STAGE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: the box convention of detections (the model's with NMS inside, the server's decode of a raw head)
BOX_CONVENTION = "xyxy in network-input pixels (the preprocessed tensor; undo the letterbox or resize to map them)"
SETTLE_WINDOW = 5
SETTLE_TOLERANCE = 0.10


def _log(message: str) -> None:
    print("serve: " + message, file=sys.stderr, flush=True)


class ModelService:
    """The backend, its warm-up, the request queue of its worker thread, and the metrics."""

    def __init__(self, folder: Path, *, backend: str = "auto", warmup_budget_s: Optional[float] = None,
                 engine_cache: Optional[Path] = None, warmup: bool = True, max_batch_size: Optional[int] = None,
                 max_queue_delay_ms: Optional[float] = None, instance_count: Optional[int] = None,
                 preferred_batch_size: Optional[Sequence[int]] = None,
                 on_ready: Callable[[str], None] = lambda _: None) -> None:
        self.folder = Path(folder)
        self.recipe = Recipe.load(self.folder, hint="serve the folder `edgebuild compile` wrote for a fleet group")
        self.name = self.recipe.model_name or self.recipe.group
        self.version = self.recipe.model_version or "1"
        # a recipe's profile is [min, opt, max] (Recipe.from_dict checks it)
        self.inputs = {n: InputSpec(n, low, opt, high) for n, (low, opt, high) in self.recipe.profiles.items()}
        runtime = self.recipe.runtime
        self.warmup_budget_s = float(warmup_budget_s if warmup_budget_s is not None else runtime.warmup_budget_s)
        self.max_batch_size, self.max_queue_delay_ms = self._batching(
            int(max_batch_size if max_batch_size is not None else runtime.max_batch_size),
            float(max_queue_delay_ms if max_queue_delay_ms is not None else runtime.max_queue_delay_ms))
        self.instance_count = int(instance_count if instance_count is not None else runtime.instance_count)
        if self.instance_count < 1:
            raise ConfigError("instance_count must be at least 1, not {}".format(self.instance_count))
        self.preferred_batch_size = preferred_sizes(
            list(preferred_batch_size) if preferred_batch_size else list(runtime.preferred_batch_size),
            self.max_batch_size, _log)
        self.max_body = sum(64 + 24 * int(np.prod(s.max_shape)) for s in self.inputs.values()) + 65536
        self._backend_choice, self._engine_cache, self._do_warmup = backend, engine_cache, warmup
        self._on_ready = on_ready
        #: requests for the backend thread (a SimpleQueue: one C lock, no Condition round trip per request)
        self._jobs = queue.SimpleQueue()  # type: queue.SimpleQueue[Job]
        #: held by the instance that gathers the next batch (one at a time, as Triton's one batcher
        #: forms batches for whichever instance is free), with the requests set aside by earlier batches
        self._gathering = threading.Lock()
        self._waiting = collections.deque()  # type: Deque[Job]
        self._lock = threading.Lock()
        self.ready = threading.Event()
        self.failed = None  # type: Optional[str]
        self.backend = "loading"
        self.backend_reason = ""
        self.output_names = []  # type: List[str]
        #: the outputs as v2 metadata tensors (name, datatype, shape): the recipe's, else the backend's
        self.outputs = []  # type: List[JsonObject]
        self.warmup = {}  # type: JsonObject
        self.acceptance = {}  # type: JsonObject
        #: set when the folder's engine failed its acceptance set and its fallback recipe is served
        self.fallback = {}  # type: JsonObject
        self.serving_folder = self.folder  # the folder, or its fallback
        #: refused: connections the HTTP server turned away (its connection cap)
        self.requests = {"success": 0, "failure": 0, "bad_request": 0, "refused": 0}
        self.latency_counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.latency_sum_ms = 0.0
        self.batches = {"runs": 0, "requests": 0, "rows": 0}
        #: per stage (and "server", their total): bucket counts, sum of seconds
        self.stage_counts = {s: [0] * (len(STAGE_BUCKETS_S) + 1) for s in STAGES + ("server",)}
        self.stage_sums = {s: 0.0 for s in STAGES + ("server",)}
        #: the recipe's task (of the recipe served) and what the server answers with it
        self.task = self.recipe.task  # type: Optional[RecipeTask]
        self.forms = answer_forms(self.task, list(self.recipe.outputs or []), runtime.detections)
        #: the checked readings of request headers, for these inputs and forms (``protocol.parse_inference``)
        self.header_readings: HeaderReadingCache = {}
        self._runner = None  # type: Optional[Runner]
        #: runs on the callers' threads (a backend whose runs may overlap, batching off)
        self.direct = False
        self._worker = threading.Thread(target=self._work, name="edgebuild-backend", daemon=True)
        #: the runners of the instances (the first is ``_runner``), once loaded
        self.runners = []  # type: List[Runner]

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

    def _accept(self, runner: Runner, folder: Path, recipe: Recipe) -> None:
        """The folder's acceptance set through this backend; one that disagrees with FP32 is not served."""
        if not recipe.acceptance:
            return
        from edgebuild.errors import AccuracyGateError
        from edgebuild.runtime.engines import acceptance

        name, shapes = next(iter(recipe.profiles.items()))
        self.acceptance = acceptance.check(runner, folder, name, max(1, shapes[2][0]))
        _log("acceptance: {statistic} {value} (threshold {threshold}) on {images} inputs".format(**self.acceptance))
        if not self.acceptance["passed"]:
            raise AccuracyGateError(
                "acceptance failed on {} ({}): {} {} is below {} on the {} inputs of {}; this backend is not "
                "served".format(self.backend, recipe.candidate, self.acceptance["statistic"],
                                self.acceptance["value"], self.acceptance["threshold"], self.acceptance["images"],
                                ACCEPTANCE_FILE))

    def _load(self, folder: Path, recipe: Recipe, engine_cache: Optional[Path]) -> Runner:
        """The backend of ``folder``, checked against its acceptance set."""
        runner, why = load_backend(folder, self._backend_choice, engine_cache, progress=_log, recipe=recipe)
        self.backend, self.backend_reason = runner.backend, why
        self.output_names = list(getattr(runner, "output_names", []))
        self.outputs = output_tensors(recipe, runner, self.output_names)
        self.task = recipe.task
        self.forms = answer_forms(recipe.task, self.output_names, self.recipe.runtime.detections)
        self.header_readings = {}
        _log("backend {} ({})".format(runner.backend, why))
        self._accept(runner, folder, recipe)
        return runner

    def _load_with_fallback(self) -> Runner:
        """The folder's backend; when it fails its acceptance set, the folder's fallback recipe's (FP16)."""
        from edgebuild.errors import AccuracyGateError

        try:
            return self._load(self.folder, self.recipe, self._engine_cache)
        except AccuracyGateError as exc:
            if not self.recipe.fallback:
                raise
            fallback = self.folder / self.recipe.fallback
            recipe = Recipe.load(fallback)
            self.fallback = {"active": True, "candidate": recipe.candidate, "reason": str(exc),
                             "refused": dict(self.acceptance)}
            _log("WARNING: {}; falling back to the {} recipe in {}".format(exc, recipe.candidate, fallback))
            runner = self._load(fallback, recipe, self._engine_cache)
            self.serving_folder = fallback
            return runner

    def start(self) -> None:
        self._worker.start()

    def _work(self) -> None:
        try:
            runner = self._load_with_fallback()
            # ONNX Runtime's session.run is thread-safe and its runs overlap; TensorRT's execution
            # context belongs to this thread
            direct = self.max_batch_size == 1 and self.backend.startswith("onnxruntime")
            runners = [runner] if direct else instances(runner, self.instance_count, _log)
            runner = runners[0]
            if self._do_warmup:
                self.warmup = self._warm_up(runner)
                for other in runners[1:]:  # a new session or context's first runs allocate
                    for which in ("opt_shape", "max_shape", "opt_shape"):
                        other.run(self._example(which))
            self.runners, self._runner, self.direct = runners, runner, direct
            for number, other in enumerate(runners[1:], 1):
                threading.Thread(target=self._serve_instance, args=(other,), daemon=True,
                                 name="edgebuild-backend-{}".format(number)).start()
            self.ready.set()
            _log("ready: {}".format(json.dumps(self.warmup)))
            self._on_ready(self.backend)
        except Exception as exc:  # reported by /v2/health/ready and the log; the process stays up to say so
            self.failed = "{}: {}".format(type(exc).__name__, exc)
            _log("cannot serve: " + self.failed)
            return
        if not self.direct:
            self._serve_instance(runner)

    def _serve_instance(self, runner: Runner) -> None:
        """One instance's worker: take the next batch (one instance gathers at a time), run it; forever."""
        attach = getattr(runner, "attach_thread", None)  # TensorRT: make the CUDA context current here
        if attach is not None:
            attach()
        while True:
            with self._gathering:
                waiting = self._waiting
                first = waiting.popleft() if waiting else self._jobs.get()
                batch = [first] if self.max_batch_size == 1 else gather(
                    first, waiting, self._jobs, self.max_batch_size, self.max_queue_delay_ms,
                    self.preferred_batch_size)
            self._run_batch(runner, batch)

    def _run_batch(self, runner: Runner, batch: List[Job]) -> None:
        started = time.perf_counter()
        for _, answer in batch:
            answer.started = started
        try:
            if len(batch) == 1:
                results = [runner.run(batch[0][0])]
            else:
                results = self._run_stacked(runner, [inputs for inputs, _ in batch])
        except Exception as exc:
            for _, answer in batch:
                answer.put(exc)
            return
        ms = (time.perf_counter() - started) * 1000.0
        rows = sum(_rows(inputs) for inputs, _ in batch)
        with self._lock:
            self.batches["runs"] += 1
            self.batches["requests"] += len(batch)
            self.batches["rows"] += rows
        for (_, answer), outputs in zip(batch, results):
            answer.put((outputs, ms, rows))

    def _run_stacked(self, runner: Runner, requests: List[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
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

    def _warm_up(self, runner: Runner) -> JsonObject:
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

    def infer(self, inputs: Dict[str, np.ndarray],
              timing: Optional[Dict[str, float]] = None) -> Tuple[Dict[str, np.ndarray], float, int]:
        """(outputs, backend ms of the run that held this request, rows in that run).

        ``timing`` gets ``wait_backend``: seconds from the call to its run's start.
        """
        queued = time.perf_counter()
        runner = self._runner if self.direct else None  # direct: set once the runner is loaded
        if runner is not None:
            outputs = runner.run(inputs)
            ms = (time.perf_counter() - queued) * 1000.0
            rows = _rows(inputs)
            with self._lock:
                self.batches["runs"] += 1
                self.batches["requests"] += 1
                self.batches["rows"] += rows
            if timing is not None:
                timing["wait_backend"] = 0.0
            return outputs, ms, rows
        answer = Answer(queued)
        self._jobs.put((inputs, answer))
        result = answer.get()
        if timing is not None:
            timing["wait_backend"] = max(0.0, answer.started - queued)
        if isinstance(result, Exception):
            raise result
        return result

    def decode(self, outputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Raw outputs as detections, in the outputs of a model with NMS inside (OBB: ``OBB_NMS_OUTPUTS``)."""
        assert self.task is not None
        if self.task.kind == "detection":
            return detection_tensors(outputs, self.task.postprocess.as_dict())
        return instance_tensors(outputs, self.task.kind, self.task.postprocess.as_dict())

    def observe(self, stages: Dict[str, float]) -> None:
        """One answered request's seconds per stage (``STAGES``; a stage it did not pass is left out)."""
        sums, counts, where = self.stage_sums, self.stage_counts, bisect.bisect_left
        with self._lock:
            total = 0.0
            for stage, seconds in stages.items():
                if stage in sums:
                    total += seconds
                    sums[stage] += seconds
                    counts[stage][where(STAGE_BUCKETS_S, seconds)] += 1
            sums["server"] += total
            counts["server"][where(STAGE_BUCKETS_S, total)] += 1

    def record(self, outcome: str, ms: float = 0.0) -> None:
        with self._lock:
            self.requests[outcome] += 1
            if outcome == "success":
                self.latency_sum_ms += ms
                self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1

    def answer_outputs(self, decode: bool) -> List[JsonObject]:
        """The v2 metadata tensors of what a request gets: the model's outputs, or the decoded detections."""
        if decode and self.task is not None:
            batch = min(s.min_shape[0] for s in self.inputs.values())
            batch = batch if batch == max(s.max_shape[0] for s in self.inputs.values()) else -1
            if self.task.kind == "detection":
                return detection_metadata(batch, self.task.postprocess.max_detections or 0)
            return instance_metadata(self.task, batch, self.outputs)
        return self.outputs or [{"name": n} for n in self.output_names]

    def task_metadata(self) -> JsonObject:
        """What the outputs mean: their form, the classes, the box convention, how to get the other form."""
        if self.task is None:
            return {"output_form": "raw", "detections": {"available": False}}
        described = {"kind": self.task.kind, "classes": list(self.task.classes),
                     "model_outputs": self.task.outputs}  # type: JsonObject
        decodes = self.forms.decoded is not None
        if self.task.kind not in ANSWER_OUTPUTS or not (decodes or self.forms.detects):
            return dict(described, output_form=self.task.outputs, detections={"available": False})
        described["output_form"] = "detections" if self.forms.decode or not decodes else self.task.outputs
        described["detections"] = {
            "available": True, "decoded_by": "server" if decodes else "model",
            "default": self.forms.decode or self.forms.detects,
            "per_request": 'parameters.detections: true or false' if decodes else None,
            "outputs": list(ANSWER_OUTPUTS[self.task.kind]),
            "box_convention": ROTATED_BOX_CONVENTION if self.task.kind == "obb" else BOX_CONVENTION,
            "max_detections": self.task.postprocess.max_detections or 0,
            "score_threshold": self.task.postprocess.score_threshold,
            "nms_iou": self.task.postprocess.nms_iou}
        if decodes:
            described["raw_outputs"] = self.outputs or [{"name": n} for n in self.output_names]
        return described

    def metadata(self) -> JsonObject:
        outputs = self.answer_outputs(self.forms.decode)
        return model_metadata(self.name, self.version, self.backend, self.inputs, outputs, {
            "task": self.task_metadata(), "concurrent_runs": self.direct,
            "backend": self.backend, "backend_reason": self.backend_reason, "target": self.recipe.target,
            "candidate": self.fallback.get("candidate", self.recipe.candidate),
            "acceptance": self.acceptance, "fallback": self.fallback, "failed": self.failed,
            "warmup": self.warmup, "instance_count": len(self.runners) or self.instance_count,
            "dynamic_batching": {"max_batch_size": self.max_batch_size, "max_queue_delay_ms": self.max_queue_delay_ms,
                                 "preferred_batch_size": list(self.preferred_batch_size)}})

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
                      'edgebuild_batch_rows_total{{model="{}"}} {}'.format(self.name, self.batches["rows"]),
                      "# HELP edgebuild_batch_size_average Rows per backend run since the start (rows / runs).",
                      "# TYPE edgebuild_batch_size_average gauge",
                      'edgebuild_batch_size_average{{model="{}"}} {:.3f}'.format(
                          self.name, self.batches["rows"] / self.batches["runs"] if self.batches["runs"] else 0.0),
                      "# HELP edgebuild_model_instances Instances of the model that run batches at once.",
                      "# TYPE edgebuild_model_instances gauge",
                      'edgebuild_model_instances{{model="{}"}} {}'.format(self.name, len(self.runners) or 1)]
        lines += self._stage_lines()
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
        if self.acceptance:
            lines += ["# HELP edgebuild_acceptance_agreement Agreement with FP32 on the acceptance set "
                      "(served only at or above the threshold).", "# TYPE edgebuild_acceptance_agreement gauge",
                      'edgebuild_acceptance_agreement{{model="{}"}} {}'.format(self.name, self.acceptance["value"]),
                      "# HELP edgebuild_acceptance_passed 1 when the backend passed its acceptance check.",
                      "# TYPE edgebuild_acceptance_passed gauge",
                      'edgebuild_acceptance_passed{{model="{}"}} {}'.format(self.name,
                                                                           int(self.acceptance["passed"]))]
        if self.recipe.fallback:
            lines += ["# HELP edgebuild_fallback_active 1 when the folder's engine failed its acceptance set and "
                      "the fallback recipe is served.", "# TYPE edgebuild_fallback_active gauge",
                      'edgebuild_fallback_active{{model="{}"}} {}'.format(self.name, int(bool(self.fallback)))]
        return "\n".join(lines) + "\n"


    def _stage_lines(self) -> List[str]:
        """The per-stage histograms (call with the lock held)."""
        lines = ["# HELP edgebuild_request_stage_seconds Time an answered inference request spent in the server "
                 "outside the backend, per stage.", "# TYPE edgebuild_request_stage_seconds histogram"]
        for stage in STAGES + ("server",):
            if stage == "server":
                lines += ["# HELP edgebuild_server_seconds Time an answered inference request spent in the server "
                          "outside the backend (the stages together).", "# TYPE edgebuild_server_seconds histogram"]
            metric = "edgebuild_server_seconds" if stage == "server" else "edgebuild_request_stage_seconds"
            labels = 'model="{}"'.format(self.name) + ('' if stage == "server" else ',stage="{}"'.format(stage))
            total = 0
            for bucket, count in zip(list(STAGE_BUCKETS_S) + ["+Inf"], self.stage_counts[stage]):
                total += count
                lines.append('{}_bucket{{{},le="{}"}} {}'.format(metric, labels, bucket, total))
            lines.append("{}_sum{{{}}} {:.6f}".format(metric, labels, self.stage_sums[stage]))
            lines.append("{}_count{{{}}} {}".format(metric, labels, total))
        return lines


def answer_forms(task: Optional[RecipeTask], raw: List[str], decode: bool) -> AnswerForms:
    """What a model folder answers: the detections the server decodes of a raw-head detector or of a pose,
    segmentation or OBB model's raw outputs too (by default with ``decode``); NMS inside: its detections."""
    if task is not None and server_decodes(task):
        return AnswerForms(raw, list(ANSWER_OUTPUTS[task.kind]), decode)
    in_model = task is not None and (task.outputs == "nms" or bool(task.postprocess.in_model))
    return AnswerForms(raw, detects=in_model)


#: ONNX Runtime's element types (``NodeArg.type``) as v2 datatypes
_ORT_DATATYPES = {"tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(double)": "FP64",
                  "tensor(int64)": "INT64", "tensor(int32)": "INT32", "tensor(int8)": "INT8", "tensor(uint8)": "UINT8",
                  "tensor(bool)": "BOOL"}


def output_tensors(recipe: Recipe, runner: Runner, names: List[str]) -> List[JsonObject]:
    """The outputs as v2 ``$metadata_tensor`` objects, in the backend's order.

    From the recipe (written from the ONNX by the host); a recipe from before it recorded outputs:
    from what ONNX Runtime reports (an axis without a number is -1); else the name alone, with a warning.
    """
    recorded = recipe.outputs or {}
    reported = {}  # type: Dict[str, JsonObject]
    session = getattr(runner, "session", None)
    if session is not None and hasattr(session, "get_outputs"):
        for arg in session.get_outputs():
            reported[arg.name] = {"datatype": _ORT_DATATYPES.get(arg.type, arg.type),
                                  "shape": [d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape]}
    tensors, unknown = [], []
    for name in names:
        if name in recorded:
            tensors.append({"name": name, "datatype": recorded[name].datatype, "shape": list(recorded[name].shape)})
        elif name in reported:
            tensors.append(dict(reported[name], name=name))
        else:
            tensors.append({"name": name})
            unknown.append(name)
    if unknown:
        _log("WARNING: the datatype and shape of outputs {} are unknown (the recipe predates recording them and "
             "the backend does not say); /v2/models gives their names only; recompile to record them".format(unknown))
    return tensors
