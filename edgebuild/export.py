"""ONNX export with dynamic axes, trusted only after it is reloaded and matches PyTorch.

The exported file is the input of every later stage. It is written into a temporary folder,
checked with the full ONNX checker and strict shape inference, loaded with ONNX Runtime, run at
the min, opt and max shapes, and compared output by output with PyTorch. Only then is it
renamed into ``build/export/opset<N>/`` with its record, ``export.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.cache import atomic_output_dir, digest, file_sha256, tool_versions
from edgebuild.errors import ExportError

if TYPE_CHECKING:
    import onnx
    import torch

    from edgebuild.config import Project
    from edgebuild.profiles import JetPackRelease

STAGE_VERSION = "export/1"
MODEL_FILE = "model.onnx"
RECORD_FILE = "export.json"
SHAPES = ("min_shape", "opt_shape", "max_shape")
_PROTOBUF_LIMIT = 1_800_000_000  # bytes; above this the weights must go to external data

Report = Callable[[str], None]


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


@dataclass(frozen=True)
class ExportRecord:
    onnx_path: Path
    files: dict[str, str]  # file name -> sha256: the model and, if any, its external data
    opset: int
    opset_reason: str
    exporter: str
    exporter_note: str
    simplified: bool
    simplify_note: str
    inputs: list[dict[str, Any]]
    outputs: list[str]
    dynamic_axes: dict[str, dict[str, str]]
    atol: float
    rtol: float
    parity: list[OutputParity]
    cache_key: str
    key_parts: dict[str, str]
    versions: dict[str, str]
    seconds: float

    @property
    def sha256(self) -> str:
        return self.files[self.onnx_path.name]

    @property
    def content_sha256(self) -> str:
        """Identity of the whole model: the ONNX and its external data (weights may live only there)."""
        return digest(sorted(self.files.items())) if len(self.files) > 1 else self.sha256

    @property
    def external_data(self) -> bool:
        return len(self.files) > 1

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["onnx_path"] = str(self.onnx_path)
        data["stage"] = STAGE_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path) -> ExportRecord:
        data = {k: v for k, v in data.items() if k not in ("stage", "reused")}
        data["onnx_path"] = folder / MODEL_FILE  # the folder may have moved since
        data["parity"] = [OutputParity(**p) for p in data["parity"]]
        return cls(**data)

    @classmethod
    def load(cls, folder: Path) -> ExportRecord:
        return cls.from_dict(json.loads((folder / RECORD_FILE).read_text()), folder)


# -- opset ---------------------------------------------------------------------------------

def choose_opset(project: Project, releases: list[JetPackRelease]) -> tuple[int, str]:
    """The highest opset every targeted TensorRT parser supports, or export.opset if not above it."""
    ceiling = min(r.max_onnx_opset for r in releases)
    limiting = sorted({f"JetPack {r.jetpack} (TensorRT {r.tensorrt})" for r in releases
                       if r.max_onnx_opset == ceiling})
    requested = project.export.opset
    if requested is None:
        return ceiling, f"highest opset every target's TensorRT parser takes; limited by {', '.join(limiting)}"
    if requested > ceiling:
        raise ExportError(
            f"{project.source}: export.opset: {requested} is above what {', '.join(limiting)} can parse "
            f"(max opset {ceiling})",
            hint=f"set export.opset <= {ceiling}, or remove it to use {ceiling}",
        )
    return requested, "export.opset in the project file"


def export_for_targets(project: Project, releases: list[JetPackRelease], *, report: Report = lambda _: None,
                       torch_runner: Any = None) -> ExportRecord:
    """Export at the opset these targets' TensorRT parsers all take (the pipeline decides whether to)."""
    opset, reason = choose_opset(project, releases)
    return export_model(project, opset, reason, report=report, torch_runner=torch_runner)


# -- cache key -----------------------------------------------------------------------------

def cache_key_parts(project: Project, opset: int) -> dict[str, str]:
    """What an export depends on: the model, the opset, the export settings and the tools."""
    from edgebuild.model import model_key_parts

    return {
        **model_key_parts(project),
        "opset": str(opset),
        "settings": digest(project.export.model_dump()),
        "tools": digest(tool_versions("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript")),
    }


def export_dir(project: Project, opset: int) -> Path:
    return project.build_dir / "export" / f"opset{opset}"


# -- export --------------------------------------------------------------------------------

def export_model(project: Project, opset: int, opset_reason: str, *, report: Report = lambda _: None,
                 torch_runner: Any = None) -> ExportRecord:
    """Export the project's model as ONNX at ``opset``; raises on any mismatch.

    Whether an earlier export can be reused is the pipeline's decision (``edgebuild.pipeline``).
    """
    started = time.perf_counter()
    from edgebuild.model import TorchRunner

    torch_runner = torch_runner or TorchRunner(project)
    reference = _reference_outputs(project, torch_runner)  # a forward that raises stops here
    parts = cache_key_parts(project, opset)
    with atomic_output_dir(export_dir(project, opset)) as staging:
        path = staging / MODEL_FILE
        proto, exporter, note = _export_proto(project, torch_runner.model, opset, report)
        _save(proto, path, project.export.external_data)
        verify_onnx(path)
        report(f"export: {exporter} exporter, opset {opset}; checking parity at {', '.join(SHAPES)}")
        parity = check_parity(project, reference, path)
        simplified, simplify_note = False, "disabled (export.simplify = false)"
        if project.export.simplify:
            simplified, simplify_note, parity = _try_simplify(project, reference, path, parity, report)
        files = {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        record = ExportRecord(
            onnx_path=export_dir(project, opset) / MODEL_FILE,
            files=files,
            opset=opset,
            opset_reason=opset_reason,
            exporter=exporter,
            exporter_note=note,
            simplified=simplified,
            simplify_note=simplify_note,
            inputs=[s.model_dump() for s in project.model.inputs],
            outputs=list(project.model.outputs),
            dynamic_axes=dynamic_axis_names(project),
            atol=project.export.atol,
            rtol=project.export.rtol,
            parity=parity,
            cache_key=digest(parts),
            key_parts=parts,
            versions=tool_versions("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript"),
            seconds=round(time.perf_counter() - started, 3),
        )
        (staging / RECORD_FILE).write_text(json.dumps(record.as_dict(), indent=2))
    return record


def dynamic_axis_names(project: Project) -> dict[str, dict[str, str]]:
    """{input name: {axis: symbolic name}} for every axis whose min and max differ."""
    names = {}
    for spec in project.model.inputs:
        image_like = len(spec.opt_shape) == 4
        readable = {0: "batch", 2: "height", 3: "width"} if image_like else {0: "batch"}
        names[spec.name] = {str(a): readable.get(a, f"{spec.name}_dim{a}") for a in spec.dynamic_axes}
    return names


def _example_args(project: Project) -> tuple[torch.Tensor, ...]:
    """Inputs at the opt shape, with dynamic axes of size 1 made 2 so no exporter specialises them."""
    import torch

    from edgebuild.model import example_inputs

    arrays = example_inputs(project, "opt_shape")
    args = []
    for spec in project.model.inputs:
        shape = list(spec.opt_shape)
        for axis in spec.dynamic_axes:
            if shape[axis] == 1:
                shape[axis] = min(2, spec.max_shape[axis])
        array = arrays[spec.name]
        args.append(torch.from_numpy(np.resize(array, shape).astype(array.dtype)))
    return tuple(args)


def _outputs_in_order(model: torch.nn.Module, names: list[str]) -> torch.nn.Module:
    """Wrap the model so forward returns a tuple in the project's output order."""
    import torch

    class OutputsInOrder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> Any:
            result = self.model(*inputs)
            if isinstance(result, dict):
                return tuple(result[n] for n in names)
            return result

    return OutputsInOrder().eval()


def _export_proto(project: Project, model: torch.nn.Module, opset: int,
                  report: Report) -> tuple[onnx.ModelProto, str, str]:
    choice = project.export.exporter
    attempts = ("dynamo", "torchscript") if choice == "auto" else (choice,)
    wrapped = _outputs_in_order(model, list(project.model.outputs))
    args = _example_args(project)
    failures: list[str] = []
    for exporter in attempts:
        report(f"export: trying the {exporter} exporter")
        try:
            proto = _export_dynamo(project, wrapped, args, opset) if exporter == "dynamo" \
                else _export_torchscript(project, wrapped, args, opset)
            problem = _exported_problem(project, proto, opset)
        except Exception as exc:  # exporters raise many types; each failure is reported below
            problem = f"{type(exc).__name__}: {_first_line(exc)}"
        if problem is None:
            _rename_dynamic_dims(project, proto)
            if exporter == "dynamo":
                note = "dynamo exporter with dynamic_shapes"
            elif failures:
                note = "TorchScript exporter, because " + "; ".join(failures)
            else:
                note = "TorchScript exporter (export.exporter = \"torchscript\")"
            return proto, exporter, note
        failures.append(f"the {exporter} exporter {problem}" if problem.startswith("produced")
                        else f"the {exporter} exporter failed: {problem}")
    raise ExportError(
        f"{project.source}: cannot export {project.model.entry_point} to ONNX opset {opset}:\n"
        + "\n".join(f"  - {f}" for f in failures),
        hint="set export.exporter to pick one exporter, or export.opset to another opset",
    )


def _first_line(exc: BaseException) -> str:
    """The line of an exception message that says what went wrong."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if "## Exception summary" in lines:  # torch.onnx wraps the real error in a long preamble
        lines = lines[lines.index("## Exception summary") + 1 :]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"\x1b\[[0-9;]*m", "", text)[:300]


@contextlib.contextmanager
def _quiet() -> Any:
    """The exporters print progress and warnings; keep the user's terminal for ours."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _export_dynamo(project: Project, module: torch.nn.Module, args: tuple, opset: int) -> onnx.ModelProto:
    import torch
    from torch.export import Dim

    # one entry per forward parameter: the wrapper's single *inputs parameter holds them all
    dynamic_shapes = (tuple({axis: Dim.DYNAMIC for axis in spec.dynamic_axes} for spec in project.model.inputs),)
    with _quiet():
        program = torch.onnx.export(
            module, args, dynamo=True, opset_version=opset, dynamic_shapes=dynamic_shapes,
            input_names=[s.name for s in project.model.inputs], output_names=list(project.model.outputs),
            optimize=True, verbose=False, report=False,
        )
    return program.model_proto


def _export_torchscript(project: Project, module: torch.nn.Module, args: tuple, opset: int) -> onnx.ModelProto:
    import tempfile

    import onnx
    import torch

    axes = {name: {int(a): n for a, n in dims.items()} for name, dims in dynamic_axis_names(project).items()}
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        path = Path(tmp) / MODEL_FILE
        torch.onnx.export(
            module, args, str(path), dynamo=False, opset_version=opset, dynamic_axes=axes,
            input_names=[s.name for s in project.model.inputs], output_names=list(project.model.outputs),
            do_constant_folding=True,
        )
        return onnx.load(str(path))


def _exported_problem(project: Project, proto: onnx.ModelProto, opset: int) -> str | None:
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


def _rename_dynamic_dims(project: Project, proto: onnx.ModelProto) -> None:
    """Give the symbolic dims the readable names (batch, height, width) everywhere in the graph."""
    mapping = {}
    graph_inputs = {i.name: i for i in proto.graph.input}
    for name, axes in dynamic_axis_names(project).items():
        dims = graph_inputs[name].type.tensor_type.shape.dim
        for axis, readable in axes.items():
            if dims[int(axis)].dim_param:
                mapping.setdefault(dims[int(axis)].dim_param, readable)
    for value in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in mapping:
                dim.dim_param = mapping[dim.dim_param]


def _save(proto: onnx.ModelProto, path: Path, external_data: bool) -> None:
    import onnx

    external = external_data or proto.ByteSize() > _PROTOBUF_LIMIT
    # asked for explicitly: every initializer goes out; forced by size: only the big ones
    onnx.save_model(proto, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=f"{path.name}.data", size_threshold=0 if external_data else 1024)


def verify_onnx(path: Path) -> None:
    """Full ONNX checker (with strict shape inference) on a file, inline or external data."""
    import onnx

    if not path.is_file():
        raise ExportError(f"{path}: ONNX file not found")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # onnx raises ValidationError, InferenceError, DecodeError, ...
        raise ExportError(
            f"{path}: not a valid ONNX model ({type(exc).__name__}: {_first_line(exc)})",
            hint="a truncated or corrupt file: delete it and export again (edgebuild export --force)",
        ) from None


# -- parity --------------------------------------------------------------------------------

def _reference_outputs(project: Project, runner: Any) -> dict[str, tuple[dict, dict]]:
    from edgebuild.model import example_inputs

    return {which: (inputs, runner.run(inputs))
            for which in SHAPES for inputs in [example_inputs(project, which, seed=SHAPES.index(which))]}


def check_parity(project: Project, reference: dict[str, tuple[dict, dict]], path: Path) -> list[OutputParity]:
    """Every output at every shape within atol + rtol * |torch|; one error listing every mismatch."""
    from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

    atol, rtol = project.export.atol, project.export.rtol
    runner = OnnxRuntimeRunner(path)
    results = []
    for which, (inputs, expected) in reference.items():
        got = runner.run(inputs)
        shapes = {n: list(a.shape) for n, a in inputs.items()}
        for name, want in expected.items():
            results.append(_compare(which, shapes, name, want, got.get(name), atol, rtol))
    bad = [r for r in results if not r.ok]
    if bad:
        lines = [f"  - {r.output} at {r.shape} {r.input_shapes}: {r.problem}" for r in bad]
        raise ParityError(
            f"{project.source}: ONNX output differs from PyTorch in {len(bad)} of {len(results)} checks "
            f"(atol {atol}, rtol {rtol}):\n" + "\n".join(lines),
            hint="the model may use an operator the exporter translates inexactly; loosen export.atol/"
                 "export.rtol only if the difference is acceptable",
        )
    return results


def _compare(which: str, shapes: dict, name: str, want: np.ndarray, got: np.ndarray | None,
             atol: float, rtol: float) -> OutputParity:
    if got is None:
        return OutputParity(which, shapes, name, float("inf"), float("inf"), False, "missing from the ONNX outputs")
    if got.shape != want.shape:
        return OutputParity(which, shapes, name, float("inf"), float("inf"), False,
                            f"shape {list(got.shape)}, PyTorch gives {list(want.shape)}")
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    error = np.abs(got64 - want64)
    max_abs = float(error.max(initial=0.0))
    max_rel = float((error / np.maximum(np.abs(want64), 1e-12)).max(initial=0.0))
    ok = bool(np.all(error <= atol + rtol * np.abs(want64)))
    problem = "" if ok else f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}"
    return OutputParity(which, shapes, name, max_abs, max_rel, ok, problem)


def _try_simplify(project: Project, reference: dict, path: Path, parity: list[OutputParity],
                  report: Report) -> tuple[bool, str, list[OutputParity]]:
    """Replace the model by onnxslim's version only if that one still checks and matches."""
    import onnx

    try:
        import onnxslim
    except ImportError:
        return False, "onnxslim not installed", parity
    report("export: simplifying with onnxslim")
    folder = path.parent / "simplified"
    folder.mkdir()
    candidate = folder / path.name
    try:
        with _quiet():
            slim = onnxslim.slim(onnx.load(str(path)))
        _save(slim, candidate, path.with_name(f"{path.name}.data").exists())
        verify_onnx(candidate)
        slim_parity = check_parity(project, reference, candidate)
    except Exception as exc:  # any failure means: keep the unsimplified, verified model
        shutil.rmtree(folder)
        return False, f"kept unsimplified: {type(exc).__name__}: {_first_line(exc)}", parity
    before, after = len(onnx.load(str(path), load_external_data=False).graph.node), len(slim.graph.node)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)
    for produced in folder.iterdir():  # the model and, with external data, its data file
        produced.replace(path.parent / produced.name)
    folder.rmdir()
    return True, f"onnxslim: {before} -> {after} nodes, parity still holds", slim_parity
