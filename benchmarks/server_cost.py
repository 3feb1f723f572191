"""What does the server itself cost? Served requests per second against a bare ONNX Runtime loop.

Runs, on one compiled model folder and one-row requests at the profile's opt height and width:

1. bare: ``--clients`` threads calling ``session.run`` on the folder's ``model.onnx`` for
   ``--duration`` seconds (the ceiling: what the backend does with no server in front of it),
   once before and once after the served run, averaged;
2. served: the runtime server in a fresh process on loopback, and ``--clients`` NVIDIA
   ``tritonclient.http`` clients sending binary tensors as fast as they get answers.

It prints both rates and their ratio, and from the server's own ``/metrics`` the time a request
spent in the server outside the backend (parse, queue wait, encode, send) per stage. The clients
run on the same cores as the server, as they do in a one-box test; on a 2-core host they take a
good share of them.

    python benchmarks/server_cost.py build/engines/<group> [--clients 8] [--duration 10]
        [--max-batch-size 1] [--raw] [--json out.json]

``--raw`` asks a detector that decodes on the device (``[runtime] detections``) for its raw head
tensors instead (the per-request ``detections: false``), so the two sides run the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _server import running_server

from edgebuild.runtime.recipe import Recipe


def _one_row(recipe: Recipe) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.random([1, *shapes[1][1:]], dtype=np.float32) for n, shapes in recipe.profiles.items()}


def _loop(clients: int, duration: float, call) -> tuple[int, list[str]]:
    """``call(i)`` from ``clients`` threads until ``duration`` ends: (calls done, failures)."""
    counts, failures = [0] * clients, []
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def work(i: int) -> None:
        start.wait()
        while time.perf_counter() < deadline[0]:
            try:
                call(i)
            except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
                failures.append(str(exc)[:200])
                return
            counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + duration
    start.wait()
    for thread in threads:
        thread.join()
    return sum(counts), failures


def bare(folder: Path, inputs: dict[str, np.ndarray], clients: int, duration: float) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    for _ in range(20):
        session.run(None, inputs)
    done, failures = _loop(clients, duration, lambda i: session.run(None, inputs))
    if failures:
        sys.exit(f"bare loop failed: {failures[0]}")
    return done / duration


def _histograms(text: str) -> dict[str, tuple[float, float]]:
    """(seconds, count) of the server's stage histograms and its backend latency in a /metrics answer, by stage."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    scale = {"edgebuild_request_stage_seconds": 1.0, "edgebuild_server_seconds": 1.0,
             "edgebuild_inference_latency_ms": 0.001}
    for family in text_string_to_metric_families(text):
        if family.name in scale:
            for sample in family.samples:
                stage = sample.labels.get("stage") or {"edgebuild_server_seconds": "all outside backend"}.get(
                    family.name, "backend")
                if sample.name.endswith("_sum"):
                    sample = sample._replace(value=sample.value * scale[family.name])
                total, count = found.get(stage, (0.0, 0.0))
                if sample.name.endswith("_sum"):
                    found[stage] = (sample.value, count)
                elif sample.name.endswith("_count"):
                    found[stage] = (total, sample.value)
    return found


def served(folder: Path, inputs: dict[str, np.ndarray], clients: int, duration: float, max_batch_size: int,
           raw: bool) -> dict:
    import urllib.request

    import tritonclient.http as triton

    recipe = Recipe.load(folder)
    name = recipe.model_name or recipe.group
    with running_server(folder, max_batch_size=max_batch_size) as (port, ready):
        url = f"127.0.0.1:{port}"
        # tritonclient.http runs on gevent: a client belongs to the thread that made it
        connections: list = [None] * clients
        requests = []
        for _ in range(clients):
            tensors = []
            for input_name, array in inputs.items():
                tensor = triton.InferInput(input_name, list(array.shape), "FP32")
                tensor.set_data_from_numpy(array, binary_data=True)
                tensors.append(tensor)
            requests.append(tensors)
        parameters = {"detections": False} if raw else None

        def call(i: int) -> None:
            if connections[i] is None:
                connections[i] = triton.InferenceServerClient(url)
                for _ in range(5):
                    connections[i].infer(name, requests[i], parameters=parameters)
            connections[i].infer(name, requests[i], parameters=parameters)

        metrics = f"http://{url}/metrics"
        before = _histograms(urllib.request.urlopen(metrics).read().decode())
        cpu = (_cpu_seconds(ready["pid"]), resource.getrusage(resource.RUSAGE_SELF))
        done, failures = _loop(clients, duration, call)
        server_cpu = _cpu_seconds(ready["pid"]) - cpu[0]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        client_cpu = usage.ru_utime + usage.ru_stime - cpu[1].ru_utime - cpu[1].ru_stime
        after = _histograms(urllib.request.urlopen(metrics).read().decode())
    if failures:
        sys.exit(f"served clients failed: {failures[0]}")
    stages = {}
    for stage, (total, count) in after.items():
        total0, count0 = before.get(stage, (0.0, 0.0))
        if count > count0:
            stages[stage] = round((total - total0) / (count - count0) * 1000.0, 3)
    return {"requests_per_s": done / duration, "mean_ms_per_request": stages,
            "server_cpu_ms_per_request": round(server_cpu / max(done, 1) * 1000.0, 3),
            "clients_cpu_ms_per_request": round(client_cpu / max(done, 1) * 1000.0, 3)}


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--raw", action="store_true", help="ask a decoding server for raw head tensors")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    inputs = _one_row(Recipe.load(args.folder))
    # the host's other load changes over a run: the bare loop before and after the served one, averaged
    first = bare(args.folder, inputs, args.clients, args.duration)
    result = served(args.folder, inputs, args.clients, args.duration, args.max_batch_size, args.raw)
    ceiling = (first + bare(args.folder, inputs, args.clients, args.duration)) / 2
    result.update(bare_runs_per_s=ceiling, ratio=result["requests_per_s"] / ceiling,
                  clients=args.clients, duration_s=args.duration, shape=[list(a.shape) for a in inputs.values()])
    print(f"bare session.run, {args.clients} threads: {ceiling:8.1f} runs/s")
    print(f"served, {args.clients} tritonclient.http clients: {result['requests_per_s']:8.1f} req/s")
    print(f"ratio served/bare: {result['ratio']:.2f}x")
    print(f"CPU per request: server process {result['server_cpu_ms_per_request']:.3f} ms (backend included), "
          f"clients {result['clients_cpu_ms_per_request']:.3f} ms")
    for stage, ms in result["mean_ms_per_request"].items():
        print(f"  {stage:>20}: {ms:8.3f} ms per request (mean, from the server's /metrics)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
