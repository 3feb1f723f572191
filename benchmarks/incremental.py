"""What does a second `edgebuild compile` cost? (the stage protocol)

On a fresh copy of a project (default: the bundled shapes example), runs the real CLI
`edgebuild compile --target orin --json` four times and prints the wall time of each against
the first, with which stage runs ran and which were reused:

1. the first compile (every stage runs);
2. the same again, nothing changed (a no-op: every stage is reused), ``--no-op-runs`` times (default
   7), reported as their median (with the fastest and slowest) against the first compile;
3. only accuracy.min_retention changed (the gate re-decides from stored measurements);
4. only the first group's cgroup_preset changed (a project preset file with less memory):
   that group's engine recipe, container and package stages run, nothing else.

    python benchmarks/incremental.py [PROJECT_DIR] [--target orin] [--retention 0.93] [--no-op-runs 7]

The no-op is the number docs/stages.md quotes (DVC's no-op ``dvc repro`` is the anchor): it reads
the stage records and every key's inputs, but hashes and image sizes come from the build folder's
file cache (edgebuild.statcache) and no model library (torch, onnx, onnxruntime) is imported.

Exits 1 when a bound does not hold: the no-op's median wall time <= NO_OP_BOUND_S (0.5 s), or on a
busy machine its median CPU time (a process waiting for a core is not slower code); the retention
change <= 0.05x the first compile or <= 1.0 s (what is left of a command that runs no stage is
Python start-up, imports and reading the keys: with a first compile of 10 s, 0.05x is below that
floor); the preset change re-running anything outside its group or anything but engine (recipe
only), container and package. Timings on a busy machine are noisy: the median of several no-ops,
and the CPU time beside the wall time, say more than one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: a compile that runs no stage still starts Python, imports edgebuild and reads every stage's key
NO_OP_FLOOR_S = 1.0
#: issue 44: a compile that reuses every stage, as fast as DVC's no-op `dvc repro`
NO_OP_BOUND_S = 0.5


def compile_once(project: Path, target: str) -> tuple[float, dict]:
    return compile_timed(project, target)[:2]


def compile_timed(project: Path, target: str) -> tuple[float, dict, float]:
    """(wall seconds, the --json report, CPU seconds of the compile's process)."""
    cmd = [sys.executable, "-m", "edgebuild", "compile", "--project", str(project), "--target", target, "--json",
           "--no-progress"]
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return elapsed, json.loads(done.stdout), cpu


def runs(report: dict, status: str) -> list[str]:
    return [f"{s['name']}/{r['group']}" if r["group"] else s["name"]
            for s in report["stages"] for r in s["runs"] if r["status"] == status]


def smaller_preset(project: Path, module: str) -> str:
    """A copy of the module's preset with half its memory, as a project file."""
    text = (ROOT / "cgroups" / f"{module}.toml").read_text()
    size = re.search(r'^memory = "(\d+)G"', text, re.M)
    memory = f'"{int(size.group(1)) * 512}M"' if size else '"1G"'
    text = re.sub(r'^memory = ".*?"', f"memory = {memory}", text, flags=re.M)
    text = re.sub(r'^memory_swap = ".*?"', f"memory_swap = {memory}", text, flags=re.M)
    (project / "limits").mkdir(exist_ok=True)
    (project / "limits" / "smaller.toml").write_text(text)
    return "limits/smaller.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", nargs="?", default=str(ROOT / "examples/shapes-detector"))
    parser.add_argument("--target", default="orin")
    parser.add_argument("--retention", type=float, default=0.93, help="the changed accuracy.min_retention")
    parser.add_argument("--no-op-runs", type=int, default=7, help="how many no-op compiles the median is of")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        shutil.copytree(args.project, project, ignore=shutil.ignore_patterns("build", "__pycache__", "data"))
        toml = project / "edgebuild.toml"
        subprocess.run([sys.executable, "-m", "edgebuild", "data", "prepare", "--project", str(project)], check=True,
                       capture_output=True)  # generated data is not part of any compile's time
        first, report = compile_once(project, args.target)
        group = report["units"][0]
        rows = [("first compile", first, report)]
        no_ops = [compile_timed(project, args.target) for _ in range(max(1, args.no_op_runs))]
        median = statistics.median(wall for wall, _, _ in no_ops)
        rows.append((f"no-op compile (median of {len(no_ops)})", median, no_ops[0][1]))
        text = toml.read_text()
        changed = re.sub(r"^min_retention = .*$", f"min_retention = {args.retention}", text, count=1, flags=re.M)
        if changed == text:
            changed = text.replace("[accuracy]", f"[accuracy]\nmin_retention = {args.retention}", 1)
        toml.write_text(changed)
        rows.append((f"min_retention -> {args.retention}",) + compile_once(project, args.target))
        preset = smaller_preset(project, report["units"][0]["target"].split("@")[0])
        text = toml.read_text()
        toml.write_text(text.replace(f'name = "{group["group"]}"\n',
                                     f'name = "{group["group"]}"\ncgroup_preset = "{preset}"\n', 1))
        rows.append((f"{group['group']} cgroup_preset changed",) + compile_once(project, args.target))
    print(f"{'run':<36} {'wall s':>8} {'ratio':>7}  ran")
    for name, seconds, result in rows:
        ran = runs(result, "ran")
        print(f"{name:<36} {seconds:8.2f} {seconds / first:7.3f}  {', '.join(ran) or '-'}")
    for name, seconds, _ in rows[1:3]:
        if seconds / first > 0.05 and seconds > NO_OP_FLOOR_S:
            failures.append(f"{name}: {seconds / first:.3f}x the first compile and {seconds:.2f} s "
                            f"(bound 0.05x or {NO_OP_FLOOR_S} s)")
    outside = [r for r in runs(rows[3][2], "ran")
               if not r.endswith("/" + group["group"])
               or r.split("/")[0] not in ("engine", "container", "package")]
    if outside:
        failures.append(f"the preset change re-ran {', '.join(outside)}")
    if "gate" not in runs(rows[2][2], "ran"):
        failures.append("the min_retention change did not re-decide the gate")
    measured = next(s for s in rows[2][2]["stages"] if s["name"] == "gate")["runs"][0]["record"]
    print(f"\nmin_retention change: gate took {measured['measured']} new measurement(s), reused {measured['stored']}")
    walls, cpus = sorted(w for w, _, _ in no_ops), sorted(c for _, _, c in no_ops)
    print(f"no-op compile: median {median:.3f} s wall (fastest {walls[0]:.3f}, slowest {walls[-1]:.3f}; "
          f"CPU median {statistics.median(cpus):.3f} s) over {len(no_ops)} runs; first compile {first:.2f} s; "
          f"ratio {median / first:.4f}")
    if median > NO_OP_BOUND_S and statistics.median(cpus) > NO_OP_BOUND_S:  # CPU: what a busy machine's wait is not
        failures.append(f"no-op compile: median {median:.2f} s wall, {statistics.median(cpus):.2f} s CPU "
                        f"(bound {NO_OP_BOUND_S} s)")
    if any(runs(report, "ran") for _, report, _ in no_ops):
        failures.append("a no-op compile ran a stage")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("all bounds hold")


if __name__ == "__main__":
    main()
