"""torchvision next to a CPU torch whose build it was not made for: the benchmark's stand-in for its compiled ops.

PyPI's torchvision is a CUDA build; next to the pinned CPU torch its ``_C.so`` does not load, and
``import torchvision`` then fails in ``_meta_registrations.py`` (``operator torchvision::nms does
not exist``; tests/support/zoo.py says why). :func:`install` defines the two op schemas
(``nms``, ``qnms``) just before torchvision is first imported, only where its compiled ops cannot
load, so a process that never imports torchvision pays nothing. :func:`patch_nms` gives
``torchvision.ops.nms`` a pure-torch body (Ultralytics' own ``TorchNMS``), which Ultralytics'
training and ``val`` call.

Run as a script it is ``edgebuild`` with :func:`install` done first: the benchmark's subprocesses for a
project whose model is ``torchvision:<name>`` (``python benchmarks/_cpu_torchvision.py validate ...``).
A host with a matching CPU torchvision needs none of this; it then changes nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_library: object = None  # the torch.library.Library holding the schemas: it must stay alive


def _ops_cannot_load() -> bool:
    """True when torchvision's compiled ops do not load next to this torch (loading them registers them)."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    found = sorted(Path(spec.origin).parent.glob("_C.*"))
    try:
        torch.ops.load_library(str(found[0]))
    except (IndexError, OSError):
        return True
    return False


def _define_schemas() -> None:
    global _library
    import torch

    if _library is None and _ops_cannot_load():
        _library = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs :func:`_define_schemas` when ``torchvision`` is first looked up, then steps aside."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 (importlib's protocol)
        if name == "torchvision":
            sys.meta_path.remove(self)
            _define_schemas()
        return None


def install() -> None:
    """Make ``import torchvision`` work here, lazily; a no-op where torchvision is already imported."""
    if "torchvision" not in sys.modules and not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


def patch_nms() -> None:
    """``torchvision.ops.nms`` in plain torch (Ultralytics' TorchNMS) where torchvision's compiled ops did not load."""
    install()
    import torchvision
    import torchvision.extension

    if not torchvision.extension._has_ops():
        from ultralytics.utils.nms import TorchNMS

        torchvision.ops.nms = TorchNMS.nms
        torchvision.ops.boxes.nms = TorchNMS.nms


if __name__ == "__main__":
    install()
    from edgebuild.cli import main

    sys.argv[0] = "edgebuild"
    main()
