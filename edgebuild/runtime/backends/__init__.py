"""Inference backends behind one interface, so evaluation, bench and the runtime can use any.

A runner has ``backend`` (a name that every reported number carries) and
``run({input name: array}) -> {output name: array}``.
"""

from typing import Dict, Protocol

import numpy as np


class Runner(Protocol):
    backend: str

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]: ...
