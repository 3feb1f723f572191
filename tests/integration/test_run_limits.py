"""`edgebuild run --limits` in a real cgroup of this host: limits read back, an over-limit allocation killed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cgroup

EDGEBUILD = [sys.executable, "-m", "edgebuild"]

# what the limited process sees of its own cgroup, from the files the kernel enforces
READ_OWN_LIMITS = """
import json, os
path = os.environ["EDGEBUILD_CGROUP"]
names = ["memory.limit_in_bytes", "cpu.cfs_quota_us", "pids.max", "memory.max", "cpu.max"]
root = os.path.dirname(os.path.dirname(path))
found = {}
for line in open("/proc/self/cgroup"):
    _, controllers, where = line.strip().split(":", 2)
    for c in controllers.split(","):
        found[c] = where
print(json.dumps({"cgroup": found, "memory_limit": open(os.path.join(path, "memory.limit_in_bytes")
                  if os.path.exists(os.path.join(path, "memory.limit_in_bytes"))
                  else os.path.join(path, "memory.max")).read().strip()}))
"""


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEBUILD, "run", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_limits_are_in_force_on_the_process(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    done = _run("--limits", "orin-nano-8gb", "--memory", "96M", "--report", str(report), "--",
                sys.executable, "-c", READ_OWN_LIMITS, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    run = json.loads(report.read_text())
    assert seen["memory_limit"] == str(96 << 20)
    assert run["cgroup"].endswith(seen["cgroup"]["memory"].split("/")[-1])  # the process was in that cgroup
    back = run["limits_read_back"]
    if run["cgroup_version"] == "v1":
        assert back["memory"] == back["memory_swap"] == str(96 << 20)
        assert back["cpu_quota_us"] == "400000" and back["pids"] == "256"
    else:
        assert back["memory"] == str(96 << 20) and back["cpu_max"] == "400000 100000"
    assert run["exit_code"] == 0 and not run["oom_killed"] and run["peak_memory"] < 96 << 20
    assert "read back memory=" in done.stderr
    assert not Path(run["cgroup"]).exists(), "the run's cgroup is removed afterwards"


def test_an_allocation_over_the_limit_is_killed_and_reported(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    grow = "import time; blocks = []\nfor _ in range(40): blocks.append(bytearray(16 << 20)); time.sleep(0.01)"
    done = _run("--limits", "orin-nano-8gb", "--memory", "128M", "--report", str(report), "--",
                sys.executable, "-c", grow, tmp_path=tmp_path)
    assert done.returncode == 13, done.stderr
    assert "OOM killer stopped it" in done.stderr and "128.0 MiB" in done.stderr
    run = json.loads(report.read_text())
    assert run["oom_killed"] and run["signal"] == "SIGKILL" and run["exit_code"] is None


def test_the_command_exit_code_is_passed_on(tmp_path: Path) -> None:
    done = _run("--limits", "nano", "--", sys.executable, "-c", "raise SystemExit(7)", tmp_path=tmp_path)
    assert done.returncode == 7
    missing = _run("--limits", "nano", "--", "no-such-program-here", tmp_path=tmp_path)
    assert missing.returncode == 3 and "cannot start 'no-such-program-here'" in missing.stderr
