"""What does going through the device farm cost? (reserve, wait, acquire, probe, run, release)

Starts a loopback farm (a labgrid coordinator and exporter as child processes, one stand-in
Jetson: a real sshd with its own device root; root and labgrid needed, as in the farm tests),
compiles a copy of the shapes example, and runs the same device job (the device evaluation of
one group's model folder over 48 validation images, on ONNX Runtime: the stand-in has no
TensorRT) directly over `ssh://` and through the farm, interleaved, and prints the median wall
time of each, the ratio (goal <= 1.10) and the coordinator round trips per farm job.

    python benchmarks/farm_overhead.py [--rounds 5]

The first direct run copies the model folder and inputs to the device (once per content hash);
it is not counted, so both ways measure a job that sends nothing but the command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import numpy

    from edgebuild.accuracy.evaluate import ValidationSet
    from edgebuild.devices.evaluation import evaluate_on_device
    from edgebuild.devices.farm import Farm, run_on_board
    from edgebuild.pipeline.runner import Options
    from edgebuild.project.config import load_project
    from edgebuild.stages import compile_work
    from edgebuild.stages.engine import ENGINE
    from edgebuild.workflows.work import select_work
    from tests.support.farm import LabgridFarm

    tags = {"module": "orin-nano-8gb", "jetpack": "6.2"}
    with tempfile.TemporaryDirectory(prefix="edgebuild-farm-bench-") as tmp:
        root = Path(tmp) / "shapes-detector"
        shutil.copytree(ROOT / "examples/shapes-detector", root,
                        ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
        toml = root / "edgebuild.toml"
        toml.write_text(toml.read_text().replace('images = "data/val/images"',
                                                 'images = "data/val/images"\nmax_images = 48'))
        project = load_project(root)
        work = select_work(project, "yard-cams")
        report = compile_work(work, until="engine", options=Options(progress=False))
        if not report.ok:
            raise SystemExit(f"compile failed: {report.error}")
        folder = project.build_dir / report.record(ENGINE, "yard-cams").folder
        data = ValidationSet(project)
        farm_env = LabgridFarm(Path(tmp) / "farm", {"orin-nano-1": ("orin-nano-8gb@6.2", tags)},
                               extra_pythonpath=Path(numpy.__file__).parent.parent)
        os.environ["EDGEBUILD_SSH_CONFIG"] = str(farm_env.ssh_config)
        try:
            farm = Farm(farm_env.address)
            url = "ssh://root@orin-nano-1:" + str(farm_env.jetsons["orin-nano-1"].port)

            def job(target: str) -> float:
                return evaluate_on_device(project, folder, target, data=data)[0].value

            job(url)  # copies the model folder and inputs once
            direct, farmed, calls = [], [], []
            for _ in range(args.rounds):
                started = time.perf_counter()
                value = job(url)
                direct.append(time.perf_counter() - started)
                before = farm.calls
                started = time.perf_counter()
                outcome = run_on_board(farm, "yard-cams", tags, lambda board: job(board.url))
                farmed.append(time.perf_counter() - started)
                calls.append(farm.calls - before)
                if outcome.error is not None or outcome.result != value:
                    raise SystemExit(f"the farm job failed or measured another value: {outcome.error}")
            farm.disconnect()
        finally:
            farm_env.stop()
    d, f = statistics.median(direct), statistics.median(farmed)
    print(f"device job (evaluate yard-cams, {len(data)} images) over {args.rounds} rounds, median wall time:")
    print(f"  direct ssh://      {d:7.3f} s")
    print(f"  through the farm   {f:7.3f} s   ({statistics.median(calls):.0f} coordinator round trips per job: "
          "places, reserve, polls until allocated, acquire, sync, cancel, release)")
    print(f"  ratio              {f / d:7.3f}x   (goal <= 1.10)")


if __name__ == "__main__":
    main()
