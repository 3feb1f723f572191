"""Device buffers and a CUDA stream behind a small interface (``trt_api.DeviceMemory``), for the TensorRT runner.

pycuda where installed (the binding the product card names), else cuda-python's runtime API.
Python 3.8; each binding is imported only when chosen.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

from typing import TYPE_CHECKING, Any, Dict  # noqa: F401 (Dict: a type comment)

from edgebuild.errors import CapabilityMissing
from edgebuild.runtime.engines.backends.trt_api import CudaStream, DeviceMemory

if TYPE_CHECKING:
    import numpy as np



class _PycudaMemory:
    """Device buffers and a stream through pycuda (the binding the product card names)."""

    def __init__(self) -> None:
        import pycuda.autoinit  # (creates the CUDA context on device 0, current on this thread)
        import pycuda.driver as cuda

        self._cuda = cuda
        self._context = pycuda.autoinit.context
        self._allocations = {}  # type: Dict[int, Any]

    def attach_thread(self) -> None:
        """Make the CUDA context current on another thread (a thread that runs a model instance)."""
        self._context.push()

    def compute_capability(self) -> str:
        major, minor = self._cuda.Device(0).compute_capability()
        return f"{major}.{minor}"

    def create_stream(self) -> CudaStream:
        return self._cuda.Stream()

    def stream_handle(self, stream: CudaStream) -> int:
        return int(stream.handle)

    def alloc(self, nbytes: int) -> int:
        allocation = self._cuda.mem_alloc(max(int(nbytes), 1))
        pointer = int(allocation)
        self._allocations[pointer] = allocation
        return pointer

    def free(self, pointer: int) -> None:
        allocation = self._allocations.pop(pointer, None)
        if allocation is not None:
            allocation.free()

    def htod_async(self, pointer: int, host: "np.ndarray", stream: CudaStream) -> None:
        self._cuda.memcpy_htod_async(pointer, host, stream)

    def dtoh_async(self, host: "np.ndarray", pointer: int, stream: CudaStream) -> None:
        self._cuda.memcpy_dtoh_async(host, pointer, stream)

    def synchronize(self, stream: CudaStream) -> None:
        stream.synchronize()


class _CudaPythonMemory:
    """The same through cuda-python's runtime API, for devices without pycuda."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import runtime as cudart  # cuda-python 12.6+
        except ImportError:
            from cuda import cudart  # older cuda-python
        self._rt = cudart

    def _check(self, result: Any) -> Any:
        error = result[0]
        if error != self._rt.cudaError_t.cudaSuccess:
            raise CapabilityMissing(f"CUDA runtime call failed: {error}")
        return result[1] if len(result) > 1 else None

    def compute_capability(self) -> str:
        props = self._check(self._rt.cudaGetDeviceProperties(0))
        return f"{props.major}.{props.minor}"

    def create_stream(self) -> CudaStream:
        return self._check(self._rt.cudaStreamCreate())

    def stream_handle(self, stream: CudaStream) -> int:
        return int(stream)

    def alloc(self, nbytes: int) -> int:
        return int(self._check(self._rt.cudaMalloc(max(int(nbytes), 1))))

    def free(self, pointer: int) -> None:
        self._check(self._rt.cudaFree(pointer))

    def htod_async(self, pointer: int, host: "np.ndarray", stream: CudaStream) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._check(self._rt.cudaMemcpyAsync(pointer, host.ctypes.data, host.nbytes, kind, stream))

    def dtoh_async(self, host: "np.ndarray", pointer: int, stream: CudaStream) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(self._rt.cudaMemcpyAsync(host.ctypes.data, pointer, host.nbytes, kind, stream))

    def synchronize(self, stream: CudaStream) -> None:
        self._check(self._rt.cudaStreamSynchronize(stream))


def default_memory() -> DeviceMemory:
    """pycuda when installed, else cuda-python; neither -> CapabilityMissing."""
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        pass
    else:
        return _PycudaMemory()
    try:
        return _CudaPythonMemory()
    except ImportError:
        raise CapabilityMissing(
            "neither pycuda nor cuda-python is installed, so TensorRT engines cannot be given device buffers",
            hint="pip install pycuda (or cuda-python) on the device",
        ) from None
