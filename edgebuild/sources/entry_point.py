"""Loading the project's PyTorch model from its entry point, and running it.

torch is imported inside the functions that need it, so the CLI starts without it.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgebuild.errors import ModelError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from edgebuild.project.config import Project

__all__ = ["ModelRecord", "TorchRunner", "call_entry_point", "example_inputs", "load_model", "resolve_entry_point"]


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


def _entry_point(project: Project) -> str:
    assert project.model.entry_point is not None, "the entry-point route runs only for a model.entry_point"
    return project.model.entry_point


def call_entry_point(project: Project, spec: str, key: str, *args: Any) -> Any:
    function = resolve_entry_point(project, spec, key)
    with _project_on_path(project):
        try:
            return function(*args)
        except Exception as exc:
            raise ModelError(f"{project.source}: {key}: {spec} raised {type(exc).__name__}: {exc}") from exc


def load_model(project: Project) -> torch.nn.Module:
    """Build the model from its entry point, load the weights, and put it in eval mode."""
    return _load_model_recorded(project)[0]


def _load_model_recorded(project: Project) -> tuple[torch.nn.Module, dict[str, str]]:
    """The model (as ``load_model``) and the files its entry point read while building it: {name: sha256}."""
    import torch

    with _files_opened() as opened:
        model = call_entry_point(project, _entry_point(project), "model.entry_point")
    loaded = _model_files(project, opened)
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
    return model.eval(), loaded


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
        #: the files the entry point read while it built the model (not [model] weights): {name: sha256}
        self.loaded_files: dict[str, str] = {}
        if model is None:
            model, self.loaded_files = _load_model_recorded(project)
        self.model = model
        self.input_names = [spec.name for spec in project.model.inputs]
        self.output_names = list(project.model.outputs)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np
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


# -- what the model is: its key -----------------------------------------------------------------------

def model_source_digest(project: Project) -> str:
    """Hash of every Python file under ``model.python_path`` (names and contents), found without
    importing anything: the entry point may import sibling modules, and a change in any of them
    must re-export. The build folder, hidden folders and virtual environments are left out. When
    the entry point's package lives outside ``model.python_path`` (installed in development mode,
    on PYTHONPATH), its files are hashed too; an installed distribution counts by its version."""
    from edgebuild.content import digest, file_sha256

    build = project.build_dir.resolve()
    entries = []
    roots = [project.path(p) for p in project.model.python_path]
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
            parts = path.relative_to(root).parts
            if any(p.startswith(".") or p in ("__pycache__", "site-packages") for p in parts) \
                    or path.resolve().is_relative_to(build):
                continue
            entries.append(f"{path.relative_to(root)}:{file_sha256(path)}")
    entries += _outside_package_entries(project, roots)
    return digest(entries) if entries else "unknown"


def _outside_package_entries(project: Project, roots: list[Path]) -> list[str]:
    """The entry point's top-level package where it is not under ``roots``: its Python files, or,
    installed with the interpreter's packages, its distribution's version. Found without importing it."""
    import importlib.metadata
    import importlib.util

    from edgebuild.content import file_sha256

    top = _entry_point(project).partition(":")[0].split(".")[0]
    if any((root / top).is_dir() or (root / f"{top}.py").is_file() for root in roots):
        return []  # hashed with model.python_path
    try:
        with _project_on_path(project):
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or (spec.origin in (None, "built-in", "frozen") and not spec.submodule_search_locations):
        return []
    # origin is a file path here: a spec without one or search locations returned above
    where = [Path(d).resolve() for d in spec.submodule_search_locations or [cast(str, spec.origin)]]
    if any(w.is_relative_to(lib) for w in where for lib in _library_roots()):
        dists = sorted(set(_packages_distributions().get(top, [])))
        return [f"{top}: {d}=={importlib.metadata.version(d)}" for d in dists] or [f"{top}: installed"]
    entries = []
    for w in where:
        files = sorted(f for f in w.rglob("*.py") if "__pycache__" not in f.parts) if w.is_dir() else [w]
        entries += [f"{top}/{f.relative_to(w) if w.is_dir() else f.name}:{file_sha256(f)}" for f in files]
    return entries


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    """{top-level package: distributions}: a scan of every installed distribution (a third of a
    second), made once per process."""
    import importlib.metadata

    return dict(importlib.metadata.packages_distributions())


def model_key_parts(project: Project, loaded: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the PyTorch model is: its code, entry point, weights and declared inputs/outputs, and
    ``loaded``: the files the entry point read while it built the model (``loaded:<file>`` parts, see
    ``loaded_file_parts`` before a run and ``recorded_file_parts`` after one)."""
    from edgebuild.content import digest, file_sha256

    weights = project.path(project.model.weights) if project.model.weights else None
    return {
        "model_code": model_source_digest(project),
        "entry_point": _entry_point(project),
        "weights": file_sha256(weights) if weights and weights.is_file() else "none",
        "io": digest([[s.model_dump() for s in project.model.inputs], project.model.outputs]),
        **(loaded or {}),
    }


# -- the files the entry point reads ---------------------------------------------------------------
#
# An entry point may read more than its code and [model] weights: a checkpoint named in its code or
# in an environment variable (Ultralytics' YOLO("best.pt")), a config, a label file. Every file it
# opens for reading while it builds the model is recorded by an audit hook on "open" events
# (sys.addaudithook: builtins.open, io.open, os.open, pathlib, io.open_code), whatever library
# opens it (torch.load with or without mmap, numpy, yaml, PIL, Ultralytics) and however it was
# imported, which wrapping torch.load would not see (numpy, configs, a loader bound by
# ``from torch import load`` before the wrap). Two loaders open their file in native code, past
# that hook: torch.jit.load and safetensors' safe_open; their path argument is recorded instead
# while a recording runs. The ModelRecord keeps each file's sha256 as loaded; the next key
# computation hashes those files again.

_recordings: list[list[str]] = []  # one list of opened paths per recording in progress
_hook_lock = threading.Lock()
_hook_installed = False
_SYSTEM_FOLDERS = ("/etc", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/boot", "/run", "/proc", "/sys",
                   "/dev")
_NATIVE_LOADERS = (("torch.jit", "load"), ("safetensors", "safe_open"), ("safetensors.torch", "safe_open"))


def _on_audit(event: str, args: tuple) -> None:
    """The audit hook: installed once for the process (hooks cannot be removed), idle but for one
    comparison unless a recording is in progress; it must never raise."""
    if event != "open" or not _recordings:
        return
    try:
        path, _, flags = args
        reading = flags is None or (flags & os.O_ACCMODE) == os.O_RDONLY
        if reading and not isinstance(path, int):  # an int is an already open descriptor
            opened = os.path.abspath(os.fsdecode(path))
            for recording in list(_recordings):
                recording.append(opened)
    except Exception:  # an audit hook that raises would fail the user's open()
        pass


def _native_loader(original: Any) -> Any:
    """``original`` with its path argument recorded while a recording is in progress."""

    def loader(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _recordings and isinstance(path, (str, os.PathLike)):
            opened = os.path.abspath(os.fsdecode(path))
            for recording in list(_recordings):
                recording.append(opened)
        return original(path, *args, **kwargs)

    loader._edgebuild_recorded = original  # type: ignore[attr-defined]
    return loader


@contextmanager
def _files_opened() -> Iterator[list[str]]:
    """The absolute paths of the files opened for reading while the block runs (every thread)."""
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_on_audit)
            _hook_installed = True
    opened: list[str] = []
    patched = []
    for module_name, attr in _NATIVE_LOADERS:
        module = sys.modules.get(module_name)
        original = getattr(module, attr, None)
        if original is not None and not hasattr(original, "_edgebuild_recorded"):
            setattr(module, attr, _native_loader(original))
            patched.append((module, attr, original))
    _recordings.append(opened)
    try:
        yield opened
    finally:
        _recordings.remove(opened)
        for module, attr, original in patched:
            setattr(module, attr, original)


def _library_roots() -> list[Path]:
    """Where the interpreter and its installed packages live: their files are versions, not the model."""
    import site
    import sysconfig

    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              *sysconfig.get_paths().values(), *getattr(site, "getsitepackages", lambda: [])()}
    user = getattr(site, "getusersitepackages", lambda: None)()
    places |= {user} if isinstance(user, str) else set()
    return [r for r in (Path(p).resolve() for p in places if p) if len(r.parts) > 1]  # never all of /


def _model_files(project: Project, opened: Iterable[str]) -> dict[str, str]:
    """{name: sha256} of the regular files in ``opened`` that are the model's: under the project
    folder (named relative to it; not in the build folder, hidden folders or Python sources, which
    ``model_source_digest`` hashes), or anywhere else (named absolute) except the interpreter's and
    its packages' files, the temporary folder, hidden folders (~/.cache, ~/.config: libraries'
    caches and settings) and the system's folders (/etc/os-release, read by Ultralytics, is the
    machine, not the model)."""
    import tempfile

    from edgebuild.content import file_sha256

    root, build = project.root.resolve(), project.build_dir.resolve()
    elsewhere = [*_library_roots(), Path(tempfile.gettempdir()).resolve(), *map(Path, _SYSTEM_FOLDERS)]
    files = {}
    for path in map(Path, dict.fromkeys(opened)):
        try:
            real = path.resolve()
            if not real.is_file() or real.suffix in (".py", ".pyc") or real.is_relative_to(build):
                continue
        except OSError:
            continue
        if real.is_relative_to(root) or path.is_relative_to(project.root):
            inside = path.relative_to(project.root) if path.is_relative_to(project.root) else real.relative_to(root)
            if any(p.startswith(".") or p in ("__pycache__", "site-packages") for p in inside.parts[:-1]):
                continue
            name = inside.as_posix()
        elif any(real.is_relative_to(r) for r in elsewhere) or any(p.startswith(".") for p in real.parts[:-1]):
            continue
        else:
            name = str(path)
        try:
            files[name] = file_sha256(path)
        except OSError:
            continue
    return dict(sorted(files.items()))


@dataclass(frozen=True)
class LastModelRun:
    """What the model stage's last run left, as its stage hands it on (``edgebuild.stages.model``):
    the key parts it was stored under and the files the entry point read, {name: sha256 then}."""

    key_parts: Mapping[str, str] = field(default_factory=dict)
    loaded_files: Mapping[str, str] = field(default_factory=dict)


def loaded_file_parts(project: Project, last: LastModelRun) -> dict[str, str]:
    """``loaded:<file>`` -> sha256 now ("missing" if gone), for each file the last model stage run
    recorded as read by the entry point (``ModelRecord.loaded_files``).

    A part is in the key when the file changed since it was loaded, or when the key the last run was
    stored under already has it. The files are known only after a run, so the key that run was
    stored under lacks them: leaving out a file unchanged since it was loaded keeps that key valid,
    and once a change has put a file's part in the stored key it stays, with the hash of the file now.
    """
    parts = {}
    for name, then in last.loaded_files.items():
        part = f"loaded:{name}"
        now = _sha256_now(project, name)
        if part in last.key_parts or now != then:
            parts[part] = now
    return parts


def recorded_file_parts(record: ModelRecord) -> dict[str, str]:
    """``loaded:<file>`` -> sha256 for each file a model stage run read: what a stage after the model
    stage (reference, export) keys on, so that a retrained checkpoint reruns it too."""
    return {f"loaded:{name}": sha for name, sha in sorted(record.loaded_files.items())}


def _sha256_now(project: Project, name: str) -> str:
    from edgebuild.content import file_sha256

    path = Path(name) if os.path.isabs(name) else project.root / name
    try:
        return file_sha256(path)
    except OSError:
        return "missing"


@dataclass(frozen=True)
class ModelRecord:
    """The model stage's result: it loads, and what its forward returns at the profile's shapes."""

    entry_point: str
    parameters: int
    output_shapes: dict[str, dict[str, list[int]]]  # min_shape/opt_shape/max_shape -> output -> shape
    seconds: float
    #: the files the entry point read while it built the model, {name: sha256 then}: relative to the
    #: project folder, or absolute outside it ([model] weights is hashed on its own)
    loaded_files: dict[str, str] = field(default_factory=dict)


def check_model(project: Project, runner: TorchRunner) -> ModelRecord:
    """Run forward at the min, opt and max shapes and check the outputs against the task.

    A forward that raises, or outputs the task cannot read (shape, class count, dtype, batch),
    is a ModelError that lists every mismatch at once; a forward that fails at an image size off
    the model's stride (found by probing, ``probed_stride``) is a ConfigError naming the profile's key.
    """
    import time

    from edgebuild.sources.task_outputs import raise_for_task_outputs

    started = time.perf_counter()
    runs = {}
    for which in _SHAPES:
        inputs = example_inputs(project, which)
        try:
            runs[which] = (inputs, runner.run(inputs))
        except ModelError as exc:
            if isinstance(exc.__cause__, RuntimeError):  # a forward that fails at this size: the stride?
                raise_for_probed_stride(project, runner, which, exc.__cause__)
            raise
    raise_for_task_outputs(project, runs)
    shapes = {which: {name: list(array.shape) for name, array in outputs.items()}
              for which, (_, outputs) in runs.items()}
    # a model file's route (torch_source, ultralytics_checkpoint) keeps this record's numbers, not its name
    built_from = project.model.entry_point or str(project.model.source)
    return ModelRecord(built_from, sum(p.numel() for p in runner.model.parameters()), shapes,
                       round(time.perf_counter() - started, 3), dict(getattr(runner, "loaded_files", {})))


_SHAPES = ("min_shape", "opt_shape", "max_shape")
#: the strides a probe tells apart, smallest first: a model whose image sizes must be multiples of s runs at an odd
#: multiple of s and fails at an odd multiple of s / 2 (one that is not a multiple of s)
_PROBED_STRIDES = (8, 16, 32, 64, 128)


def probed_stride(project: Project, runner: TorchRunner, which: str) -> tuple[int, str] | None:
    """The forward at the profile's ``which`` shape failed: (the model's stride, what showed it) where the model
    runs at an odd multiple of a stride near that size and fails at the odd multiples of the smaller strides
    (the profile's size is not a multiple of the stride found), else None: the failure is not the stride's.
    At most five forwards of the profile's smallest batch."""
    import numpy as np
    spec = project.model.inputs[0]
    shape = list(getattr(spec, which))
    if len(shape) != 4 or len(project.model.inputs) != 1 or min(shape[2:]) < _PROBED_STRIDES[0]:
        return None
    failed = [f"{shape[2]}x{shape[3]}"]
    rng = np.random.default_rng(0)
    for stride in _PROBED_STRIDES:
        size = [_odd_multiple(side, stride) for side in shape[2:]]
        said = f"{size[0]}x{size[1]}"
        if said in failed:
            continue
        images = rng.standard_normal([spec.min_shape[0], shape[1], *size]).astype(spec.dtype)
        try:
            runner.run({spec.name: images})
        except ModelError:
            failed.append(said)
            continue
        if all(side % stride == 0 for side in shape[2:]):
            return None  # the profile's size is a multiple of this stride already: it fails for another reason
        return stride, f"runs at {said}, not at {', '.join(failed[:-1])} or {failed[-1]}" if len(failed) > 1 \
            else f"runs at {said}, not at {failed[0]}"
    return None


def raise_for_probed_stride(project: Project, runner: TorchRunner, which: str, error: Exception) -> None:
    """ConfigError naming the profile's keys whose image size is off the model's stride (``probed_stride``) and the
    nearest sizes that are on it; nothing where the stride does not explain the failed forward."""
    from edgebuild.errors import ConfigError

    found = probed_stride(project, runner, which)
    if found is None:
        return
    stride, said = found
    spec = project.model.inputs[0]
    off = [w for w in _SHAPES if len(getattr(spec, w)) == 4 and any(side % stride for side in getattr(spec, w)[2:])]
    keys = ", ".join(f"model.inputs[0].{w}" for w in off)
    sizes = ", ".join(f"{w} {getattr(spec, w)[2]}x{getattr(spec, w)[3]} (nearest valid: "
                      f"{_nearest_sizes(getattr(spec, w)[2:], stride)})" for w in off)
    raise ConfigError(
        f"{project.source}: {keys}: image size not a multiple of the model's stride {stride}: {sizes}; the forward "
        f"at {which} {getattr(spec, which)} raised {type(error).__name__}: {str(error).strip()[:300]} (the model "
        f"{said})",
        hint=f"make the height and width of min_shape, opt_shape and max_shape (and task.preprocess.input_size) "
             f"multiples of {stride}")


def _odd_multiple(side: int, stride: int) -> int:
    """The odd multiple of ``stride`` nearest ``side`` (the lower one on a tie)."""
    low = max(1, side // stride - (side // stride + 1) % 2)  # the odd multiple at or below side (1 at least)
    return min((low * stride, (low + 2) * stride), key=lambda size: abs(size - side))


def _nearest_sizes(sides: list[int], stride: int) -> str:
    """``96 or 128`` for a side of 100 at stride 32; per side where height and width differ."""
    def nearest(side: int) -> str:
        low, high = side // stride * stride, (side // stride + 1) * stride
        return str(side) if side % stride == 0 else str(high) if low == 0 else f"{low} or {high}"

    if sides[0] == sides[1]:
        return nearest(sides[0])
    return f"height {nearest(sides[0])}, width {nearest(sides[1])}"


def example_inputs(project: Project, which: str = "opt_shape", seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs at the min, opt or max shape of every model input."""
    import numpy as np
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
