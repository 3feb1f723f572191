"""ONNX export with dynamic axes, trusted only after it is reloaded and matches PyTorch.

The exported file is the input of every later stage. Each exporter's model (``auto``: dynamo,
then TorchScript) is checked in turn: the opset it actually wrote, the full ONNX checker with
strict shape inference, an ONNX Runtime session at the min, opt and max shapes, and parity with
PyTorch output by output. The first that passes every check is renamed into
``build/export/opset<N>/`` with its record, ``export.json``, which says why any earlier exporter
was refused. When none passes, the error lists why each failed and, where a higher opset would
work, which targets' TensorRT caps the opset.
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.content import atomic_output_dir, digest, file_sha256, tool_versions
from edgebuild.errors import ExportError

if TYPE_CHECKING:
    import onnx
    import torch

    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import JetPackRelease, SelectedGroup

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
    failed_attempts: list[str] = field(default_factory=list)  # "the dynamo exporter <why it was refused>"

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
    limiting = _parsers(r for r in releases if r.max_onnx_opset == ceiling)
    requested = project.export.opset
    if requested is None:
        return ceiling, _ceiling_reason(releases, ceiling)
    if requested > ceiling:
        raise ExportError(
            f"{project.source}: export.opset: {requested} is above what {limiting} can parse "
            f"(max opset {ceiling})",
            hint=f"set export.opset <= {ceiling}, or remove it to use {ceiling}",
        )
    return requested, f"export.opset in the project file (every target's TensorRT parser takes up to {ceiling})"


def _parsers(releases: Any) -> str:
    """'JetPack 5.1.2 (TensorRT 8.5.2.2), JetPack 6.2 (TensorRT 10.3.0.30)', each release once."""
    return ", ".join(sorted({f"JetPack {r.jetpack} (TensorRT {r.tensorrt})" for r in releases}))


def _ceiling_reason(releases: list[JetPackRelease], ceiling: int) -> str:
    """Why this opset: the parsers that cap it and, where the fleet spans several, what the others take."""
    reason = (f"highest opset every target's TensorRT parser takes; limited by "
              f"{_parsers(r for r in releases if r.max_onnx_opset == ceiling)}")
    above = sorted({r.max_onnx_opset for r in releases} - {ceiling})
    if above:
        reason += "; " + "; ".join(
            f"{_parsers(r for r in releases if r.max_onnx_opset == top)} would take up to {top}" for top in above)
    return reason


def export_for_targets(project: Project, releases: list[JetPackRelease], *, report: Report = lambda _: None,
                       torch_runner: Any = None) -> ExportRecord:
    """Export at the opset these targets' TensorRT parsers all take (the pipeline decides whether to)."""
    opset, reason = choose_opset(project, releases)
    return export_model(project, opset, reason, report=report, torch_runner=torch_runner)


# -- cache key -----------------------------------------------------------------------------

def cache_key_parts(project: Project, opset: int) -> dict[str, str]:
    """What an export depends on: the model, the opset, the export settings and the tools."""
    from edgebuild.sources.model import model_key_parts

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
                 torch_runner: Any = None, groups: Sequence[SelectedGroup] | None = None) -> ExportRecord:
    """Export the project's model as ONNX at ``opset``; raises on any mismatch.

    ``groups`` are the targets the opset was chosen for (default: the project's fleet): when no
    exporter's model passes, the error names those whose TensorRT caps the opset. Whether an
    earlier export can be reused is the pipeline's decision (``edgebuild.pipeline.runner``).
    """
    started = time.perf_counter()
    from edgebuild.sources.model import TorchRunner

    torch_runner = torch_runner or TorchRunner(project)
    reference = _reference_outputs(project, torch_runner)  # a forward that raises stops here
    parts = cache_key_parts(project, opset)
    with atomic_output_dir(export_dir(project, opset)) as staging:
        path = staging / MODEL_FILE
        try:
            exporter, note, refused, parity = _export_checked(project, torch_runner.model, reference, opset, path,
                                                              report)
        except _NoExporterPassed as failed:
            raise _export_failure(project, torch_runner.model, reference, opset, failed.refused, groups,
                                  report) from None
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
            failed_attempts=[r.summary for r in refused],
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

    from edgebuild.sources.model import example_inputs

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


class _Refused(Exception):
    """One exporter's model did not pass a check: which exporter, why (one line), and the details."""

    def __init__(self, exporter: str, why: str, details: tuple[str, ...] = (), *, parity: bool = False) -> None:
        super().__init__(why)
        self.exporter, self.why, self.details, self.parity = exporter, why, details, parity

    @property
    def summary(self) -> str:
        return f"the {self.exporter} exporter {self.why}"


class _NoExporterPassed(Exception):
    def __init__(self, refused: list[_Refused]) -> None:
        super().__init__("; ".join(r.summary for r in refused))
        self.refused = refused


def _export_checked(project: Project, model: torch.nn.Module, reference: dict, opset: int, path: Path,
                    report: Report) -> tuple[str, str, list[_Refused], list[OutputParity]]:
    """Each exporter in turn until one's model passes every check; why each earlier one did not."""
    choice = project.export.exporter
    attempts = ("dynamo", "torchscript") if choice == "auto" else (choice,)
    wrapped = _outputs_in_order(model, list(project.model.outputs))
    args = _example_args(project)
    refused: list[_Refused] = []
    for exporter in attempts:
        report(f"export: trying the {exporter} exporter at opset {opset}")
        try:
            parity = _attempt(project, exporter, wrapped, args, reference, opset, path)
        except _Refused as why:
            refused.append(why)
            report(f"export: {why.summary}" + ("; falling back" if exporter != attempts[-1] else ""))
            continue
        return exporter, _exporter_note(exporter, refused), refused, parity
    raise _NoExporterPassed(refused)


def _attempt(project: Project, exporter: str, module: torch.nn.Module, args: tuple, reference: dict, opset: int,
             path: Path) -> list[OutputParity]:
    """One exporter's model, written to ``path`` and checked, cheapest check first; raises _Refused.

    The checks: the exporter's own result (opset actually written, inputs, outputs), the full ONNX
    checker with strict shape inference, an ONNX Runtime session, and parity with PyTorch.
    """
    from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

    export = _export_dynamo if exporter == "dynamo" else _export_torchscript
    try:
        proto = export(project, module, args, opset)
    except Exception as exc:  # exporters raise many types; each is reported as why this attempt failed
        raise _Refused(exporter, f"failed: {type(exc).__name__}: {_first_line(exc)}") from None
    problem = _exported_problem(project, proto, opset)  # e.g. dynamo kept opset 18: refused before any write
    if problem is None:
        _rename_dynamic_dims(project, proto)
        _remove_model(path)
        _save(proto, path, project.export.external_data)
        problem = _checker_problem(path)
    if problem is not None:
        raise _Refused(exporter, problem)
    try:
        with _native_output_dropped():  # ONNX Runtime logs its errors too; the message below has them
            results = parity_results(project, reference, OnnxRuntimeRunner(path))
    except ExportError as exc:  # cannot load, or fails to run at some shape
        raise _Refused(exporter, f"wrote a model ONNX Runtime refuses ({_hide_path(exc.message, path)})") from None
    bad = [r for r in results if not r.ok]
    if bad:
        raise _Refused(exporter, f"wrote a model whose outputs differ from PyTorch in {len(bad)} of {len(results)} "
                                 f"checks (atol {project.export.atol}, rtol {project.export.rtol})",
                       tuple(_mismatch_lines(bad)), parity=True)
    return results


def _exporter_note(exporter: str, refused: list[_Refused]) -> str:
    if exporter == "dynamo":
        return "dynamo exporter with dynamic_shapes"
    if refused:
        return "TorchScript exporter, because " + "; ".join(r.summary for r in refused)
    return "TorchScript exporter (export.exporter = \"torchscript\")"


def _remove_model(path: Path) -> None:
    """Clear what an earlier attempt wrote (the model and its external data)."""
    path.unlink(missing_ok=True)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)


def _hide_path(text: str, path: Path) -> str:
    """A message without the temporary folder it was written in: that folder is gone when the user reads it."""
    text = text.replace(f"{path}: ", "").replace(str(path), path.name).replace(str(path.parent), "<export>")
    return _first_line(Exception(text))


# -- when no exporter passes ---------------------------------------------------------------

def _export_failure(project: Project, model: torch.nn.Module, reference: dict, opset: int,
                    refused: list[_Refused], groups: Sequence[SelectedGroup] | None, report: Report) -> ExportError:
    """One error listing why every attempt was refused, and what to try (another exporter, opset, fleet split)."""
    lines = [f"{project.source}: cannot export {project.model.entry_point} to ONNX opset {opset}:"]
    for r in refused:
        lines.append(f"  - {r.summary}")
        lines += [f"      {d}" for d in r.details]
    advice, hint = _opset_advice(project, model, reference, opset, groups, report)
    if advice:
        lines.append(advice)
    tried = {r.exporter for r in refused}
    other = 'export.exporter = "torchscript"' if "torchscript" not in tried else \
        'export.exporter = "dynamo"' if "dynamo" not in tried else ""
    if hint is None:
        hint = "try " + (f"{other}, or " if other else "") + "another export.opset"
        if all(r.parity for r in refused):
            hint = ("the model may use an operator the exporter translates inexactly; " + hint
                    + "; loosen export.atol/export.rtol only if the difference is acceptable")
    elif other:
        hint += f"; or try {other}"
    error = ParityError if all(r.parity for r in refused) else ExportError
    return error("\n".join(lines), hint=hint)


def _opset_advice(project: Project, model: torch.nn.Module, reference: dict, opset: int,
                  groups: Sequence[SelectedGroup] | None, report: Report) -> tuple[str, str | None]:
    """Would a higher opset work? Tries, lowest first, the highest opset of each target above ``opset``.

    Returns a sentence for the error (which targets cap the opset, the highest each takes) and a
    hint, or ("", None) when no target takes a higher opset.
    """
    groups = list(groups) if groups is not None else _fleet_groups(project)
    takes = {g.name: g.target.release.max_onnx_opset for g in groups}
    higher_opsets = sorted(o for o in set(takes.values()) if o > opset)
    for higher in higher_opsets:
        report(f"export: checking whether the model exports at opset {higher}")
        exporter = _passes_at(project, model, reference, higher)
        if exporter is None:
            continue
        capped = [g for g in groups if takes[g.name] < higher]
        if not capped:  # every target takes it: export.opset was set below what the model needs
            return (f"At opset {higher}, which every selected target takes, it exports ({exporter} exporter) and "
                    "matches PyTorch."), f"set export.opset = {higher}, or remove export.opset"
        rest = [g for g in groups if takes[g.name] >= higher]
        names = ", ".join(g.name for g in capped)
        return (f"It needs a higher opset than some targets take: at opset {higher} it exports ({exporter} "
                f"exporter) and matches PyTorch, and {_describe(rest, takes)} can parse that, but "
                f"{_describe(capped, takes)} cap the opset at {opset}."), (
                f"give {names} their own project, or leave them out of this compile (--target "
                f"{','.join(g.name for g in rest)}), so the rest exports at opset {higher}; for {names} the model "
                f"must do without what the errors above name (rewrite that part with operators of opset {opset})")
    if higher_opsets:
        return f"It fails at opset {', '.join(map(str, higher_opsets))} too, so the opset is not what stops it.", None
    return "", None


def _describe(groups: list[SelectedGroup], takes: dict[str, int]) -> str:
    return ", ".join(f"{g.name} = {g.target.id} (TensorRT {g.target.release.tensorrt}, up to opset {takes[g.name]})"
                     for g in groups)


def _passes_at(project: Project, model: torch.nn.Module, reference: dict, opset: int) -> str | None:
    """The exporter whose model passes every check at ``opset``, or None; written to a scratch folder."""
    import tempfile

    scratch = export_dir(project, opset).parent
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".probe-opset{opset}-", dir=scratch) as tmp:
        try:
            return _export_checked(project, model, reference, opset, Path(tmp) / MODEL_FILE, lambda _: None)[0]
        except _NoExporterPassed:
            return None


def _fleet_groups(project: Project) -> list[SelectedGroup]:
    from edgebuild.errors import EdgebuildError
    from edgebuild.targets.profiles import load_catalog, select_groups

    try:
        return select_groups("all", project.fleet, load_catalog())
    except EdgebuildError:  # the opset advice is a courtesy; the export error is what matters
        return []


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
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()), _native_output_dropped():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


@contextlib.contextmanager
def _native_output_dropped() -> Any:
    """File descriptors 1 and 2 into a scratch file: the TorchScript exporter's C++ log writes there
    directly (the whole Torch IR graph when an operator fails), past any Python redirect."""
    import os
    import sys
    import tempfile

    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no such descriptors (embedded interpreters): nothing to hide
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


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
    if not path.is_file():
        raise ExportError(f"{path}: ONNX file not found")
    refused = _checker_refusal(path)
    if refused is not None:
        raise ExportError(
            f"{path}: not a valid ONNX model ({refused[1]})",
            hint="a truncated or corrupt file: delete it and export again (edgebuild export --force)",
        )


def _checker_problem(path: Path) -> str | None:
    """Why the full ONNX checker or its strict shape inference refuses an exported model, or None."""
    refused = _checker_refusal(path)
    return None if refused is None else f"wrote a model {refused[0]} ({_hide_path(refused[1], path)})"


def _checker_refusal(path: Path) -> tuple[str, str] | None:
    """(which check, what it says) when the full checker refuses the file, or None."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # onnx raises ValidationError, InferenceError, DecodeError, ...
        which = "strict shape inference fails on" if isinstance(exc, onnx.shape_inference.InferenceError) \
            else "the ONNX checker refuses"
        return which, f"{type(exc).__name__}: {_first_line(exc)}"
    return None


# -- parity --------------------------------------------------------------------------------

def _reference_outputs(project: Project, runner: Any) -> dict[str, tuple[dict, dict]]:
    from edgebuild.sources.model import example_inputs

    return {which: (inputs, runner.run(inputs))
            for which in SHAPES for inputs in [example_inputs(project, which, seed=SHAPES.index(which))]}


def parity_results(project: Project, reference: dict[str, tuple[dict, dict]], runner: Any) -> list[OutputParity]:
    """Every output at every shape against atol + rtol * |torch|, run with an OnnxRuntimeRunner."""
    atol, rtol = project.export.atol, project.export.rtol
    results = []
    for which, (inputs, expected) in reference.items():
        got = runner.run(inputs)
        shapes = {n: list(a.shape) for n, a in inputs.items()}
        for name, want in expected.items():
            results.append(_compare(which, shapes, name, want, got.get(name), atol, rtol))
    return results


def check_parity(project: Project, reference: dict[str, tuple[dict, dict]], path: Path) -> list[OutputParity]:
    """Every output at every shape within atol + rtol * |torch|; one error listing every mismatch."""
    from edgebuild.runtime.backends.onnxruntime import OnnxRuntimeRunner

    results = parity_results(project, reference, OnnxRuntimeRunner(path))
    bad = [r for r in results if not r.ok]
    if bad:
        raise ParityError(
            f"{project.source}: ONNX output differs from PyTorch in {len(bad)} of {len(results)} checks "
            f"(atol {project.export.atol}, rtol {project.export.rtol}):\n"
            + "\n".join(f"  {line}" for line in _mismatch_lines(bad)),
            hint="the model may use an operator the exporter translates inexactly; loosen export.atol/"
                 "export.rtol only if the difference is acceptable",
        )
    return results


def _mismatch_lines(bad: list[OutputParity]) -> list[str]:
    return [f"- {r.output} at {r.shape} {r.input_shapes}: {r.problem}" for r in bad]


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
