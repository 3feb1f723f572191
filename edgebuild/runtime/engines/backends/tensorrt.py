"""TensorRT engine builder and runner, written against the documented Python API of 8.5, 8.6 and 10.x.

This module runs on the device (Jetson, Python 3.8), so it keeps to 3.8 syntax and imports only
numpy, tensorrt and a CUDA binding (pycuda, else cuda-python), each inside the function that needs
it. The version differences it encodes (reference/jetson-facts.md section 4 and the API listings
in reference/tensorrt-api/):

- network flags: ``1 << int(NetworkDefinitionCreationFlag.EXPLICIT_BATCH)`` before 10, ``0`` from 10,
  STRONGLY_TYPED always from 11 (and on request from 10), where the ONNX alone sets the precision
  and no precision flag exists (``tensorrt_precision.py``);
- workspace: ``set_memory_pool_limit(MemoryPoolType.WORKSPACE, n)`` only (``max_workspace_size`` is
  gone in 10.x);
- build: ``build_serialized_network`` only (``build_engine`` is gone in 10.x);
- ``builder_optimization_level`` only where the config has it (8.6+);
- parser errors: ``desc()`` and ``node()`` everywhere, ``node_name()``/``node_operator()`` from 10.x;
- device memory: ``device_memory_size_v2`` where present (10.x), else ``device_memory_size``;
- I/O: the tensor API (``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``), never
  bindings or ``execute_async_v2`` (removed in 10.x).
"""

# ruff: noqa: UP006, UP007, UP035, UP045
# (typing.Dict/Optional/Tuple on purpose: this file must run on Python 3.8)

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple, Union

from edgebuild.errors import BundleError, CapabilityMissing, ConfigError, ExportError, TargetError
from edgebuild.runtime.base.files import atomic_write_bytes, sha256_bytes, sha256_file
from edgebuild.runtime.base.identity import read_identity
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import PRECISIONS
from edgebuild.runtime.engines.backends.cuda_memory import default_memory
from edgebuild.runtime.engines.backends.tensorrt_dla import (
    apply_dynamic_ranges,
    dla_problem,
    open_on_dla,
    place_on_dla,
    read_ranges,
    refuse_typed,
)
from edgebuild.runtime.engines.backends.tensorrt_precision import (
    apply_precision,
    keep_layers_fp32,
    network_flags,
    strongly_typed,
)
from edgebuild.runtime.engines.backends.trt_api import (
    DeviceMemory,
    EnumValue,
    IBuilderConfig,
    ICudaEngine,
    IOnnxParser,
    TensorRT,
)
from edgebuild.runtime.engines.engine_header import read_header
from edgebuild.runtime.engines.provenance import REBUILD_HINT, EngineProvenance, RunningDevice, engine_damage, refusal

if TYPE_CHECKING:  # numpy is imported where a runner runs, not to build settings
    import numpy as np

__all__ = ["BuildSettings", "TensorRTRunner", "build_engine", "import_tensorrt"]

Shape = Tuple[int, ...]
ShapeRange = Tuple[Shape, Shape, Shape]


def _no_progress(message: str) -> None:
    pass


@dataclass(frozen=True)
class BuildSettings:
    """Everything the builder needs; a pipeline stage makes one from the project and the target profile.

    ``precision`` "int8" means the ONNX carries Q/DQ nodes: the INT8 flag (and FP16, so layers
    without Q/DQ may use FP16) is set and TensorRT honours the Q/DQ scales; there is no calibrator. With
    ``dynamic_ranges`` (a DLA INT8 recipe) the ONNX is FP32 and that file gives every tensor its range
    (implicit quantization, ``tensorrt_dla.py``).
    ``strongly_typed`` asks TensorRT 10.x for a strongly typed network; from TensorRT 11 every
    network is, the precision flags are gone, and the ONNX must carry the precision itself
    (``edgebuild.runtime.engines.backends.tensorrt_precision``; so are "fp8" and "nvfp4", always).
    ``profiles`` maps each dynamic input name to its (min, opt, max) shapes.
    """

    onnx_path: Path
    engine_path: Path  # the serialized engine written (engine.plan)
    precision: str
    profiles: Mapping[str, ShapeRange]
    workspace_bytes: int
    timing_cache_path: Optional[Path] = None
    dla_core: Optional[int] = None
    builder_optimization_level: Optional[int] = None
    strongly_typed: bool = False
    dynamic_ranges: Optional[Path] = None
    #: an FP16 build's layers kept in FP32 (the FP16 candidate's ``kept_fp32``); ignored for other precisions
    fp32_layers: Tuple[str, ...] = ()
    progress: Progress = field(default=_no_progress, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "onnx_path", Path(self.onnx_path))
        object.__setattr__(self, "engine_path", Path(self.engine_path))
        if self.timing_cache_path is not None:
            object.__setattr__(self, "timing_cache_path", Path(self.timing_cache_path))
        if self.precision not in PRECISIONS:
            raise ConfigError(f"engine precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if int(self.workspace_bytes) <= 0:
            raise ConfigError(f"workspace_bytes must be positive, not {self.workspace_bytes}")
        if self.dynamic_ranges is not None and self.precision != "int8":
            raise ConfigError(f"dynamic ranges are INT8 scales: precision int8, not {self.precision!r}")
        if self.dla_core is not None and self.precision == "fp32":
            raise ConfigError("DLA runs only FP16 or INT8 layers: choose precision fp16 or int8 to use a DLA core")
        if self.dla_core is not None and self.dla_core < 0:
            raise ConfigError("dla_core must be 0 or more (a DLA core's index), not {}".format(self.dla_core))
        if self.builder_optimization_level is not None and not 0 <= self.builder_optimization_level <= 5:
            raise ConfigError(f"builder_optimization_level must be 0..5, not {self.builder_optimization_level}")
        profiles = {}
        for name, shapes in self.profiles.items():
            if len(shapes) != 3:
                raise ConfigError(f"input {name!r}: a profile needs (min, opt, max) shapes, got {shapes!r}")
            low, opt, high = (tuple(int(d) for d in s) for s in shapes)
            if not len(low) == len(opt) == len(high):
                raise ConfigError(f"input {name!r}: min/opt/max shapes {low}/{opt}/{high} differ in rank")
            if any(not a <= b <= c for a, b, c in zip(low, opt, high)):
                raise ConfigError(f"input {name!r}: shapes must satisfy min <= opt <= max, got {low}/{opt}/{high}")
            if self.dla_core is not None and not low == opt == high:
                raise ConfigError(f"input {name!r}: a DLA engine runs one static shape (the DLA has no dynamic "
                                  f"shapes), so min = opt = max, not {low}/{opt}/{high}")
            profiles[name] = (low, opt, high)
        object.__setattr__(self, "profiles", profiles)


# -- helpers ------------------------------------------------------------------------------------

def import_tensorrt() -> TensorRT:
    try:
        import tensorrt
    except ImportError as exc:
        raise CapabilityMissing(
            f"TensorRT is not installed on this host (import tensorrt failed: {exc})",
            hint="TensorRT comes with JetPack on a Jetson, or from NVIDIA's package index on a GPU workstation; "
                 "without it, use the 'deferred' placement so the device builds its engine",
        ) from None
    return tensorrt


def _parser_errors(parser: IOnnxParser) -> List[str]:
    lines = []
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        where = f"node #{error.node()}"
        if hasattr(error, "node_name"):  # 10.x names the node; 8.x only gives its index
            name, op = error.node_name(), error.node_operator()
            if name or op:
                where += f" {name!r}" + (f" ({op})" if op else "")
        lines.append(f"{where}: {error.desc()}")
    return lines


def _device_memory_size(engine: ICudaEngine) -> int:
    if hasattr(engine, "device_memory_size_v2"):  # 10.x; device_memory_size is deprecated there
        return int(engine.device_memory_size_v2)
    return int(engine.device_memory_size)


def _layer_information(trt: TensorRT, engine: ICudaEngine) -> Union[JsonObject, str]:
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    try:
        return json.loads(text)
    except ValueError:
        return text


#: every BuilderFlag of 8.5 to 11 (a version lacking one is skipped): what ``builder_flags`` can name
_BUILDER_FLAGS = ("FP16", "BF16", "INT8", "FP8", "INT4", "FP4", "TF32", "REFIT", "REFIT_IDENTICAL", "REFIT_INDIVIDUAL",
                  "DISABLE_TIMING_CACHE", "GPU_FALLBACK", "STRICT_TYPES", "DEBUG", "SAFETY_SCOPE",
                  "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO", "REJECT_EMPTY_ALGORITHMS",
                  "ENABLE_TACTIC_HEURISTIC", "VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME", "SPARSE_WEIGHTS",
                  "STRIP_PLAN", "WEIGHTLESS", "WEIGHT_STREAMING", "ERROR_ON_TIMING_CACHE_MISS",
                  "DISABLE_COMPILATION_CACHE", "EDITABLE_TIMING_CACHE", "MONITOR_MEMORY", "DISTRIBUTIVE_INDEPENDENCE")


def _builder_flags(trt: TensorRT, config: IBuilderConfig) -> List[str]:
    """The names of the flags set on ``config``, from its ``flags`` bitmask (bit ``int(flag)`` per flag).

    Read from the config rather than remembered where they are set, so the record holds what
    TensorRT built with (defaults such as TF32 included), whichever code path set them.
    """
    mask = int(config.flags)
    names = []
    for name in _BUILDER_FLAGS:
        member = getattr(trt.BuilderFlag, name, None)
        if member is not None and mask & (1 << int(member)):
            names.append(name)
    return names


def _hardware_compatibility(config: IBuilderConfig) -> Optional[str]:
    """The config's hardware compatibility level (8.6+), e.g. "NONE" or "AMPERE_PLUS"; None before 8.6."""
    level = getattr(config, "hardware_compatibility_level", None)
    return None if level is None else str(getattr(level, "name", level)).split(".")[-1]


# -- builder ------------------------------------------------------------------------------------

def build_engine(settings: BuildSettings, trt: Optional[TensorRT] = None) -> JsonObject:
    """Parse the ONNX, build a serialized engine, write it (and the timing cache) atomically.

    Returns the engine metadata a pipeline stage writes into ``engine.json`` (it adds the module,
    JetPack/L4T and compute capability, which the builder does not know).
    """
    if trt is None:
        trt = import_tensorrt()
    progress = settings.progress
    version = str(trt.__version__)
    if not settings.onnx_path.is_file():
        raise ExportError(f"{settings.onnx_path}: ONNX file not found (run `edgebuild export` first)")
    problem = dla_problem(version) if settings.dla_core is not None else None
    if problem:
        raise TargetError(f"TensorRT {version} runs no DLA: {problem}",
                          hint="place the group on the GPU (accelerator = \"gpu\"), or use a JetPack whose "
                               "TensorRT runs the DLA")

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    typed = strongly_typed(trt, settings.strongly_typed, settings.precision)
    if settings.dynamic_ranges is not None:
        refuse_typed(trt, typed)
    network = builder.create_network(network_flags(trt, typed))
    parser = trt.OnnxParser(network, logger)
    progress(f"TensorRT {version}: parsing {settings.onnx_path.name}")
    if not parser.parse_from_file(str(settings.onnx_path)):
        errors = _parser_errors(parser) or ["the parser reported failure without an error message"]
        raise ExportError(
            f"TensorRT {version} cannot parse {settings.onnx_path} ({len(errors)} error(s)):\n  - "
            + "\n  - ".join(errors),
            hint="`edgebuild preflight` lists the operators each target's TensorRT supports",
        )

    inputs = [network.get_input(i).name for i in range(network.num_inputs)]
    unknown = sorted(set(settings.profiles) - set(inputs))
    if unknown:
        raise ConfigError(f"shape profile names inputs {unknown} that {settings.onnx_path.name} does not have "
                          f"(its inputs: {inputs})")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings.workspace_bytes))
    apply_precision(trt, config, network, settings.precision, typed, settings.onnx_path)
    if settings.precision == "fp16":
        missing = keep_layers_fp32(trt, config, network, settings.fp32_layers, typed)
        if missing:
            progress(f"TensorRT {version}: no layer named {', '.join(missing)} to keep in FP32 (the parser named "
                     "them otherwise); those run as TensorRT chooses")
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # per-layer precision in the inspector

    if settings.profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in settings.profiles.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)

    gpu_fallback = None  # type: Optional[List[str]]
    if settings.dla_core is not None:
        gpu_fallback = place_on_dla(trt, builder, config, network, settings.dla_core)
        progress(f"DLA core {settings.dla_core}: {network.num_layers - len(gpu_fallback)} of {network.num_layers} "
                 f"layers on the DLA, {len(gpu_fallback)} on the GPU (GPU fallback)"
                 + (": " + ", ".join(gpu_fallback[:5]) + (" ..." if len(gpu_fallback) > 5 else "")
                    if gpu_fallback else ""))
    ranges = None if settings.dynamic_ranges is None else apply_dynamic_ranges(
        trt, config, network, read_ranges(settings.dynamic_ranges), gpu_fallback or [], settings.dynamic_ranges)

    optimization_level = None
    if settings.builder_optimization_level is not None:
        if hasattr(config, "builder_optimization_level"):  # 8.6+
            config.builder_optimization_level = int(settings.builder_optimization_level)
            optimization_level = int(settings.builder_optimization_level)
        else:
            progress(f"TensorRT {version} has no builder optimization level (8.6+); "
                     f"level {settings.builder_optimization_level} ignored")

    cache_path = settings.timing_cache_path
    cache_loaded = False
    if cache_path is not None:
        blob = b""
        if cache_path.is_file():
            blob = cache_path.read_bytes()
            cache_loaded = True
            progress(f"timing cache: loaded {cache_path} ({len(blob)} bytes)")
        cache = config.create_timing_cache(blob)
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            raise TargetError(f"TensorRT {version} rejected the timing cache {cache_path} (made for another "
                              "device or TensorRT version?)", hint=f"delete {cache_path} to start a new one")

    progress(f"TensorRT {version}: building the {settings.precision} engine (this can take minutes)")
    started = time.monotonic()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.monotonic() - started
    if serialized is None:
        raise ExportError(
            f"TensorRT {version} failed to build an engine from {settings.onnx_path} "
            f"(precision {settings.precision}, workspace {settings.workspace_bytes} bytes)",
            hint="the TensorRT log above says why; a larger workspace or another precision may help",
        )
    engine_bytes = bytes(serialized)
    atomic_write_bytes(settings.engine_path, engine_bytes)
    progress(f"built in {seconds:.1f} s: {settings.engine_path} ({len(engine_bytes)} bytes)")
    if cache_path is not None:
        atomic_write_bytes(cache_path, bytes(config.get_timing_cache().serialize()))

    engine = trt.Runtime(logger).deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise ExportError(f"TensorRT {version} cannot load the engine it has just built ({settings.engine_path})")
    flags = _builder_flags(trt, config)
    return {
        "tensorrt_version": version,
        "precision": settings.precision,
        "strongly_typed": typed,
        "shapes": {name: {"min": list(s[0]), "opt": list(s[1]), "max": list(s[2])}
                   for name, s in settings.profiles.items()},
        "onnx": str(settings.onnx_path),
        "onnx_sha256": sha256_file(settings.onnx_path),
        "plan": str(settings.engine_path),  # engine.json's keys, kept: the engine file's path, sha256 and size
        "plan_sha256": sha256_bytes(engine_bytes),
        "plan_bytes": len(engine_bytes),
        "build_seconds": round(seconds, 3),
        "workspace_bytes": int(settings.workspace_bytes),
        "dla_core": settings.dla_core,
        "dla_gpu_fallback": gpu_fallback,  # the layers a DLA engine runs on the GPU (None: not a DLA engine)
        "dynamic_ranges": ranges,  # implicit INT8: the tensors given a range (None: scales from Q/DQ, or none)
        "builder_optimization_level": optimization_level,
        "timing_cache": None if cache_path is None else {"path": str(cache_path), "loaded": cache_loaded},
        "device_memory_size": _device_memory_size(engine),
        "layers": _layer_information(trt, engine),
        # provenance (runtime/engines/provenance.py): what the config held when the engine was built
        "builder_flags": flags,
        "version_compatible": "VERSION_COMPATIBLE" in flags,
        "hardware_compatibility": _hardware_compatibility(config),
    }


# -- compatibility -------------------------------------------------------------------------------

def _cc(value: Union[str, float, Tuple[int, ...], List[int]]) -> str:
    """'8.7', '87', 'sm_87' or (8, 7) -> '8.7'."""
    if isinstance(value, (tuple, list)):
        return ".".join(str(int(v)) for v in value)
    text = str(value).strip().lower().replace("sm_", "").replace("sm", "")
    if "." not in text and text.isdigit() and len(text) >= 2:
        text = f"{text[:-1]}.{text[-1]}"
    return text


def check_engine_compatible(engine_json: JsonObject, running_trt_version: str,
                            compute_capability: str) -> None:
    """Refuse an engine built for another TensorRT version or GPU: engines are tied to both."""
    built_version = engine_json.get("tensorrt_version")
    built_cc = engine_json.get("compute_capability")
    target = ", ".join(str(engine_json[k]) for k in ("module", "jetpack") if engine_json.get(k))
    built = f"TensorRT {built_version} on compute capability {built_cc}" + (f" ({target})" if target else "")
    here = f"TensorRT {running_trt_version} and compute capability {_cc(compute_capability)}"
    engine_file = engine_json.get("plan", "the engine")
    if built_version is None or built_cc is None:
        raise TargetError(f"{engine_file}: engine.json does not say which TensorRT version and compute capability it "
                          f"was built for; this device has {here}", hint=REBUILD_HINT)
    problems = []
    if str(built_version) != str(running_trt_version):
        problems.append("TensorRT version")
    if _cc(built_cc) != _cc(compute_capability):
        problems.append("compute capability")
    if problems:
        raise TargetError(
            f"{engine_file} was built for {built}; this device has {here} ({' and '.join(problems)} differ). "
            "A TensorRT engine runs only with the exact TensorRT version and GPU it was built for.",
            hint=REBUILD_HINT,
        )


def _refuse_mismatch(engine_name: str, engine_bytes: bytes, record: Optional[EngineProvenance], version: str,
                     compute_capability: str, device_root: Optional[Path]) -> None:
    """Refuse, before TensorRT deserializes it, an engine that is not its record's or not for this device."""
    damage = engine_damage(record, sha256_bytes(engine_bytes), engine_name)
    if damage:
        raise BundleError(damage, hint=REBUILD_HINT)
    l4t, compatible = read_identity(device_root)
    here = RunningDevice(version, _cc(compute_capability), l4t, compatible)
    why = refusal(record, read_header(engine_bytes), here, engine_name)
    if why:
        raise TargetError(why, hint=REBUILD_HINT)


# -- runner -------------------------------------------------------------------------------------

_NUMPY_TYPES = (("FLOAT", "float32"), ("HALF", "float16"), ("INT8", "int8"), ("INT32", "int32"),
                ("INT64", "int64"), ("BOOL", "bool_"), ("UINT8", "uint8"))


def _numpy_dtype(trt: TensorRT, data_type: EnumValue) -> "np.dtype":
    import numpy as np

    for trt_name, np_name in _NUMPY_TYPES:
        member = getattr(trt.DataType, trt_name, None)
        if member is not None and member == data_type:
            return np.dtype(getattr(np, np_name))
    raise ExportError(f"engine tensor type {data_type} has no numpy equivalent")


class TensorRTRunner:
    """Runs a serialized engine with the tensor API; same interface as OnnxRuntimeRunner."""

    def __init__(self, engine_path: Union[str, Path], engine_json: Union[None, str, Path, JsonObject] = None,
                 *, trt: Optional[TensorRT] = None, memory: Optional[DeviceMemory] = None,
                 device_root: Optional[Path] = None, accelerator: Optional[str] = None) -> None:
        """``accelerator`` (the recipe's ``runs_on``: dla0, dla1, or dla for either core) opens a DLA engine on
        that core; by default a DLA engine opens on the core its ``engine.json`` says it was built for."""
        self.path = Path(engine_path)
        self._trt = trt if trt is not None else import_tensorrt()
        self._memory = memory if memory is not None else default_memory()
        version = str(self._trt.__version__)
        record = None
        if engine_json is not None:
            built = engine_json if isinstance(engine_json, Mapping) else json.loads(Path(engine_json).read_text())
            check_engine_compatible(built, version, self._memory.compute_capability())
            record = EngineProvenance.from_engine_json(built)
            if accelerator is None and built.get("dla_core") is not None:
                accelerator = "dla{}".format(built["dla_core"])
        if not self.path.is_file():
            raise TargetError(f"{self.path}: TensorRT engine file not found")
        engine_bytes = self.path.read_bytes()
        _refuse_mismatch(str(self.path), engine_bytes, record, version, self._memory.compute_capability(), device_root)
        self._logger = self._trt.Logger(self._trt.Logger.WARNING)
        self._runtime = self._trt.Runtime(self._logger)
        #: the DLA core the engine runs on (None: the GPU); set on the runtime before it deserializes the engine
        self.dla_core = open_on_dla(self._runtime, accelerator, self.path)
        self._engine = self._runtime.deserialize_cuda_engine(engine_bytes)
        if self._engine is None:
            raise TargetError(f"TensorRT {version} cannot load {self.path}: it was built with another TensorRT "
                              "version or for another GPU, or the file is damaged", hint=REBUILD_HINT)
        self._context = self._engine.create_execution_context()
        self._stream = self._memory.create_stream()
        self._version = version
        self.backend = f"tensorrt {version}"
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        is_input = self._trt.TensorIOMode.INPUT
        self.input_names = [n for n in names if self._engine.get_tensor_mode(n) == is_input]
        self.output_names = [n for n in names if n not in self.input_names]
        self._dtypes = {n: _numpy_dtype(self._trt, self._engine.get_tensor_dtype(n)) for n in names}
        #: device buffers, name -> (pointer, bytes): allocated at a tensor's first run and again only when a
        #: larger shape needs more, so a steady stream of requests makes no cudaMalloc/cudaFree
        self._device = {}  # type: Dict[str, Tuple[int, int]]

    def instance(self, threads: Optional[int] = None) -> "TensorRTRunner":
        """Another instance of the model (the server's ``instance_count``): a new execution context of this
        engine, with its own CUDA stream and device buffers, sharing the engine's weights.

        ``ICudaEngine.create_execution_context`` allocates the context's activation memory
        (``device_memory_size``) each time: the memory plan counts one per instance. Each context runs
        the engine's one optimization profile, profile 0, which a new context selects by default (as
        Triton's TensorRT backend gives every instance profile 0); its batch sizes are that profile's
        min to max axis 0, which the server's max batch never passes. ``threads`` is ONNX Runtime's
        (a TensorRT run has no intra-op threads on the host) and is ignored.
        """
        engine = self._engine
        assert engine is not None, "__init__ refuses an engine TensorRT cannot load"
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._context = engine.create_execution_context()
        if other._context is None:
            raise TargetError(f"{self.path}: TensorRT {self._version} could not create another execution context "
                              "(out of device memory?)", hint="lower [runtime] instance_count")
        other._stream = self._memory.create_stream()
        other._device = {}
        return other

    def attach_thread(self) -> None:
        """Make the CUDA context current on the calling thread (the thread that runs this instance)."""
        attach = getattr(self._memory, "attach_thread", None)
        if attach is not None:
            attach()

    def close(self) -> None:
        """Free the device buffers (the runner allocates them again if it runs after this)."""
        device, self._device = self._device, {}
        for pointer, _ in device.values():
            self._memory.free(pointer)

    def __del__(self) -> None:
        # at interpreter shutdown the CUDA binding may be torn down first: nothing left to free then
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def _buffer(self, name: str, nbytes: int) -> int:
        """The device address of ``name``'s buffer, at least ``nbytes`` long, bound to the context."""
        held = self._device.get(name)
        if held is not None and held[1] >= nbytes:
            return held[0]
        if held is not None:
            del self._device[name]
            self._memory.free(held[0])
        pointer = self._memory.alloc(max(nbytes, 1))
        self._device[name] = (pointer, max(nbytes, 1))
        self._context.set_tensor_address(name, pointer)
        return pointer

    def run(self, inputs: Mapping[str, "np.ndarray"]) -> Dict[str, "np.ndarray"]:
        return self._execute(inputs, None)

    def run_timed(self, inputs: Mapping[str, "np.ndarray"]) -> Dict[str, float]:
        """One run with the stream synchronised after each phase: h2d_ms, compute_ms, d2h_ms."""
        timings = {}  # type: Dict[str, float]
        self._execute(inputs, timings)
        return timings

    def _execute(self, inputs: Mapping[str, "np.ndarray"],
                 timings: Optional[Dict[str, float]]) -> Dict[str, "np.ndarray"]:
        import numpy as np

        clock = time.perf_counter

        def mark(phase: str, since: float) -> float:
            if timings is None:
                return since
            self._memory.synchronize(self._stream)
            now = clock()
            timings[phase] = (now - since) * 1000.0
            return now

        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise ExportError(f"{self.path}: inputs {missing} not given (engine inputs: {self.input_names})")
        host = {}  # type: Dict[str, np.ndarray]
        for name in self.input_names:
            host[name] = np.ascontiguousarray(inputs[name], dtype=self._dtypes[name])
            if not self._context.set_input_shape(name, tuple(host[name].shape)):
                raise ExportError(f"{self.path}: input {name!r} shape {list(host[name].shape)} is outside the "
                                  "engine's optimization profile")
        for name in self.output_names:
            shape = tuple(int(d) for d in self._context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise ExportError(f"{self.path}: output {name!r} has a data-dependent shape {list(shape)}, "
                                  "which this runner does not support")
            host[name] = np.empty(shape, dtype=self._dtypes[name])
        pointers = {name: self._buffer(name, host[name].nbytes) for name in self.input_names + self.output_names}
        started = clock()
        for name in self.input_names:
            self._memory.htod_async(pointers[name], host[name], self._stream)
        started = mark("h2d_ms", started)
        if not self._context.execute_async_v3(self._memory.stream_handle(self._stream)):
            shapes = {n: list(host[n].shape) for n in self.input_names}
            raise ExportError(f"{self.path}: TensorRT execution failed at input shapes {shapes}")
        started = mark("compute_ms", started)
        for name in self.output_names:
            self._memory.dtoh_async(host[name], pointers[name], self._stream)
        self._memory.synchronize(self._stream)
        mark("d2h_ms", started)
        return {name: host[name] for name in self.output_names}

