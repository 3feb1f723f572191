"""What does evaluating on the device cost beyond inference? (edgebuild-device.pyz evaluate)

Runs the device-side evaluation (`python -m edgebuild.runtime evaluate`, the code that runs on a
Jetson, here in a fresh process on this host, the stand-in device) over a compiled model
folder's validation inputs, and a bare `session.run` loop over the same batches in this process,
interleaved, and prints the device evaluation's wall time (loading the inputs, inference,
decoding and NMS on the device, writing the results; backend loading excluded) against the bare
loop's.

    python benchmarks/device_evaluate.py [PROJECT_DIR] [--target GROUP] [--rounds 3]

The project is compiled first if it is not up to date (default: a copy of the shapes example).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", nargs="?", default=str(ROOT / "examples/shapes-detector"))
    parser.add_argument("--target", default="yard-cams")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from edgebuild.accuracy.evaluate import ValidationSet, detection_settings, device_inputs
    from edgebuild.pipeline.runner import Options
    from edgebuild.project.config import load_project
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner
    from edgebuild.stages import compile_work
    from edgebuild.stages.engine import ENGINE
    from edgebuild.workflows.work import select_work

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(args.project, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
        project = load_project(root)
        report = compile_work(select_work(project, args.target), until="engine", options=Options(progress=False))
        if not report.ok:
            sys.exit(f"compile failed: {report.error}")
        folder = project.build_dir / report.record(ENGINE, args.target).folder
        data = ValidationSet(project)
        inputs = Path(tmp) / "inputs.npz"
        inputs.write_bytes(device_inputs(project, data))
        command = [sys.executable, "-m", "edgebuild.runtime", "evaluate", str(folder), "--inputs", str(inputs),
                   "--out", str(Path(tmp) / "results.npz"), "--backend", "onnxruntime"]
        settings = detection_settings(project)
        if settings:
            command += ["--detection", json.dumps(settings)]
        runner = OnnxRuntimeRunner(folder / "model.onnx")
        batches = [batch for _, batch, _ in data.batches()]
        name = project.model.inputs[0].name
        runner.run({name: batches[0]})
        device, inference, bare = [], [], []
        for _ in range(args.rounds):
            done = subprocess.run(command, capture_output=True, text=True)
            answer = json.loads(done.stdout.strip().splitlines()[-1])
            if not answer.get("ok"):
                sys.exit(f"device evaluation failed: {answer}")
            device.append(answer["evaluate"]["seconds"])
            inference.append(answer["evaluate"]["inference_s"])
            started = time.perf_counter()
            for batch in batches:
                runner.run({name: batch})
            bare.append(time.perf_counter() - started)
    first = device[0]
    device = device[1:] or device  # the first round also unpacks the compressed inputs once
    d, i, b = float(np.median(device)), float(np.median(inference)), float(np.median(bare))
    print(f"{project.project.name} {args.target}: {len(data)} images in {len(batches)} batches, "
          f"{answer['evaluate']['backend']}, median of {args.rounds} rounds")
    print(f"device evaluation, first run (unpacks the compressed inputs): {first:.3f} s")
    print(f"device evaluation (inputs, inference, decode + NMS, results): {d:.3f} s")
    print(f"  of which inference:                                       {i:.3f} s")
    print(f"bare session.run loop over the same batches:                {b:.3f} s")
    print(f"device evaluation / bare inference: {d / b:.2f}x (target <= 1.25x)")


if __name__ == "__main__":
    main()
