"""Which Jetson this is, from the files every Jetson has (no TensorRT, no CUDA needed).

The L4T release comes from ``/etc/nv_tegra_release`` and the board from
``/proc/device-tree/compatible``. The root they are read under is injectable (``root=`` or
``EDGEBUILD_DEVICE_ROOT``) so tests can supply those files. The build-side device check
(``runtime.device``), the bundle check and the TensorRT runner's refusal of a mismatched engine
all read them here.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import os
import re
from pathlib import Path
from typing import Optional, Tuple

__all__ = []  # used only inside the runtime layer

ROOT_ENV = "EDGEBUILD_DEVICE_ROOT"


def device_root(root: Optional[Path] = None) -> Path:
    if root is not None:
        return Path(root)
    return Path(os.environ.get(ROOT_ENV, "/"))


def parse_nv_tegra_release(text: str) -> Optional[str]:
    """``# R36 (release), REVISION: 4.3, GCID: ...`` -> ``36.4.3``."""
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return "{}.{}".format(match.group(1), match.group(2)) if match else None


def read_identity(root: Optional[Path] = None) -> Tuple[Optional[str], Tuple[str, ...]]:
    """(L4T release, device-tree compatible strings) of the device under ``root``."""
    base = device_root(root)
    release = base / "etc" / "nv_tegra_release"
    l4t = parse_nv_tegra_release(release.read_text(errors="replace")) if release.is_file() else None
    compatible_file = base / "proc" / "device-tree" / "compatible"
    compatible = ()  # type: Tuple[str, ...]
    if compatible_file.is_file():
        compatible = tuple(s for s in compatible_file.read_bytes().decode(errors="replace").split("\0") if s)
    return l4t, compatible
