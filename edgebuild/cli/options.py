"""The options several commands share, as click decorators.

``project_option``, ``json_option``, ``target_option`` and ``farm_options`` are the build host's
own. ``click_options`` turns the option tables the device CLI shares (``edgebuild/runtime/options.py``)
into click: ``edgebuild serve``, ``bench`` and ``ota verify|install`` take the same parameters as
``edgebuild-device.pyz serve|bench|ota-*``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from edgebuild.runtime.options import Option

__all__ = []

F = TypeVar("F", bound=Callable[..., Any])

project_option = click.option(
    "--project", "-p", "project_dir", default=".", show_default=True, envvar="EDGEBUILD_PROJECT",
    type=click.Path(file_okay=True, dir_okay=True, path_type=Path),
    help="Project folder, or its edgebuild.toml (env EDGEBUILD_PROJECT).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
target_option = click.option(
    "--target", "-t", "selector", default="all", show_default=True,
    help="Which fleet groups: a family (orin), a module id, MODULE@JETPACK, a group name, or 'all'; "
         "comma-separated for several.",
)


def farm_options(command: F) -> F:
    """--farm [ADDRESS], --jobs, --farm-timeout: run the device jobs on boards reserved from a labgrid farm."""
    command = click.option("--farm-timeout", type=float, default=None, metavar="S",
                           help="How long a job waits for a busy board (default [farm] timeout_s, 600).")(command)
    command = click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
                           help="At most N boards at once (default [farm] jobs, else every matching board).")(command)
    return click.option(
        "--farm", "farm_address", is_flag=False, flag_value="", default=None, metavar="[HOST:PORT]",
        help="Run on boards of a labgrid farm: each group reserves a place tagged module=<module id> "
             "jetpack=<release> (and power_mode= if the group names one), waits while they are busy, and always "
             "releases it. Bare --farm: [farm] coordinator, else $LG_COORDINATOR.")(command)


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
