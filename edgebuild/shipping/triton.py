"""A Triton Inference Server model repository per fleet group, for fleets that serve with Triton.

With ``[runtime] server = "triton"`` (or ``"both"``) the container stage writes
``build/triton/<group>/`` from the group's model folder:

    model_repository/<model>/config.pbtxt
    model_repository/<model>/1/model.plan     a TensorRT engine built for the device, or
    model_repository/<model>/1/model.onnx     the ONNX, which Triton's ONNX Runtime backend turns into a
                                              TensorRT engine at first load (TensorRT accelerator,
                                              engine cache in /engine-cache)
    Dockerfile, run.sh                        FROM the Triton image of the JetPack release
                                              (profiles/triton/releases.toml), or the tarball's notes

``config.pbtxt``: the platform from the placement (``tensorrt_plan`` with ``cc_model_filenames``
for the module's compute capability when a shippable engine exists, else ``onnxruntime_onnx``),
inputs and outputs with dims from the profile (-1 for dynamic axes; the batch axis is implicit
when the profile's axis 0 is dynamic), ``max_batch_size`` from the profile, ``dynamic_batching``
from ``[runtime]``, ``instance_group`` KIND_GPU, and ``model_warmup`` at the profile's opt shape,
so Triton reports the model ready only after warm-up.

A detector with NMS inside the model (``[task.postprocess] in_model``) gives Triton its four
fixed-size outputs (num_detections, detection_boxes, detection_scores, detection_classes), so
Triton answers detections with no ensemble and no Python backend; a raw-head detector is served
as its raw tensors, and the record's notes say how to change that. Pose, segmentation and OBB models
are served as their outputs (raw, or pose's and segmentation's detections with NMS inside; docs/tasks.md),
each with its dims, and the notes say who decodes.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from edgebuild._compat import tomllib
from edgebuild.content import atomic_output_dir
from edgebuild.datafiles import data_dir
from edgebuild.errors import ConfigError, ProfileDataError
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.recipe import ENGINE_FILE, Recipe

__all__ = []

#: KServe v2 datatypes as Triton's model-config data types
TRITON_TYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "FP64": "TYPE_FP64", "INT64": "TYPE_INT64",
                "INT32": "TYPE_INT32", "INT8": "TYPE_INT8", "UINT8": "TYPE_UINT8", "BOOL": "TYPE_BOOL"}
ENGINE_CACHE = "/engine-cache"
SERVERS = ("edgebuild", "triton", "both")


@dataclass(frozen=True)
class TritonRelease:
    jetpack: str
    kind: str  # container or tarball
    triton: str
    tensorrt: str
    confirmed: bool
    image: str | None = None
    tarball: str | None = None
    url: str | None = None


def triton_release(jetpack: str) -> TritonRelease | None:
    """The Triton release recorded for a JetPack release (the longest key that matches), or None."""
    path = data_dir("profiles") / "triton" / "releases.toml"
    try:
        table = tomllib.loads(path.read_text())["jetpack"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise ProfileDataError(f"{path}: cannot read the Triton release table: {exc}") from None
    keys = [k for k in table if jetpack == k or jetpack.startswith(k + ".")]
    if not keys:
        return None
    key = max(keys, key=len)
    try:
        return TritonRelease(jetpack=key, **table[key])
    except TypeError as exc:
        raise ProfileDataError(f"{path}: [jetpack.\"{key}\"]: {exc}") from None


def _dims(shape: list[int], batched: bool) -> list[int]:
    return list(shape[1:] if batched else shape)


def _io_block(name: str, datatype: str, dims: list[int]) -> str:
    kind = TRITON_TYPES.get(datatype)
    if kind is None:
        raise ConfigError(f"{name}: datatype {datatype} has no Triton model-config type")
    return f'  {{\n    name: "{name}"\n    data_type: {kind}\n    dims: [ {", ".join(str(d) for d in dims)} ]\n  }}'


def config_pbtxt(recipe: Recipe, *, engine: bool) -> str:
    """Triton's ``config.pbtxt`` for a model folder (``engine``: a shippable TensorRT engine is in it)."""
    if not recipe.outputs:
        raise ConfigError(f"the recipe of {recipe.group} records no outputs (an older edgebuild wrote it)",
                          hint="rerun `edgebuild compile --force engine` for it")
    profiles = recipe.profiles
    lows = [shapes[0][0] for shapes in profiles.values()]
    highs = [shapes[2][0] for shapes in profiles.values()]
    batched = all(high > low for low, high in zip(lows, highs)) and min(lows) == 1
    max_batch = min(highs) if batched else 0
    inputs = []
    for name, (low, _, high) in profiles.items():
        shape = [lo if lo == hi else -1 for lo, hi in zip(low, high)]
        inputs.append(_io_block(name, "FP32", _dims(shape, batched)))
    outputs = [_io_block(name, spec.datatype, _dims(spec.shape, batched)) for name, spec in recipe.outputs.items()]
    lines = [f"# Triton model configuration of {recipe.model_name} {recipe.model_version} for {recipe.group} "
             f"({recipe.target}, {recipe.candidate}); written by edgebuild from its model folder.",
             f'name: "{recipe.model_name}"',
             f'platform: "{"tensorrt_plan" if engine else "onnxruntime_onnx"}"',
             f"max_batch_size: {max_batch}",
             "input [\n" + ",\n".join(inputs) + "\n]",
             "output [\n" + ",\n".join(outputs) + "\n]"]
    if engine:
        lines.append(f'cc_model_filenames [\n  {{\n    key: "{recipe.module.compute_capability}"\n'
                     '    value: "model.plan"\n  }\n]')
    else:
        precision = {"int8": "INT8", "fp16": "FP16"}.get(recipe.precision, "FP32")
        parameters = {"precision_mode": precision, "trt_engine_cache_enable": "1",
                      "trt_engine_cache_path": ENGINE_CACHE, "max_workspace_size_bytes": str(recipe.workspace_bytes)}
        block = "\n".join(f'          parameters {{ key: "{k}" value: "{v}" }}' for k, v in parameters.items())
        lines.append("optimization {\n  execution_accelerators {\n    gpu_execution_accelerator: [\n"
                     f'      {{\n          name: "tensorrt"\n{block}\n      }}\n    ]\n  }}\n}}')
    runtime = recipe.runtime
    if batched and runtime.max_batch_size > 1:
        wanted = runtime.preferred_batch_size or [runtime.max_batch_size, max_batch]  # the project's, as serve's
        preferred = sorted({b for b in wanted if 1 < b <= max_batch})
        lines.append("dynamic_batching {\n"
                     + "".join(f"  preferred_batch_size: {b}\n" for b in preferred)
                     + f"  max_queue_delay_microseconds: {int(round(runtime.max_queue_delay_ms * 1000))}\n}}")
    lines.append(f"instance_group [\n  {{\n    count: {runtime.instance_count}\n    kind: KIND_GPU\n  }}\n]")
    warm = []
    opt_batch = next(iter(profiles.values()))[1][0] if batched else 0
    for name, (_, opt, _) in profiles.items():
        warm.append(f'    inputs {{\n      key: "{name}"\n      value: {{\n        data_type: TYPE_FP32\n'
                    f'        dims: [ {", ".join(str(d) for d in _dims(opt, batched))} ]\n'
                    '        random_data: true\n      }\n    }')
    lines.append('model_warmup [\n  {\n    name: "opt_shape"\n'
                 f"    batch_size: {opt_batch}\n    count: 3\n" + "\n".join(warm) + "\n  }\n]")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class TritonRecord:
    """What the container stage wrote for Triton for one group."""

    repository: str  # relative to the build folder
    platform: str
    image: str | None
    triton: str | None
    notes: list[str]

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> TritonRecord:
        return cls(**data)


def write_repository(folder: Path, out: Path, *, build_dir: Path, recipe: Recipe | None = None) -> TritonRecord:
    """``out`` (``build/triton/<group>``): the model repository, a Dockerfile and run.sh for Triton
    (``recipe``: the folder's, where the caller has read it already). A group folder (several models,
    ``edgebuild.runtime.base.group``) gives one repository with every model."""
    from edgebuild.runtime.base.group import model_folders

    folders = model_folders(folder)
    recipes = {name: Recipe.load(path) for name, path in folders.items()}
    recipe = recipe if recipe is not None and len(folders) == 1 else next(iter(recipes.values()))
    engine = recipe.shippable_engine and Recipe.has_engine(next(iter(folders.values())))
    release = triton_release(recipe.jetpack)
    notes = []
    if release is None:
        notes.append(f"no Triton release is recorded for JetPack {recipe.jetpack} (profiles/triton/releases.toml): "
                     "the model repository is written, the container is not")
    elif not release.confirmed:
        notes.append(f"Triton {release.triton} for JetPack {release.jetpack} is unconfirmed in "
                     "profiles/triton/releases.toml: check NVIDIA's support matrix")
    if engine and release is not None and not recipe.tensorrt.startswith(release.tensorrt):
        notes.append(f"the engine was built with TensorRT {recipe.tensorrt}, Triton {release.triton} loads TensorRT "
                     f"{release.tensorrt}: it will refuse the engine; serve the ONNX instead (deferred) or rebuild")
    for name, each in recipes.items():
        if each.task is not None and each.task.outputs == "raw_head":
            notes.append(f"Triton serves {name}'s raw head (every client decodes and runs NMS itself): set "
                         "task.postprocess.in_model = true to serve detections (docs/detections.md)")
        elif each.task is not None and each.task.outputs == "raw" and each.task.postprocess.in_model:
            notes.append(f"Triton serves {name}'s {each.task.kind} detections from NMS inside the model "
                         f"({', '.join(each.outputs or {})}): clients read num_detections rows of each "
                         f"(docs/{each.task.kind}.md)")
        elif each.task is not None and each.task.outputs == "raw":
            notes.append(f"Triton serves {name}'s raw {each.task.kind} outputs ({', '.join(each.outputs or {})}): "
                         "every client decodes them (NMS, then keypoints, masks or rotated boxes) by the recipe of "
                         f"docs/{each.task.kind}.md; edgebuild's server decodes them on the device ([runtime] "
                         "detections), and pose and segmentation can put NMS inside the model (in_model = true)")
    with atomic_output_dir(out) as staging:
        for name, each in recipes.items():
            each_engine = each.shippable_engine and Recipe.has_engine(folders[name])
            model_dir = staging / "model_repository" / each.model_name
            (model_dir / "1").mkdir(parents=True)
            (model_dir / "config.pbtxt").write_text(config_pbtxt(each, engine=each_engine))
            if each_engine:
                shutil.copyfile(folders[name] / ENGINE_FILE, model_dir / "1" / "model.plan")
            else:
                shutil.copyfile(folders[name] / each.onnx, model_dir / "1" / "model.onnx")
        port = recipe.runtime.port
        if release is not None and release.kind == "container":
            (staging / "Dockerfile").write_text(
                f"# Triton {release.triton} for JetPack {release.jetpack} (iGPU), serving "
                f"{', '.join(f'{r.model_name} {r.model_version}' for r in recipes.values())} ({recipe.group}); "
                "written by edgebuild.\n"
                f"FROM {release.image}\nCOPY model_repository /models\n"
                f"HEALTHCHECK --interval=10s --timeout=3s CMD curl -fs localhost:{port}/v2/health/ready || exit 1\n"
                f'CMD ["tritonserver", "--model-repository=/models", "--http-port={port}", '
                '"--strict-readiness=true"]\n')
            limits = recipe.limits
            (staging / "run.sh").write_text(
                "#!/bin/sh\n# Triton with the group's limits (the same preset as the edgebuild container).\n"
                f"exec docker run --rm --runtime nvidia --memory {limits.memory} --memory-swap {limits.memory} "
                f"--cpus {limits.cpus} --pids-limit {limits.pids} -p {port}:{port} "
                f"-v edgebuild-engine-cache:{ENGINE_CACHE} edgebuild-triton-{recipe.group} \"$@\"\n")
            (staging / "run.sh").chmod(0o755)
        elif release is not None:
            (staging / "README.txt").write_text(
                f"JetPack {release.jetpack} has no Triton container: Triton {release.triton} ships as the release "
                f"tarball {release.tarball} ({release.url}). On the device:\n"
                f"  tar -xzf {release.tarball} -C /opt/tritonserver\n"
                "  /opt/tritonserver/bin/tritonserver --model-repository=$PWD/model_repository "
                f"--backend-directory=/opt/tritonserver/backends --http-port={port} --strict-readiness=true\n")
    return TritonRecord(repository=str((out / "model_repository").relative_to(build_dir)),
                        platform="tensorrt_plan" if engine else "onnxruntime_onnx",
                        image=release.image if release else None, triton=release.triton if release else None,
                        notes=notes)
