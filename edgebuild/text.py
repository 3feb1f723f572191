"""Plain-text output shared by the CLI and the modules that render results for people."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Iterator

__all__ = ["Progress", "python_output_dropped", "table"]

#: where a library function says what it is doing, a line at a time (the CLI prints it to stderr);
#: the progress callback, not the build report
Progress = Callable[[str], None]

# contextlib.redirect_stdout swaps sys.stdout for the whole process, not for a thread: two threads
# that drop a library's prints at once (the farm's groups scoring mAP in parallel) could restore each
# other's buffer and leave the process writing to a dead one, so that the answer a command prints last
# vanishes. Every such block holds this lock.
_DROPPING = threading.RLock()


@contextlib.contextmanager
def python_output_dropped(stderr: bool = False) -> Iterator[None]:
    """What Python code prints to sys.stdout (and sys.stderr) while the block runs is dropped; thread-safe."""
    with _DROPPING, contextlib.redirect_stdout(io.StringIO()):
        if not stderr:
            yield
            return
        with contextlib.redirect_stderr(io.StringIO()):
            yield


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Columns padded to their widest cell, headers first."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)
