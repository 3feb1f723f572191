"""The project's commands: ``init``, ``check``, ``data prepare``, ``profiles list|show``, ``doctor``."""

from __future__ import annotations

from pathlib import Path

import click

import edgebuild.cli.render as render
from edgebuild.cli.context import CliContext, pass_cli
from edgebuild.cli.options import json_option, project_option

__all__ = []


def _input_size(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    from edgebuild.workflows.init.project_file import parse_input_size

    try:
        return None if value is None else parse_input_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _floats(ctx: click.Context, param: click.Parameter, value: str | None) -> list[float] | None:
    if value is None:
        return None
    try:
        return [float(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give numbers separated by commas, e.g. 0.485,0.456,0.406 "
                                 "(one for a GRAY model)") from None


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing edgebuild.toml.")
@click.option("--model", "model", default=None, metavar="PATH_OR_NAME",
              help="The model to write the project from: an ONNX file, an Ultralytics best.pt (detect, segment, "
                   "pose or OBB; a YOLOv10/YOLO26 NMS-free head ships as trained), a TorchScript file "
                   "(torch.jit.save), or a classifier by name: torchvision:resnet18, timm:mobilenetv3_small_100.")
@click.option("--data", "data", type=click.Path(path_type=Path), default=None,
              help="Its dataset: a YOLO data.yaml, a Pascal VOC root, a COCO JSON, or split folders of class folders. "
                   "It gives the class names, and the task where the model does not say it.")
@click.option("--weights", "weights", type=click.Path(path_type=Path), default=None,
              help="A model by name: its trained state_dict (torch.save(model.state_dict(), PATH)); without it the "
                   "weights are random and the gate refuses them.")
@click.option("--input-size", "input_size", default=None, metavar="N|H,W", callback=_input_size,
              help="The image size the model was trained at, where it does not say one (a TorchScript file "
                   "traced says its own; default 224 for a classifier, 640 for a detector).")
@click.option("--fleet", "fleet", default=None, metavar="GROUPS",
              help="Fleet groups NAME=MODULE@JETPACK,... (default: one orin-nano-8gb group, newest JetPack).")
@click.option("--name", "name", default=None, help="The project name (default: the folder's name).")
@click.option("--trust-checkpoint", is_flag=True,
              help="A .pt checkpoint (a pickle) may be loaded: writes [model] trust_checkpoint = true.")
@click.option("--mean", "mean", default=None, metavar="M[,M,M]", callback=_floats,
              help="The normalization mean the model was trained with (after pixels / 255). Without it, for a "
                   "model file that says none, init measures the usual conventions on the validation set.")
@click.option("--std", "std", default=None, metavar="S[,S,S]", callback=_floats,
              help="The normalization std the model was trained with (0.00392157 for 0-255 pixels).")
@click.option("--channel-order", "channel_order", type=click.Choice(["RGB", "BGR", "GRAY"]), default=None,
              help="The channel order the model was trained with (default: measured, or what the file says).")
@click.option("--resize", "resize", type=click.Choice(["letterbox", "resize"]), default=None,
              help="How images were fitted to the input size in training (default: measured for a detector "
                   "whose file says nothing; resize for a classifier).")
def init(directory: Path, force: bool, model: str | None, data: Path | None, weights: Path | None,
         input_size: list[int] | None, fleet: str | None, name: str | None, trust_checkpoint: bool,
         mean: list[float] | None, std: list[float] | None, channel_order: str | None, resize: str | None) -> None:
    """Write an edgebuild.toml into DIRECTORY.

    With --model and --data, a complete, commented project file from what the model and the
    dataset say, which `edgebuild compile` runs as it is; without them, a commented starter to fill in.
    A TorchScript file or a model by name is loaded and run once per profile shape, as compile's
    model stage runs it, before the file is written. For a model file that says nothing of its
    preprocessing (an ONNX file without Ultralytics metadata, a TorchScript file), the FP32 metric is
    measured on up to 64 validation images under the usual conventions (0-1, ImageNet mean/std,
    0-255, the images' own mean/std; RGB and BGR; letterbox and resize for a detector) and the best
    is written; --mean, --std, --channel-order and --resize fix what you know.
    """
    given = {"mean": mean, "std": std, "channel_order": channel_order, "resize": resize}
    if model is None and data is None:
        if fleet is not None or name is not None or trust_checkpoint or weights is not None or input_size or \
                any(v is not None for v in given.values()):
            raise click.UsageError("--fleet, --name, --weights, --input-size, --trust-checkpoint, --mean, --std, "
                                   "--channel-order and --resize go with --model and --data")
        from edgebuild.project.template import write_starter

        path = write_starter(directory, force=force)
        click.echo(f"wrote {path}: fill in the model, data and fleet, then run `edgebuild check`")
        return
    if model is None or data is None:
        raise click.UsageError("--model and --data go together: the model file and its dataset")
    from edgebuild.workflows.init.project_file import init_from_files

    result = init_from_files(directory, model=model, data=data, fleet=fleet, name=name, force=force,
                             trust_checkpoint=trust_checkpoint, input_size=input_size, weights=weights,
                             preprocess={k: v for k, v in given.items() if v is not None})
    for line in result.found:
        click.echo(line)
    click.echo(f"wrote {result.path}; next: {result.next_command}")


@click.command()
@project_option
@json_option
def check(project_dir: Path, as_json: bool) -> None:
    """Validate the project file, its code and data, and list the fleet groups.

    A model.entry_point's model is built and run at the min/opt/max shapes, as validate's model
    stage runs it (data.prepare is imported, not run); class folders are checked against
    task.classes, every label is read and every image decoded (remembered by content in the build
    folder, so a second check is instant). A model file
    ([model] source) gets the model stage's checks without the export: its bytes against its kind,
    the ONNX checker, its opset against every group's TensorRT, its inputs, outputs and stride (run
    with ONNX Runtime), an Ultralytics checkpoint's trust_checkpoint. A fleet file is
    checked with every model project it names (each as above), and
    its groups are listed with the models they run.
    """
    from edgebuild.project.fleet_file import is_fleet_file
    from edgebuild.workflows.project import check_project

    if is_fleet_file(project_dir):
        _check_fleet(project_dir, as_json)
        return
    checked = check_project(project_dir)
    if as_json:
        click.echo(render.as_json({"project_file": str(checked.project.source), "valid": True,
                                   "fleet": [g.as_dict() for g in checked.fleet], "data_to_prepare": checked.to_prepare,
                                   "checked": [str(f) for f in checked.findings]}))
        return
    click.echo(render.check_text(checked))


def _check_fleet(project_dir: Path, as_json: bool) -> None:
    from edgebuild.project.fleet_file import load_fleet
    from edgebuild.workflows.project import check_project

    fleet = load_fleet(project_dir)
    checked = {name: check_project(project.source) for name, project in fleet.models.items()}
    groups = [{"group": g.name, "target": g.target_id, "models": list(g.models or [])} for g in fleet.file.fleet]
    if as_json:
        click.echo(render.as_json({"fleet_file": str(fleet.source), "valid": True, "groups": groups,
                                   "models": {n: str(p.source) for n, p in fleet.models.items()}}))
        return
    click.echo(f"{fleet.source}: a valid fleet file ({len(fleet.models)} models, {len(groups)} groups)")
    for group in groups:
        click.echo(f"  {group['group']:<12} {group['target']:<22} runs {', '.join(group['models'])}")
    for name, result in checked.items():
        click.echo(f"\nmodel {name} ({fleet.models[name].source}):")
        click.echo(render.check_text(result))


@click.group("data")
def data_group() -> None:
    """The project's calibration and validation data."""


@data_group.command("prepare")
@project_option
@pass_cli
def data_prepare_command(cli: CliContext, project_dir: Path) -> None:
    """Run the project's data.prepare when a data path is missing (compile and validate do this too)."""
    from edgebuild.workflows.project import prepare_project_data

    ran = prepare_project_data(project_dir, progress=cli.say)
    click.echo(f"data: {'prepared by ' + ran if ran else 'every data path is there'}")


@click.group()
def profiles() -> None:
    """JetPack releases, Jetson modules and the targets they make."""


@profiles.command("list")
@json_option
def profiles_list(as_json: bool) -> None:
    """List JetPack releases and modules, and which pairs are valid targets."""
    from edgebuild.workflows.project import profile_catalog

    catalog = profile_catalog()
    click.echo(render.as_json(catalog) if as_json else render.catalog_text(catalog))


@profiles.command("show")
@click.argument("target")
@json_option
def profiles_show(target: str, as_json: bool) -> None:
    """Show one target (MODULE@JETPACK), module, or JetPack release, with sources."""
    from edgebuild.workflows.project import profile_records

    records = profile_records(target)
    if as_json:
        click.echo(render.as_json(records))
        return
    for kind in ("module", "jetpack"):
        if kind in records:
            click.echo(render.profile_text(kind, records[kind]))


@click.command()
@json_option
def doctor(as_json: bool) -> None:
    """Report what this host can do and what each missing piece would enable."""
    from edgebuild.workflows.doctor import run_checks

    checks = run_checks()
    click.echo(render.as_json([c.as_dict() for c in checks]) if as_json else render.doctor_text(checks))


COMMANDS = (init, check, data_group, profiles, doctor)
