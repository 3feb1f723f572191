"""Plain-text output shared by the CLI and the modules that render results for people."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "table"]

#: where a library function says what it is doing, a line at a time (the CLI prints it to stderr);
#: the progress callback, not the build report
Progress = Callable[[str], None]


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Columns padded to their widest cell, headers first."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)
