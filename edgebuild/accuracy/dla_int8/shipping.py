"""What a DLA group's INT8 recipe ships: the FP32 ONNX, its dynamic ranges, and the acceptance set of its layout."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.content import file_sha256
from edgebuild.runtime.base.files import atomic_write_bytes, atomic_writer

if TYPE_CHECKING:
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.project.config import Project

__all__: list[str] = []


@dataclass(frozen=True)
class DlaInt8Recipe:
    onnx: str  # the FP32 ONNX that ships, inside the gate folder
    retention: float  # of its DLA layout, on its emulation
    ranges_sha256: str
    acceptance: bytes  # ``acceptance.npz``, its threshold from the emulation's own agreement with FP32


def dla_int8_recipe(project: Project, gate: GateResult, tensorrt: str, ranges_out: Path) -> DlaInt8Recipe:
    """The INT8 candidate for a DLA group of TensorRT ``tensorrt``, its ranges copied to ``ranges_out``.

    Only called for a candidate the group may build (``devices.placement.candidate_order`` leaves out an INT8
    candidate whose DLA layout was refused)."""
    from edgebuild.accuracy.evaluate import ACCEPTANCE_IMAGES, ACCEPTANCE_VERSION, ValidationSet, acceptance_set

    dla = gate.candidate("int8").dla_int8
    layout = dla.layouts.get(tensorrt) if dla is not None else None
    assert dla is not None and layout is not None and layout.passed, "a refused DLA layout is never built"
    ranges = gate.folder / dla.ranges
    if not ranges_out.is_file() or file_sha256(ranges_out) != file_sha256(ranges):
        with atomic_writer(ranges_out) as out, open(ranges, "rb") as source:
            shutil.copyfileobj(source, out)
    emulation = gate.folder / layout.emulation
    stored = emulation.with_name(f"{emulation.stem}-acceptance-{ACCEPTANCE_VERSION}.npz")
    if stored.is_file():
        payload = stored.read_bytes()
    else:
        images = ValidationSet(project, limit=ACCEPTANCE_IMAGES)
        payload, _ = acceptance_set(project, images, gate.folder / gate.candidate("fp32").onnx, emulation)
        atomic_write_bytes(stored, payload)
    return DlaInt8Recipe(dla.onnx, layout.retention, file_sha256(ranges_out), payload)
