"""Runtime containers and run specs per fleet group: the ``container`` stage and ``edgebuild container``.

From a compiled model folder (``build/engines/<group>/``) and the group's limit preset, writes a
build context to ``build/containers/<group>/``:

- ``Dockerfile`` from ``docker/Dockerfile.in``: FROM the JetPack profile's NVIDIA TensorRT image
  (flavor ``jetson``) or a Debian Python image (flavor ``cpu``, ONNX Runtime, for trying the
  runtime on a build host), a non-root user, the engine cache as the only writable volume, a
  HEALTHCHECK on readiness, ``edgebuild-device.pyz serve`` as the entry point;
- ``model/`` (the recipe, the ONNX, and the engine where it was built for the device) and
  ``edgebuild-device.pyz``;
- the run specs, each carrying the preset's limits: ``run.sh`` (``docker run``), ``compose.yaml``,
  and on cgroup-v2 JetPack releases a systemd unit running the server without a container;
- ``container.json``: what was written, from what, with which limits.

CUDA memory on a Jetson is probably not charged to the container's cgroup, so the preset's
``[gpu]`` budget is enforced at build time (TensorRT's memory-pool limit, and the engine stage's
device-memory check), not here.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import string
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild import __version__
from edgebuild.content import atomic_output_dir
from edgebuild.datafiles import data_dir
from edgebuild.devices.ssh import device_tool_archive
from edgebuild.errors import CapabilityMissing, ConfigError, ContainerError, EdgebuildError, LimitError, TargetError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.serving.ports import GRPC_PORT
from edgebuild.shipping.deepstream import DeepStreamRecord, write_deepstream
from edgebuild.shipping.triton import TritonRecord, write_repository
from edgebuild.targets.presets import LimitPreset, human_size
from edgebuild.targets.profiles import SelectedGroup, Target
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.shipping.shipped import Shipped

__all__ = ["ContainerRecord", "build_image", "group_container_spec", "write_group_container"]

FLAVORS = ("jetson", "cpu")
#: the cpu flavor's default base: Debian bookworm's Python, where pip can add numpy and ONNX Runtime
CPU_BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
IMAGE_ROOT = "/opt/edgebuild"
MODEL_DIR = f"{IMAGE_ROOT}/model"
ENGINE_CACHE = "/var/cache/edgebuild"
RUNTIME_UID = 10001
#: where the systemd unit expects the model folder and the device tool on a device
UNIT_INSTALL_ROOT = "/opt/edgebuild"
#: how long a deferred engine build may take on first start before the health check counts failures
DEFERRED_BUILD_ALLOWANCE_S = 1200
START_ALLOWANCE_S = 60


class _AtTemplate(string.Template):
    """``@name`` placeholders: Dockerfiles and shell already use ``$``."""

    delimiter = "@"


@dataclass(frozen=True)
class ContainerSpec:
    """What one group's image and run specs are made of."""

    group: str
    target: Target
    flavor: str
    base_image: str
    image: str
    preset: LimitPreset
    model_name: str
    model_version: str
    port: int
    backend: str
    ships_engine: bool
    start_period_s: int
    notes: tuple[str, ...] = field(default=())
    #: KServe v2 over gRPC: the server's default port, where the image has grpcio (else HTTP only, with a warning)
    grpc_port: int = GRPC_PORT

    @property
    def ports(self) -> list[int]:
        """What the container publishes: HTTP, then gRPC (unless the HTTP port is gRPC's: the server then warns)."""
        return [self.port] + ([self.grpc_port] if self.grpc_port != self.port else [])

    @property
    def container_name(self) -> str:
        return f"edgebuild-{self.group}" + ("-cpu" if self.flavor == "cpu" else "")

    @property
    def volume(self) -> str:
        return f"{self.container_name}-engines"

    @property
    def unit_name(self) -> str:
        return f"edgebuild-{self.group}.service"

    @property
    def writes_unit(self) -> bool:
        """systemd units for cgroup-v2 JetPack releases (AllowedCPUs and MemorySwapMax need v2)."""
        return self.flavor == "jetson" and self.target.release.cgroup.startswith("v2")


def tensorrt_base_image(target: Target) -> str:
    """The first NVIDIA image of the JetPack profile that carries TensorRT."""
    for image in target.release.base_images:
        if "/l4t-tensorrt:" in image and image.endswith("-runtime"):
            return image
    for image in target.release.base_images:
        if "/l4t-tensorrt:" in image or "/l4t-jetpack:" in image:
            return image
    listed = ", ".join(target.release.base_images) or "none"
    raise TargetError(f"JetPack {target.release.jetpack} lists no NVIDIA image with TensorRT in its profile "
                      f"(base_images: {listed})",
                      hint="pass --base-image IMAGE (an image of that JetPack with TensorRT's Python bindings)")


def _image_tag(model_name: str, version: str, group: str, flavor: str) -> str:
    tag = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{version}-{group}" + ("-cpu" if flavor == "cpu" else ""))
    return f"edgebuild/{model_name}:{tag[:128]}"


def container_spec(recipe: Recipe, target: Target, preset: LimitPreset, *, flavor: str = "jetson",
                   base_image: str | None = None, image: str | None = None) -> ContainerSpec:
    """The container spec of one group from its recipe (``build/engines/<group>/recipe.json``)."""
    if flavor not in FLAVORS:
        raise ConfigError(f"container flavor {flavor!r} is not one of {', '.join(FLAVORS)}")
    if preset.module != target.module.id:
        raise ConfigError(f"limit preset {preset.name} is for {preset.module}, not {target.module.id} "
                          f"({recipe.group})")
    deferred = recipe.placement == "deferred" or not recipe.shippable_engine
    warmup = recipe.runtime.warmup_budget_s
    notes = []
    if flavor == "jetson" and deferred:
        notes.append("no engine built for the device yet: the container builds it from the recipe at first "
                     f"start into the {ENGINE_CACHE} volume (minutes, once per TensorRT version and GPU)")
    if flavor == "cpu":
        notes.append("cpu flavor: ONNX Runtime on the CPU, for trying the runtime on a build host; not for a Jetson")
    model_name = recipe.model_name or recipe.group
    version = recipe.model_version or "1"
    return ContainerSpec(
        group=recipe.group, target=target, flavor=flavor,
        base_image=base_image or (tensorrt_base_image(target) if flavor == "jetson" else CPU_BASE_IMAGE),
        image=image or _image_tag(model_name, version, recipe.group, flavor), preset=preset,
        model_name=model_name, model_version=version, port=recipe.runtime.port,
        backend="tensorrt" if flavor == "jetson" else "onnxruntime",
        ships_engine=flavor == "jetson" and not deferred,
        start_period_s=int(warmup + (DEFERRED_BUILD_ALLOWANCE_S if flavor == "jetson" and deferred
                                     else START_ALLOWANCE_S)),
        notes=tuple(notes))


# -- run specs ------------------------------------------------------------------------------

def docker_size(n: int) -> str:
    """Bytes in docker's units (``2g``, ``512m``), exact."""
    for unit, shift in (("g", 30), ("m", 20), ("k", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}b"


def _cores(cpus: float) -> str:
    return f"{cpus:g}"


def limit_args(preset: LimitPreset) -> list[str]:
    """The preset as ``docker run`` / ``podman run`` options."""
    args = ["--memory", docker_size(preset.memory), "--memory-swap", docker_size(preset.memory_swap),
            "--cpus", _cores(preset.cpus), "--pids-limit", str(preset.pids)]
    if preset.cpuset:
        args += ["--cpuset-cpus", preset.cpuset]
    return args


def run_args(spec: ContainerSpec, *, detach: bool = True, publish: str | None = None, restart: bool = True,
             name: str | None = None) -> list[str]:
    """``docker run ...`` for the spec, limits included (``podman run`` takes the same options)."""
    args = ["run"] + (["--detach"] if detach else []) + ["--name", name or spec.container_name]
    if restart:
        args += ["--restart", "unless-stopped"]
    if spec.flavor == "jetson":
        # the NVIDIA container runtime mounts the GPU; its device nodes belong to group video
        args += ["--runtime", "nvidia", "--group-add", "video"]
    args += limit_args(spec.preset)
    args += ["--read-only", "--tmpfs", "/tmp:rw,size=64m", "--security-opt", "no-new-privileges",
             "--cap-drop", "ALL", "--volume", f"{spec.volume}:{ENGINE_CACHE}",
             *(["--publish", publish] if publish else [a for p in spec.ports for a in ("--publish", f"{p}:{p}")]),
             spec.image]
    return args


def compose_spec(spec: ContainerSpec) -> JsonObject:
    service: JsonObject = {"image": spec.image, "build": {"context": ".", "dockerfile": "Dockerfile"}}
    if spec.flavor == "jetson":
        service["runtime"] = "nvidia"
        service["group_add"] = ["video"]
    service.update({
        "restart": "unless-stopped",
        "mem_limit": docker_size(spec.preset.memory),
        "memswap_limit": docker_size(spec.preset.memory_swap),
        "cpus": spec.preset.cpus,
        **({"cpuset": spec.preset.cpuset} if spec.preset.cpuset else {}),
        "pids_limit": spec.preset.pids,
        "read_only": True,
        "tmpfs": ["/tmp:rw,size=64m"],
        "security_opt": ["no-new-privileges:true"],
        "cap_drop": ["ALL"],
        "volumes": [f"engine-cache:{ENGINE_CACHE}"],
        "ports": [f"{p}:{p}" for p in spec.ports],
    })
    return {"name": spec.container_name, "services": {spec.group: service}, "volumes": {"engine-cache": {}}}


def _fill(template: str, spec: ContainerSpec, **extra: Any) -> str:
    target = spec.target
    values = {
        "group": spec.group, "model_name": spec.model_name, "model_version": spec.model_version,
        "target": target.id, "flavor": spec.flavor, "backend": spec.backend, "preset": spec.preset.name,
        "target_line": (f"{target.module.name} with JetPack {target.release.jetpack} (L4T R{target.release.l4t}, "
                        f"TensorRT {target.release.tensorrt})" if spec.flavor == "jetson"
                        else f"a CPU host (ONNX Runtime), for {target.id}"),
        "edgebuild_version": __version__, "base_image": spec.base_image, "uid": RUNTIME_UID,
        "image_root": IMAGE_ROOT, "model_dir": MODEL_DIR, "engine_cache": ENGINE_CACHE, "port": spec.port,
        "grpc_port": spec.grpc_port,
        "start_period_s": spec.start_period_s, "cuda_major": target.release.cuda.split(".")[0],
        "build_command": f"docker build -t {spec.image} ." + (" (on an arm64 host: the device or an arm64 builder)"
                                                              if spec.flavor == "jetson" else ""),
        **extra,
    }
    try:
        return _AtTemplate(template).substitute(values)
    except (KeyError, ValueError) as exc:
        raise EdgebuildError(f"template placeholder {exc} has no value (an installation problem in docker/)") from None


def dockerfile(spec: ContainerSpec) -> str:
    return _fill((data_dir("docker") / "Dockerfile.in").read_text(), spec)


def systemd_unit(spec: ContainerSpec) -> str:
    preset = spec.preset
    install_dir = f"{UNIT_INSTALL_ROOT}/{spec.group}"
    return _fill((data_dir("docker") / "edgebuild.service.in").read_text(), spec,
                 install_dir=install_dir, unit_name=spec.unit_name, memory=preset.memory,
                 swap=max(preset.memory_swap - preset.memory, 0), cpu_quota=round(preset.cpus * 100),
                 allowed_cpus=f"AllowedCPUs={preset.cpuset}" if preset.cpuset else "# AllowedCPUs: any",
                 pids=preset.pids)


def _run_script(spec: ContainerSpec) -> str:
    args = run_args(spec)
    parts, i = [f"docker {args[0]}"], 1
    while i < len(args):  # one option per line, with its value
        pair = i + 1 < len(args) - 1 and args[i].startswith("--") and not args[i + 1].startswith("--")
        parts.append(" ".join(shlex.quote(a) for a in args[i:i + 2 if pair else i + 1]))
        i += 2 if pair else 1
    line = " \\\n  ".join(parts)
    return (f"#!/bin/sh\n# Start the model server of {spec.group} ({spec.target.id}) with the limits of preset "
            f"{spec.preset.name}:\n# {spec.preset.describe()}\n# Written by edgebuild {__version__}; build the image "
            f"first: docker build -t {spec.image} .\nset -e\n{line}\n")


# -- writing a context -----------------------------------------------------------------------

def write_container(artifact_dir: Path, out_dir: Path, spec: ContainerSpec,
                    recipe: Recipe | None = None) -> JsonObject:
    """Write the build context and run specs of one group; returns what ``container.json`` holds.

    ``recipe`` is the folder's recipe where the caller has read it already."""
    artifact_dir = Path(artifact_dir)
    recipe = recipe or _first_recipe(artifact_dir)
    model_files = _served_files(artifact_dir, recipe, spec.ships_engine)
    missing = [name for name in model_files if not (artifact_dir / name).is_file()]
    if missing:
        raise ConfigError(f"{artifact_dir}: {', '.join(missing)} missing; rerun `edgebuild compile --force`")
    with atomic_output_dir(Path(out_dir)) as staging:
        (staging / "model").mkdir()
        for name in model_files:  # a fallback recipe sits in a subfolder
            (staging / "model" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(artifact_dir / name, staging / "model" / name)
        (staging / "edgebuild-device.pyz").write_bytes(device_tool_archive())
        shutil.copyfile(data_dir("docker") / "install-runtime-deps.sh", staging / "install-runtime-deps.sh")
        (staging / "Dockerfile").write_text(dockerfile(spec))
        run_sh = staging / "run.sh"
        run_sh.write_text(_run_script(spec))
        run_sh.chmod(0o755)
        import yaml  # only where a compose file is written (a reused container stage never imports it)

        header = (f"# Compose file of {spec.group} ({spec.target.id}), limits of preset {spec.preset.name}; "
                  f"written by edgebuild {__version__}.\n")
        (staging / "compose.yaml").write_text(header + yaml.safe_dump(compose_spec(spec), sort_keys=False))
        files = ["Dockerfile", "install-runtime-deps.sh", "edgebuild-device.pyz", "run.sh", "compose.yaml"]
        if spec.writes_unit:
            (staging / spec.unit_name).write_text(systemd_unit(spec))
            files.append(spec.unit_name)
        record = {
            "group": spec.group, "target": spec.target.id, "flavor": spec.flavor, "image": spec.image,
            "base_image": spec.base_image, "backend": spec.backend, "ships_engine": spec.ships_engine,
            "model": {"name": spec.model_name, "version": spec.model_version,
                      "files": sorted(f"model/{n}" for n in model_files)},
            "limits": spec.preset.as_dict(), "port": spec.port, "grpc_port": spec.grpc_port,
            "start_period_s": spec.start_period_s,
            "run": ["docker", *run_args(spec)], "files": files,
            "systemd_unit": spec.unit_name if spec.writes_unit else None,
            "notes": list(spec.notes) + ([] if spec.writes_unit or spec.flavor == "cpu" else [
                f"no systemd unit: JetPack {spec.target.release.jetpack} hosts use cgroup "
                f"{spec.target.release.cgroup.split(';')[0]}, where AllowedCPUs and MemorySwapMax do nothing; "
                "use run.sh or compose.yaml"]),
        }
        (staging / "container.json").write_text(json.dumps(record, indent=2))
    return record


# -- building an image -----------------------------------------------------------------------

def container_tool(preferred: str | None = None) -> str:
    """``podman`` or ``docker``, whichever this host has (``preferred`` first)."""
    for name in ([preferred] if preferred else ["podman", "docker"]):
        if shutil.which(name):
            return name
    raise CapabilityMissing(f"no container runtime here ({preferred or 'podman or docker'} not found)",
                            hint="install podman (apt-get install podman buildah) or docker, or copy the "
                                 "build context to a host that has one")


def _can_build_arm64() -> bool:
    return platform.machine() in ("aarch64", "arm64") or Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists()


def build_image(context: Path, spec: ContainerSpec, *, tool: str | None = None,
                pull: bool = True, progress: Progress = print) -> str:
    """Build the image of a written context with podman or docker; returns the image tag."""
    if spec.flavor == "jetson" and not _can_build_arm64():
        raise CapabilityMissing(
            f"the {spec.group} image is arm64 ({spec.base_image}) and this host is {platform.machine()} without "
            "qemu-user-static binfmt",
            hint=f"build it on the device or an arm64 builder: copy {context} there and run "
                 f"`docker build -t {spec.image} .`")
    tool = container_tool(tool)
    command = [tool, "build", "--tag", spec.image, "--file", str(context / "Dockerfile")]
    if tool == "podman":
        command += ["--format", "docker"]  # OCI images drop HEALTHCHECK
        command += ["--pull=missing" if pull else "--pull=never"]
    command.append(str(context))
    progress(f"building {spec.image} with {tool} from {context}")
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BUILDAH_LAYERS": "true"})
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        hint = ("the base image is not on this host; pull it, or build without --no-pull"
                if "image not known" in tail or "manifest unknown" in tail else None)
        raise ContainerError(f"{tool} build of {spec.image} failed (exit {done.returncode}):\n{tail}", hint=hint)
    return spec.image


# -- running an image on this host ----------------------------------------------------------

def _run_tool(tool: str, args: list[str], timeout_s: float | None = None) -> subprocess.CompletedProcess:
    # from an empty folder: podman's conmon can leave files (an "oom" marker) in its working directory
    try:
        with tempfile.TemporaryDirectory(prefix="edgebuild-container-") as scratch:
            return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout_s, cwd=scratch)
    except subprocess.TimeoutExpired:
        raise ContainerError(f"`{tool} {' '.join(args[:2])} ...` did not finish in {timeout_s:.0f} s") from None


def start_container(spec: ContainerSpec, *, tool: str | None = None, publish: str | None = None,
                    name: str | None = None) -> str:
    """Start the spec's image detached with its limits (an old container of that name is replaced)."""
    tool = container_tool(tool)
    name = name or spec.container_name
    _run_tool(tool, ["rm", "--force", name])
    done = _run_tool(tool, run_args(spec, publish=publish, name=name), timeout_s=300)
    if done.returncode != 0:
        raise ContainerError(f"{tool} run of {spec.image} failed (exit {done.returncode}): {done.stderr.strip()}")
    return name


def inspect_container(name: str, *, tool: str | None = None) -> JsonObject:
    tool = container_tool(tool)
    done = _run_tool(tool, ["inspect", "--type", "container", name])
    if done.returncode != 0:
        raise ContainerError(f"no container {name}: {done.stderr.strip()}")
    return json.loads(done.stdout)[0]


def remove_container(name: str, *, tool: str | None = None) -> None:
    tool = container_tool(tool)
    _run_tool(tool, ["rm", "--force", "--time", "10", name], timeout_s=120)


def run_once(spec: ContainerSpec, command: list[str], *, tool: str | None = None,
             timeout_s: float = 600) -> int:
    """Run ``command`` in the spec's image under its limits, to completion; an OOM kill is a LimitError."""
    tool = container_tool(tool)
    name = f"{spec.container_name}-once-{os.getpid()}"
    args = run_args(spec, detach=False, restart=False, name=name)
    args[-1:] = ["--entrypoint", command[0], spec.image, *command[1:]]
    try:
        done = _run_tool(tool, args, timeout_s=timeout_s)
        state = inspect_container(name, tool=tool).get("State", {})
    finally:
        remove_container(name, tool=tool)
    if state.get("OOMKilled") or done.returncode == 137:
        raise LimitError(f"{' '.join(command)} in {spec.image} was killed by the OOM killer at the memory limit "
                         f"{human_size(spec.preset.memory)} of preset {spec.preset.name} (exit {done.returncode})",
                         hint="raise [limits] memory in the preset, or make the work smaller")
    return done.returncode


# -- per project ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ContainerRecord:
    """The container stage's result for one group (what ``container.json`` says, typed)."""

    group: str
    target: str
    flavor: str
    image: str
    base_image: str
    ships_engine: bool
    limits: LimitPreset
    systemd_unit: str | None
    context: str  # the build context, relative to the build folder
    notes: list[str]
    triton: TritonRecord | None = None  # the Triton model repository, if asked for
    #: the DeepStream configs of a recipe with a task: written or why not
    deepstream: DeepStreamRecord | None = None

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> ContainerRecord:
        triton, deepstream = data.get("triton"), data.get("deepstream")
        return cls(**{**data, "limits": LimitPreset.from_dict(data["limits"], "container record"),
                      "triton": TritonRecord.from_dict(triton) if triton is not None else None,
                      "deepstream": DeepStreamRecord.from_dict(deepstream) if deepstream is not None else None})


def _first_recipe(folder: Path) -> Recipe:
    """The recipe of a model folder, or of a group folder's first model (the group's target, limits and runtime)."""
    from edgebuild.runtime.base.group import model_folders

    hint = "run `edgebuild compile` first (the engine stage writes build/engines/<group>/)"
    if not (folder / "recipe.json").is_file() and not (folder / "group.json").is_file():
        return Recipe.load(folder, hint=hint)  # says what is missing
    return Recipe.load(next(iter(model_folders(folder).values())), hint=hint)


def _served_files(folder: Path, recipe: Recipe, engine: bool) -> list[str]:
    """The files the server reads, relative to ``folder``: a model folder's, or a group folder's manifest and
    every model's."""
    from edgebuild.runtime.base.group import GROUP_FILE, GroupManifest, is_group_folder

    if not is_group_folder(folder):
        return recipe.file_names(engine=engine)
    names = [GROUP_FILE]
    for model in GroupManifest.load(folder).models:
        names += [f"{model.folder}/{name}" for name in Recipe.load(folder / model.folder).file_names(engine=engine)]
    return names


def group_container_spec(group: SelectedGroup, model_folder: Path, *, flavor: str = "jetson",
                         base_image: str | None = None, recipe: Recipe | None = None) -> ContainerSpec:
    """The container spec of one group, from its model folder (the engine stage's record names it).

    The limits are the group's preset as the compile resolved it (checked against the module,
    and the engine's memory pool was built with it). ``recipe`` is the folder's, where the
    caller has read it already.
    """
    recipe = recipe or _first_recipe(model_folder)
    if recipe.target != group.target.id:
        raise ConfigError(f"{model_folder}: the recipe is for {recipe.target}, but group {group.name} "
                          f"is now {group.target.id}", hint="rerun `edgebuild compile` for it")
    assert group.limits is not None, "select_work resolves every group's limit preset"
    return container_spec(recipe, group.target, group.limits, flavor=flavor, base_image=base_image)


def write_group_container(project: Shipped, group: SelectedGroup, model_folder: Path, *, flavor: str = "jetson",
                          base_image: str | None = None, progress: Progress = print) -> ContainerRecord:
    """The container stage for one group: its build context and run specs in build/containers/<group>[-cpu]/."""
    recipe = _first_recipe(model_folder)
    spec = group_container_spec(group, model_folder, flavor=flavor, base_image=base_image, recipe=recipe)
    if (model_folder / "group.json").is_file():  # several models: the image is the fleet's, not one model's
        spec = replace(spec, model_name=project.project.name, model_version=project.ota.version,
                       image=_image_tag(project.project.name, project.ota.version, group.name, flavor))
    layout = BuildLayout.of(project)
    out = layout.container(group.name, flavor)
    folder = model_folder
    written = write_container(folder, out, spec, recipe)
    progress(f"{group.name}: wrote {out} (FROM {spec.base_image}, limits {spec.preset.name})")
    triton = None
    if project.runtime.server in ("triton", "both"):
        record = triton = write_repository(folder, layout.triton(group.name), build_dir=project.build_dir,
                                           recipe=recipe)
        progress(f"{group.name}: wrote the Triton model repository {record.repository} ({record.platform}"
                 + (f", FROM {record.image}" if record.image else "") + ")")
        for note in record.notes:
            progress(f"{group.name}: Triton: {note}")
    deepstream = None
    if recipe.task is not None:
        ds = deepstream = write_deepstream(folder, layout.deepstream(group.name), build_dir=project.build_dir,
                                           recipe=recipe)
        progress(f"{group.name}: " + (f"wrote the DeepStream {ds.deepstream} configs {ds.folder}" if ds.written
                                      else f"no DeepStream config: {ds.reason}"))
        for note in ds.notes:
            progress(f"{group.name}: DeepStream: {note}")
    return ContainerRecord(group=group.name, target=group.target.id, flavor=flavor, image=spec.image,
                           base_image=spec.base_image, ships_engine=spec.ships_engine, limits=spec.preset,
                           systemd_unit=written["systemd_unit"], context=str(out.relative_to(project.build_dir)),
                           notes=written["notes"], triton=triton,
                           deepstream=deepstream)
