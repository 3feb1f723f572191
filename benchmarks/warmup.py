"""Does warm-up make the first real request fast? (the runtime server's warm-up)

Starts the server on a compiled model folder twice, each time in a fresh process on loopback:

- warmed: the server warms up before it reports ready; then the first request after ready,
  then ``--requests`` more, whose median is the warmed p50;
- cold: the same server with warm-up switched off (``Server(..., warmup=False)``, ready at
  once); its first request is the cold first call.

Both use the profile's opt shape and report the backend's own time (``inference_ms``) and the
time the client saw. The target: the first request after ready at most 1.5x the warmed p50.

    python benchmarks/warmup.py build/engines/<group> [--requests 50] [--json out.json]
    python benchmarks/warmup.py examples/shapes-detector/build/engines/yard-cams   # after `make demo`
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _server import running_server

from edgebuild.runtime.base.recipe import Recipe


def _post(port: int, path: str, body: bytes) -> tuple[float, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    conn.request("POST", path, body=body)
    answer = conn.getresponse()
    data = answer.read()
    elapsed = (time.perf_counter() - started) * 1000
    conn.close()
    if answer.status != 200:
        sys.exit(f"request failed: HTTP {answer.status} {data[:300]!r}")
    return elapsed, json.loads(data)


def measure(folder: Path, warm: bool, requests: int) -> dict:
    with running_server(folder, warmup=warm) as (port, ready):
        recipe = Recipe.load(folder)
        name = recipe.model_name or recipe.group
        body = json.dumps({"inputs": [
            {"name": n, "shape": shapes[1], "datatype": "FP32",
             "data": np.random.default_rng(0).random(shapes[1], dtype=np.float32).reshape(-1).tolist()}
            for n, shapes in recipe.profiles.items()]}).encode()
        path = f"/v2/models/{name}/infer"
        first_client, first = _post(port, path, body)
        rest = [_post(port, path, body) for _ in range(requests)]
    backend_ms = [r[1]["parameters"]["inference_ms"] for r in rest]
    return {"warm_up": warm, "backend": first["parameters"]["backend"], "warmup": ready.get("warmup"),
            "first_request_ms": first["parameters"]["inference_ms"], "first_request_client_ms": round(first_client, 3),
            "p50_ms": statistics.median(backend_ms), "p50_client_ms": round(statistics.median(r[0] for r in rest), 3),
            "requests": requests}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path, help="a folder written by `edgebuild compile` (build/engines/<group>)")
    parser.add_argument("--requests", type=int, default=50, help="requests after the first one (default 50)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    warmed = measure(args.artifact, True, args.requests)
    cold = measure(args.artifact, False, args.requests)
    ratio = warmed["first_request_ms"] / warmed["p50_ms"]
    print(f"backend {warmed['backend']}, opt shape, {args.requests} requests after the first")
    print(f"warmed: warm-up {warmed['warmup']['warmup_s']:.2f} s ({warmed['warmup']['runs']} runs, settled "
          f"{warmed['warmup']['settled']}); first request after ready {warmed['first_request_ms']:.2f} ms, "
          f"p50 {warmed['p50_ms']:.2f} ms -> {ratio:.2f}x  {'PASS' if ratio <= 1.5 else 'FAIL'} (target <= 1.5x)")
    print(f"cold:   first call without warm-up {cold['first_request_ms']:.2f} ms "
          f"({cold['first_request_ms'] / cold['p50_ms']:.2f}x its p50 {cold['p50_ms']:.2f} ms)")
    if args.json:
        args.json.write_text(json.dumps({"warmed": warmed, "cold": cold, "ratio": ratio}, indent=2))
    sys.exit(0 if ratio <= 1.5 else 1)


if __name__ == "__main__":
    main()
