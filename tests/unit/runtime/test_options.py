"""The serve, bench and OTA options: one table, the same parameters in both command lines."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime import options
from edgebuild.runtime.cli import parser

SHARED = {("serve",): options.SERVE, ("bench",): options.BENCH, ("track",): options.TRACK,
          ("ota", "verify"): options.OTA_VERIFY, ("ota", "install"): options.OTA_INSTALL}
DEVICE_COMMAND = {("serve",): "serve", ("bench",): "bench", ("track",): "track",
                  ("ota", "verify"): "ota-verify",
                  ("ota", "install"): "ota-install"}


def _click_command(path: tuple[str, ...]) -> click.Command:
    command = main
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", list(SHARED), ids=" ".join)
def test_both_command_lines_take_the_same_shared_options(path: tuple[str, ...]) -> None:
    host = {p.name: p for p in _click_command(path).params}
    device = {a.dest: a for a in parser()._subparsers._group_actions[0].choices[DEVICE_COMMAND[path]]._actions}
    for spec in SHARED[path]:
        if spec.name == "artifact" and path == ("bench",):
            continue  # the host's bench can find the artifact from --target
        assert spec.name in host and spec.name in device, spec.name
        if spec.flags:
            assert tuple(host[spec.name].opts) == spec.flags == tuple(device[spec.name].option_strings)
            assert host[spec.name].default == device[spec.name].default or spec.is_flag, spec.name


@pytest.mark.parametrize("path", list(SHARED), ids=" ".join)
def test_help_shows_every_shared_option(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    for spec in SHARED[path]:
        for flag in spec.flags:
            assert flag in result.output
    device = parser()._subparsers._group_actions[0].choices[DEVICE_COMMAND[path]].format_help()
    assert all(flag in device for spec in SHARED[path] for flag in spec.flags)


def test_as_argv_gives_the_device_parser_the_same_values(tmp_path: Path) -> None:
    values = {"backend": "onnxruntime", "batch": [1, 4], "concurrency": [1, 2], "shape": ["images:3x8x8"],
              "iterations": 30, "duration": None, "warmup": 2, "ci_pct": 1.5, "budget_s": 10.0,
              "min_iterations": 20, "engine_cache": tmp_path}
    argv = options.as_argv(options.BENCH, values)
    args = parser().parse_args(["bench", str(tmp_path), *argv])
    assert args.batch == "1,4" and args.concurrency == "1,2" and args.shape == ["images:3x8x8"]
    assert (args.iterations, args.duration, args.warmup, args.ci_pct, args.min_iterations) == (30, None, 2, 1.5, 20)
    assert args.backend == "onnxruntime" and args.engine_cache == tmp_path


def test_ranges_and_paths_are_checked_on_the_device_too(tmp_path: Path, capsys) -> None:
    for argv, message in ((["bench", str(tmp_path), "--warmup", "-1"], "less than the smallest allowed value, 0"),
                          (["bench", str(tmp_path), "--iterations", "two"], "'two' is not a whole number"),
                          (["serve", str(tmp_path / "nothing")], "does not exist"),
                          (["ota-verify", str(tmp_path)], "is a folder, not a file")):
        with pytest.raises(SystemExit) as caught:
            parser().parse_args(argv)
        assert caught.value.code == 2 and message in capsys.readouterr().err
    result = CliRunner().invoke(main, ["bench", str(tmp_path), "--warmup", "-1"])
    assert result.exit_code == 2 and "x>=0" in result.output
