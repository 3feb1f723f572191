"""The export tools' own output: kept off the user's terminal, and cut to the line that matters.

torch.onnx, onnxslim and ONNX Runtime print progress, warnings and whole graphs, some of it
from C++ straight to file descriptors 1 and 2; what reaches the user is edgebuild's report and
one line per failure, without the temporary folders the tools wrote in.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

from edgebuild.text import python_output_dropped

__all__ = ["quiet"]


def first_line(exc: BaseException) -> str:
    """The line of an exception message that says what went wrong."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if "## Exception summary" in lines:  # torch.onnx wraps the real error in a long preamble
        lines = lines[lines.index("## Exception summary") + 1 :]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"\x1b\[[0-9;]*m", "", text)[:300]


def hide_path(text: str, path: Path) -> str:
    """A message without the temporary folder it was written in: that folder is gone when the user reads it."""
    text = text.replace(f"{path}: ", "").replace(str(path), path.name).replace(str(path.parent), "<export>")
    return first_line(Exception(text))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The exporters print progress and warnings; keep the user's terminal for ours."""
    with python_output_dropped(stderr=True), warnings.catch_warnings(), native_output_dropped():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


@contextlib.contextmanager
def native_output_dropped() -> Iterator[None]:
    """File descriptors 1 and 2 into a scratch file: the TorchScript exporter's C++ log writes there
    directly (the whole Torch IR graph when an operator fails), past any Python redirect."""
    import os
    import sys
    import tempfile

    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no such descriptors (embedded interpreters): nothing to hide
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
