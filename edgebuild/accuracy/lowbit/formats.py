"""The reduced-precision number formats TensorRT runs on Blackwell, in numpy.

FP8 E4M3 ("float8e4m3fn": no infinities, largest finite 448) and FP4 E2M1 (values 0, 0.5, 1, 1.5,
2, 3, 4, 6 and their negatives) are rounded to the nearest representable value, ties to even, and
saturate at their largest finite value, as TensorRT's quantization does (``castToFp8(clip(x / s,
-448, 448))``; TensorRT "Quantization Schemes"). ``ml_dtypes`` (a dependency of ``onnx``) does the
rounding; values are clipped first because its float8e4m3fn cast turns an overflow into NaN.

NVFP4 (TensorRT's FP4): E2M1 values in blocks of 16 along the reduction axis, each block with an
E4M3 scale, and one FP32 scale per tensor that the E4M3 block scales are relative to
(``scale_2 = amax / (6 * 448)``, block scale ``amax_block / 6 / scale_2`` rounded to E4M3), as
ModelOpt's ``NVFP4QTensor`` computes them for TensorRT.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []

E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16


def e4m3(x: np.ndarray) -> np.ndarray:
    """``x`` as float8e4m3fn (an ``ml_dtypes`` array), saturating at +-448."""
    import ml_dtypes

    return np.clip(np.asarray(x, np.float32), -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)


def e2m1(x: np.ndarray) -> np.ndarray:
    """``x`` as float4e2m1fn (an ``ml_dtypes`` array), saturating at +-6."""
    import ml_dtypes

    return np.clip(np.asarray(x, np.float32), -E2M1_MAX, E2M1_MAX).astype(ml_dtypes.float4_e2m1fn)


def scale_of(amax: np.ndarray, largest: float) -> np.ndarray:
    """``amax / largest`` as float32, 1 where ``amax`` is 0 (TensorRT takes positive scales only)."""
    amax = np.asarray(amax, np.float64)
    return np.where(amax > 0, amax / largest, 1.0).astype(np.float32)


def fp8_weight(weight: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(E4M3 values, FP32 scales): per channel along ``axis`` (amax / 448), per tensor where ``axis`` is None."""
    w = np.asarray(weight, np.float32)
    if axis is None:
        scale = scale_of(np.abs(w).max(initial=0.0), E4M3_MAX)
        return e4m3(w / scale), scale
    axis = axis % w.ndim
    others = tuple(i for i in range(w.ndim) if i != axis)
    scale = scale_of(np.abs(w).max(axis=others, initial=0.0), E4M3_MAX)
    shape = [1] * w.ndim
    shape[axis] = -1
    return e4m3(w / scale.reshape(shape)), scale


def nvfp4_weight(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.float32, np.ndarray]:
    """A 2-D weight in NVFP4 with 16-element blocks along ``axis`` (its reduction axis):
    (E2M1 values, E4M3 block scales with ``axis`` divided by 16, the FP32 tensor scale, the dequantized weight)."""
    w = np.asarray(weight, np.float32)
    axis = axis % w.ndim
    moved = np.moveaxis(w, axis, -1)  # [..., K]
    blocks = moved.reshape(*moved.shape[:-1], moved.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    tensor_scale = scale_of(np.abs(w).max(initial=0.0), E2M1_MAX * E4M3_MAX)
    block_scale = e4m3(np.abs(blocks).max(axis=-1) / E2M1_MAX / tensor_scale)
    effective = block_scale.astype(np.float32) * tensor_scale
    safe = np.where(effective > 0, effective, 1.0)[..., None]
    values = e2m1(blocks / safe)
    dequantized = values.astype(np.float32) * effective[..., None]
    restore = (lambda a: np.moveaxis(a.reshape(moved.shape), -1, axis))  # noqa: E731
    return restore(values), np.moveaxis(block_scale, -1, axis), np.float32(tensor_scale), restore(dequantized)
