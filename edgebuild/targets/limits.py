"""A limit preset against a module, a group's preset, and running a command inside a real cgroup.

The presets themselves (``cgroups/*.toml``, sizes in bytes) are ``edgebuild.targets.presets``'.

``run_limited`` is ``edgebuild run --limits``: it puts a command (by default the runtime server)
into a fresh cgroup on this host, v1 or v2, whichever the host mounts, reads the limits back
from the cgroup files, and reports the peak memory and any OOM kill when the command ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from edgebuild.errors import CapabilityMissing, ConfigError, LimitError
from edgebuild.targets.presets import LimitPreset, cpuset_cpus, human_size, load_preset
from edgebuild.targets.profiles import Module, SelectedGroup
from edgebuild.text import Progress

__all__ = ["check_against_module", "preset_for_group", "run_limited"]

#: the share of a module's DRAM that one server's RAM plus its engine may take together
MAX_SHARE_OF_MODULE = 0.75
CPU_PERIOD_US = 100_000


def check_against_module(preset: LimitPreset, module: Module) -> None:
    """A preset must be for the group's module and leave the rest of the DRAM to the system."""
    if preset.module != module.id:
        raise ConfigError(f"limit preset {preset.name!r} is for {preset.module}, not {module.id}",
                          hint=f"use the preset {module.id!r} or one written for that module")
    dram = module.memory_gb * (1 << 30)
    wanted = preset.memory + preset.engine_device_memory_max
    if wanted > MAX_SHARE_OF_MODULE * dram:
        raise ConfigError(
            f"limit preset {preset.name!r}: memory {human_size(preset.memory)} plus engine device memory "
            f"{human_size(preset.engine_device_memory_max)} is more than {MAX_SHARE_OF_MODULE:.0%} of the "
            f"{module.name}'s {module.memory_gb} GB shared CPU/GPU DRAM",
            hint="the system, the camera stack and other services need the rest; lower one of them")


def preset_for_group(group: SelectedGroup, runtime_preset: str | None, project_root: Path | None) -> LimitPreset:
    """The group's preset: its own ``cgroup_preset``, else ``runtime_preset`` (the project's ``[runtime]
    cgroup_preset``), else its module's; a preset file's path is relative to ``project_root``."""
    name = group.cgroup_preset or runtime_preset or group.target.module.id
    return load_preset(name, project_root)


# -- cgroups on this host ---------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "cpuset", "pids")


@dataclass
class CgroupUsage:
    peak_memory: int | None
    oom_kills: int
    limits: dict[str, str]


class CgroupV1:
    """One cgroup per controller, nested under this process's own cgroup of each controller."""

    version = "v1"

    def __init__(self, name: str, mounts: dict[str, Path], own: dict[str, str]) -> None:
        self.paths = {c: mounts[c] / own.get(c, "/").lstrip("/") / name for c in V1_CONTROLLERS}

    @property
    def path(self) -> Path:
        return self.paths["memory"]

    def create(self, preset: LimitPreset) -> None:
        for path in self.paths.values():
            path.mkdir()
        memory = self.paths["memory"]
        _write(memory / "memory.limit_in_bytes", preset.memory)
        if (memory / "memory.memsw.limit_in_bytes").exists():  # absent when the kernel has no swap accounting
            _write(memory / "memory.memsw.limit_in_bytes", preset.memory_swap)
        elif preset.memory_swap == preset.memory:
            _write(memory / "memory.swappiness", 0)
        cpu = self.paths["cpu"]
        _write(cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
        _write(cpu / "cpu.cfs_quota_us", int(preset.cpus * CPU_PERIOD_US))
        cpuset = self.paths["cpuset"]
        _write(cpuset / "cpuset.cpus", preset.cpuset or (cpuset.parent / "cpuset.cpus").read_text().strip())
        _write(cpuset / "cpuset.mems", (cpuset.parent / "cpuset.mems").read_text().strip())
        _write(self.paths["pids"] / "pids.max", preset.pids)

    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in self.paths.values()]

    def read_back(self) -> dict[str, str]:
        files = {"memory": ("memory", "memory.limit_in_bytes"),
                 "memory_swap": ("memory", "memory.memsw.limit_in_bytes"),
                 "cpu_quota_us": ("cpu", "cpu.cfs_quota_us"), "cpu_period_us": ("cpu", "cpu.cfs_period_us"),
                 "cpuset": ("cpuset", "cpuset.cpus"), "pids": ("pids", "pids.max")}
        return {key: _read(self.paths[c] / f) for key, (c, f) in files.items() if (self.paths[c] / f).exists()}

    def usage(self) -> CgroupUsage:
        memory = self.paths["memory"]
        control = _read(memory / "memory.oom_control")
        kills = re.search(r"oom_kill (\d+)", control)
        return CgroupUsage(int(_read(memory / "memory.max_usage_in_bytes")), int(kills.group(1)) if kills else 0,
                           self.read_back())

    def remove(self) -> None:
        for path in self.paths.values():
            _rmdir(path)


class CgroupV2:
    """One cgroup in the unified hierarchy, under ``edgebuild/`` at its root.

    v2 forbids processes in a cgroup whose controllers are delegated to children, so the
    cgroup is not nested under this process's own (which holds processes) but under a
    process-free ``edgebuild/`` parent, like a systemd slice.
    """

    version = "v2"
    CONTROLLERS = ("memory", "cpu", "cpuset", "pids")

    def __init__(self, name: str, root: Path = CGROUP_ROOT) -> None:
        self.root = root
        self.parent = root / "edgebuild"
        self.path = self.parent / name

    def create(self, preset: LimitPreset) -> None:
        available = _read(self.root / "cgroup.controllers").split()
        missing = [c for c in self.CONTROLLERS if c not in available]
        if missing:
            raise CapabilityMissing(f"the cgroup v2 hierarchy at {self.root} lacks the {', '.join(missing)} "
                                    "controller(s)", hint="boot with them enabled (they are on every JetPack 6 image)")
        self.parent.mkdir(exist_ok=True)
        enable = " ".join(f"+{c}" for c in self.CONTROLLERS)
        _write(self.root / "cgroup.subtree_control", enable)
        _write(self.parent / "cgroup.subtree_control", enable)
        self.path.mkdir()
        _write(self.path / "memory.max", preset.memory)
        _write(self.path / "memory.swap.max", preset.memory_swap - preset.memory)
        _write(self.path / "cpu.max", f"{int(preset.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")
        if preset.cpuset:
            _write(self.path / "cpuset.cpus", preset.cpuset)
        _write(self.path / "pids.max", preset.pids)

    def procs_files(self) -> list[Path]:
        return [self.path / "cgroup.procs"]

    def read_back(self) -> dict[str, str]:
        names = {"memory": "memory.max", "memory_swap_extra": "memory.swap.max", "cpu_max": "cpu.max",
                 "cpuset": "cpuset.cpus", "pids": "pids.max"}
        return {key: _read(self.path / f) for key, f in names.items() if (self.path / f).exists()}

    def usage(self) -> CgroupUsage:
        events = _read(self.path / "memory.events")
        kills = re.search(r"oom_kill (\d+)", events)
        peak_file = self.path / "memory.peak"  # kernel 5.19 and later
        peak = int(_read(peak_file)) if peak_file.exists() else None
        return CgroupUsage(peak, int(kills.group(1)) if kills else 0, self.read_back())

    def remove(self) -> None:
        _rmdir(self.path)


def _write(path: Path, value: object) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as exc:
        raise LimitError(f"cannot set {path.name} to {value} in {path.parent}: {exc.strerror}",
                         hint="the host refused the limit; check the value against this host") from None


def _read(path: Path) -> str:
    return path.read_text().strip()


def _rmdir(path: Path) -> None:
    for _ in range(50):  # the kernel releases a cgroup a moment after its last task exits
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _mounts() -> tuple[dict[str, Path], Path | None]:
    """(v1 controller -> mount point, the v2 mount with controllers or None)."""
    v1: dict[str, Path] = {}
    v2 = None
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, kind, options = Path(parts[1]), parts[2], parts[3].split(",")
        if kind == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options:
                    v1[controller] = where
        elif kind == "cgroup2" and (where / "cgroup.controllers").exists() and \
                "memory" in _read(where / "cgroup.controllers").split():
            v2 = where
    return v1, v2


def _own_v1_paths() -> dict[str, str]:
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    return own


def host_cgroup(name: str) -> CgroupV1 | CgroupV2:
    """A (not yet created) cgroup on this host: v2 where its controllers are mounted, else v1."""
    v1, v2 = _mounts()
    if v2 is not None:
        return CgroupV2(name, v2)
    if all(c in v1 for c in V1_CONTROLLERS):
        return CgroupV1(name, v1, _own_v1_paths())
    missing = [c for c in V1_CONTROLLERS if c not in v1]
    raise CapabilityMissing(f"this host mounts no cgroup v2 hierarchy with controllers and no cgroup v1 "
                            f"{', '.join(missing)} controller(s)", hint="run on a Linux host with cgroups mounted")


def fit_to_host(preset: LimitPreset, warn: Progress) -> LimitPreset:
    """Keep the preset's cores and quota possible on this host, saying what changed."""
    online = sorted(os.sched_getaffinity(0))
    fitted = preset
    if preset.cpuset:
        wanted = cpuset_cpus(preset.cpuset)
        usable = [c for c in wanted if c in online]
        if len(usable) < len(wanted):
            chosen = usable or online
            text = ",".join(str(c) for c in chosen)
            warn(f"cpuset {preset.cpuset} of preset {preset.name} is not all on this host (CPUs "
                 f"{','.join(str(c) for c in online)}); using {text}")
            fitted = replace(fitted, cpuset=text)
    cores = len(cpuset_cpus(fitted.cpuset)) if fitted.cpuset else len(online)
    if fitted.cpus > cores:
        warn(f"the CPU quota of {fitted.cpus:g} cores is more than the {cores} core(s) the process may run on "
             "here, so it does not bind on this host")
    return fitted


@dataclass
class LimitedRun:
    """What ``edgebuild run --limits`` reports when the command ends."""

    preset: dict[str, Any]
    cgroup: str
    cgroup_version: str
    limits_read_back: dict[str, str]
    command: list[str]
    exit_code: int | None
    signal: str | None
    oom_killed: bool
    peak_memory: int | None
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_limited(preset: LimitPreset, command: Sequence[str], *, progress: Progress = print,
                report_file: Path | None = None, env: dict[str, str] | None = None) -> LimitedRun:
    """Run ``command`` inside a new cgroup with the preset's limits; the cgroup is removed afterwards.

    The child joins the cgroup before it execs, so every thread and process it starts is limited.
    SIGINT and SIGTERM are passed on to it. A kill by the kernel's OOM killer is raised as a
    ``LimitError`` after the report is written.
    """
    if os.geteuid() != 0 and not os.access(CGROUP_ROOT, os.W_OK):
        raise CapabilityMissing("creating a cgroup needs root on this host (or a delegated cgroup v2 subtree)",
                                hint="run `sudo edgebuild run --limits ...`, or try the limits in a container")
    preset = fit_to_host(preset, lambda m: progress(f"run: warning: {m}"))
    cgroup = host_cgroup(f"edgebuild-run-{os.getpid()}-{int(time.time() * 1000) % 100000}")
    try:
        cgroup.create(preset)
    except BaseException:
        cgroup.remove()
        raise
    procs = [str(p) for p in cgroup.procs_files()]

    def join_cgroup() -> None:  # runs in the child between fork and exec
        pid = str(os.getpid())
        for path in procs:
            with open(path, "w") as f:
                f.write(pid)

    child_env = dict(os.environ if env is None else env)
    child_env["EDGEBUILD_CGROUP"] = str(cgroup.path)
    child_env["EDGEBUILD_LIMIT_PRESET"] = preset.name
    started = time.perf_counter()
    try:
        limits = cgroup.read_back()
        progress(f"run: cgroup {cgroup.version} {cgroup.path}: {preset.describe()}")
        progress("run: read back " + ", ".join(f"{k}={v}" for k, v in limits.items()))
        try:
            child = subprocess.Popen(list(command), preexec_fn=join_cgroup, env=child_env)  # noqa: PLW1509
        except OSError as exc:
            raise ConfigError(f"cannot start {command[0]!r}: {exc.strerror}") from None
        previous = {s: signal.signal(s, lambda num, _frame: child.send_signal(num))
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        usage = cgroup.usage()
    finally:
        cgroup.remove()
    killed_by = signal.Signals(-code).name if code < 0 else None
    result = LimitedRun(preset.as_dict(), str(cgroup.path), cgroup.version, usage.limits, list(command),
                        code if code >= 0 else None, killed_by, usage.oom_kills > 0, usage.peak_memory,
                        round(time.perf_counter() - started, 3))
    peak = human_size(usage.peak_memory) if usage.peak_memory is not None else "not reported by this kernel"
    progress(f"run: ended after {result.seconds:.1f} s, "
             + (f"killed by {killed_by}" if killed_by else f"exit code {code}")
             + f"; peak memory {peak} of {human_size(preset.memory)}")
    if report_file is not None:
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.write_text(json.dumps(result.as_dict(), indent=2))
    if result.oom_killed:
        raise LimitError(
            f"{command[0]} exceeded the memory limit of preset {preset.name} ({human_size(preset.memory)}) and "
            f"the kernel's OOM killer stopped it ({usage.oom_kills} kill(s) in its cgroup)",
            hint="raise the preset's memory (or try one with `--memory`), or lower the server's load "
                 "(batch size, threads)")
    return result

