"""The recipe of a model folder: the one contract between the build host and the device.

``edgebuild compile``'s engine stage writes a model folder per fleet group
(``build/engines/<group>/``): ``recipe.json`` (this record), the selected ONNX, and where the
engine was built ``engine.plan`` with its metadata ``engine.json``. The container and package
stages, the SSH builder, the device's engine builder, server, bench runner and OTA health check
all read the folder through :meth:`Recipe.load`, which checks every field once and says which
file and field are wrong, so nothing downstream reads a dict by string key.

``schema`` names the recipe format; a folder written by an edgebuild with another format is
refused with a message saying so, rather than failing later on a missing key.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Union, get_args, get_origin, get_type_hints

from edgebuild.errors import ConfigError
from edgebuild.runtime.base.files import atomic_write_text, sha256_file
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.preprocess_spec import PreprocessSpec

__all__ = ["ENGINE_FILE", "ENGINE_JSON", "FALLBACK_FOLDER", "ONNX_FILE", "RECIPE_FILE", "Recipe", "RecipeAcceptance",
           "RecipeModule", "RecipeLimits", "RecipePostprocess", "RecipeTask", "RuntimeSettings", "TensorSpec"]

RECIPE_SCHEMA = "edgebuild.recipe/1"
RECIPE_FILE = "recipe.json"
ONNX_FILE = "model.onnx"
ENGINE_FILE = "engine.plan"
ENGINE_JSON = "engine.json"
#: the acceptance set the server runs before it serves (runtime/engines/acceptance.py)
ACCEPTANCE_FILE = "acceptance.npz"
#: the subfolder of a first-boot folder holding the recipe the device falls back to (FP16)
FALLBACK_FOLDER = "fallback"
#: the regions file of ``[runtime.tracking] regions``, copied into the model folder
REGIONS_FILE = "regions.json"
#: a DLA INT8 folder's dynamic ranges (``Recipe.dynamic_ranges``)
RANGES_FILE = "dynamic_ranges.json"
#: how the entry point runs a recipe's streams: beside the server, or instead of it
TRACKING_MODES = ("beside", "instead")
TRACKERS = ("bytetrack", "ocsort")
#: the precisions an engine is built at (the device contract owns them; the TensorRT backend reads them)
PRECISIONS = ("fp32", "fp16", "int8", "fp8", "nvfp4")

_REBUILD = "rebuild the model folder with this edgebuild: `edgebuild compile --force --target GROUP`"


@dataclass(frozen=True)
class RuntimeSettings:
    """The project's ``[runtime]`` settings the server starts with."""

    warmup_budget_s: float
    port: int
    max_batch_size: int
    max_queue_delay_ms: float
    #: raw outputs (a detector's head, a pose, segmentation or OBB model's): the server decodes and answers
    #: detections by default (``[runtime] detections``; a request chooses with ``parameters.detections``)
    detections: bool = False
    #: instances of the model that run batches at once (Triton's ``instance_group`` count): ONNX Runtime
    #: sessions sharing the cores, or TensorRT execution contexts of the one engine
    instance_count: int = 1
    #: batch sizes run as soon as they are reached (Triton's ``dynamic_batching.preferred_batch_size``)
    preferred_batch_size: List[int] = field(default_factory=list)


@dataclass(frozen=True)
class RecipeModule:
    """The Jetson module the recipe targets, as the device check and the OTA compatibility need it."""

    id: str
    name: str
    compute_capability: str
    #: device-tree compatible strings: the module's boards first, the SoC (shared by a family) last
    compatible: List[str]


#: what a model's outputs are: NMS inside (``NMS_OUTPUTS``), a detector's raw head, a classifier's logits, a
#: pose, segmentation or OBB model's outputs (raw: the server decodes them where asked, ``task_decode``; or pose's
#: and segmentation's detections with NMS inside, ``postprocess["in_model"]``)
OUTPUT_FORMS = ("nms", "raw_head", "logits", "raw")


@dataclass(frozen=True)
class RecipePostprocess:
    """A recipe task's ``postprocess``, sparse: a key only where the task's output form has it, in the order
    ``recipe.json`` holds it. A detector: ``decode_outputs``' settings (boxes_output ... pre_nms_top_k,
    in_model); a classifier: ``logits_output``; "raw" (pose, segmentation, OBB): the task's ``[task.postprocess]``
    output names and thresholds, ``in_model`` where true and a pose model's ``kpt_shape``. One field order holds
    all three, so :meth:`as_dict` writes each form key for key as it was written before the record was typed."""

    boxes_output: Optional[str] = None
    scores_output: Optional[str] = None
    score_threshold: Optional[float] = None
    nms_iou: Optional[float] = None
    max_detections: Optional[int] = None
    #: a detector's: the candidates kept before NMS
    pre_nms_top_k: Optional[int] = None
    keypoints_output: Optional[str] = None
    coefficients_output: Optional[str] = None
    prototypes_output: Optional[str] = None
    #: NMS inside the model (a detector's is always there; pose's and segmentation's only where true)
    in_model: Optional[bool] = None
    #: a pose model's [keypoints, 2 or 3]
    kpt_shape: Optional[List[int]] = None
    logits_output: Optional[str] = None

    def as_dict(self) -> JsonObject:
        """The keys the recipe holds, in its order: the settings mapping the decoders take."""
        found = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if self.kpt_shape is not None:
            found["kpt_shape"] = list(self.kpt_shape)
        return found

    @classmethod
    def from_dict(cls, data: JsonObject) -> "RecipePostprocess":
        """From the recipe's JSON object (every key checked as :meth:`Recipe.load` checks it)."""
        try:
            return _build(cls, data, "task.postprocess")
        except _FieldError as exc:
            raise ConfigError(str(exc), hint=_REBUILD) from None


@dataclass(frozen=True)
class RecipeTask:
    """What the model's outputs mean and how an image becomes its input: for the server's decode,
    the bench's per-stage timing and the DeepStream config."""

    kind: str  # detection | classification | pose | segmentation | obb
    classes: List[str]
    #: one of OUTPUT_FORMS
    outputs: str
    #: a detector: ``decode_outputs``' settings (``in_model`` true for "nms"); a classifier: ``logits_output``;
    #: "raw": the task's ``[task.postprocess]`` (output names, thresholds) for the application's decode
    postprocess: RecipePostprocess
    #: how an image becomes the input (``vision.preprocess`` applies it)
    preprocess: PreprocessSpec


@dataclass(frozen=True)
class RecipeLimits:
    """The group's cgroup limit preset (sizes in bytes), as the build side's
    ``edgebuild.targets.presets.LimitPreset`` writes it: the container and Triton's run.sh start with it."""

    name: str
    module: str
    description: str
    source: str
    memory: int
    memory_swap: int
    cpus: float
    cpuset: Optional[str]
    pids: int
    tensorrt_workspace: int
    engine_device_memory_max: int


@dataclass(frozen=True)
class RecipeStream:
    """One ``[[streams]]`` entry the group's devices track: ``edgebuild track --source``, its name and fps."""

    source: str
    name: Optional[str] = None
    max_fps: Optional[float] = None


@dataclass(frozen=True)
class RecipeStreams:
    """The group's ``[[streams]]`` and ``[runtime.tracking]``: what the container's entry point tracks, beside
    the server or instead of it, and where the tracked frames go (``edgebuild track``'s options)."""

    sources: List[RecipeStream]
    tracker: str = "bytetrack"
    #: one of TRACKING_MODES
    mode: str = "beside"
    #: the JSON lines file on the device; a relative path is in the engine cache
    jsonl: str = "tracks.jsonl"
    sse_port: Optional[int] = None
    mqtt: Optional[str] = None  # HOST[:PORT]
    mqtt_topic: str = "edgebuild"
    #: ``REGIONS_FILE`` where the project names regions: a file of the model folder
    regions: Optional[str] = None


@dataclass(frozen=True)
class TensorSpec:
    """A model output as the KServe v2 metadata gives it: datatype and shape (-1 for a dynamic axis)."""

    datatype: str
    shape: List[int]


@dataclass(frozen=True)
class RecipeAcceptance:
    """An engine built on a device, measured there over the validation set by the compile's accept stage
    (``edgebuild.devices.engines.Acceptance`` without the keys it is stored by; engine.json says the same)."""

    candidate: str
    plan_sha256: str
    where: str
    backend: str
    metric: str
    value: float
    images: int
    #: FP32's metric on the same images
    reference: float
    retention: float

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> "RecipeAcceptance":
        return cls(**data)


@dataclass(frozen=True)
class Recipe:
    """What one fleet group's model folder holds and how its engine is built."""

    #: the build host's copy of an NVFP4 candidate's FP32 emulation beside the ONNX, which ONNX Runtime runs in
    #: its place (it has no FP4 kernels): the OTA health reference. Not a file of the recipe: never shipped
    EMULATED_ONNX: ClassVar[str] = "emulated.onnx"

    group: str
    model_name: str
    model_version: str
    runtime: RuntimeSettings
    target: str
    #: ``local``, ``ssh://user@host``, ``host-check`` or ``deferred`` (see edgebuild/devices/engine.py)
    placement: str
    placement_reason: str
    shippable_engine: bool
    #: the ONNX file's name inside the folder
    onnx: str
    onnx_sha256: str
    #: the TensorRT builder precision: fp32, fp16, int8, or fp8 / nvfp4 (Jetson AGX Thor; built strongly typed)
    precision: str
    #: the gate candidate it came from (``int8``, ``int8-mixed``, ...)
    candidate: str
    kept_fp32: List[str]
    retention: float
    accuracy_backend: str
    #: input name -> [min_shape, opt_shape, max_shape]
    profiles: Dict[str, List[List[int]]]
    #: the preset's TensorRT memory-pool limit
    workspace_bytes: int
    #: the group's cgroup limit preset
    limits: RecipeLimits
    dla_core: Optional[int]
    timing_cache: str
    module: RecipeModule
    jetpack: str
    l4t: str
    l4t_accepted: List[str]
    tensorrt: str
    #: the acceptance set the server runs before it serves (``runtime/engines/acceptance.py``), and its sha256
    acceptance: Optional[str] = None
    acceptance_sha256: Optional[str] = None
    #: a first-boot folder's fallback (``FALLBACK_FOLDER``: a recipe of its own, FP16, with its
    #: ONNX and acceptance set), served when this recipe's engine fails its acceptance set
    fallback: Optional[str] = None
    fallback_sha256: Optional[str] = None  # of the fallback's recipe.json
    #: an engine built on a device: its metric measured there by the compile (edgebuild.devices.engine.Acceptance)
    accepted: Optional[RecipeAcceptance] = None
    #: the ONNX's outputs by name, in graph order (KServe metadata, the Triton config)
    outputs: Optional[Dict[str, TensorSpec]] = None
    #: what the outputs mean (a folder written before it existed: None, raw tensors only)
    task: Optional[RecipeTask] = None
    #: what the group's devices track (``[[streams]]``); None: they serve only (the field is then left out)
    streams: Optional[RecipeStreams] = None
    #: where the model runs: gpu, dla0, dla1 or dla (either core: the device's runtime picks, ``dla_core`` is the
    #: core it is built for); a GPU recipe has no ``accelerator`` key
    accelerator: str = "gpu"
    #: INT8 on the DLA (implicit quantization): the file of the folder holding a dynamic range for every tensor
    #: (``RANGES_FILE``, tensor name -> amax, format ``edgebuild.dynamic-ranges/1``) and its sha256; the ONNX is
    #: then the FP32 model, with no Q/DQ (the DLA runs none). None: the field is left out
    dynamic_ranges: Optional[str] = None
    dynamic_ranges_sha256: Optional[str] = None
    schema: str = RECIPE_SCHEMA

    @property
    def runs_on(self) -> str:
        """gpu, dla0, dla1 or dla (either core); a recipe written before placements says it with dla_core alone."""
        if self.accelerator == "gpu" and self.dla_core is not None:
            return "dla{}".format(self.dla_core)
        return self.accelerator

    # -- the folder ------------------------------------------------------------------------------

    def file_names(self, engine: bool = True) -> List[str]:
        """The folder's files: the recipe and the ONNX, and with ``engine`` engine.plan and engine.json."""
        names = [RECIPE_FILE, self.onnx] + ([self.acceptance] if self.acceptance else [])
        if self.dynamic_ranges:
            names.append(self.dynamic_ranges)
        if self.streams is not None and self.streams.regions:
            names.append(self.streams.regions)
        if self.fallback:  # the fallback recipe is deferred: it never holds an engine
            names += ["{}/{}".format(self.fallback, n) for n in (RECIPE_FILE, ONNX_FILE, ACCEPTANCE_FILE)]
        if engine:
            names += [ENGINE_FILE, ENGINE_JSON]
        return names

    def model_files(self, folder: Union[str, Path], engine: bool = True) -> Dict[str, Path]:
        """Those of :meth:`file_names` that exist in ``folder``, by name."""
        found = {name: Path(folder) / name for name in self.file_names(engine)}
        return {name: path for name, path in found.items() if path.is_file()}

    def file_hashes(self, folder: Union[str, Path]) -> Dict[str, str]:
        """sha256 of the folder's files that decide what runs (those of :meth:`model_files`), by name."""
        return {name: sha256_file(path) for name, path in sorted(self.model_files(folder).items())}

    @staticmethod
    def has_engine(folder: Union[str, Path]) -> bool:
        return (Path(folder) / ENGINE_FILE).is_file() and (Path(folder) / ENGINE_JSON).is_file()

    def verify_files(self, folder: Union[str, Path]) -> None:
        """Check the folder's model files against the hashes they were written with, before anything loads.

        The ONNX must be the one the recipe names (``onnx_sha256``) and an engine file the one its
        ``engine.json`` describes (``plan_sha256``). Raises BundleError naming the file: a damaged or
        swapped model is never served, benchmarked or built from.
        """
        from edgebuild.errors import BundleError

        folder = Path(folder)
        onnx_path = folder / self.onnx
        if not onnx_path.is_file():
            raise BundleError("{}: {} is missing".format(folder, self.onnx), hint=_REBUILD)
        if sha256_file(onnx_path) != self.onnx_sha256:
            raise BundleError("{}: {} does not match the onnx_sha256 of {} (the file was changed or damaged "
                              "after the recipe was written)".format(folder, self.onnx, RECIPE_FILE), hint=_REBUILD)
        if self.acceptance and (not (folder / self.acceptance).is_file()
                                or sha256_file(folder / self.acceptance) != self.acceptance_sha256):
            raise BundleError("{}: {} is missing or does not match the acceptance_sha256 of {}".format(
                folder, self.acceptance, RECIPE_FILE), hint=_REBUILD)
        if self.dynamic_ranges and (not (folder / self.dynamic_ranges).is_file()
                                    or sha256_file(folder / self.dynamic_ranges) != self.dynamic_ranges_sha256):
            raise BundleError("{}: {} is missing or does not match the dynamic_ranges_sha256 of {}".format(
                folder, self.dynamic_ranges, RECIPE_FILE), hint=_REBUILD)
        if self.fallback and (not (folder / self.fallback / RECIPE_FILE).is_file()
                              or sha256_file(folder / self.fallback / RECIPE_FILE) != self.fallback_sha256):
            raise BundleError("{}: {}/{} is missing or does not match the fallback_sha256 of {}".format(
                folder, self.fallback, RECIPE_FILE, RECIPE_FILE), hint=_REBUILD)
        if Recipe.has_engine(folder):
            try:
                expected = json.loads((folder / ENGINE_JSON).read_text()).get("plan_sha256")
            except ValueError as exc:
                raise BundleError("{}: {} is not JSON ({})".format(folder, ENGINE_JSON, exc), hint=_REBUILD) from None
            if expected and sha256_file(folder / ENGINE_FILE) != expected:
                raise BundleError("{}: {} does not match the plan_sha256 of {}".format(folder, ENGINE_FILE,
                                                                                      ENGINE_JSON), hint=_REBUILD)

    def compatibility(self) -> JsonObject:
        """What a device must be to run this folder (the OTA manifest's ``compatibility``)."""
        module = self.module
        return {"module": {"id": module.id, "name": module.name, "compatible": list(module.compatible)},
                "l4t_accepted": list(self.l4t_accepted), "jetpack": self.jetpack}

    # -- reading and writing ---------------------------------------------------------------------

    def to_dict(self) -> JsonObject:
        data = json.loads(json.dumps(asdict(self)))  # the JSON's own shapes: a tuple field is a list
        if self.task is not None:  # sparse: only the keys of the task's form
            data["task"]["postprocess"] = self.task.postprocess.as_dict()
        if self.streams is None:  # a recipe without streams is written as before they were recorded
            del data["streams"]
        if self.accelerator == "gpu":  # and a GPU recipe as before placements
            del data["accelerator"]
        if self.dynamic_ranges is None:  # and one without dynamic ranges as before they were carried
            del data["dynamic_ranges"], data["dynamic_ranges_sha256"]
        return dict(schema=data.pop("schema"), **data)

    def save(self, folder: Union[str, Path]) -> Path:
        """Write ``recipe.json`` into ``folder`` atomically; the record is checked as a reader would first."""
        path = Path(folder) / RECIPE_FILE
        data = self.to_dict()
        Recipe.from_dict(data, source=str(path))
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder_or_path: Union[str, Path], hint: Optional[str] = None) -> "Recipe":
        """The recipe of a model folder (or of a ``recipe.json`` path), checked field by field.

        Raises ConfigError naming the file and what is wrong: no such file, not JSON, a recipe of
        another edgebuild (``schema``), a missing, unknown or mistyped field. ``hint`` replaces the
        default advice for a missing file.
        """
        path = Path(folder_or_path)
        if not path.is_file() and path.name != RECIPE_FILE:
            path = path / RECIPE_FILE
        if not path.is_file():
            raise ConfigError("{}: no {} here; use a model folder `edgebuild compile` wrote for a fleet group "
                              "(build/engines/<group>/)".format(path.parent, RECIPE_FILE),
                              hint=hint or "run `edgebuild compile` for that group first")
        try:
            data = json.loads(path.read_text())
        except UnicodeDecodeError as exc:
            raise ConfigError("{}: not a text file ({})".format(path, exc), hint=_REBUILD) from None
        except ValueError as exc:
            raise ConfigError("{}: not valid JSON ({}); the file is truncated or was edited by hand".format(
                path, exc), hint=_REBUILD) from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: object, source: str = "recipe") -> "Recipe":
        """A recipe from its JSON object; ``source`` (the file) starts every error message."""
        if not isinstance(data, dict):
            raise ConfigError("{}: not a recipe (a JSON {}, not an object)".format(source, type(data).__name__),
                              hint=_REBUILD)
        schema = data.get("schema")
        if schema != RECIPE_SCHEMA:
            found = "has no schema field (an edgebuild before recipe schemas wrote it)" if schema is None \
                else "is schema {!r}".format(schema)
            raise ConfigError("{}: the recipe {}; this edgebuild reads {!r}".format(source, found, RECIPE_SCHEMA),
                              hint=_REBUILD + ", or serve it with the edgebuild-device.pyz built with it")
        try:
            recipe = _build(cls, data, "")
            _check_values(recipe)
        except _FieldError as exc:
            raise ConfigError("{}: {}".format(source, exc), hint=_REBUILD) from None
        return recipe


# -- checking ---------------------------------------------------------------------------------

class _FieldError(Exception):
    pass


def _join(where: str, name: str) -> str:
    return "{}.{}".format(where, name) if where else name


def _build(cls: Any, data: Any, where: str) -> Any:
    """An instance of the dataclass ``cls`` from a JSON object, each field checked against its type."""
    if not isinstance(data, dict):
        raise _FieldError("field {!r} must be an object, not {}".format(where, _shown(data)))
    known = {f.name: f for f in fields(cls)}
    required = [name for name, f in known.items() if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise _FieldError("field{} {} missing".format(
            "s" if len(missing) > 1 else "", ", ".join(repr(_join(where, m)) for m in missing)
            + (" are" if len(missing) > 1 else " is")))
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _FieldError("unknown field{} {}".format("s" if len(unknown) > 1 else "",
                                                      ", ".join(repr(_join(where, u)) for u in unknown)))
    hints = get_type_hints(cls)
    return cls(**{name: _value(data[name], hints[name], _join(where, name)) for name in known if name in data})


def _value(value: Any, hint: Any, where: str) -> Any:
    if is_dataclass(hint):
        return _build(hint, value, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(value, inner[0], where)
    if origin is list:
        if not isinstance(value, list):
            raise _mistyped(where, value, "a list")
        return [_value(v, args[0], "{}[{}]".format(where, i)) for i, v in enumerate(value)]
    if origin is tuple:  # Tuple[X, ...] or Tuple[X, Y]: a JSON list
        if not isinstance(value, (list, tuple)):
            raise _mistyped(where, value, "a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(v, args[0], "{}[{}]".format(where, i)) for i, v in enumerate(value))
        if len(value) != len(args):
            raise _mistyped(where, value, "a list of {}".format(len(args)))
        return tuple(_value(v, a, "{}[{}]".format(where, i)) for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _mistyped(where, value, "an object")
        return {k: _value(v, args[1], _join(where, k)) for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise _mistyped(where, value, "true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _mistyped(where, value, "a whole number")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _mistyped(where, value, "a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _mistyped(where, value, "a string")
        return value
    raise TypeError("recipe field {} has a type the reader does not know: {}".format(where, hint))  # a bug


def _mistyped(where: str, value: object, expected: str) -> _FieldError:
    return _FieldError("field {!r} must be {}, not {}".format(where, expected, _shown(value)))


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_values(recipe: Recipe) -> None:
    """What the types alone do not say: the precision, the profiles' shapes, the runtime settings."""
    if recipe.precision not in PRECISIONS:
        raise _FieldError("field 'precision' is {!r}, not one of {}".format(recipe.precision, ", ".join(PRECISIONS)))
    if not recipe.profiles:
        raise _FieldError("field 'profiles' names no input")
    for name, shapes in recipe.profiles.items():
        where = _join("profiles", name)
        if len(shapes) != 3 or len({len(s) for s in shapes}) != 1 or not shapes[0]:
            raise _FieldError("field {!r} must be [min_shape, opt_shape, max_shape] of one rank, not {}".format(
                where, _shown(shapes)))
        low, opt, high = shapes
        if any(not 1 <= lo <= o <= hi for lo, o, hi in zip(low, opt, high)):
            raise _FieldError("field {!r}: every dimension needs 1 <= min <= opt <= max, not {}".format(
                where, _shown(shapes)))
    if recipe.task is not None and recipe.task.outputs not in OUTPUT_FORMS:
        raise _FieldError("field 'task.outputs' is {!r}, not one of {}".format(recipe.task.outputs,
                                                                              ", ".join(OUTPUT_FORMS)))
    if recipe.streams is not None:
        _check_streams(recipe.streams)
    _check_accelerator(recipe)
    if recipe.dynamic_ranges is not None and (recipe.precision != "int8" or not recipe.dynamic_ranges_sha256):
        raise _FieldError("field 'dynamic_ranges' needs precision int8 and a dynamic_ranges_sha256 (precision {!r})"
                          .format(recipe.precision))
    runtime = recipe.runtime
    if runtime.max_batch_size < 1 or runtime.max_queue_delay_ms < 0 or runtime.warmup_budget_s <= 0:
        raise _FieldError("field 'runtime' needs max_batch_size >= 1, max_queue_delay_ms >= 0 and "
                          "warmup_budget_s > 0, not {}".format(_shown(asdict(runtime))))
    if runtime.instance_count < 1:
        raise _FieldError("field 'runtime.instance_count' must be at least 1, not {}".format(runtime.instance_count))
    if any(not 1 <= size <= runtime.max_batch_size for size in runtime.preferred_batch_size):
        raise _FieldError("field 'runtime.preferred_batch_size' must hold sizes from 1 to max_batch_size {}, "
                          "not {}".format(runtime.max_batch_size, _shown(runtime.preferred_batch_size)))


#: where a model runs (edgebuild.targets.dla.ACCELERATORS)
ACCELERATORS = ("gpu", "dla0", "dla1", "dla")


def _check_accelerator(recipe: Recipe) -> None:
    """The placement against the core the engine is built for."""
    if recipe.accelerator not in ACCELERATORS:
        raise _FieldError("field 'accelerator' is {!r}, not one of {}".format(recipe.accelerator,
                                                                             ", ".join(ACCELERATORS)))
    if recipe.accelerator != "gpu" and recipe.dla_core is None:
        raise _FieldError("field 'accelerator' is {!r} but 'dla_core' is null".format(recipe.accelerator))
    if recipe.accelerator in ("dla0", "dla1") and recipe.accelerator != "dla{}".format(recipe.dla_core):
        raise _FieldError("field 'accelerator' is {!r} but 'dla_core' is {}".format(recipe.accelerator,
                                                                                 recipe.dla_core))


def _check_streams(streams: RecipeStreams) -> None:
    if not streams.sources:
        raise _FieldError("field 'streams.sources' names no source")
    for key, value, allowed in (("mode", streams.mode, TRACKING_MODES), ("tracker", streams.tracker, TRACKERS)):
        if value not in allowed:
            raise _FieldError("field 'streams.{}' is {!r}, not one of {}".format(key, value, ", ".join(allowed)))


def recipe_of(recipe: Union[Recipe, JsonObject]) -> Recipe:
    """A Recipe from a Recipe or from its dict (for callers that still hold the JSON)."""
    return recipe if isinstance(recipe, Recipe) else Recipe.from_dict(dict(recipe))
