"""Loading the project's PyTorch model from its entry point, and running it.

torch is imported inside the functions that need it, so the CLI starts without it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgebuild.errors import ModelError

if TYPE_CHECKING:
    import torch

    from edgebuild.project.config import Project

__all__ = ["ModelRecord", "TorchRunner", "call_entry_point", "check_model", "example_inputs", "load_model",
           "model_key_parts", "model_source_digest", "outputs_by_name", "resolve_entry_point"]


@contextmanager
def _project_on_path(project: Project) -> Iterator[None]:
    added = [str(project.path(p)) for p in project.model.python_path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)


def _forget_foreign_package(project: Project, top: str) -> None:
    """Drop an already-imported package of this name that came from another project's folder."""
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None)
    if loaded is None or origin is None:
        return
    roots = [project.path(p) for p in project.model.python_path]
    if any(Path(origin).resolve().is_relative_to(root) for root in roots):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def resolve_entry_point(project: Project, spec: str, key: str) -> Any:
    """Import ``package.module:function`` with the project's python_path; errors name ``key``."""
    module_name, _, attr = spec.partition(":")
    _forget_foreign_package(project, module_name.split(".")[0])
    with _project_on_path(project):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ModelError(
                f"{project.source}: {key}: cannot import module {module_name!r}: {exc}",
                hint=f"model.python_path is {project.model.python_path} (relative to {project.root})",
            ) from exc
        except Exception as exc:  # the user's module raised while importing
            raise ModelError(
                f"{project.source}: {key}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        import difflib

        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=1)
        raise ModelError(f"{project.source}: {key}: module {module_name!r} has no function {attr!r}"
                         + (f"; did you mean {close[0]!r}?" if close else ""))
    return function


def call_entry_point(project: Project, spec: str, key: str, *args: Any) -> Any:
    function = resolve_entry_point(project, spec, key)
    with _project_on_path(project):
        try:
            return function(*args)
        except Exception as exc:
            raise ModelError(f"{project.source}: {key}: {spec} raised {type(exc).__name__}: {exc}") from exc


def load_model(project: Project) -> torch.nn.Module:
    """Build the model from its entry point, load the weights, and put it in eval mode."""
    import torch

    model = call_entry_point(project, project.model.entry_point, "model.entry_point")
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"{project.source}: model.entry_point: {project.model.entry_point} returned "
            f"{type(model).__name__}, not a torch.nn.Module"
        )
    if project.model.weights:
        path = project.path(project.model.weights)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise ModelError(f"{project.source}: model.weights: file not found: {path}") from None
        except Exception as exc:
            raise ModelError(f"{project.source}: model.weights: cannot read {path}: {exc}") from exc
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        try:
            model.load_state_dict(state, strict=True)
        except (RuntimeError, TypeError) as exc:
            raise ModelError(
                f"{project.source}: model.weights: {path} does not fit the model: {exc}"
            ) from exc
    return model.eval()


def outputs_by_name(result: Any, names: list[str], source: str) -> dict[str, np.ndarray]:
    """A forward result (tensor, tuple/list or dict of tensors) as {output name: array}."""
    import torch

    if isinstance(result, torch.Tensor):
        values = {names[0]: result} if len(names) == 1 else None
    elif isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise ModelError(
                f"{source}: model.outputs: forward returned keys {sorted(result)}, missing {missing}"
            )
        values = {n: result[n] for n in names}
    elif isinstance(result, (tuple, list)) and len(result) == len(names):
        values = dict(zip(names, result))
    else:
        values = None
    if values is None:
        count = len(result) if isinstance(result, (tuple, list, dict)) else 1
        raise ModelError(
            f"{source}: model.outputs: names {names} do not fit what forward returned "
            f"({type(result).__name__} with {count} value(s))"
        )
    return {n: _as_array(v, n, source) for n, v in values.items()}


def _as_array(value: Any, name: str, source: str) -> np.ndarray:
    import torch

    if not isinstance(value, torch.Tensor):
        # e.g. Ultralytics' Detect head returns (predictions, [feature maps]) in eval mode
        raise ModelError(f"{source}: model.outputs: output {name!r} is a {type(value).__name__}, not a tensor",
                         hint="return only tensors from forward, one per name in model.outputs")
    try:
        return value.detach().cpu().numpy()
    except TypeError as exc:  # a dtype numpy lacks, e.g. bfloat16
        raise ModelError(f"{source}: model.outputs: output {name!r} ({value.dtype}) cannot become an array: "
                         f"{exc}", hint="return float32 (or float16) outputs") from exc


class TorchRunner:
    """Runs the PyTorch model on the CPU with the Runner interface: {name: array} -> {name: array}."""

    backend = "torch-cpu"

    def __init__(self, project: Project, model: torch.nn.Module | None = None) -> None:
        self.project = project
        self.model = model if model is not None else load_model(project)
        self.input_names = [spec.name for spec in project.model.inputs]
        self.output_names = list(project.model.outputs)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        tensors = [torch.from_numpy(np.ascontiguousarray(inputs[name])) for name in self.input_names]
        with torch.inference_mode():
            try:
                result = self.model(*tensors)
            except Exception as exc:
                shapes = {n: list(inputs[n].shape) for n in self.input_names}
                raise ModelError(
                    f"{self.project.source}: model forward at {shapes} raised {type(exc).__name__}: {exc}"
                ) from exc
        return outputs_by_name(result, self.output_names, str(self.project.source))


def model_source_digest(project: Project) -> str:
    """Hash of every Python file under ``model.python_path`` (names and contents), found without
    importing anything: the entry point may import sibling modules, and a change in any of them
    must re-export. The build folder, hidden folders and virtual environments are left out."""
    from edgebuild.content import file_sha256

    build = project.build_dir.resolve()
    entries = []
    for root in (project.path(p) for p in project.model.python_path):
        for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
            parts = path.relative_to(root).parts
            if any(p.startswith(".") or p in ("__pycache__", "site-packages") for p in parts) \
                    or path.resolve().is_relative_to(build):
                continue
            entries.append(f"{path.relative_to(root)}:{file_sha256(path)}")
    from edgebuild.content import digest

    return digest(entries) if entries else "unknown"


def model_key_parts(project: Project) -> dict[str, str]:
    """What the PyTorch model is: its code, entry point, weights and declared inputs/outputs."""
    from edgebuild.content import digest, file_sha256

    weights = project.path(project.model.weights) if project.model.weights else None
    return {
        "model_code": model_source_digest(project),
        "entry_point": project.model.entry_point,
        "weights": file_sha256(weights) if weights and weights.is_file() else "none",
        "io": digest([[s.model_dump() for s in project.model.inputs], project.model.outputs]),
    }


@dataclass(frozen=True)
class ModelRecord:
    """The model stage's result: it loads, and what its forward returns at the profile's shapes."""

    entry_point: str
    parameters: int
    output_shapes: dict[str, dict[str, list[int]]]  # min_shape/opt_shape/max_shape -> output -> shape
    seconds: float


def check_model(project: Project, runner: TorchRunner) -> ModelRecord:
    """Run forward at the min, opt and max shapes and check the outputs against the task.

    A forward that raises, or outputs the task cannot read (shape, class count, dtype, batch),
    is a ModelError that lists every mismatch at once.
    """
    import time

    from edgebuild.sources.task_outputs import raise_for_task_outputs

    started = time.perf_counter()
    runs = {}
    for which in ("min_shape", "opt_shape", "max_shape"):
        inputs = example_inputs(project, which)
        runs[which] = (inputs, runner.run(inputs))
    raise_for_task_outputs(project, runs)
    shapes = {which: {name: list(array.shape) for name, array in outputs.items()}
              for which, (_, outputs) in runs.items()}
    return ModelRecord(project.model.entry_point, sum(p.numel() for p in runner.model.parameters()), shapes,
                       round(time.perf_counter() - started, 3))


def example_inputs(project: Project, which: str = "opt_shape", seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs at the min, opt or max shape of every model input."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for spec in project.model.inputs:
        shape = getattr(spec, which)
        if spec.dtype in ("float32", "float16"):
            inputs[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            inputs[spec.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            inputs[spec.name] = rng.integers(0, 10, shape).astype(spec.dtype)
    return inputs
