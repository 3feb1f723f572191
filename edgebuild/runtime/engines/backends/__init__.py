"""Inference backends behind one interface, so evaluation, bench and the runtime can use any.

A runner has ``backend`` (a name that every reported number carries) and
``run({input name: array}) -> {output name: array}``. Which runner serves a model folder on
this machine is decided in ``select.py``.
"""

from typing import TYPE_CHECKING, Dict, Protocol

__all__ = ["Runner"]

if TYPE_CHECKING:  # numpy is not imported to pick a backend or to build a command line
    import numpy as np


class Runner(Protocol):
    backend: str

    def run(self, inputs: "Dict[str, np.ndarray]") -> "Dict[str, np.ndarray]": ...
