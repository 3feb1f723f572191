"""Is bench's timing loop honest? Its p50 against a bare ``session.run`` loop on the same model and input.

Both run in this process on ONNX Runtime's CPU provider, one session each with the same options,
at the same shape (batch 1, the profile's opt height and width) and the same input array. The
two are interleaved in ``--rounds`` blocks (bare, bench, bare, bench, ...) so drift in the
machine's speed hits both alike; the result is the ratio of the medians over all blocks. The
target: bench's p50 at most 1.05x the bare loop's.

    python benchmarks/bench_overhead.py build/engines/<group> [--iterations 300] [--rounds 5]
    python benchmarks/bench_overhead.py examples/shapes-detector/build/engines/yard-cams   # after `make demo`
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.bench.bench import input_shapes, run_bench


def bare_loop(session: ort.InferenceSession, feed: dict, iterations: int) -> list[float]:
    samples = []
    for _ in range(iterations):
        started = time.perf_counter()
        session.run(None, feed)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path, help="a folder written by `edgebuild compile` (build/engines/<group>)")
    parser.add_argument("--iterations", type=int, default=300, help="runs per block (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks of each (default 5)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    recipe = Recipe.load(args.artifact)
    shapes = input_shapes(recipe.profiles, 1)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(args.artifact / recipe.onnx), options, providers=["CPUExecutionProvider"])
    feed = {n: np.random.default_rng(0).random(s, dtype=np.float32) for n, s in shapes.items()}
    bare_loop(session, feed, 50)  # its warm-up, as bench does its own
    bare, bench = [], []
    for block in range(args.rounds):
        bare.append(statistics.median(bare_loop(session, feed, args.iterations)))
        result = run_bench(args.artifact, backend="onnxruntime", batches=[1], iterations=args.iterations, warmup=50,
                           progress=lambda _: None)
        bench.append(result["configs"][0]["latency"]["p50_ms"])
        print(f"block {block + 1}: bare p50 {bare[-1]:.3f} ms, bench p50 {bench[-1]:.3f} ms", flush=True)
    ratio = statistics.median(bench) / statistics.median(bare)
    print(f"{args.artifact} at {shapes} on {result['backend']}: bench p50 {statistics.median(bench):.3f} ms, bare "
          f"session.run p50 {statistics.median(bare):.3f} ms -> {ratio:.3f}x  "
          f"{'PASS' if ratio <= 1.05 else 'FAIL'} (target <= 1.05x)")
    if args.json:
        args.json.write_text(json.dumps({"bare_p50_ms": bare, "bench_p50_ms": bench, "ratio": ratio}, indent=2))
    sys.exit(0 if ratio <= 1.05 else 1)


if __name__ == "__main__":
    main()
