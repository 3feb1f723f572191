"""The ``edgebuild`` command line. Each command parses flags, calls one library function, prints.

Heavy modules (torch, onnx, onnxruntime) are imported by the library functions, never here,
so ``edgebuild --help`` stays instant.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from edgebuild import __version__
from edgebuild.errors import EXIT_CODES, EdgebuildError

_EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>2}  {text.strip().rstrip('.')}" for code, text in EXIT_CODES.items()
)


class _Group(click.Group):
    """Prints EdgebuildError as one clear message with its exit code; -v adds the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EdgebuildError as exc:
            if ctx.meta.get("edgebuild.verbose"):
                traceback.print_exc()
            click.echo(f"error: {exc.kind}: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


project_option = click.option(
    "--project", "-p", "project_dir", default=".", show_default=True, envvar="EDGEBUILD_PROJECT",
    type=click.Path(file_okay=True, dir_okay=True, path_type=Path),
    help="Project folder, or its edgebuild.toml (env EDGEBUILD_PROJECT).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


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
    ctx.meta["edgebuild.verbose"] = verbose


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing edgebuild.toml.")
def init(directory: Path, force: bool) -> None:
    """Write a commented starter edgebuild.toml into DIRECTORY."""
    from edgebuild.project_template import write_starter

    path = write_starter(directory, force=force)
    click.echo(f"wrote {path}: fill in the model, data and fleet, then run `edgebuild check`")


@main.command()
@project_option
@json_option
def check(project_dir: Path, as_json: bool) -> None:
    """Validate the project file and its data paths, and list the fleet groups."""
    from edgebuild.config import load_project
    from edgebuild.pipeline import plan_compile

    project = load_project(project_dir)
    plan = plan_compile(project, "all")
    units = [u.describe() for u in plan.units]
    if as_json:
        _emit_json({"project_file": str(project.source), "valid": True, "fleet": units})
        return
    click.echo(f"{project.source}: valid ({project.task.kind}, {len(project.task.classes)} classes, "
               f"metric {project.metric}, min retention {project.accuracy.min_retention})")
    click.echo(_fleet_table(units))


def _fleet_table(units: list[dict]) -> str:
    rows = [[u["group"] + ("" if u["in_fleet"] else " (not in fleet)"), u["target"], u["jetpack"],
             "R" + u["l4t"], u["tensorrt"], u["cuda"], f"sm {u['compute_capability']}",
             str(u["max_onnx_opset"])] for u in units]
    return _table(rows, ["group", "target", "JetPack", "L4T", "TensorRT", "CUDA", "GPU", "max opset"])


@main.command("compile")
@project_option
@click.option("--target", "-t", "selector", default="all", show_default=True,
              help="Which fleet groups: a family (orin), a module id, MODULE@JETPACK, a group "
                   "name, or 'all'; comma-separated for several.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
@json_option
def compile_command(project_dir: Path, selector: str, no_progress: bool, as_json: bool) -> None:
    """Run the pipeline for every fleet group the target selects.

    Plans one build unit per selected group and runs the stages in order. The summary
    says which stages ran and which are not available in this version.
    """
    from edgebuild.config import load_project
    from edgebuild.pipeline import plan_compile, run_compile

    project = load_project(project_dir)
    plan = plan_compile(project, selector)
    if not as_json:
        click.echo(f"edgebuild compile: {project.project.name} ({project.source})")
        click.echo(f"target {selector!r}: {len(plan.units)} of {len(project.fleet)} fleet group(s)\n")
        click.echo(_fleet_table([u.describe() for u in plan.units]) + "\n")

    def show(stage: Any, outcome: Any) -> None:
        if not as_json:
            click.echo(f"  {stage.name:<10} {outcome.status:<14} {outcome.detail}")

    if not as_json:
        click.echo("stages:")
    report = run_compile(plan, progress=not no_progress and not as_json and sys.stderr.isatty(),
                         on_stage=show)
    if as_json:
        _emit_json(report.as_dict())
    else:
        ran = [s.name for s, o in report.stages if o.status == "ran"]
        missing = [s.name for s, o in report.stages if o.status == "not available"]
        click.echo(f"\nran: {', '.join(ran) or 'nothing'}")
        if missing:
            click.echo(f"not available yet: {', '.join(missing)}")
    if not report.ok:
        sys.exit(1)


@main.group()
def profiles() -> None:
    """JetPack releases, Jetson modules and the targets they make."""


@profiles.command("list")
@json_option
def profiles_list(as_json: bool) -> None:
    """List JetPack releases and modules, and which pairs are valid targets."""
    from edgebuild.profiles import load_catalog

    catalog = load_catalog()
    if as_json:
        _emit_json({
            "jetpack": [r.model_dump() for r in catalog.releases.values()],
            "modules": [m.model_dump() for m in catalog.modules.values()],
        })
        return
    rows = [[r.jetpack, "R" + r.l4t, r.ubuntu, r.cuda, r.tensorrt, r.python, r.cgroup,
             str(r.max_onnx_opset), ", ".join(r.modules)] for r in catalog.releases.values()]
    click.echo(_table(rows, ["JetPack", "L4T", "Ubuntu", "CUDA", "TensorRT", "Python", "cgroup",
                             "opset", "modules"]))
    click.echo()
    rows = [[m.id, m.name, m.family, f"sm {m.compute_capability}", str(m.dla_cores), f"{m.memory_gb} GB",
             ", ".join(m.jetpack)] for m in catalog.modules.values()]
    click.echo(_table(rows, ["module", "name", "family", "GPU", "DLA", "memory", "JetPack"]))
    click.echo("\na target is MODULE@JETPACK, e.g. orin-nano-8gb@6.2; "
               "`edgebuild profiles show TARGET` for details")


@profiles.command("show")
@click.argument("target")
@json_option
def profiles_show(target: str, as_json: bool) -> None:
    """Show one target (MODULE@JETPACK), module, or JetPack release, with sources."""
    from edgebuild.errors import TargetError
    from edgebuild.profiles import load_catalog

    catalog = load_catalog()
    if "@" in target:
        resolved = catalog.parse_target(target)
        records = {"target": resolved.id, "module": resolved.module.model_dump(),
                   "jetpack": resolved.release.model_dump()}
    elif target in catalog.modules:
        records = {"module": catalog.modules[target].model_dump()}
    elif target in catalog.releases:
        records = {"jetpack": catalog.releases[target].model_dump()}
    else:
        raise TargetError(
            f"unknown target, module or JetPack release {target!r}",
            hint=f"modules: {', '.join(catalog.modules)}; JetPack: {', '.join(catalog.releases)}",
        )
    if as_json:
        _emit_json(records)
        return
    for kind in ("module", "jetpack"):
        if kind in records:
            click.echo(_describe_record(kind, records[kind]))


def _describe_record(kind: str, record: dict) -> str:
    title = record["name"] if kind == "module" else f"JetPack {record['jetpack']}"
    unconfirmed = set(record.get("unconfirmed", []))
    lines = [title]
    for key, value in record.items():
        if key in ("sources", "unconfirmed", "notes", "name"):
            continue
        if key == "power_modes":
            value = ", ".join(f"{m['id']} {m['name']}" if m["id"] is not None else m["name"] for m in value)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        flag = "  (unconfirmed)" if key in unconfirmed else ""
        lines.append(f"  {key:<22} {value}{flag}")
    for key, text in record.get("notes", {}).items():
        lines.append(f"  note on {key}: {text}")
    lines.append("  sources:")
    lines += [f"    - {s}" for s in record["sources"]]
    return "\n".join(lines) + "\n"


@main.command()
@json_option
def doctor(as_json: bool) -> None:
    """Report what this host can do and what each missing piece would enable."""
    from edgebuild.doctor import run_checks

    checks = run_checks()
    if as_json:
        _emit_json([c.as_dict() for c in checks])
        return
    for c in checks:
        mark = "ok " if c.ok else "-- "
        click.echo(f"{mark} {c.name:<16} {c.found}")
        if not c.ok:
            click.echo(f"    {'':<16} missing: {c.enables}")
