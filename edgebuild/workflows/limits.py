"""``edgebuild run --limits``: a command on this host inside a cgroup with a preset's limits."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

from edgebuild.text import Progress

__all__ = ["run_with_limits"]



def run_with_limits(preset_name: str, command: Sequence[str], *, memory: str | None = None,
                    cpus: float | None = None, cpuset: str | None = None, pids: int | None = None,
                    report_file: Path | None = None, progress: Progress = lambda _: None) -> int:
    """Run ``command`` under the preset (a module id, or a preset file) with these overrides; its exit
    status: the command's own, 128 + the signal that ended it, or LimitError (13) for an OOM kill."""
    from edgebuild.targets.limits import run_limited
    from edgebuild.targets.presets import load_preset

    preset = load_preset(preset_name, Path.cwd()).with_overrides(memory=memory, cpus=cpus, cpuset=cpuset, pids=pids)
    result = run_limited(preset, list(command), progress=progress, report_file=report_file)
    if result.exit_code is not None:
        return result.exit_code
    return 128 + (int(signal.Signals[result.signal]) if result.signal else 0)
