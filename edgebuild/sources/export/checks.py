"""The checks an exported ONNX model must pass before any later stage may use it.

Cheapest first: what the exporter wrote (the opset it actually imports, the inputs with their
dynamic axes, the outputs in the project's order), the full ONNX checker with strict shape
inference, an ONNX Runtime session, and parity with PyTorch for every output at the min, opt
and max shapes, every mismatch collected into one message. onnxslim's version of a model
replaces it only if it passes the same checks; then only that one runs in ONNX Runtime.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import ExportError
from edgebuild.sources.export.tool_output import first_line, hide_path, quiet
from edgebuild.text import Progress

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from edgebuild.project.config import Project
    from edgebuild.runtime.engines.backends import Runner

__all__ = ["save_onnx"]

SHAPES = ("min_shape", "opt_shape", "max_shape")
_PROTOBUF_LIMIT = 1_800_000_000  # bytes; above this the weights must go to external data



class ParityError(ExportError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""


@dataclass(frozen=True)
class OutputParity:
    shape: str
    input_shapes: dict[str, list[int]]
    output: str
    max_abs: float
    max_rel: float
    ok: bool
    problem: str = ""


class Refused(Exception):
    """One exporter's model did not pass a check: which exporter, why (one line), and the details."""

    def __init__(self, exporter: str, why: str, details: tuple[str, ...] = (), *, parity: bool = False) -> None:
        super().__init__(why)
        self.exporter, self.why, self.details, self.parity = exporter, why, details, parity

    @property
    def summary(self) -> str:
        return f"the {self.exporter} exporter {self.why}"


# -- what the exporter wrote -----------------------------------------------------------------

def exported_problem(project: Project, proto: onnx.ModelProto, opset: int) -> str | None:
    """What is wrong with an exporter's output, in words, or None."""
    got = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if got != opset:
        return f"produced opset {got}, not the requested {opset} (its version conversion failed)"
    names = [i.name for i in proto.graph.input]
    for spec in project.model.inputs:
        if spec.name not in names:
            return f"produced inputs {names}, without {spec.name!r}"
        dims = proto.graph.input[names.index(spec.name)].type.tensor_type.shape.dim
        fixed = [a for a in spec.dynamic_axes if a < len(dims) and not dims[a].dim_param]
        if fixed:
            return f"produced fixed sizes on dynamic axes {fixed} of input {spec.name!r}"
    outputs = [o.name for o in proto.graph.output]
    if outputs != list(project.model.outputs):
        return f"produced outputs {outputs}, not {list(project.model.outputs)}"
    return None


def one_file_bytes(proto: onnx.ModelProto, external_data: bool) -> bytes | None:
    """The bytes ``save_onnx`` writes when the model is one file, to check and write from memory; None
    when its weights go to external data (asked for, or too big for protobuf)."""
    if external_data or proto.ByteSize() > _PROTOBUF_LIMIT:
        return None
    return proto.SerializeToString()


def save_onnx(proto: onnx.ModelProto, path: Path, external_data: bool) -> None:
    """Write a model, its weights in ``<name>.data`` when asked or when protobuf cannot hold them."""
    import onnx

    external = external_data or proto.ByteSize() > _PROTOBUF_LIMIT
    # asked for explicitly: every initializer goes out; forced by size: only the big ones
    onnx.save_model(proto, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=f"{path.name}.data", size_threshold=0 if external_data else 1024)


# -- the ONNX checker ------------------------------------------------------------------------

def verify_onnx(path: Path) -> None:
    """Full ONNX checker (with strict shape inference) on a file, inline or external data."""
    if not path.is_file():
        raise ExportError(f"{path}: ONNX file not found")
    refused = _checker_refusal(path)
    if refused is not None:
        raise ExportError(
            f"{path}: not a valid ONNX model ({refused[1]})",
            hint="a truncated or corrupt file: delete it and export again (edgebuild export --force)",
        )


def checker_problem(path: Path, written: bytes | None = None) -> str | None:
    """Why the full ONNX checker or its strict shape inference refuses an exported model, or None.
    ``written``: the file's bytes when the caller has them (one file, no external data)."""
    refused = _checker_refusal(path if written is None else written)
    return None if refused is None else f"wrote a model {refused[0]} ({hide_path(refused[1], path)})"


def _checker_refusal(model: Path | bytes) -> tuple[str, str] | None:
    """(which check, what it says) when the full checker refuses the file (or its bytes), or None."""
    import onnx

    try:
        onnx.checker.check_model(model if isinstance(model, bytes) else str(model), full_check=True)
    except Exception as exc:  # onnx raises ValidationError, InferenceError, DecodeError, ...
        which = "strict shape inference fails on" if isinstance(exc, onnx.shape_inference.InferenceError) \
            else "the ONNX checker refuses"
        return which, f"{type(exc).__name__}: {first_line(exc)}"
    return None


# -- parity ----------------------------------------------------------------------------------

def reference_outputs(project: Project, runner: Runner) -> dict[str, tuple[dict, dict]]:
    """{shape: (inputs, PyTorch's outputs)} at the min, opt and max shapes, run with a TorchRunner."""
    from edgebuild.sources.entry_point import example_inputs

    return {which: (inputs, runner.run(inputs))
            for which in SHAPES for inputs in [example_inputs(project, which, seed=SHAPES.index(which))]}


def output_tolerance(atol: float, want: np.ndarray) -> float:
    """The absolute tolerance of one output tensor: ``atol`` times the tensor's own scale (its largest
    |value|, never below 1).

    Outputs come in their own units: a detector's boxes and a pose model's keypoints in pixels (up to the
    image size), logits and scores near 1. float32 arithmetic rounds relative to the magnitudes it adds up,
    so two faithful runtimes of a 640-pixel model differ by a few thousandths of a pixel, also on the values
    near zero of the same tensor (where ``rtol * |torch|`` allows nothing): a fixed atol of 1e-4 refused
    such exports. Scaled by the peak, atol stays 1e-4 for outputs within +-1 and becomes 0.064 px at 640
    px, while a real divergence (a wrong operator, a wrong constant: errors of a percent of the scale and
    more) still fails."""
    import numpy as np
    peak = float(np.abs(want).max(initial=0.0)) if want.size else 0.0
    return atol * max(1.0, peak if np.isfinite(peak) else 1.0)


def parity_results(project: Project, reference: dict[str, tuple[dict, dict]], runner: Runner) -> list[OutputParity]:
    """Every output at every shape within ``output_tolerance(atol, torch) + rtol * |torch|`` (the absolute
    part scaled by each output's own magnitude), run with an OnnxRuntimeRunner."""
    import numpy as np

    from edgebuild.runtime.base.vision import NMS_OUTPUTS
    from edgebuild.sources.export.nms_graph import detections_mismatch

    atol, rtol = project.export.atol, project.export.rtol
    results = []
    for which, (inputs, expected) in reference.items():
        got = runner.run(inputs)
        shapes = {n: list(a.shape) for n, a in inputs.items()}
        if list(expected) == list(NMS_OUTPUTS) and all(n in got for n in NMS_OUTPUTS):
            # detections (an NMS-free head's top-k): compared as detections, in any order of near-equal scores
            box_atol = output_tolerance(atol, np.asarray(expected[NMS_OUTPUTS[1]], np.float64))
            worst, problem = detections_mismatch(expected, got, atol, rtol, box_atol)
            results.append(OutputParity(which, shapes, "detections", worst, 0.0, not problem, problem))
            continue
        for name, want in expected.items():
            results.append(_compare(which, shapes, name, want, got.get(name), atol, rtol))
    return results


def _check_parity(project: Project, reference: dict[str, tuple[dict, dict]], path: Path) -> list[OutputParity]:
    """Every output at every shape within the tolerance (``parity_results``); one error listing every mismatch."""
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    results = parity_results(project, reference, OnnxRuntimeRunner(path))
    bad = [r for r in results if not r.ok]
    if bad:
        raise ParityError(
            f"{project.source}: ONNX output differs from PyTorch in {len(bad)} of {len(results)} checks "
            f"({tolerance_words(project.export.atol, project.export.rtol)}):\n"
            + "\n".join(f"  {line}" for line in mismatch_lines(bad)),
            hint="the model may use an operator the exporter translates inexactly; loosen export.atol/"
                 "export.rtol only if the difference is acceptable",
        )
    return results


def tolerance_words(atol: float, rtol: float) -> str:
    """How the parity tolerance is said in messages."""
    return f"atol {atol} x each output's largest |value| (at least 1), rtol {rtol}"


def mismatch_lines(bad: list[OutputParity]) -> list[str]:
    return [f"- {r.output} at {r.shape} {r.input_shapes}: {r.problem}" for r in bad]


def _compare(which: str, shapes: dict, name: str, want: np.ndarray, got: np.ndarray | None,
             atol: float, rtol: float) -> OutputParity:
    import numpy as np
    if got is None:
        return OutputParity(which, shapes, name, float("inf"), float("inf"), False, "missing from the ONNX outputs")
    if got.shape != want.shape:
        return OutputParity(which, shapes, name, float("inf"), float("inf"), False,
                            f"shape {list(got.shape)}, PyTorch gives {list(want.shape)}")
    # float32 at least (float64 where an output is): exact enough for atol + rtol * |torch|, and a
    # tenth of the time of float64 on a detector's [N, A, C] outputs
    dtype = np.result_type(want.dtype, got.dtype, np.float32)
    want_f, got_f = want.astype(dtype, copy=False), got.astype(dtype, copy=False)
    error, scale = np.abs(got_f - want_f), np.abs(want_f)
    max_abs = float(error.max(initial=0.0))
    max_rel = float((error / np.maximum(scale, 1e-12)).max(initial=0.0))
    ok = bool(np.all(error <= output_tolerance(atol, want_f) + rtol * scale))
    problem = "" if ok else f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}"
    return OutputParity(which, shapes, name, max_abs, max_rel, ok, problem)


# -- onnxslim --------------------------------------------------------------------------------

def simplify(project: Project, reference: dict, path: Path, progress: Progress,
             exported: onnx.ModelProto | None = None) -> tuple[str, list[OutputParity] | None]:
    """onnxslim's version of the model at ``path`` replaces it if it passes every check itself.

    ``exported``: the model for ``path`` when the caller holds it in memory as one file and has not
    written it yet (it writes it only if it is kept); onnxslim may change it. Without it, the model
    is read from ``path``. Returns what happened and the simplified model's parity,
    or None when the model at ``path`` is kept as it is (onnxslim missing, failing, or its model
    refused: the caller checks that one). Only the model that is kept runs in ONNX Runtime, so a
    simplified model costs one parity check.
    """
    import importlib.util

    import onnx

    if importlib.util.find_spec("onnxslim") is None:
        return "onnxslim not installed", None
    progress("export: simplifying with onnxslim")
    folder = path.parent / "simplified"
    folder.mkdir()
    candidate = folder / path.name
    try:
        original = exported if exported is not None else onnx.load(str(path))
        before = len(original.graph.node)  # onnxslim may change the graph it is given
        with quiet():
            slim = _slim(original)
        written = one_file_bytes(slim, external_data=exported is None)  # external data stays external
        if written is None:
            save_onnx(slim, candidate, path.with_name(f"{path.name}.data").exists())
        else:
            candidate.write_bytes(written)
        problem = checker_problem(candidate, written)
        if problem is not None:
            raise ExportError(f"onnxslim {problem}")
        slim_parity = _check_parity(project, reference, candidate)
    except Exception as exc:  # any failure means: keep the unsimplified model, checked by the caller
        shutil.rmtree(folder)
        return f"kept unsimplified: {type(exc).__name__}: {first_line(exc)}", None
    after = len(slim.graph.node)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)
    for produced in folder.iterdir():  # the model and, with external data, its data file
        produced.replace(path.parent / produced.name)
    folder.rmdir()
    return f"onnxslim: {before} -> {after} nodes, passes every check", slim_parity


def _slim(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim, its graph's shapes found by ONNX's own shape inference (C++, with data propagation)
    instead of onnxslim's sympy one: about half the time on the shapes example, YOLOv8n, SSDlite and
    ViT, and the same graph on every example and zoo model but SSDlite and ViT, where a few
    Shape-arithmetic nodes stay unfolded (docs/benchmarks.md#exporter-speed). Where ONNX's inference
    fails, onnxslim infers the shapes itself."""
    import onnxslim  # its import (sympy, for its shape inference) is most of its cost on a small model

    try:
        inferred = _shapes_inferred(model)
    except Exception:  # e.g. a model above protobuf's 2 GB: onnxslim's own inference handles it
        return onnxslim.slim(model)
    return onnxslim.slim(inferred, no_shape_infer=True)


def _shapes_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with the shapes ONNX's inference finds for every tensor. The inference reads
    the weights' shapes, not their values, so the float weights are left out of the copy it serialises
    and put back after (resnet18: 0.03 s instead of 0.18 s)."""
    import math

    import onnx

    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)
    weights = {t.name: t.raw_data for t in model.graph.initializer
               if t.data_type in floats and math.prod(t.dims) > 256 and t.HasField("raw_data")}
    for tensor in model.graph.initializer:
        if tensor.name in weights:
            tensor.ClearField("raw_data")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    finally:
        for tensor in model.graph.initializer:
            if tensor.name in weights:
                tensor.raw_data = weights[tensor.name]
    for tensor in inferred.graph.initializer:
        if tensor.name in weights:
            tensor.raw_data = weights[tensor.name]
    return inferred
