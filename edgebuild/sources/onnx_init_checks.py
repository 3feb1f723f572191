"""What ``edgebuild init --model`` reads from an ONNX file before it writes a project: an image input it can
feed (NCHW, float32), and Ultralytics metadata that agrees with the graph (edgebuild.workflows.init.project_file)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgebuild.errors import ModelError
from edgebuild.sources.onnx_checks import FLOAT_HINT, image_dtype_problem

if TYPE_CHECKING:
    from edgebuild.sources.onnx_checks import UltralyticsSummary

__all__ = ["metadata_classes_note", "raise_for_image_input", "raise_for_metadata_task"]


def raise_for_image_input(where: str, name: str, dims: Sequence[int | None], dtype: str) -> None:
    """``edgebuild init --model``: an image input [N, C, H, W] of float32, or a ModelError saying what it is."""
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if dims[1] not in (None, 1, 3) and dims[3] in (1, 3):
        raise ModelError(f"{where}: input {name!r} {shown} is channels-last (NHWC: {dims[3]} channels on the last "
                         "axis); edgebuild feeds images channels-first [N, C, H, W]",
                         hint="export the model with an NCHW input (torch: drop the permute before the first conv; "
                              f"tf2onnx: --inputs-as-nchw {name})")
    problem = image_dtype_problem(name, dtype)
    if problem:
        raise ModelError(f"{where}: {problem}", hint=FLOAT_HINT)


def raise_for_metadata_task(where: str, task: str, outputs: dict[str, str]) -> None:
    """An export whose metadata says task classify but whose outputs are no [N, C] classifier output."""
    if task == "classify":
        raise ModelError(f"{where}: its metadata says task classify, but its outputs {outputs} are not one [N, C] "
                         "classifier output (a [N, 4+C, A] output is a detection head): the metadata contradicts "
                         "the graph", hint="export the model again from its checkpoint (yolo export model=best.pt "
                                           "format=onnx dynamic=True), so the metadata says the task of its head")


def metadata_classes_note(where: str, summary: UltralyticsSummary | None, num_classes: int | None,
                          outputs: str) -> list[str]:
    """``edgebuild init --model``: an Ultralytics export's metadata names against its head (``num_classes``, from
    ``outputs``): a ModelError where they disagree, a note where the names cannot be read."""
    if summary is None:
        return []
    classes = summary.classes
    if not classes:
        said = f"names = {summary.names_unread!r}" if summary.names_unread else "it says no names"
        return [f"{where}'s metadata class names could not be read ({said}): the class names are the dataset's, "
                "and their order against the model's is not checked."]
    if num_classes and len(classes) != num_classes:
        raise ModelError(f"--model: {where}: its metadata names {len(classes)} classes {classes}, but its outputs "
                         f"({outputs}) predict {num_classes}: the file contradicts itself",
                         hint="export the model again from its checkpoint (the metadata and head then agree)")
    return []
