"""The type of the device side's progress callback: where a runtime function says what it is doing.

The build side's ``edgebuild.text.Progress`` says the same, but the device code may not import it
(it is a layer above): this is its Python 3.8 twin. A progress callback is not a report: the
bench result and ``engine.json`` are what a run reports.
"""

# ruff: noqa: UP035
# (typing.Callable on purpose: this alias is evaluated on the device's Python 3.8)

from typing import Callable

__all__: list = []  # used by the runtime's modules only, the same layer

#: one line at a time (the runtime's CLI prints it to stderr)
Progress = Callable[[str], None]

