"""What does the server cost per request? Served requests against a bare ``session.run`` of the same ONNX.

On one compiled model folder, one-row requests at the profile's opt height and width (binary
tensors), three processes on this host: the runtime server (``edgebuild serve``, batching off),
and two bare ONNX Runtime sessions on the folder's ONNX, one made as the server's backend makes it
(its session options) and one with ONNX Runtime's defaults. The clients run in this process.

1. sequential, one client: per round, ``--requests`` served requests one after the other, as many
   bare runs on each session, and as many ``GET /v2/health/live`` on the same client (the floor:
   the client's own round trip on loopback with no body and no backend). The rounds interleave
   the sides, so a busy host slows each of them alike. The **per-request cost** is served p50 -
   bare p50, per round, and its median over the rounds;
2. throughput: per round, ``--clients`` clients sending requests as fast as they get answers for
   ``--duration`` seconds, and a bare ``--clients``-thread ``session.run`` loop as long on each
   session; the ratio served / bare per round, and its median.

The floors: ``GET /v2/health/live`` on the same client, and the same inference request against a
null server (``_server.NULL_CHILD``: it reads each request whole and writes back a canned copy of
the server's answer) - what the client and loopback cost for these bytes, which no server can go
under; the script prints the server's own cost past it too. And the **transport floor**: the same
request against a minimal server (``NULL_CHILD`` given the folder) that reads it whole, runs the same bare
``session.run`` on a fixed input and writes the canned answer, minus bare p50: what any server that runs
the model pays with this client on this host (the client's requests then come as far apart as the served
ones, and find its caches as cold); served p50 - its p50 is this server's **cost above the transport
floor**. It also prints, from the server's
``/metrics``, the mean time per stage a request spent in the server outside the backend during the
sequential requests, and the CPU per request of the server process and of the clients under the
throughput load. On a shared host, run it under ``chrt -r 1`` (every process it starts inherits it).

    python benchmarks/server_cost.py build/engines/<group> [--rounds 5] [--requests 200]
        [--clients 8] [--duration 5] [--transports http] [--decode] [--json out.json]

A transport is how the clients reach the server: ``http`` is NVIDIA ``tritonclient.http`` with
binary tensors; ``grpc`` is ``tritonclient.grpc`` (raw tensor contents) on the server's gRPC port;
``shm`` is ``tritonclient.http`` with Triton's system shared memory: each client registers one
region for its inputs and one for its outputs (``tritonclient.utils.shared_memory``), writes the
input there once per request and reads the outputs as views of its region, so no tensor crosses
the socket. Each transport's clients are made for its turn of a round and closed after it; gRPC's
library keeps threads running after that, which on a 2-core host speeds up the HTTP requests that
follow: compare ``http`` with ``shm`` in a run without ``grpc``. Another transport is a class with
``HttpTransport``'s ``infer``, ``live`` and ``close`` (``canned`` only where a null server of its
protocol exists), made from a ``Target``, added to ``TRANSPORTS``.

A detector that decodes on the device (``[runtime] detections``) is asked for its raw head
(``parameters.detections: false``) so that both sides run the same model; ``--decode`` keeps
the decoding (its cost then counts as the server's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _server import running_bare, running_null_server, running_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests.support
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.serving import protocol
from tests.support.nvidia_shared_memory import nvidia_shared_memory  # noqa: E402

#: the Server options every run takes (batching off: the comparison is one request, one run)
SERVER_OPTIONS: dict[str, Any] = {"max_batch_size": 1, "grpc_port": 0}  # gRPC on a free port


class Target:
    """What a transport needs to reach the served model: the server's ports, the model, the request."""

    def __init__(self, port: int, model: str, inputs: dict[str, np.ndarray], parameters: dict | None,
                 grpc_port: int | None = None) -> None:
        self.port, self.model, self.inputs, self.parameters = port, model, inputs, parameters
        self.grpc_port = grpc_port


class _TritonClient:
    """What every transport does the same with its NVIDIA client: the floor request, and closing it."""

    _client: Any

    def live(self) -> None:
        if not self._client.is_server_live():
            raise RuntimeError("the server is not live")

    def close(self) -> None:
        self._client.close()


class HttpTransport(_TritonClient):
    """NVIDIA ``tritonclient.http``, binary tensors in and out, one keep-alive connection.

    A client belongs to the thread that made it (tritonclient.http runs on gevent).
    """

    name = "http"

    def __init__(self, target: Target) -> None:
        import tritonclient.http as triton

        self._target = target
        self._client = triton.InferenceServerClient(f"127.0.0.1:{target.port}")
        self._tensors = []
        for name, array in target.inputs.items():
            tensor = triton.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array, binary_data=True)
            self._tensors.append(tensor)

    def infer(self) -> Any:
        return self._client.infer(self._target.model, self._tensors, parameters=self._target.parameters)

    @staticmethod
    def canned(result: Any) -> bytes:
        """The whole HTTP answer the server gave ``result`` (a ``tritonclient.http.InferResult``), for the
        null server that gives the transport's floor."""
        response = result.get_response()
        outputs = {o["name"]: result.as_numpy(o["name"]) for o in response["outputs"]}
        body, content_type, headers = protocol.encode_response(
            response["model_name"], response["model_version"], outputs, list(outputs), response["parameters"])
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        return head.encode() + body


class GrpcTransport(_TritonClient):
    """NVIDIA ``tritonclient.grpc``: raw tensor contents in and out on one channel."""

    name = "grpc"

    def __init__(self, target: Target) -> None:
        import tritonclient.grpc as triton

        if target.grpc_port is None:
            sys.exit("the server has no gRPC port (grpcio or tritonclient[grpc] missing?)")
        self._target = target
        self._client = triton.InferenceServerClient(f"127.0.0.1:{target.grpc_port}")
        self._tensors = []
        for name, array in target.inputs.items():
            tensor = triton.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            self._tensors.append(tensor)

    def infer(self) -> Any:
        result = self._client.infer(self._target.model, self._tensors, parameters=self._target.parameters)
        return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


class SharedMemoryTransport(_TritonClient):
    """``tritonclient.http`` with the system shared-memory extension: inputs and outputs in registered
    regions, only the request's JSON header on the socket. One pair of regions per client."""

    name = "shm"
    _made = 0
    _lock = threading.Lock()

    def __init__(self, target: Target) -> None:
        import tritonclient.http as triton

        shm = nvidia_shared_memory()
        with SharedMemoryTransport._lock:
            SharedMemoryTransport._made += 1
            tag = f"eb-bench-{os.getpid()}-{SharedMemoryTransport._made}"
        self._shm, self._target = shm, target
        self._client = triton.InferenceServerClient(f"127.0.0.1:{target.port}")
        # the outputs' shapes and types, from one ordinary request
        probe = HttpTransport(target)
        answer = probe.infer()
        probe.close()
        self._outputs = {o["name"]: answer.as_numpy(o["name"]) for o in answer.get_response()["outputs"]}
        in_size = sum(a.nbytes for a in target.inputs.values())
        out_size = sum(a.nbytes for a in self._outputs.values())
        self._regions = [(f"{tag}-in", shm.create_shared_memory_region(f"{tag}-in", f"/{tag}-in", in_size)),
                         (f"{tag}-out", shm.create_shared_memory_region(f"{tag}-out", f"/{tag}-out", out_size))]
        for (name, _), size in zip(self._regions, (in_size, out_size)):
            self._client.register_system_shared_memory(name, f"/{name}", size)
        self._inputs, offset = [], 0
        for name, array in target.inputs.items():
            tensor = triton.InferInput(name, list(array.shape), "FP32")
            tensor.set_shared_memory(f"{tag}-in", array.nbytes, offset)
            self._inputs.append((tensor, array, offset))
            offset += array.nbytes
        self._asked, self._placed, offset = [], [], 0
        for name, array in self._outputs.items():
            output = triton.InferRequestedOutput(name, binary_data=True)
            output.set_shared_memory(f"{tag}-out", array.nbytes, offset)
            self._asked.append(output)
            self._placed.append((name, array.dtype, array.shape, offset))
            offset += array.nbytes

    def infer(self) -> Any:
        handle_in, handle_out = self._regions[0][1], self._regions[1][1]
        for _, array, offset in self._inputs:  # the camera app's frame goes into the region
            self._shm.set_shared_memory_region(handle_in, [array], offset)
        self._client.infer(self._target.model, [t for t, _, _ in self._inputs], outputs=self._asked,
                           parameters=self._target.parameters)
        return {name: self._shm.get_contents_as_numpy(handle_out, dtype, shape, offset)
                for name, dtype, shape, offset in self._placed}

    def close(self) -> None:
        for name, handle in self._regions:
            self._client.unregister_system_shared_memory(name)
            self._shm.destroy_shared_memory_region(handle)
        super().close()


TRANSPORTS: dict[str, Callable[[Target], Any]] = {"http": HttpTransport, "grpc": GrpcTransport,
                                                  "shm": SharedMemoryTransport}


def _one_row(recipe: Recipe) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.random([1, *shapes[1][1:]], dtype=np.float32) for n, shapes in recipe.profiles.items()}


def _timed(call: Callable[[], Any], count: int) -> list[float]:
    clock = time.perf_counter
    seconds = []
    for _ in range(count):
        started = clock()
        call()
        seconds.append(clock() - started)
    return seconds


def _loop(clients: int, duration: float, make: Callable[[], Any]) -> int:
    """Requests done by ``clients`` threads, each with its own transport (made and warmed in its thread),
    in ``duration`` seconds."""
    counts, failures = [0] * clients, []
    until = [0.0]
    # the clock starts once every client is connected and warm, before any is let go
    barrier = threading.Barrier(clients, action=lambda: until.__setitem__(0, time.perf_counter() + duration))

    def work(i: int) -> None:
        try:
            transport = make()
            for _ in range(5):
                transport.infer()
        except Exception as exc:  # noqa: BLE001 - shown, the run stops
            failures.append(f"{type(exc).__name__}: {exc}"[:300])
            barrier.abort()
            return
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        try:
            while time.perf_counter() < until[0]:
                transport.infer()
                counts[i] += 1
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{type(exc).__name__}: {exc}"[:300])
        transport.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"served clients failed: {failures[0]}")
    return sum(counts)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _metrics(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()


def _histograms(text: str) -> dict[str, tuple[float, float]]:
    """(seconds, count) of the server's stage histograms and of its backend latency in a /metrics answer."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or not (line.split("{")[0].endswith(("_sum", "_count"))):
            continue
        metric, value = line.rsplit(" ", 1)
        family, labels = metric.split("{", 1)
        if family.startswith("edgebuild_request_stage_seconds"):
            stage, scale = labels.split('stage="')[1].split('"')[0], 1.0
        elif family.startswith("edgebuild_server_seconds"):
            stage, scale = "all outside the backend", 1.0
        elif family.startswith("edgebuild_inference_latency_ms"):
            stage, scale = "backend", 0.001
        else:
            continue
        total, count = found.get(stage, (0.0, 0.0))
        found[stage] = (float(value) * scale, count) if family.endswith("_sum") else (total, float(value))
    return found


def _stage_means(before: dict, after: dict) -> dict[str, float]:
    means = {}
    for stage, (total, count) in after.items():
        total0, count0 = before.get(stage, (0.0, 0.0))
        if count > count0:
            means[stage] = round((total - total0) / (count - count0) * 1000.0, 4)
    return means


def _p50_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000.0


def measure(folder: Path, args: argparse.Namespace) -> dict:
    recipe = Recipe.load(folder)
    inputs = _one_row(recipe)
    shapes = {n: list(a.shape) for n, a in inputs.items()}
    raw = recipe.task is not None and recipe.task.outputs == "raw_head" and recipe.runtime.detections
    parameters = {"detections": False} if raw and not args.decode else None
    sessions = ("server", "default")
    rounds = {"sequential": [], "throughput": []}
    with contextlib.ExitStack() as stack:
        port, ready = stack.enter_context(running_server(folder, **SERVER_OPTIONS))
        bares = {s: stack.enter_context(running_bare(folder, shapes, s)) for s in sessions}
        target = Target(port, recipe.model_name or recipe.group, inputs, parameters, ready.get("grpc_port"))
        # each transport's clients live only for its own turn: a client library's threads (gRPC's) must not
        # run while another transport is measured (they keep a core from idling, which speeds up the others)
        servers = {name: {"served": target} for name in args.transports}
        for name in args.transports:
            probe = TRANSPORTS[name](target)
            canned = getattr(probe, "canned", None)
            if canned is not None:  # the same client against a server that does nothing: the transport's floor
                answer = canned(probe.infer())
                null = stack.enter_context(running_null_server(answer))
                servers[name]["null"] = Target(null, target.model, inputs, parameters)
                # and against one that does nothing but run the same session.run: the client's requests
                # as far apart as the served ones, its caches as cold (the transport floor with the model)
                least = stack.enter_context(running_null_server(answer, folder, shapes))
                servers[name]["minimal"] = Target(least, target.model, inputs, parameters)
            probe.close()
        stages = {name: [] for name in args.transports}
        for i in range(args.rounds):
            row = {"bare_" + s: _p50_ms(bares[s].sequential(args.requests)) for s in sessions}
            for name in args.transports:
                clients = {kind: TRANSPORTS[name](where) for kind, where in servers[name].items()}
                for client in clients.values():
                    _timed(client.infer, 20)  # the connection, the server's first requests
                before = _histograms(_metrics(port))
                row[name] = _p50_ms(_timed(clients["served"].infer, args.requests))
                stages[name].append(_stage_means(before, _histograms(_metrics(port))))
                row[name + "_live"] = _p50_ms(_timed(clients["served"].live, args.requests))
                for kind in ("null", "minimal"):
                    if kind in clients:
                        row[f"{name}_{kind}"] = _p50_ms(_timed(clients[kind].infer, args.requests))
                for client in clients.values():
                    client.close()
            rounds["sequential"].append(row)
            print(f"round {i + 1}: p50 ms " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
        for i in range(args.throughput_rounds):
            row = {"bare_" + s: bares[s].loop(args.clients, args.duration) / args.duration for s in sessions}
            for name in args.transports:
                cpu = (_cpu_seconds(ready["pid"]), _own_cpu_seconds())
                done = _loop(args.clients, args.duration, lambda name=name: TRANSPORTS[name](target))
                row[name] = done / args.duration
                row[name + "_server_cpu_ms"] = (_cpu_seconds(ready["pid"]) - cpu[0]) / max(done, 1) * 1000.0
                row[name + "_clients_cpu_ms"] = (_own_cpu_seconds() - cpu[1]) / max(done, 1) * 1000.0
            rounds["throughput"].append(row)
            print(f"throughput round {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                  flush=True)
    return _summary(rounds, stages, args, shapes, ready, parameters)


def _median(values) -> float:
    return round(statistics.median(values), 4)


def _summary(rounds: dict, stages: dict, args: argparse.Namespace, shapes: dict, ready: dict,
             parameters: dict | None) -> dict:
    seq, put = rounds["sequential"], rounds["throughput"]
    sessions = ("server", "default")
    result = {"shape": shapes, "parameters": parameters, "rounds": args.rounds, "requests_per_round": args.requests,
              "clients": args.clients, "duration_s": args.duration, "server_warmup": ready.get("warmup"),
              "bare_p50_ms": {s: _median(r["bare_" + s] for r in seq) for s in sessions},
              "bare_per_s": {s: _median(r["bare_" + s] for r in put) for s in sessions} if put else {},
              "transports": {name: _transport(seq, put, name, rows) for name, rows in stages.items()},
              "rounds_detail": rounds}
    return result


def _transport(seq: list[dict], put: list[dict], name: str, stages: list[dict]) -> dict:
    """One transport's medians; ``cost_ms`` is the goal's number: served p50 - bare p50 (the server's
    session options) per round, the median of the rounds."""
    return {"served_p50_ms": _median(r[name] for r in seq),
            "live_p50_ms": _median(r[name + "_live"] for r in seq),
            "cost_ms": _median(r[name] - r["bare_server"] for r in seq),
            "cost_vs_default_session_ms": _median(r[name] - r["bare_default"] for r in seq),
            # the same client against a server that does no work: what the client and loopback cost
            "null_server_p50_ms": _median(r[name + "_null"] for r in seq) if name + "_null" in seq[0] else None,
            # what this server adds past that floor: served p50 - bare p50 - null-server p50, per round
            "server_own_ms": (_median(r[name] - r["bare_server"] - r[name + "_null"] for r in seq)
                              if name + "_null" in seq[0] else None),
            # a server that reads the request, runs the same session.run and writes a canned answer: its p50 -
            # bare p50 is the transport floor (what any server pays with this client on this host), and
            # served p50 - its p50 this server's cost above that floor
            "transport_floor_ms": (_median(r[name + "_minimal"] - r["bare_server"] for r in seq)
                                   if name + "_minimal" in seq[0] else None),
            "cost_above_floor_ms": (_median(r[name] - r[name + "_minimal"] for r in seq)
                                    if name + "_minimal" in seq[0] else None),
            "served_per_s": _median(r[name] for r in put) if put else None,
            "ratio": _median(r[name] / r["bare_server"] for r in put) if put else None,
            "ratio_vs_default_session": _median(r[name] / r["bare_default"] for r in put) if put else None,
            # CPU per request under the throughput load: the server process (backend included), the clients
            "server_cpu_ms": _median(r[name + "_server_cpu_ms"] for r in put) if put else None,
            "clients_cpu_ms": _median(r[name + "_clients_cpu_ms"] for r in put) if put else None,
            "stages_ms": {k: _median(s.get(k, 0.0) for s in stages) for k in stages[0]} if stages else {}}


def _print(result: dict) -> None:
    bare = result["bare_p50_ms"]
    print(f"\nsequential, one client, {result['shape']}, medians of {result['rounds']} rounds "
          f"of {result['requests_per_round']} requests:")
    print(f"  bare session.run p50: {bare['server']:.3f} ms (the server's session options), "
          f"{bare['default']:.3f} ms (ONNX Runtime's defaults)")
    for name, t in result["transports"].items():
        print(f"  {name}: served p50 {t['served_p50_ms']:.3f} ms, floor (GET /v2/health/live) p50 "
              f"{t['live_p50_ms']:.3f} ms")
        print(f"  {name}: per-request cost (served p50 - bare p50) {t['cost_ms']:.3f} ms "
              f"({t['cost_vs_default_session_ms']:.3f} ms against the default session)")
        if t["null_server_p50_ms"] is not None:
            print(f"  {name}: the same request against a server that does nothing (client and loopback): p50 "
                  f"{t['null_server_p50_ms']:.3f} ms; this server's own cost past it {t['server_own_ms']:.3f} ms")
        if t["transport_floor_ms"] is not None:
            print(f"  {name}: transport floor (a server that only reads the request, runs the same session.run and "
                  f"writes a canned answer, minus bare p50) {t['transport_floor_ms']:.3f} ms; this server's cost "
                  f"above the transport floor {t['cost_above_floor_ms']:.3f} ms")
        for stage, ms in t["stages_ms"].items():
            print(f"      {stage:>24}: {ms:7.4f} ms mean (the server's /metrics)")
    if result["bare_per_s"]:
        print(f"\nthroughput, {result['clients']} clients or threads, medians of rounds of {result['duration_s']} s:")
        print(f"  bare session.run loop: {result['bare_per_s']['server']:.1f} runs/s (the server's session "
              f"options), {result['bare_per_s']['default']:.1f} (defaults)")
        for name, t in result["transports"].items():
            print(f"  {name}: served {t['served_per_s']:.1f} req/s, ratio {t['ratio']:.3f}x "
                  f"({t['ratio_vs_default_session']:.3f}x against the default session)")
            print(f"  {name}: CPU per request: server process {t['server_cpu_ms']:.3f} ms (backend included), "
                  f"clients {t['clients_cpu_ms']:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=5, help="sequential rounds (each side per round)")
    parser.add_argument("--requests", type=int, default=200, help="sequential requests per round and side")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of each throughput run")
    parser.add_argument("--throughput-rounds", type=int, default=3, help="0: sequential only")
    parser.add_argument("--transports", type=lambda s: s.split(","), default=["http"],
                        help="comma-separated: " + ", ".join(TRANSPORTS))
    parser.add_argument("--decode", action="store_true", help="let a decoding server decode (its cost counts)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    unknown = [t for t in args.transports if t not in TRANSPORTS]
    if unknown:
        parser.error(f"unknown transports {unknown}; known: {sorted(TRANSPORTS)}")
    result = measure(args.folder, args)
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
