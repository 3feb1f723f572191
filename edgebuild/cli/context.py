"""What ``main`` hands every command: the global flags, and where progress lines go.

``main`` stores one :class:`CliContext` in ``ctx.obj``; a command that needs it takes it with
``@pass_cli``. It is frozen: a command reads it, never changes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import click

from edgebuild.text import Progress

__all__ = []


@dataclass(frozen=True)
class CliContext:
    verbose: bool = False  # -v: tracebacks for errors
    interactive: bool = False  # stderr is a terminal: progress bars are worth drawing

    @staticmethod
    def say(message: str) -> None:
        """A progress line: to stderr, so stdout stays the result (a table, JSON)."""
        click.echo(message, err=True)

    def progress_lines(self, *, quiet: bool = False) -> Progress:
        """Where a library function's progress lines go: stderr, or nowhere (``--json``)."""
        return (lambda _: None) if quiet else self.say

    def progress(self, *, no_progress: bool = False, as_json: bool = False) -> bool:
        """Whether to draw progress bars: on a terminal, unless --no-progress or --json."""
        return self.interactive and not no_progress and not as_json


pass_cli = click.make_pass_decorator(CliContext, ensure=True)


@contextmanager
def farm_usage() -> Iterator[None]:
    """A farm command without a coordinator is a usage error (exit 2), as a wrong flag is."""
    from edgebuild.devices.farm import NoCoordinator

    try:
        yield
    except NoCoordinator as exc:
        raise click.UsageError(exc.message) from None
