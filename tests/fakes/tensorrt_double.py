"""A test double of the ``tensorrt`` module, held to the real API listings of one version.

The listings in ``tensorrt-api/`` were taken from the real modules (copied from
../shared/reference/tensorrt-api/). Every object the double hands out knows its TensorRT class
and rejects reading or assigning a member that class lacks in that version (AttributeError naming
the version), every enum rejects a member the version lacks, and keyword arguments are checked
against the listed signatures. Every method call and property assignment is recorded in
``double.calls`` as ``(qualified name, args, kwargs)`` so tests can assert the exact sequence.

The 8.5 listing covers only 9 classes and 5 enums. For a class or enum it lacks (Logger,
EngineInspector, ParserError, IHostMemory, ITensor, DataType, ...) the double falls back to the
8.6 listing and records the name in ``double.unverified`` so a test can see what was not checked
against 8.5 itself.

The 11.4.0.106 listing (the TensorRT 11 API: strongly typed only, no INT8/FP16 builder flags, no
calibrators) was made in this repository, not copied from the shared reference: see its
``provenance`` and ``tensorrt-api/introspect_tensorrt.py``.

It builds nothing: ``build_serialized_network`` returns ``PLAN`` (b"TEST-DOUBLE-PLAN ..."), which
tests write only into tmp_path, and "execution" runs a Python function the test supplies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

API_DIR = Path(__file__).resolve().parent / "tensorrt-api"
VERSIONS = ("8.5.3.1", "8.6.1", "10.3.0", "11.4.0.106")
PLAN = b"TEST-DOUBLE-PLAN: not a TensorRT engine"
FALLBACK = {"8.5.3.1": "8.6.1"}


def load_listing(version: str) -> dict[str, Any]:
    return json.loads((API_DIR / f"tensorrt-{version}.json").read_text())


class Listing:
    """Members, kinds and signatures of one version, with the 8.5 fallback made explicit."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.own = load_listing(version)
        self.fallback = load_listing(FALLBACK[version]) if version in FALLBACK else None
        self.unverified: set[str] = set()

    def _source(self, section: str, name: str) -> dict[str, Any] | None:
        if name in self.own[section]:
            return self.own
        if self.fallback is not None and name in self.fallback[section]:
            self.unverified.add(name)
            return self.fallback
        return None

    def members(self, cls: str) -> list[str]:
        source = self._source("classes", cls)
        if source is None:
            raise AttributeError(f"tensorrt {self.version} listing has no class {cls!r}")
        return source["classes"][cls]

    def detail(self, cls: str, member: str) -> dict[str, str]:
        source = self._source("classes", cls) or {}
        return source.get("class_members_detail", {}).get(cls, {}).get(member, {"kind": "", "doc1": ""})

    def enum(self, name: str) -> dict[str, int] | None:
        source = self._source("enums", name)
        return None if source is None else source["enums"][name]

    def top_level(self, name: str) -> bool:
        if name in self.own.get("top_level_names", ()) or name in self.own["classes"] or name in self.own["enums"]:
            return True
        if self.fallback is not None and name in self.fallback.get("top_level_names", ()):
            self.unverified.add(name)
            return True
        return False

    def keyword_names(self, cls: str, member: str) -> set[str] | None:
        doc = self.detail(cls, member).get("doc1", "")
        match = re.match(r"\w+\((.*)\) ->", doc)
        if not match:
            return None
        return set(re.findall(r"(\w+):", match.group(1))) - {"self"}


class EnumMember:
    def __init__(self, enum: str, name: str, value: int) -> None:
        self.enum, self.name, self.value = enum, name, value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnumMember) and (other.enum, other.name) == (self.enum, self.name)

    def __hash__(self) -> int:
        return hash((self.enum, self.name))

    def __repr__(self) -> str:
        return f"<{self.enum}.{self.name}: {self.value}>"


class EnumDouble:
    def __init__(self, version: str, name: str, values: dict[str, int]) -> None:
        self._version, self._name, self._values = version, name, values

    def __getattr__(self, member: str) -> EnumMember:
        if member.startswith("_") or member not in self._values:
            raise AttributeError(f"tensorrt {self._version}: enum {self._name} has no member {member!r}")
        return EnumMember(self._name, member, self._values[member])


class TrtObject:
    """Base of every object handed out: members are checked against the listing on each access."""

    _trt_class = ""
    #: values of listed properties before anything assigns them
    _defaults: dict[str, Any] = {}

    def __init__(self, trt: TensorRTDouble) -> None:
        object.__setattr__(self, "_trt", trt)
        object.__setattr__(self, "_props", {})

    def _check(self, name: str) -> dict[str, str]:
        trt = object.__getattribute__(self, "_trt")
        cls = object.__getattribute__(self, "_trt_class")
        if name not in trt._listing.members(cls):
            raise AttributeError(f"tensorrt {trt.__version__}: {cls} has no attribute {name!r}")
        return trt._listing.detail(cls, name)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_"):
            return object.__getattribute__(self, name)
        detail = TrtObject._check(self, name)
        props = object.__getattribute__(self, "_props")
        if name in props:
            return props[name]
        defaults = object.__getattribute__(self, "_defaults")
        if name in defaults:
            return defaults[name]
        cls = object.__getattribute__(self, "_trt_class")
        try:
            value = object.__getattribute__(self, name)
        except AttributeError:
            raise NotImplementedError(f"the tensorrt test double does not implement {cls}.{name}") from None
        if detail.get("kind") == "property" or not callable(value):
            return value
        trt = object.__getattribute__(self, "_trt")

        def recorded(*args: Any, **kwargs: Any) -> Any:
            allowed = trt._listing.keyword_names(cls, name)
            unknown = set(kwargs) - allowed if allowed is not None else set()
            if unknown:
                raise TypeError(f"tensorrt {trt.__version__}: {cls}.{name}() has no keyword {sorted(unknown)}")
            trt.calls.append((f"{cls}.{name}", args, kwargs))
            return value(*args, **kwargs)

        return recorded

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        TrtObject._check(self, name)
        trt = object.__getattribute__(self, "_trt")
        trt.calls.append((f"{object.__getattribute__(self, '_trt_class')}.{name} =", (value,), {}))
        object.__getattribute__(self, "_props")[name] = value


# -- what a test tells the double ------------------------------------------------------------------

@dataclass
class TensorSpec:
    name: str
    mode: str  # "INPUT" or "OUTPUT"
    shape: tuple[int, ...]  # -1 for dynamic dimensions
    dtype: str = "FLOAT"


@dataclass
class ModelSpec:
    """The network the double's parser 'reads' and the engine it 'deserializes'."""

    tensors: list[TensorSpec] = field(default_factory=lambda: [
        TensorSpec("images", "INPUT", (-1, 3, -1, -1)),
        TensorSpec("boxes", "OUTPUT", (-1, -1, 4)),
        TensorSpec("scores", "OUTPUT", (-1, -1, 2)),
    ])
    #: input shapes -> output shapes
    shapes: Callable[[dict[str, tuple]], dict[str, tuple]] = field(default=lambda s: {
        "boxes": (s["images"][0], (s["images"][2] // 8) * (s["images"][3] // 8), 4),
        "scores": (s["images"][0], (s["images"][2] // 8) * (s["images"][3] // 8), 2),
    })
    #: input arrays -> output arrays (what "execution" computes, so copies can be checked)
    compute: Callable[[dict[str, np.ndarray], dict[str, tuple]], dict[str, np.ndarray]] = field(default=lambda x, s: {
        name: np.full(shape, float(x["images"].sum()), np.float32) for name, shape in s.items()})
    #: (node index, node name, operator, description) per parser error; empty: parsing succeeds
    parse_errors: list[tuple[int, str, str, str]] = field(default_factory=list)
    build_fails: bool = False
    num_dla_cores: int = 2
    #: indices of the layers the DLA cannot run (``IBuilderConfig.can_run_on_DLA`` says False for them)
    gpu_only_layers: tuple[int, ...] = ()
    device_memory_size: int = 12345678
    #: (LayerType member, DataType of its first output[, its name]) per layer of the parsed network
    layers: list[tuple[str, ...]] = field(default_factory=lambda: [("CONVOLUTION", "FLOAT"), ("ACTIVATION", "FLOAT")])
    #: per layer, the names of the tensors it reads and writes (as TensorRT's parser names them after the ONNX's);
    #: a layer without an entry reads nothing and writes ``layer<i>:<k>``
    layer_io: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    layers_json: str = '{"Layers": [{"Name": "conv", "Precision": "test-double"}], "Bindings": ["images"]}'
    #: serialized timing cache the double's builder "produces"
    timing_cache_out: bytes = b"TEST-DOUBLE-TIMING-CACHE"


class FakeDevice:
    """Device memory for the runner: pointer -> bytearray, shared by the memory double and execution."""

    def __init__(self) -> None:
        self.buffers: dict[int, bytearray] = {}
        self.next = 0x1000
        self.log: list[tuple] = []


class FakeCudaMemory:
    """Stands in for _PycudaMemory/_CudaPythonMemory (same methods)."""

    def __init__(self, device: FakeDevice, compute_capability: str = "8.7") -> None:
        self.device, self.cc = device, compute_capability

    def compute_capability(self) -> str:
        return self.cc

    def create_stream(self) -> str:
        self.device.log.append(("create_stream",))
        return "stream-0"

    def stream_handle(self, stream: str) -> int:
        return 77

    def alloc(self, nbytes: int) -> int:
        pointer = self.device.next
        self.device.next += max(nbytes, 1) + 256
        self.device.buffers[pointer] = bytearray(nbytes)
        self.device.log.append(("alloc", pointer, nbytes))
        return pointer

    def free(self, pointer: int) -> None:
        del self.device.buffers[pointer]
        self.device.log.append(("free", pointer))

    def htod_async(self, pointer: int, host: np.ndarray, stream: str) -> None:
        assert host.flags.c_contiguous
        self.device.buffers[pointer][:] = host.tobytes()
        self.device.log.append(("htod", pointer, host.nbytes))

    def dtoh_async(self, host: np.ndarray, pointer: int, stream: str) -> None:
        host.reshape(-1).view(np.uint8)[:] = np.frombuffer(bytes(self.device.buffers[pointer]), np.uint8)
        self.device.log.append(("dtoh", pointer, host.nbytes))

    def synchronize(self, stream: str) -> None:
        self.device.log.append(("synchronize",))


# -- the classes ---------------------------------------------------------------------------------

class Logger(TrtObject):
    _trt_class = "Logger"

    def __init__(self, trt: TensorRTDouble, min_severity: Any = None) -> None:
        super().__init__(trt)
        self._severity = min_severity


class HostMemory(TrtObject):
    _trt_class = "IHostMemory"

    def __init__(self, trt: TensorRTDouble, data: bytes) -> None:
        super().__init__(trt)
        self._data = data

    def __bytes__(self) -> bytes:
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self._data)


class Tensor(TrtObject):
    _trt_class = "ITensor"

    def __init__(self, trt: TensorRTDouble, spec: TensorSpec) -> None:
        super().__init__(trt)
        self._spec = spec

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def shape(self) -> tuple:
        return self._spec.shape

    @property
    def dtype(self) -> EnumMember:
        return getattr(self._trt.DataType, self._spec.dtype)

    def set_dynamic_range(self, min: float, max: float) -> bool:  # noqa: A002 (listed names); 8.x-10.x
        self._trt.ranges[self._spec.name] = (min, max)
        return True


class Layer(TrtObject):
    _trt_class = "ILayer"

    def __init__(self, trt: TensorRTDouble, index: int, layer_type: str, output_dtype: str, name: str = "") -> None:
        super().__init__(trt)
        self._index, self._type, self._dtype = index, layer_type, output_dtype
        self._name = name or f"{layer_type.lower()}_{index}"

    @property
    def type(self) -> EnumMember:
        return getattr(self._trt.LayerType, self._type)

    def _io(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        io = self._trt.spec.layer_io
        return io[self._index] if self._index < len(io) else ((), (f"layer{self._index}:0",))

    @property
    def name(self) -> str:
        return self._name

    def set_output_type(self, index: int, dtype: EnumMember) -> None:
        pass  # recorded in calls, as every call is

    @property
    def num_outputs(self) -> int:
        return len(self._io()[1])

    def get_output(self, index: int) -> Tensor:
        return Tensor(self._trt, TensorSpec(self._io()[1][index], "OUTPUT", (), self._dtype))

    @property
    def num_inputs(self) -> int:
        return len(self._io()[0])

    def get_input(self, index: int) -> Tensor:
        name = self._io()[0][index]
        spec = next((t for t in self._trt.spec.tensors if t.name == name), None)
        return Tensor(self._trt, spec or TensorSpec(name, "OUTPUT", (), "FLOAT"))


class Network(TrtObject):
    _trt_class = "INetworkDefinition"

    def __init__(self, trt: TensorRTDouble, flags: int) -> None:
        super().__init__(trt)
        self._flags = flags
        self._inputs: list[TensorSpec] = []
        self._layers: list[tuple[str, ...]] = []

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def get_input(self, index: int) -> Tensor:
        return Tensor(self._trt, self._inputs[index])

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    def get_layer(self, index: int) -> Layer:
        return Layer(self._trt, index, *self._layers[index])


class ParserError(TrtObject):
    _trt_class = "ParserError"

    def __init__(self, trt: TensorRTDouble, error: tuple[int, str, str, str]) -> None:
        super().__init__(trt)
        self._error = error

    def node(self) -> int:
        return self._error[0]

    def node_name(self) -> str:  # 10.x only: the listing gate rejects it on 8.x
        return self._error[1]

    def node_operator(self) -> str:  # 10.x only
        return self._error[2]

    def desc(self) -> str:
        return self._error[3]


class OnnxParser(TrtObject):
    _trt_class = "OnnxParser"

    def __init__(self, trt: TensorRTDouble, network: Network, logger: Logger) -> None:
        super().__init__(trt)
        trt.calls.append(("OnnxParser()", (network, logger), {}))
        self._network = network
        self._errors: list[tuple] = []

    def parse_from_file(self, model: str) -> bool:
        if not Path(model).is_file():
            return False
        self._errors = list(self._trt.spec.parse_errors)
        if not self._errors:
            self._network._inputs = [t for t in self._trt.spec.tensors if t.mode == "INPUT"]
            self._network._layers = list(self._trt.spec.layers)
        return not self._errors

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> ParserError:
        return ParserError(self._trt, self._errors[index])


class OptimizationProfile(TrtObject):
    _trt_class = "IOptimizationProfile"

    def __init__(self, trt: TensorRTDouble) -> None:
        super().__init__(trt)
        self._shapes: dict[str, tuple] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:  # noqa: A002 (listed names)
        self._shapes[input] = (tuple(min), tuple(opt), tuple(max))


class TimingCache(TrtObject):
    _trt_class = "ITimingCache"

    def __init__(self, trt: TensorRTDouble, blob: bytes) -> None:
        super().__init__(trt)
        self._blob = bytes(blob)

    def serialize(self) -> HostMemory:
        return HostMemory(self._trt, self._blob)


class BuilderConfig(TrtObject):
    _trt_class = "IBuilderConfig"
    _defaults = {"builder_optimization_level": 3, "DLA_core": -1}

    def __init__(self, trt: TensorRTDouble) -> None:
        super().__init__(trt)
        self._flags: set[str] = set()
        self._pools: dict[str, int] = {}
        self._profiles: list[OptimizationProfile] = []
        self._cache: TimingCache | None = None
        self._devices: dict[int, str] = {}  # layer index -> DeviceType set for it

    def set_memory_pool_limit(self, pool: EnumMember, pool_size: int) -> None:
        self._pools[pool.name] = pool_size

    def set_flag(self, flag: EnumMember) -> None:
        self._flags.add(flag.name)

    def get_flag(self, flag: EnumMember) -> bool:
        return flag.name in self._flags

    @property
    def flags(self) -> int:  # the bitmask: bit int(flag) per flag set, as TensorRT's property
        return sum(1 << int(getattr(self._trt.BuilderFlag, name)) for name in self._flags)

    @property
    def hardware_compatibility_level(self) -> EnumMember:  # 8.6+; nothing in edgebuild sets it
        return self._trt.HardwareCompatibilityLevel.NONE

    def add_optimization_profile(self, profile: OptimizationProfile) -> int:
        self._profiles.append(profile)
        return len(self._profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: bytes) -> TimingCache:
        return TimingCache(self._trt, serialized_timing_cache)

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
        self._cache = cache
        return True

    def get_timing_cache(self) -> TimingCache | None:
        return self._cache

    def can_run_on_DLA(self, layer: Layer) -> bool:  # noqa: N802 (TensorRT's name)
        return layer._index not in self._trt.spec.gpu_only_layers

    def set_device_type(self, layer: Layer, device_type: EnumMember) -> None:
        self._devices[layer._index] = device_type.name

    def get_device_type(self, layer: Layer) -> EnumMember:
        name = self._devices.get(layer._index) or getattr(self._props.get("default_device_type"), "name", "GPU")
        return getattr(self._trt.DeviceType, name)


class Builder(TrtObject):
    _trt_class = "Builder"

    def __init__(self, trt: TensorRTDouble, logger: Logger) -> None:
        super().__init__(trt)
        trt.calls.append(("Builder()", (logger,), {}))

    @property
    def num_DLA_cores(self) -> int:  # noqa: N802 (TensorRT's name)
        return self._trt.spec.num_dla_cores

    def create_network(self, flags: int = 0) -> Network:
        return Network(self._trt, flags)

    def create_builder_config(self) -> BuilderConfig:
        return BuilderConfig(self._trt)

    def create_optimization_profile(self) -> OptimizationProfile:
        return OptimizationProfile(self._trt)

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> HostMemory | None:
        if self._trt.spec.build_fails:
            return None
        if config._cache is not None:
            config._cache._blob = self._trt.spec.timing_cache_out
        return HostMemory(self._trt, PLAN)

    def build_engine(self, network: Network, config: BuilderConfig) -> None:  # 8.x only, deprecated
        raise AssertionError("edgebuild must not call Builder.build_engine")


class EngineInspector(TrtObject):
    _trt_class = "EngineInspector"

    def get_engine_information(self, format: EnumMember) -> str:  # noqa: A002 (listed name)
        assert format.name == "JSON"
        return self._trt.spec.layers_json


class ExecutionContext(TrtObject):
    _trt_class = "IExecutionContext"

    def __init__(self, trt: TensorRTDouble, engine: CudaEngine) -> None:
        super().__init__(trt)
        self._engine = engine
        self._input_shapes: dict[str, tuple] = {}
        self._addresses: dict[str, int] = {}

    def set_input_shape(self, name: str, shape: Any) -> bool:
        spec = self._engine._tensor(name)
        shape = tuple(shape)
        if spec.mode != "INPUT" or len(shape) != len(spec.shape):
            return False
        if any(d != s for d, s in zip(shape, spec.shape) if s != -1):
            return False
        self._input_shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple:
        spec = self._engine._tensor(name)
        if spec.mode == "INPUT":
            return self._input_shapes.get(name, spec.shape)
        return tuple(self._trt.spec.shapes(self._input_shapes)[name])

    def set_tensor_address(self, name: str, memory: int) -> bool:
        self._addresses[name] = memory
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        device = self._trt.device
        inputs = {}
        for name, shape in self._input_shapes.items():
            dtype = _NP[self._engine._tensor(name).dtype]
            inputs[name] = np.frombuffer(bytes(device.buffers[self._addresses[name]]), dtype).reshape(shape)
        out_shapes = self._trt.spec.shapes(self._input_shapes)
        for name, value in self._trt.spec.compute(inputs, out_shapes).items():
            data = np.ascontiguousarray(value, _NP[self._engine._tensor(name).dtype]).tobytes()
            device.buffers[self._addresses[name]][:] = data
        return True

    def execute_async_v2(self, bindings: Any, stream_handle: int) -> bool:  # 8.x only
        raise AssertionError("edgebuild must not use bindings")


_NP = {"FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT8": np.int8, "INT64": np.int64}


class CudaEngine(TrtObject):
    _trt_class = "ICudaEngine"

    def _tensor(self, name: str) -> TensorSpec:
        for spec in self._trt.spec.tensors:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def num_io_tensors(self) -> int:
        return len(self._trt.spec.tensors)

    def get_tensor_name(self, index: int) -> str:
        return self._trt.spec.tensors[index].name

    def get_tensor_mode(self, name: str) -> EnumMember:
        return getattr(self._trt.TensorIOMode, self._tensor(name).mode)

    def get_tensor_dtype(self, name: str) -> EnumMember:
        return getattr(self._trt.DataType, self._tensor(name).dtype)

    def get_tensor_shape(self, name: str) -> tuple:
        return self._tensor(name).shape

    @property
    def device_memory_size(self) -> int:
        return self._trt.spec.device_memory_size

    @property
    def device_memory_size_v2(self) -> int:  # 10.x only
        return self._trt.spec.device_memory_size

    def create_execution_context(self) -> ExecutionContext:
        return ExecutionContext(self._trt, self)

    def create_engine_inspector(self) -> EngineInspector:
        return EngineInspector(self._trt)


class Runtime(TrtObject):
    _trt_class = "Runtime"
    _defaults = {"DLA_core": -1}

    @property
    def num_DLA_cores(self) -> int:  # noqa: N802 (TensorRT's name)
        return self._trt.spec.num_dla_cores

    def __init__(self, trt: TensorRTDouble, logger: Logger) -> None:
        super().__init__(trt)
        trt.calls.append(("Runtime()", (logger,), {}))

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> CudaEngine | None:
        return CudaEngine(self._trt) if bytes(serialized_engine) == PLAN else None


class _ClassFactory:
    """What ``trt.Builder`` etc. are: callable, with the class's static members (Logger.WARNING)."""

    def __init__(self, trt: TensorRTDouble, cls: type) -> None:
        self._trt, self._cls = trt, cls

    def __call__(self, *args: Any) -> Any:
        return self._cls(self._trt, *args)

    def __getattr__(self, name: str) -> Any:
        name_of_class = self._cls._trt_class
        if name.startswith("_") or name not in self._trt._listing.members(name_of_class):
            raise AttributeError(f"tensorrt {self._trt.__version__}: {name_of_class} has no attribute {name!r}")
        severity = self._trt._listing.enum("ILogger.Severity") or {}
        if name in severity:
            return EnumMember("ILogger.Severity", name, severity[name])
        raise NotImplementedError(f"the tensorrt test double does not implement {name_of_class}.{name}")


_CLASSES = {"Logger": Logger, "Builder": Builder, "OnnxParser": OnnxParser, "Runtime": Runtime}
_ENUMS = ("BuilderFlag", "MemoryPoolType", "NetworkDefinitionCreationFlag", "DeviceType", "TensorIOMode",
          "ProfilingVerbosity", "LayerInformationFormat", "DataType", "HardwareCompatibilityLevel",
          "LayerType")


class TensorRTDouble:
    """``make_tensorrt(version)`` -> this; use it where edgebuild takes ``trt=``."""

    def __init__(self, version: str, spec: ModelSpec | None = None) -> None:
        if version not in VERSIONS:
            raise ValueError(f"no API listing for TensorRT {version}; have {VERSIONS}")
        self.__version__ = version
        self._listing = Listing(version)
        self.spec = spec or ModelSpec()
        self.device = FakeDevice()
        self.calls: list[tuple[str, tuple, dict]] = []
        self.ranges: dict[str, tuple[float, float]] = {}  # ITensor.set_dynamic_range, by tensor name

    @property
    def unverified(self) -> set[str]:
        return self._listing.unverified

    def call_names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def memory(self, compute_capability: str = "8.7") -> FakeCudaMemory:
        return FakeCudaMemory(self.device, compute_capability)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if not self._listing.top_level(name):
            raise AttributeError(f"tensorrt {self.__version__} has no attribute {name!r}")
        if name in _CLASSES:
            return _ClassFactory(self, _CLASSES[name])
        if name in _ENUMS:
            values = self._listing.enum(name)
            if values is None:
                raise AttributeError(f"tensorrt {self.__version__} has no enum {name!r}")
            return EnumDouble(self.__version__, name, values)
        raise NotImplementedError(f"the tensorrt test double does not implement tensorrt.{name}")


def make_tensorrt(version: str, spec: ModelSpec | None = None) -> TensorRTDouble:
    return TensorRTDouble(version, spec)


def implemented_members() -> dict[str, set[str]]:
    """Public members each double class defines, by TensorRT class name (for the listing check)."""
    result = {}
    for cls in (Logger, HostMemory, Tensor, Layer, Network, ParserError, OnnxParser, OptimizationProfile, TimingCache,
                BuilderConfig, Builder, EngineInspector, ExecutionContext, CudaEngine, Runtime):
        names = {n for n in vars(cls) if not n.startswith("_")}
        result[cls._trt_class] = names
    return result
