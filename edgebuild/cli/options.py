"""click decorators from the option tables the device CLI shares (``edgebuild/runtime/options.py``).

``edgebuild serve``, ``bench`` and ``ota verify|install`` take the same parameters as
``edgebuild-device.pyz serve|bench|ota-*``; this turns each ``Option`` into its click form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from edgebuild.runtime.options import Option

F = TypeVar("F", bound=Callable[..., Any])


def click_options(specs: Sequence[Option], *, skip: Iterable[str] = ()) -> Callable[[F], F]:
    """A decorator adding ``specs`` (but those named in ``skip``) to a click command, in table order."""
    skipped = set(skip)

    def decorate(function: F) -> F:
        for spec in reversed(specs):  # click lists the decorator nearest the function first
            if spec.name not in skipped:
                function = _parameter(spec)(function)
        return function

    return decorate


def _parameter(spec: Option) -> Callable[[F], F]:
    kind = _click_type(spec)
    if spec.positional:
        return click.argument(spec.name, type=kind)
    return click.option(*spec.flags, spec.name, type=kind, is_flag=spec.is_flag, multiple=spec.multiple,
                        default=False if spec.is_flag else spec.default, required=spec.required,
                        show_default=spec.show_default, metavar=spec.metavar, help=spec.help)


def _click_type(spec: Option) -> Any:
    if spec.is_flag:
        return None
    if spec.choices:
        return click.Choice(list(spec.choices))
    if spec.path:
        return click.Path(file_okay=spec.path != "dir", dir_okay=spec.path != "file", exists=spec.exists,
                          path_type=Path)
    if spec.type is int:
        return click.IntRange(min=int(spec.minimum)) if spec.minimum is not None else int
    if spec.type is float:
        return click.FloatRange(min=spec.minimum) if spec.minimum is not None else float
    return spec.type
