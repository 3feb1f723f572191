"""How much faster is `edgebuild export` when nothing changed? (the export cache)

Runs the real CLI three times on a copy of a project: a forced export, then two plain ones,
and prints the wall time of each. The second and third must reuse the first.

    python benchmarks/export_cache.py [PROJECT_DIR] [--target orin]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return elapsed, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", nargs="?", default=str(Path(__file__).parent.parent / "examples/shapes-detector"))
    parser.add_argument("--target", default="orin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        shutil.copytree(args.project, project, ignore=shutil.ignore_patterns("build", "__pycache__"))
        base = [sys.executable, "-m", "edgebuild", "export", "--project", str(project), "--target", args.target]
        first, _ = timed(base + ["--force"])
        second, out2 = timed(base)
        third, out3 = timed(base)
    if "reused" not in out2 or "reused" not in out3:
        sys.exit("the second export was not a cache hit:\n" + out2)
    cached = min(second, third)
    print(f"first export (forced):  {first:7.2f} s")
    print(f"second export (cached): {second:7.2f} s")
    print(f"third export (cached):  {third:7.2f} s")
    print(f"speed-up: {first / cached:.1f}x (whole command, including Python start-up)")
    if first / cached < 10:
        sys.exit("FAIL: the cached export is less than 10x faster")


if __name__ == "__main__":
    main()
