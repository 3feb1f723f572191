"""Inference backends behind one interface, so evaluation, bench and the runtime can use any.

A runner has ``backend`` (a name that every reported number carries) and
``run({input name: array}) -> {output name: array}``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Runner(Protocol):
    backend: str

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
