"""The part of TensorRT's Python API that ``tensorrt.py`` and ``tensorrt_precision.py`` use, as Protocols,
and the device memory the runner needs of a CUDA binding (``DeviceMemory``).

TensorRT ships no type information, and is not installed where edgebuild is built and tested, so
these classes say which attributes and methods the backend relies on: that is the contract the
test double (tests/fakes/tensorrt_double.py) implements, checked there against the API listings
of 8.5 to 11.x. Names follow TensorRT's own classes (``IBuilder``, ``ICudaEngine``, ...).
A member that only some versions have (``ICudaEngine.device_memory_size_v2``,
``IParserError.node_name``, ...) is listed with the version that added it; the code checks
``hasattr`` before using it. Likewise, an enum member that a version dropped (``BuilderFlag.FP16``
in 11) is only touched on the versions that have it.

Only type checkers read these classes; nothing here imports TensorRT or a CUDA binding.
"""

# ruff: noqa: UP006, UP035, N802, N815
# (typing.Tuple on purpose: this file must run on Python 3.8; camel-case names are TensorRT's)

from typing import TYPE_CHECKING, Any, Iterable, Optional, Protocol, Tuple

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DeviceMemory"]

Shape = Tuple[int, ...]


class EnumValue(Protocol):
    """A member of one of TensorRT's enums (``BuilderFlag.FP16``): compared with ``==``, ``int()`` is its bit."""

    @property
    def name(self) -> str: ...

    def __int__(self) -> int: ...


# -- the enums, with the members the backend names (others are looked up with getattr) ----------------

class BuilderFlagEnum(Protocol):
    FP16: EnumValue  # gone in 11 (strongly typed networks only)
    INT8: EnumValue  # gone in 11
    GPU_FALLBACK: EnumValue
    PREFER_PRECISION_CONSTRAINTS: EnumValue  # gone in 11
    OBEY_PRECISION_CONSTRAINTS: EnumValue  # gone in 11 (the ONNX's types are obeyed)


class NetworkDefinitionCreationFlagEnum(Protocol):
    EXPLICIT_BATCH: EnumValue  # ignored in 10, gone in 11
    STRONGLY_TYPED: EnumValue  # 10+


class MemoryPoolTypeEnum(Protocol):
    WORKSPACE: EnumValue


class ProfilingVerbosityEnum(Protocol):
    DETAILED: EnumValue


class DeviceTypeEnum(Protocol):
    DLA: EnumValue
    GPU: EnumValue


class LayerInformationFormatEnum(Protocol):
    JSON: EnumValue


class TensorIOModeEnum(Protocol):
    INPUT: EnumValue


class DataTypeEnum(Protocol):
    FLOAT: EnumValue
    HALF: EnumValue


class LayerTypeEnum(Protocol):
    QUANTIZE: EnumValue
    DEQUANTIZE: EnumValue
    CONSTANT: EnumValue


# -- the objects -----------------------------------------------------------------------------------------

class ILogger(Protocol):
    """What ``trt.Logger(severity)`` makes; the backend only hands it on."""


class LoggerClass(Protocol):
    """``trt.Logger``: called with a severity, and holding the severities."""

    WARNING: EnumValue

    def __call__(self, min_severity: EnumValue) -> ILogger: ...


class IHostMemory(Protocol):
    """A serialized engine or timing cache: ``bytes(memory)`` copies it out.

    TensorRT's gives ``bytes()`` the buffer protocol; ``__bytes__`` says the same to a type checker.
    """

    @property
    def nbytes(self) -> int: ...

    def __bytes__(self) -> bytes: ...


class ITensor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> EnumValue: ...

    def set_dynamic_range(self, min: float, max: float) -> bool: ...  # 8.x-10.x (deprecated in 10), gone in 11


class ILayer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def type(self) -> EnumValue: ...

    @property
    def num_outputs(self) -> int: ...

    def get_output(self, index: int) -> ITensor: ...

    @property
    def num_inputs(self) -> int: ...

    def get_input(self, index: int) -> Optional[ITensor]: ...

    # a weakly typed build's precision constraint (gone in 11: the ONNX's types are obeyed)
    precision: EnumValue

    def set_output_type(self, index: int, dtype: EnumValue) -> None: ...


class INetworkDefinition(Protocol):
    @property
    def num_inputs(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    def get_input(self, index: int) -> ITensor: ...

    def get_layer(self, index: int) -> ILayer: ...


class IParserError(Protocol):
    def node(self) -> int: ...

    def desc(self) -> str: ...

    def node_name(self) -> str: ...  # 10+

    def node_operator(self) -> str: ...  # 10+


class IOnnxParser(Protocol):
    @property
    def num_errors(self) -> int: ...

    def get_error(self, index: int) -> IParserError: ...

    def parse_from_file(self, model: str) -> bool: ...


class IOptimizationProfile(Protocol):
    def set_shape(self, input: str, min: Shape, opt: Shape, max: Shape) -> None: ...


class ITimingCache(Protocol):
    def serialize(self) -> IHostMemory: ...


class IBuilderConfig(Protocol):
    """The settings of one build; the backend sets these attributes and reads ``flags`` back."""

    flags: int  # bit ``int(BuilderFlag.X)`` per flag set
    profiling_verbosity: EnumValue
    default_device_type: EnumValue
    DLA_core: int
    builder_optimization_level: int  # 8.6+
    hardware_compatibility_level: EnumValue  # 8.6+

    def set_memory_pool_limit(self, pool: EnumValue, pool_size: int) -> None: ...

    def set_flag(self, flag: EnumValue) -> None: ...

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int: ...

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache: ...

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool: ...

    def get_timing_cache(self) -> ITimingCache: ...

    def can_run_on_DLA(self, layer: ILayer) -> bool: ...

    def set_device_type(self, layer: ILayer, device_type: EnumValue) -> None: ...


class IBuilder(Protocol):
    @property
    def num_DLA_cores(self) -> int: ...

    def create_network(self, flags: int) -> INetworkDefinition: ...

    def create_builder_config(self) -> IBuilderConfig: ...

    def create_optimization_profile(self) -> IOptimizationProfile: ...

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> Optional[IHostMemory]:
        ...


class IEngineInspector(Protocol):
    def get_engine_information(self, format: EnumValue) -> str: ...


class IExecutionContext(Protocol):
    def set_input_shape(self, name: str, shape: Shape) -> bool: ...

    def get_tensor_shape(self, name: str) -> Iterable[int]: ...

    def set_tensor_address(self, name: str, memory: int) -> bool: ...

    def execute_async_v3(self, stream_handle: int) -> bool: ...


class ICudaEngine(Protocol):
    @property
    def num_io_tensors(self) -> int: ...

    @property
    def device_memory_size(self) -> int: ...  # deprecated in 10

    @property
    def device_memory_size_v2(self) -> int: ...  # 10+

    def get_tensor_name(self, index: int) -> str: ...

    def get_tensor_mode(self, name: str) -> EnumValue: ...

    def get_tensor_dtype(self, name: str) -> EnumValue: ...

    def create_execution_context(self) -> IExecutionContext: ...

    def create_engine_inspector(self) -> IEngineInspector: ...


class IRuntime(Protocol):
    DLA_core: int  # the DLA core a deserialized DLA engine runs on

    @property
    def num_DLA_cores(self) -> int: ...

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> Optional[ICudaEngine]: ...


class TensorRT(Protocol):
    """The ``tensorrt`` module itself, as ``import_tensorrt()`` returns it (or a test passes its double)."""

    __version__: str
    Logger: LoggerClass
    BuilderFlag: BuilderFlagEnum
    NetworkDefinitionCreationFlag: NetworkDefinitionCreationFlagEnum
    MemoryPoolType: MemoryPoolTypeEnum
    ProfilingVerbosity: ProfilingVerbosityEnum
    DeviceType: DeviceTypeEnum
    LayerInformationFormat: LayerInformationFormatEnum
    TensorIOMode: TensorIOModeEnum
    DataType: DataTypeEnum
    LayerType: LayerTypeEnum

    def Builder(self, logger: ILogger) -> IBuilder: ...

    def OnnxParser(self, network: INetworkDefinition, logger: ILogger) -> IOnnxParser: ...

    def Runtime(self, logger: ILogger) -> IRuntime: ...


# -- the CUDA binding (pycuda or cuda-python) ----------------------------------------------------------

#: the CUDA binding's own stream object (a ``pycuda.driver.Stream``, cuda-python's ``cudaStream_t``, the
#: test double's name): untyped, and handed back only to the memory that made it
CudaStream = Any


class DeviceMemory(Protocol):
    """Device buffers and a stream: what the runner needs of a CUDA binding (tests pass a fake)."""

    def compute_capability(self) -> str: ...

    def create_stream(self) -> CudaStream: ...

    def stream_handle(self, stream: CudaStream) -> int: ...

    def alloc(self, nbytes: int) -> int: ...

    def free(self, pointer: int) -> None: ...

    def htod_async(self, pointer: int, host: "np.ndarray", stream: CudaStream) -> None: ...

    def dtoh_async(self, host: "np.ndarray", pointer: int, stream: CudaStream) -> None: ...

    def synchronize(self, stream: CudaStream) -> None: ...
