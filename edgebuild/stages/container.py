"""The container stage (per group): the runtime container's build context and cgroup-limited run specs.

Reads: the group's model folder (the engine stage's record names it), the Dockerfile templates,
the device-side code and the group's limit preset. Writes ``build/containers/<group>[-cpu]/``
(Dockerfile, entry point, run.sh, compose.yaml, a systemd unit on cgroup v2) and, with
``[runtime] server = "triton"|"both"``, ``build/triton/<group>/``, and for a recipe with a task the
DeepStream configs in ``build/deepstream/<group>/`` (or the reason there are none); its record is a
``ContainerRecord``.
"""

from __future__ import annotations

from pathlib import Path

from edgebuild.content import digest, file_sha256, tree_sha256
from edgebuild.datafiles import data_dir
from edgebuild.pipeline.runner import Stage
from edgebuild.shipping.container import ContainerRecord
from edgebuild.shipping.deepstream import DeepStreamRecord
from edgebuild.stages.engine import model_folder
from edgebuild.stages.session import CompileInputs

__all__ = ["CONTAINER"]

RUNTIME_PACKAGE = Path(__file__).resolve().parents[1] / "runtime"  # the device-side code the image carries


def model_folder_key(inputs: CompileInputs) -> dict[str, str]:
    """The sha256 of every file of the group's model folder (recipe, ONNX, acceptance set, engine where built)."""
    from edgebuild.runtime.base.recipe import Recipe

    folder = model_folder(inputs)  # Recipe.file_hashes's files, hashed through the file cache
    return {name: file_sha256(path) for name, path in sorted(Recipe.load(folder).model_files(folder).items())}


def folder_key(folder: Path) -> dict[str, str]:
    """The sha256 of every file directly in ``folder``."""
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def _key(inputs: CompileInputs) -> dict[str, str]:
    limits = inputs.unit.limits
    assert limits is not None, "select_work resolves every group's limit preset"
    return {"model_folder": digest(model_folder_key(inputs)), "templates": tree_sha256(data_dir("docker"), "*"),
            "device_tool": tree_sha256(RUNTIME_PACKAGE),
            "limits": digest(limits.as_dict()),
            "flavor": inputs.session.settings.container_flavor, "base_image": inputs.session.settings.base_image or "",
            "server": inputs.project.runtime.server,
            "triton_releases": tree_sha256(data_dir("profiles") / "triton", "*.toml"),
            "deepstream_tables": tree_sha256(data_dir("profiles") / "deepstream", "*.toml")}


def _run(inputs: CompileInputs) -> ContainerRecord:
    from edgebuild.shipping.container import write_group_container

    settings = inputs.session.settings
    return write_group_container(inputs.project, inputs.unit, model_folder(inputs), flavor=settings.container_flavor,
                                 base_image=settings.base_image, progress=inputs.progress)


def _outputs(inputs: CompileInputs, record: ContainerRecord) -> list[Path]:
    build = inputs.project.build_dir
    deepstream = record.deepstream
    return ([build / record.context] + ([build / Path(record.triton.repository).parent] if record.triton else [])
            + ([build / deepstream.folder] if deepstream and deepstream.written and deepstream.folder else []))


def _describe(record: ContainerRecord) -> str:
    return (f"FROM {record.base_image} ({'engine' if record.ships_engine else 'recipe'}, limits "
            f"{record.limits.name}{', systemd unit' if record.systemd_unit else ''}"
            + (f"; Triton {record.triton.platform} repository" if record.triton else "")
            + _describe_deepstream(record.deepstream) + ")")


def _describe_deepstream(deepstream: DeepStreamRecord | None) -> str:
    if deepstream is None:
        return ""
    if deepstream.written:
        return f"; DeepStream {deepstream.deepstream} configs written"
    return f"; no DeepStream config: {deepstream.reason}"


CONTAINER = Stage(
    name="container", version=6,
    summary="runtime container build context and cgroup-limited run specs (docker run, compose, systemd)",
    record=ContainerRecord, after=("engine",), per_group=True, key=_key, run=_run, outputs=_outputs,
    describe=_describe)
