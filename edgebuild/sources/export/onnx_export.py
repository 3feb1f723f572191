"""ONNX export with dynamic axes, trusted only after it is reloaded and matches PyTorch.

The exported file is the input of every later stage. Each exporter's model (``auto``: TorchScript,
the faster, then dynamo; see ``AUTO_ORDER``) is checked in turn (``edgebuild.sources.export.checks``):
the opset it actually wrote, the full ONNX checker with strict shape inference, an ONNX Runtime
session at the min, opt and max shapes, and parity with PyTorch output by output. The first that
passes every check is renamed into ``build/export/opset<N>/`` with its record, ``export.json``,
which says why any earlier exporter was refused; ``export.exporter = "dynamo"`` or
``"torchscript"`` tries only that one. When none passes, the error (``edgebuild.sources.export.advice``)
lists why each failed and, where a higher opset would work, which targets' TensorRT caps the opset.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.content import atomic_output_dir, digest, file_sha256, tool_versions
from edgebuild.errors import ExportError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.project.schema import InputSpec
from edgebuild.sources.export.advice import export_failure
from edgebuild.sources.export.checks import (
    OutputParity,
    Refused,
    checker_problem,
    exported_problem,
    mismatch_lines,
    one_file_bytes,
    parity_results,
    reference_outputs,
    save_onnx,
    simplify,
    tolerance_words,
)
from edgebuild.sources.export.tool_output import first_line, hide_path, native_output_dropped, quiet
from edgebuild.text import Progress

if TYPE_CHECKING:
    import onnx
    import torch

    from edgebuild.project.config import Project
    from edgebuild.sources.entry_point import ModelRecord, TorchRunner
    from edgebuild.targets.profiles import JetPackRelease, SelectedGroup

__all__ = ["ExportRecord", "choose_opset"]

STAGE_VERSION = "export/2"
MODEL_FILE = "model.onnx"
RECORD_FILE = "export.json"

_IN_MEMORY_LIMIT = 1_500_000_000  # weight bytes; above this the TorchScript exporter writes to a file

# export.exporter = "auto": the TorchScript exporter first, the dynamo exporter if its model fails a
# check. TorchScript's traced export is 8x to 45x faster than dynamo's (torch.export, decompositions,
# onnxscript): 0.28 s against 12.2 s on the shapes example (docs/benchmarks.md#exporter-speed), and
# at opset 17 dynamo's model is often refused anyway (opset 18 written; YOLO's Split). Either model
# is checked the same way, so the faster goes first and dynamo is the fallback for what TorchScript
# cannot translate (operators without a TorchScript symbolic, e.g. torch.diff).
AUTO_ORDER = ("torchscript", "dynamo")
_EXPORTER_NAMES = {"torchscript": "TorchScript exporter", "dynamo": "dynamo exporter with dynamic_shapes"}


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
    inputs: list[InputSpec]  # [model.inputs] as exported
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

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["onnx_path"] = str(self.onnx_path)
        data["inputs"] = [spec.model_dump() for spec in self.inputs]
        data["stage"] = STAGE_VERSION
        return data

    @classmethod
    def from_dict(cls, data: JsonObject, folder: Path) -> ExportRecord:
        data = {k: v for k, v in data.items() if k not in ("stage", "reused")}
        data["onnx_path"] = folder / MODEL_FILE  # the folder may have moved since
        data["parity"] = [OutputParity(**p) for p in data["parity"]]
        data["inputs"] = [InputSpec.model_validate(spec) for spec in data["inputs"]]
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
        return _without_layer_norm(project, releases, ceiling) or (ceiling, _ceiling_reason(releases, ceiling))
    if requested > ceiling:
        raise ExportError(
            f"{project.source}: export.opset: {requested} is above what {limiting} can parse "
            f"(max opset {ceiling})",
            hint=f"set export.opset <= {ceiling}, or remove it to use {ceiling}",
        )
    return requested, f"export.opset in the project file (every target's TensorRT parser takes up to {ceiling})"


def _without_layer_norm(project: Project, releases: list[JetPackRelease], ceiling: int) -> tuple[int, str] | None:
    """(16, why) for an Ultralytics RT-DETR checkpoint (LayerNorms in its encoder and decoder) whose fleet has a
    TensorRT parser without LayerNormalization (8.5, JetPack 5.1): from opset 17 the exporter writes one such
    node per LayerNorm, below it the basic operators every parser takes (known-restrictions.toml); else None."""
    from edgebuild.project.ultralytics_facts import source_facts
    from edgebuild.targets.preflight import parser_table, restrictions

    since = restrictions().get("decomposed_below", {}).get("LayerNormalization", {}).get("since_opset", 0)
    lacking = [r for r in releases
               if not parser_table(r.tensorrt).get("operators", {}).get("LayerNormalization", {}).get("supported")]
    if not since or ceiling < since or not lacking:
        return None
    facts = source_facts(project)
    if facts is None or facts.told_by != "checkpoint" or not facts.detr:
        return None
    return since - 1, (f"{_ceiling_reason(releases, ceiling)}; {since - 1}, below LayerNormalization's opset "
                       f"{since}: RT-DETR's LayerNorms are written as basic operators, since {_parsers(lacking)} "
                       "does not parse LayerNormalization")


def _parsers(releases: Iterable[JetPackRelease]) -> str:
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


# -- cache key -----------------------------------------------------------------------------

def cache_key_parts(project: Project, opset: int, record: ModelRecord | None = None) -> dict[str, str]:
    """What an export depends on: the model (with the files its entry point read, as the model stage's
    ``record`` has them), the opset, the export settings and the tools."""
    from edgebuild.sources.entry_point import model_key_parts, recorded_file_parts

    return {
        **model_key_parts(project, recorded_file_parts(record) if record is not None else None),
        "opset": str(opset),
        "settings": digest(project.export.model_dump()),
        "tools": digest(tool_versions("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript")),
    }


def export_dir(project: Project, opset: int) -> Path:
    return BuildLayout.of(project).export(opset)


# -- export --------------------------------------------------------------------------------

def export_model(project: Project, opset: int, opset_reason: str, *, progress: Progress = lambda _: None,
                 torch_runner: TorchRunner | None = None, groups: Sequence[SelectedGroup] | None = None,
                 key_parts: dict[str, str] | None = None, source_note: str = "") -> ExportRecord:
    """Export the project's model as ONNX at ``opset``; raises on any mismatch.

    ``groups`` are the targets the opset was chosen for (default: the project's fleet): when no
    exporter's model passes, the error names those whose TensorRT caps the opset. Whether an
    earlier export can be reused is the pipeline's decision (``edgebuild.pipeline.runner``).
    A model file loaded into PyTorch by its own route (no entry point) passes its loaded
    ``torch_runner``, its own ``key_parts`` and a ``source_note`` (where the model came from).
    """
    started = time.perf_counter()
    from edgebuild.sources.entry_point import TorchRunner

    torch_runner = torch_runner or TorchRunner(project)
    reference = reference_outputs(project, torch_runner)  # a forward that raises stops here
    parts = key_parts if key_parts is not None else cache_key_parts(project, opset)
    with atomic_output_dir(export_dir(project, opset)) as staging:
        path = staging / MODEL_FILE
        try:
            passed = _export_checked(project, torch_runner.model, reference, opset, path, progress,
                                     simplify_model=project.export.simplify)
        except _NoExporterPassed as failed:
            probe = functools.partial(_passes_at, project, torch_runner.model, reference)
            raise export_failure(project, opset, failed.refused, groups, progress, probe) from None
        files = {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
        record = ExportRecord(
            onnx_path=export_dir(project, opset) / MODEL_FILE,
            files=files,
            opset=opset,
            opset_reason=opset_reason,
            exporter=passed.exporter,
            exporter_note=passed.note + (f"; {source_note}" if source_note else ""),
            simplified=passed.simplified,
            simplify_note=passed.simplify_note,
            inputs=list(project.model.inputs),
            outputs=list(project.model.outputs),
            dynamic_axes=_dynamic_axis_names(project),
            atol=project.export.atol,
            rtol=project.export.rtol,
            parity=passed.parity,
            cache_key=digest(parts),
            key_parts=parts,
            versions=tool_versions("torch", "onnx", "onnxruntime", "onnxslim", "onnxscript"),
            seconds=round(time.perf_counter() - started, 3),
            failed_attempts=[r.summary for r in passed.refused],
        )
        (staging / RECORD_FILE).write_text(json.dumps(record.as_dict(), indent=2))
    return record


def _dynamic_axis_names(project: Project) -> dict[str, dict[str, str]]:
    """{input name: {axis: symbolic name}} for every axis whose min and max differ."""
    names = {}
    for spec in project.model.inputs:
        image_like = len(spec.opt_shape) == 4
        readable = {0: "batch", 2: "height", 3: "width"} if image_like else {0: "batch"}
        names[spec.name] = {str(a): readable.get(a, f"{spec.name}_dim{a}") for a in spec.dynamic_axes}
    return names


def _example_args(project: Project) -> tuple[torch.Tensor, ...]:
    """Inputs at the opt shape, with dynamic axes of size 1 made 2 so no exporter specialises them."""
    import numpy as np
    import torch

    from edgebuild.sources.entry_point import example_inputs

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
    """Wrap the model so forward returns a tuple in the project's output order. A ScriptModule (a
    TorchScript file) is given as is: the TorchScript exporter takes it only unwrapped."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return model

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


# -- each exporter in turn, each model checked ------------------------------------------------

class _NoExporterPassed(Exception):
    """No exporter's model passed: why each was refused."""

    def __init__(self, refused: list[Refused]) -> None:
        super().__init__("; ".join(r.summary for r in refused))
        self.refused = refused


@dataclass(frozen=True)
class _Passed:
    """The model at the path passed every check: which exporter wrote it, why that one, and its checks."""

    exporter: str
    note: str
    refused: list[Refused]  # the exporters tried before it, and why each was refused
    parity: list[OutputParity]
    simplified: bool
    simplify_note: str


def _export_checked(project: Project, model: torch.nn.Module, reference: dict, opset: int, path: Path,
                    progress: Progress, *, simplify_model: bool) -> _Passed:
    """Each exporter in turn until one's model passes every check; why each earlier one did not."""
    choice = project.export.exporter
    attempts = AUTO_ORDER if choice == "auto" else (choice,)
    wrapped = _outputs_in_order(model, list(project.model.outputs))
    args = _example_args(project)
    refused: list[Refused] = []
    for exporter in attempts:
        progress(f"export: trying the {exporter} exporter at opset {opset}")
        try:
            parity, simplified, simplify_note = _attempt(project, exporter, wrapped, args, reference, opset, path,
                                                         progress, simplify_model)
        except Refused as why:
            refused.append(why)
            progress(f"export: {why.summary}" + ("; falling back" if exporter != attempts[-1] else ""))
            continue
        return _Passed(exporter, _exporter_note(exporter, choice, refused), refused, parity, simplified,
                       simplify_note)
    raise _NoExporterPassed(refused)


def _attempt(project: Project, exporter: str, module: torch.nn.Module, args: tuple, reference: dict, opset: int,
             path: Path, progress: Progress, simplify_model: bool) -> tuple[list[OutputParity], bool, str]:
    """One exporter's model, written to ``path`` and checked, cheapest check first; raises Refused.

    The checks: the exporter's own result (opset actually written, inputs, outputs), the full ONNX
    checker with strict shape inference, an ONNX Runtime session, and parity with PyTorch. With
    ``simplify_model``, onnxslim's version replaces the model if it passes all of them itself; only
    when it does not is the exporter's own model run in ONNX Runtime. Returns the kept model's
    parity, whether it is onnxslim's, and what onnxslim did.
    """
    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    export = _export_dynamo if exporter == "dynamo" else _export_torchscript
    try:
        proto = export(project, module, args, opset)
    except Exception as exc:  # exporters raise many types; each is reported as why this attempt failed
        raise Refused(exporter, f"failed: {type(exc).__name__}: {first_line(exc)}") from None
    problem = exported_problem(project, proto, opset)  # e.g. dynamo kept opset 18: refused before any write
    inline = None
    if problem is None:
        _rename_dynamic_dims(project, proto)
        _remove_model(path)
        # one file: checked from memory and written only if it is the model kept (onnxslim's usually is)
        inline = one_file_bytes(proto, project.export.external_data)
        if inline is None:
            save_onnx(proto, path, project.export.external_data)
        problem = checker_problem(path, inline)
    if problem is not None:
        raise Refused(exporter, problem)
    simplify_note = "disabled (export.simplify = false)"
    if simplify_model:
        simplify_note, simplified_parity = simplify(project, reference, path, progress,
                                                    proto if inline is not None else None)
        if simplified_parity is not None:
            return simplified_parity, True, simplify_note
    if inline is not None:
        path.write_bytes(inline)
    try:
        with native_output_dropped():  # ONNX Runtime logs its errors too; the message below has them
            results = parity_results(project, reference, OnnxRuntimeRunner(path))
    except ExportError as exc:  # cannot load, or fails to run at some shape
        raise Refused(exporter, f"wrote a model ONNX Runtime refuses ({hide_path(exc.message, path)})") from None
    bad = [r for r in results if not r.ok]
    if bad:
        raise Refused(exporter, f"wrote a model whose outputs differ from PyTorch in {len(bad)} of {len(results)} "
                                f"checks ({tolerance_words(project.export.atol, project.export.rtol)})",
                      tuple(mismatch_lines(bad)), parity=True)
    return results, False, simplify_note


def _exporter_note(exporter: str, choice: str, refused: list[Refused]) -> str:
    """Which exporter wrote the model and why that one: forced, tried first, or why the earlier were refused."""
    name = _EXPORTER_NAMES[exporter]
    if refused:
        return f"{name}, because " + "; ".join(r.summary for r in refused)
    if choice != "auto":
        return f'{name} (export.exporter = "{choice}")'
    return f"{name} (export.exporter = \"auto\" tries it first: the faster exporter)"


def _remove_model(path: Path) -> None:
    """Clear what an earlier attempt wrote (the model and its external data)."""
    path.unlink(missing_ok=True)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)


def _passes_at(project: Project, model: torch.nn.Module, reference: dict, opset: int) -> str | None:
    """The exporter whose model passes every check at ``opset``, or None; written to a scratch folder."""
    import tempfile

    scratch = export_dir(project, opset).parent
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".probe-opset{opset}-", dir=scratch) as tmp:
        try:
            return _export_checked(project, model, reference, opset, Path(tmp) / MODEL_FILE, lambda _: None,
                                   simplify_model=False).exporter
        except _NoExporterPassed:
            return None


# -- the exporters -----------------------------------------------------------------------------

def _export_dynamo(project: Project, module: torch.nn.Module, args: tuple, opset: int) -> onnx.ModelProto:
    import torch
    from torch.export import Dim

    # one entry per forward parameter: the wrapper's single *inputs parameter holds them all
    dynamic_shapes = (tuple({axis: Dim.DYNAMIC for axis in spec.dynamic_axes} for spec in project.model.inputs),)
    with quiet():
        program = torch.onnx.export(
            module, args, dynamo=True, opset_version=opset, dynamic_shapes=dynamic_shapes,
            input_names=[s.name for s in project.model.inputs], output_names=list(project.model.outputs),
            optimize=True, verbose=False, report=False,
        )
    assert program is not None, "torch.onnx.export(dynamo=True) returns the ONNXProgram"
    return program.model_proto


def _export_torchscript(project: Project, module: torch.nn.Module, args: tuple, opset: int) -> onnx.ModelProto:
    """The TorchScript exporter's model, written to memory; to a scratch file only where protobuf may not
    hold the weights (its exporter then needs a path for external data)."""
    import io
    import tempfile

    import onnx
    import torch

    axes = {name: {int(a): n for a, n in dims.items()} for name, dims in _dynamic_axis_names(project).items()}

    def export(target: str | io.BytesIO) -> None:
        torch.onnx.export(
            module, args,
            target,  # type: ignore[arg-type]  # torch's stub: a path only; this exporter writes a BytesIO too
            dynamo=False, opset_version=opset, dynamic_axes=axes, do_constant_folding=True,
            input_names=[s.name for s in project.model.inputs], output_names=list(project.model.outputs))

    if _weight_bytes(module) < _IN_MEMORY_LIMIT:
        buffer = io.BytesIO()
        with quiet():
            export(buffer)
        return onnx.load_model_from_string(buffer.getvalue())
    with tempfile.TemporaryDirectory() as tmp, quiet():
        path = Path(tmp) / MODEL_FILE
        export(str(path))
        return onnx.load(str(path))


def _weight_bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def _rename_dynamic_dims(project: Project, proto: onnx.ModelProto) -> None:
    """Give the symbolic dims the readable names (batch, height, width) everywhere in the graph."""
    mapping: dict[str, str] = {}
    graph_inputs = {i.name: i for i in proto.graph.input}
    for name, axes in _dynamic_axis_names(project).items():
        dims = graph_inputs[name].type.tensor_type.shape.dim
        for axis, readable in axes.items():
            if dims[int(axis)].dim_param:
                mapping.setdefault(dims[int(axis)].dim_param, readable)
    for value in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in mapping:
                dim.dim_param = mapping[dim.dim_param]
