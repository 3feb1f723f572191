"""What does dynamic batching do to throughput and latency? (the runtime server's batcher)

Starts the server on a compiled model folder once per setting, each in a fresh process on
loopback, warms it up, then runs ``--clients`` concurrent clients for ``--duration`` seconds.
Every client sends one-row requests (batch 1, the profile's opt height and width) as fast as it
gets answers. Per setting it reports requests per second, the client-side p50 and p99 latency,
and the mean rows per backend run, the server's own time outside the backend per request and the
part of it spent in the batching queue (from the server's ``/metrics``), so the effect of
batching is the change against the ``max_batch_size 1`` line.

    python benchmarks/batching.py build/engines/<group> [--clients 16] [--duration 10]
        [--settings 1:0,4:2,8:2,8:5] [--binary] [--json out.json]
    python benchmarks/batching.py examples/shapes-detector/build/engines/yard-cams   # after `make demo`

A setting is MAX_BATCH_SIZE:MAX_QUEUE_DELAY_MS. The backend is whatever the folder serves with
here (ONNX Runtime on the CPU on a build host, said in the output); batching pays most on a GPU,
where one run of 8 rows costs little more than one of 1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _server import running_server

from edgebuild.runtime.base.recipe import Recipe


def _counter(metrics: str, name: str, labels: str = "") -> float:
    found = re.search(rf"^{name}\{{[^}}]*{labels}[^}}]*\}} (\S+)$", metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _mean_ms(before: str, after: str, name: str, labels: str = "") -> float | None:
    """The mean of a histogram in seconds over the run, in ms (None: nothing observed)."""
    count = _counter(after, name + "_count", labels) - _counter(before, name + "_count", labels)
    total = _counter(after, name + "_sum", labels) - _counter(before, name + "_sum", labels)
    return round(total / count * 1000.0, 2) if count else None


def _metrics(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    return conn.getresponse().read().decode()


def _bodies(recipe: Recipe, binary: bool) -> list[tuple[bytes, dict]]:
    """A few different one-row requests, encoded before the clock starts: JSON, or the binary extension."""
    rng = np.random.default_rng(0)
    bodies = []
    for _ in range(8):
        inputs, tail = [], b""
        for input_name, shapes in recipe.profiles.items():
            shape = [1, *shapes[1][1:]]
            array = rng.random(shape, dtype=np.float32)
            if binary:
                inputs.append({"name": input_name, "shape": shape, "datatype": "FP32",
                               "parameters": {"binary_data_size": array.nbytes}})
                tail += array.astype("<f4").tobytes()
            else:
                inputs.append({"name": input_name, "shape": shape, "datatype": "FP32",
                               "data": array.reshape(-1).tolist()})
        head = json.dumps({"inputs": inputs, **({"parameters": {"binary_data_output": True}} if binary else {})})
        headers = {"Inference-Header-Content-Length": str(len(head))} if binary else {}
        bodies.append((head.encode() + tail, headers))
    return bodies


def measure(folder: Path, max_batch_size: int, delay_ms: float, clients: int, duration: float,
            binary: bool = False) -> dict:
    recipe = Recipe.load(folder)
    name = recipe.model_name or recipe.group
    bodies = _bodies(recipe, binary)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[str] = []
    with running_server(folder, max_batch_size=max_batch_size, max_queue_delay_ms=delay_ms) as (port, ready):
        before = _metrics(port)
        deadline = time.perf_counter() + duration

        def client(index: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            n = index
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                body, headers = bodies[n % len(bodies)]
                conn.request("POST", f"/v2/models/{name}/infer", body=body, headers=headers)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    failures.append(f"HTTP {answer.status}")
                    continue
                latencies[index].append((time.perf_counter() - started) * 1000)
                n += 1
            conn.close()

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        after = _metrics(port)
    done = sorted(ms for per_client in latencies for ms in per_client)
    runs = _counter(after, "edgebuild_backend_runs_total") - _counter(before, "edgebuild_backend_runs_total")
    rows = _counter(after, "edgebuild_batch_rows_total") - _counter(before, "edgebuild_batch_rows_total")
    return {"max_batch_size": max_batch_size, "max_queue_delay_ms": delay_ms, "clients": clients,
            "seconds": round(elapsed, 2), "requests": len(done), "failures": len(failures),
            "requests_per_s": round(len(done) / elapsed, 1),
            "p50_ms": round(statistics.median(done), 2) if done else None,
            "p99_ms": round(done[min(len(done) - 1, int(0.99 * len(done)))], 2) if done else None,
            "rows_per_run": round(rows / runs, 2) if runs else None,
            # the server's own time outside the backend, and the part of it spent waiting for the batcher
            "server_ms": _mean_ms(before, after, "edgebuild_server_seconds"),
            "wait_backend_ms": _mean_ms(before, after, "edgebuild_request_stage_seconds", 'stage="wait_backend"'),
            "warmup": ready.get("warmup", {}).get("warmup_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path, help="a folder written by `edgebuild compile` (build/engines/<group>)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per setting (default 10)")
    parser.add_argument("--settings", default="1:0,4:2,8:2,8:5",
                        help="MAX_BATCH_SIZE:MAX_QUEUE_DELAY_MS,... (default 1:0,4:2,8:2,8:5; 1 is no batching)")
    parser.add_argument("--binary", action="store_true",
                        help="send and receive tensors with the v2 binary tensor extension instead of JSON")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    settings = [(int(size), float(delay)) for size, delay in (item.split(":") for item in args.settings.split(","))]
    recipe = Recipe.load(args.artifact)
    backend = "TensorRT engine" if Recipe.has_engine(args.artifact) else "ONNX Runtime on the CPU"
    print(f"{args.artifact}: {backend} here (the server's log says which it used), {args.clients} clients x "
          f"{args.duration:.0f} s per setting, one-row requests at {next(iter(recipe.profiles.values()))[1][1:]} "
          f"as {'binary tensors' if args.binary else 'JSON'}")
    results = []
    print(f"{'batch':>5} {'delay ms':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rows/run':>8} "
          f"{'server ms':>9} {'queue ms':>8} {'failed':>6}")
    for size, delay in settings:
        r = measure(args.artifact, size, delay, args.clients, args.duration, binary=args.binary)
        results.append(r)
        print(f"{size:>5} {delay:>8g} {r['requests_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['rows_per_run']:>8} {r['server_ms']!s:>9} {r['wait_backend_ms']!s:>8} {r['failures']:>6}")
    base = results[0]["requests_per_s"]
    for r in results[1:]:
        print(f"max_batch_size {r['max_batch_size']}, delay {r['max_queue_delay_ms']:g} ms: "
              f"{r['requests_per_s'] / base:.2f}x the throughput of the first setting")
    if args.json:
        args.json.write_text(json.dumps({"artifact": str(args.artifact), "backend_here": backend, "binary": args.binary,
                                         "results": results}, indent=2))
    sys.exit(1 if any(r["failures"] for r in results) else 0)


if __name__ == "__main__":
    main()
