"""The ``edgebuild`` command group: its help, ``-v``, and errors as one line with their exit code.

Every command lives in a module of its group (``project``, ``build``, ``device``) and is added
here. Heavy modules (torch, onnx, onnxruntime, pydantic) are imported by the library functions
the commands call, never at import time, so ``edgebuild --help`` stays instant.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from edgebuild import __version__
from edgebuild.cli.build import COMMANDS as BUILD_COMMANDS
from edgebuild.cli.context import CliContext
from edgebuild.cli.device import COMMANDS as DEVICE_COMMANDS
from edgebuild.cli.project import COMMANDS as PROJECT_COMMANDS
from edgebuild.errors import EXIT_CODES, EdgebuildError

__all__ = ["main"]

_EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>2}  {text.strip().rstrip('.')}" for code, text in EXIT_CODES.items()
)


class _Group(click.Group):
    """Prints EdgebuildError as one clear message with its exit code; -v adds the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EdgebuildError as exc:
            if isinstance(ctx.obj, CliContext) and ctx.obj.verbose:
                traceback.print_exc()
            click.echo(f"error: {exc.kind}: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=_Group, epilog=_EXIT_CODE_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="edgebuild")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Take a PyTorch vision model to a fleet of NVIDIA Jetson devices.

    edgebuild reads the project's edgebuild.toml and, for every fleet group the target
    selects, exports the model to ONNX, checks its operators against that JetPack's TensorRT,
    gates FP16/INT8 candidates on accuracy retention, builds engines, runtime containers and
    signed OTA artifacts.

    \b
    Start with:
      edgebuild init                       write a commented edgebuild.toml
      edgebuild check                      validate it
      edgebuild compile --target orin      build for every Orin group of the fleet
      edgebuild doctor                     what this host can do
    """
    # pydantic looks for plugins (observers of every validation) in the entry points of every installed
    # distribution when it builds its first model: about 30 ms of a no-op compile in a venv with torch, for
    # plugins the command line never uses. Set PYDANTIC_DISABLE_PLUGINS= (empty) to have them loaded.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    ctx.obj = CliContext(verbose=verbose, interactive=sys.stderr.isatty())


for _command in (*PROJECT_COMMANDS, *BUILD_COMMANDS, *DEVICE_COMMANDS):
    main.add_command(_command)
