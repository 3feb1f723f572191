"""A fleet group's model folder: the recipe an engine is built from, and its acceptance set.

``build/engines/<group>/`` holds what ships to the group's devices: the candidate's ONNX, the
recipe (``runtime.recipe.Recipe``: builder settings, limits, module, JetPack, outputs), the
acceptance set the server checks before it reports ready, the FP16 first-boot fallback of an
INT8 recipe, and the engine where one was built.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import file_sha256
from edgebuild.devices.placement import chosen_candidate, fallback_candidate, shippable
from edgebuild.errors import LimitError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.project.streams_schema import streams_of_group
from edgebuild.runtime.base.files import atomic_write_bytes, atomic_writer
from edgebuild.runtime.base.recipe import (
    ACCEPTANCE_FILE,
    ENGINE_FILE,
    FALLBACK_FOLDER,
    ONNX_FILE,
    RANGES_FILE,
    RECIPE_FILE,
    REGIONS_FILE,
    Recipe,
    RecipeLimits,
    RecipeModule,
    RecipeStream,
    RecipeStreams,
    RuntimeSettings,
    TensorSpec,
)
from edgebuild.targets.presets import LimitPreset, human_size

if TYPE_CHECKING:
    from edgebuild.accuracy.dla_int8.shipping import DlaInt8Recipe
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup, Target

__all__ = ["acceptance_payload"]


def write_recipe(project: Project, group: SelectedGroup, gate: GateResult, placement: str, why: str,
                 acceptance: bytes, candidate: str | None = None, folder: Path | None = None) -> Path:
    """The engine recipe of one fleet group: the ``candidate``'s ONNX (default: the gate's
    selection), the builder settings, its limits and its acceptance set (``acceptance_payload``).

    Written into ``build/engines/<group>/`` (or ``folder``) file by file (each atomically): an
    engine already in the folder stays, and ``place_and_build_engine`` decides whether it still fits.
    """
    from edgebuild.accuracy.evaluate import recipe_task  # arrays and datasets: not on a no-op compile

    target, limits = group.target, group.limits
    assert limits is not None, "select_work resolves every group's limit preset"
    chosen = gate.candidate(chosen_candidate(gate, candidate, group.accelerator))
    folder = folder or BuildLayout.of(project).engine(group.name)
    folder.mkdir(parents=True, exist_ok=True)
    implicit = dla_int8_of(project, gate, group, chosen.precision, folder)  # INT8 on the DLA: FP32 ONNX + ranges
    if implicit is not None:
        acceptance = implicit.acceptance
    source, onnx_path = gate.folder / (implicit.onnx if implicit else chosen.onnx), folder / ONNX_FILE
    onnx_sha256 = file_sha256(source)
    if not onnx_path.is_file() or file_sha256(onnx_path) != onnx_sha256:
        with atomic_writer(onnx_path) as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out)
    _place_emulation(gate, chosen.emulated, folder)
    acceptance_sha256 = hashlib.sha256(acceptance).hexdigest()
    if not (folder / ACCEPTANCE_FILE).is_file() or file_sha256(folder / ACCEPTANCE_FILE) != acceptance_sha256:
        atomic_write_bytes(folder / ACCEPTANCE_FILE, acceptance)
    fallback = None if placement != "deferred" or folder.name == FALLBACK_FOLDER \
        else fallback_candidate(project, gate, chosen.precision, group.accelerator)
    fallback_sha256 = None
    if fallback is not None:
        written = write_recipe(project, group, gate, placement, why, acceptance_payload(project, gate, fallback),
                               fallback, folder / FALLBACK_FOLDER)
        fallback_sha256 = file_sha256(written)
    elif (folder / FALLBACK_FOLDER).is_dir():
        shutil.rmtree(folder / FALLBACK_FOLDER)
    # the streams run from the served folder, not from its fallback (which the server loads in its place)
    streams = recipe_streams(project, group.name) if folder.name != FALLBACK_FOLDER else None
    _place_regions(project, streams, folder)
    Recipe(
        group=group.name,
        model_name=project.project.name,
        model_version=project.ota.version,
        runtime=RuntimeSettings(**project.runtime.model_dump(include={
            "warmup_budget_s", "port", "max_batch_size", "max_queue_delay_ms", "detections", "instance_count",
            "preferred_batch_size"})),
        target=target.id,
        placement=placement,
        placement_reason=why,
        shippable_engine=shippable(placement),
        onnx=ONNX_FILE,
        onnx_sha256=onnx_sha256,
        candidate=chosen.precision,
        kept_fp32=list(chosen.kept_fp32),
        retention=implicit.retention if implicit else chosen.retention,
        accuracy_backend=chosen.backend,
        limits=RecipeLimits(**limits.as_dict()),
        **builder_settings(project, group, chosen.precision),
        accelerator=group.accelerator,
        timing_cache=f"{target.module.id}-trt{target.release.tensorrt}.cache",
        module=RecipeModule(**_module_facts(target)),
        jetpack=target.release.jetpack,
        l4t=target.release.l4t,
        l4t_accepted=[target.release.l4t, *target.release.l4t_aliases],
        tensorrt=target.release.tensorrt,
        acceptance=ACCEPTANCE_FILE,
        acceptance_sha256=acceptance_sha256,
        fallback=FALLBACK_FOLDER if fallback is not None else None,
        fallback_sha256=fallback_sha256,
        outputs=onnx_outputs(onnx_path),
        task=recipe_task(project),
        streams=streams,
        dynamic_ranges=RANGES_FILE if implicit else None,
        dynamic_ranges_sha256=implicit.ranges_sha256 if implicit else None,
    ).save(folder)
    return folder / RECIPE_FILE


def dla_int8_of(project: Project, gate: GateResult, group: SelectedGroup, candidate: str,
                folder: Path) -> DlaInt8Recipe | None:
    """A DLA group's INT8 candidate as it ships (the FP32 ONNX, its ranges as ``RANGES_FILE`` in ``folder``, the
    acceptance set of its emulation); None for any other recipe, whose folder then holds no ranges file."""
    if group.use_dla and candidate == "int8" and folder.name != FALLBACK_FOLDER:
        from edgebuild.accuracy.dla_int8.shipping import dla_int8_recipe

        return dla_int8_recipe(project, gate, group.target.release.tensorrt, folder / RANGES_FILE)
    (folder / RANGES_FILE).unlink(missing_ok=True)
    return None


def recipe_streams(project: Project, group: str) -> RecipeStreams | None:
    """The recipe's ``streams``: the ``[[streams]]`` the group's devices run and ``[runtime.tracking]``; None where
    they run none."""
    sources = [RecipeStream(source=s.source, name=s.name, max_fps=s.max_fps)
               for s in streams_of_group(project.streams, group)]
    if not sources:
        return None
    tracking = project.runtime.tracking
    if tracking is None:
        return RecipeStreams(sources=sources)
    return RecipeStreams(sources=sources, **tracking.model_dump(exclude={"regions"}),
                         regions=REGIONS_FILE if tracking.regions else None)


def _place_emulation(gate: GateResult, emulated: str, folder: Path) -> None:
    """NVFP4: its FP32 emulation as the folder's ``Recipe.EMULATED_ONNX``, which the host runs in place of the
    ONNX ONNX Runtime cannot (the OTA health reference); not a file of the recipe, so never shipped."""
    target = folder / Recipe.EMULATED_ONNX
    if not emulated:
        target.unlink(missing_ok=True)
    elif not target.is_file() or file_sha256(target) != file_sha256(gate.folder / emulated):
        atomic_write_bytes(target, (gate.folder / emulated).read_bytes())


def _place_regions(project: Project, streams: RecipeStreams | None, folder: Path) -> None:
    """The project's regions file as the model folder's ``REGIONS_FILE`` (removed where the recipe has none)."""
    target = folder / REGIONS_FILE
    tracking = project.runtime.tracking
    if streams is None or streams.regions is None or tracking is None or tracking.regions is None:
        target.unlink(missing_ok=True)
        return
    atomic_write_bytes(target, project.path(tracking.regions).read_bytes())


#: ONNX tensor element types as KServe v2 datatypes
V2_DATATYPES = {1: "FP32", 10: "FP16", 11: "FP64", 7: "INT64", 6: "INT32", 3: "INT8", 2: "UINT8", 9: "BOOL"}


def onnx_outputs(path: Path) -> dict[str, TensorSpec]:
    """The graph outputs of an ONNX file: v2 datatype and shape (-1 for a symbolic or unknown axis)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found = {}
    for output in graph.output:
        tensor = output.type.tensor_type
        found[output.name] = TensorSpec(
            datatype=V2_DATATYPES.get(tensor.elem_type, onnx.TensorProto.DataType.Name(tensor.elem_type)),
            shape=[d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim])
    return found


def builder_settings(project: Project, group: SelectedGroup, candidate: str) -> JsonObject:
    """The recipe's TensorRT builder settings for a candidate (what ``engine_build_key`` reads besides the ONNX).

    A group placed on a DLA core builds one static shape, each input's opt_shape as min = opt = max:
    the DLA runs no dynamic shapes (dla.toml's general restrictions)."""
    from edgebuild.targets.dla import build_core

    assert group.limits is not None, "select_work resolves every group's limit preset"
    static = group.use_dla
    return {"precision": "int8" if candidate.startswith("int8") else candidate,
            "profiles": {s.name: [list(s.opt_shape)] * 3 if static else
                         [list(s.min_shape), list(s.opt_shape), list(s.max_shape)] for s in project.model.inputs},
            "workspace_bytes": group.limits.tensorrt_workspace,  # the preset's TensorRT memory-pool limit
            "dla_core": build_core(group.accelerator)}


def acceptance_payload(project: Project, gate: GateResult, candidate_name: str | None = None) -> bytes:
    """``acceptance.npz`` for a candidate (default: the gate's selection; ``accuracy.evaluate.acceptance_set``).

    The same for every group; kept beside the candidate's measurement, whose folder is keyed by
    the model, data and task it is made from, so it is made once per candidate, not per compile.
    """
    from edgebuild.accuracy.evaluate import ACCEPTANCE_IMAGES, ACCEPTANCE_VERSION, ValidationSet, acceptance_set

    chosen = gate.candidate(chosen_candidate(gate, candidate_name))
    candidate = gate.folder / (chosen.emulated or chosen.onnx)  # NVFP4: ONNX Runtime runs its emulation
    stored = candidate.parent / f"acceptance-{ACCEPTANCE_VERSION}.npz"
    if stored.is_file():
        return stored.read_bytes()
    data = ValidationSet(project, limit=ACCEPTANCE_IMAGES)
    payload, _ = acceptance_set(project, data, gate.folder / gate.candidate("fp32").onnx, candidate)
    atomic_write_bytes(stored, payload)
    return payload


def check_engine_memory(engine_json: Path, limits: LimitPreset) -> None:
    """Refuse an engine whose activations need more device memory than the group's preset allows.

    CUDA memory on a Jetson is probably not charged to the container's cgroup, so this check, and
    the memory-pool limit the engine was built with, are what bound it.
    """
    size = json.loads(engine_json.read_text()).get("device_memory_size")
    if size is not None and int(size) > limits.engine_device_memory_max:
        raise LimitError(
            f"{engine_json.parent / ENGINE_FILE}: the engine needs {human_size(int(size))} of device memory, more "
            f"than the {human_size(limits.engine_device_memory_max)} preset {limits.name} allows "
            "(gpu.engine_device_memory_max)",
            hint="lower the max shape of the optimization profile, or use a preset with a larger engine budget")


def _module_facts(target: Target) -> JsonObject:
    module = target.module
    return {"id": module.id, "name": module.name, "compute_capability": module.compute_capability,
            "compatible": module.compatible}
