"""One entry point for the gate's measurements: the FP8 or NVFP4 candidate of the pre-processed model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgebuild.accuracy.calibration import ActivationStatistics
    from edgebuild.accuracy.quantize import Candidate, QdqPlacement

__all__: list[str] = []


def make_lowbit(precision: str, prepared: Path, out: Path, placement: QdqPlacement,
                statistics: ActivationStatistics) -> Candidate:
    """The ``precision`` ("fp8" or "nvfp4") candidate written to ``out``."""
    if precision == "fp8":
        from edgebuild.accuracy.lowbit.fp8 import fp8_candidate

        return fp8_candidate(prepared, out, placement, statistics)
    from edgebuild.accuracy.lowbit.nvfp4 import nvfp4_candidate

    return nvfp4_candidate(prepared, out, placement, statistics)


def not_applicable(precision: str, prepared: Path, placement: QdqPlacement) -> str:
    """Why the model has no ``precision`` candidate ("": it has one)."""
    if placement.empty:
        return (f"{precision.upper()} not applicable: the model has no {', '.join(placement.op_types)} node "
                "(quantize.op_types), so TensorRT would run nothing in it")
    if precision == "nvfp4":
        from edgebuild.accuracy.lowbit.nvfp4 import nvfp4_gemm_count

        if not nvfp4_gemm_count(prepared, placement):
            return ("NVFP4 not applicable: TensorRT runs FP4 only in GEMMs (MatMul/Gemm with a 2-D constant weight "
                    "whose reduction axis is a multiple of 16, over a 2-D or 3-D activation) and the model has none; "
                    "it has no FP4 convolution (profiles/tensorrt/silent-fallbacks.toml, fp4-convolution)")
    return ""
