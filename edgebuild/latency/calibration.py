"""``edgebuild plan --calibrate BENCH.json...``: the latency plan refitted with the project's own measurements.

Accepted files: what ``edgebuild bench --json`` writes (schema ``edgebuild.bench/1``, one model
folder's run), ``build/bench/<group>.json`` of ``bench --farm`` (the same schema), and a group
folder's bench (``edgebuild.bench-group/1``: each model's run alone is used). Each configuration
measured at concurrency 1 with TensorRT on a Jetson, whose GPU compute time was timed apart (the
bench's copy/compute split), becomes a fit sample: the figure is the p50 GPU compute time, like the
published figures fitted. The bench result names its model folder's group and ONNX (sha256); the
ONNX is looked up in the project's build (``build/engines/<group>``, a fleet's
``build/groups/<group>/<model>``) to count its graph. Anything else is skipped, and said why.

The accepted measurements are kept in ``latency_measurements.json`` beside ``edgebuild.toml`` with
their graphs' counts (a later ``--calibrate`` refits with them and the new files, without the ONNX),
and the refit in ``latency_model.toml`` there: ``edgebuild plan`` in that project uses it and says so.
How the refit weighs them, and the error before and after: ``edgebuild.latency.refit.calibrate``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgebuild.errors import ConfigError
from edgebuild.jsontypes import JsonObject
from edgebuild.latency.measured import LatencyCheck, measurements_of, record_bench
from edgebuild.latency.model import (
    USER_WEIGHT,
    FitSample,
    LatencyModel,
    PublishedLatency,
    compact_cost,
    cost_from_compact,
    load_latency_model,
    write_latency_model,
)
from edgebuild.latency.refit import Calibration, calibrate
from edgebuild.project.layout import BuildLayout, project_latency_files
from edgebuild.runtime.base.files import atomic_write_text
from edgebuild.runtime.bench.bench_result import BENCH_GROUP_SCHEMA as BENCH_GROUP
from edgebuild.runtime.bench.bench_result import BenchResult, GroupBenchResult, read_bench_result
from edgebuild.runtime.bench.schema import SCHEMA as BENCH
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.targets.profiles import Catalog

__all__ = ["CalibrationRun", "calibrate_project", "project_fit", "project_fit_digest"]

SCHEMA = "edgebuild.latency-measurements/1"


def _project_folder(project_dir: Path) -> Path:
    return project_dir.parent if project_dir.is_file() else project_dir


def project_fit(project_dir: Path) -> LatencyModel:
    """The project's own fit (``plan --calibrate``) where it has one, else the published fit."""
    return load_latency_model(_project_fit_file(project_dir))


def project_fit_digest(project_dir: Path) -> str:
    """The content hash of the fit :func:`project_fit` reads ("none" where there is none): what a stored
    prediction depends on."""
    from edgebuild.content import file_sha256
    from edgebuild.latency.model import published_model_path

    path = _project_fit_file(project_dir) or published_model_path()
    return file_sha256(path) if path.is_file() else "none"


def _project_fit_file(project_dir: Path) -> Path | None:
    own, _ = project_latency_files(_project_folder(project_dir))
    return own if own.is_file() else None


def record_measured(project_dir: Path, artifact: Path, result: BenchResult | GroupBenchResult, *, source: str = "bench",
                    progress: Progress = lambda _: None) -> list[Path]:
    """Store a bench result's measurements next to their predictions when ``artifact`` is a model
    folder of the project's build (``latency.measured``); nothing for a folder elsewhere."""
    from edgebuild.errors import EdgebuildError
    from edgebuild.project.config import load_project

    try:
        layout = BuildLayout.of(load_project(project_dir, check_paths=False))
    except EdgebuildError:
        return []
    root, artifact = layout.root.resolve(), artifact.resolve()
    if root not in artifact.parents:
        progress(f"measured latency not recorded: {artifact} is not a model folder of {root}")
        return []
    runs = [(artifact, result)] if isinstance(result, BenchResult) else []
    if isinstance(result, GroupBenchResult):
        from edgebuild.runtime.base.group import model_folders

        folders = model_folders(artifact)
        runs = [(folders[name], alone) for name, alone in result.alone.items() if name in folders]
    fit = project_fit(project_dir)
    written = [p for folder, run in runs if (p := record_bench(layout, folder, run, fit, source)) is not None]
    for path in written:
        progress(f"measured next to predicted: {path}")
    return written


# -- the refit -------------------------------------------------------------------------------

@dataclass(frozen=True)
class CalibrationRun:
    calibration: Calibration
    new: int  # measurements taken from the files given
    kept: int  # measurements from earlier --calibrate runs
    skipped: tuple[str, ...]  # what was not used, and why
    model_path: Path
    measurements_path: Path


def _results(path: Path) -> list[BenchResult]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a bench result ({exc})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema in (BENCH, BENCH_GROUP):
        try:
            result = read_bench_result(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{path}: not a whole bench result ({type(exc).__name__}: {exc})") from None
        return [result] if isinstance(result, BenchResult) else list(result.alone.values())
    raise ConfigError(f"{path}: schema {schema!r} is not a bench result --calibrate reads",
                      hint=f"give what `edgebuild bench --json` writes ({BENCH}, {BENCH_GROUP}); of `bench --farm`, "
                           "build/bench/<group>.json (fleet.json has no per-configuration detail)")


def _onnx_for(layout: BuildLayout, check: LatencyCheck, files: dict[str, str]) -> tuple[Path | None, list[Path]]:
    """The ONNX the result was measured with, found in the project's build by its sha256."""
    from edgebuild.errors import EdgebuildError
    from edgebuild.runtime.base.recipe import Recipe

    folders = [layout.engine(check.group)] + sorted(p for p in layout.fleet_group(check.group).glob("*")
                                                    if p.is_dir())
    wanted = check.onnx_sha256 or files.get("model.onnx")
    for folder in folders:
        try:
            recipe = Recipe.load(folder)
        except EdgebuildError:  # no recipe there (not compiled): not it
            continue
        if recipe.onnx_sha256 == wanted and (folder / recipe.onnx).is_file():
            return folder / recipe.onnx, folders
    return None, folders


def _sample_of(path: Path, result: BenchResult, check: LatencyCheck, layout: BuildLayout,
               catalog: Catalog) -> tuple[JsonObject | None, str | None]:
    """One stored measurement (with its graph's counts), or why the configuration is not one."""
    from edgebuild.latency.graph import graph_cost_from_file

    where = f"{path.name}: {check.group} batch {check.batch} {check.precision}"
    if not check.comparable:
        return None, f"{where}: {check.why_not}"
    if check.includes != "gpu_compute":
        return None, f"{where}: no GPU compute time apart from the copies (the bench's copy/compute split)"
    module = catalog.modules.get(check.module)
    if module is None or not any(p.power_mode == check.power_mode for p in module.performance):
        return None, f"{where}: no {check.module} power mode {check.power_mode} in profiles/modules"
    onnx, searched = _onnx_for(layout, check, result.artifact.files)
    if onnx is None:
        return None, (f"{where}: its ONNX (sha256 {(check.onnx_sha256 or '?')[:12]}) is not in "
                      f"{', '.join(str(p) for p in searched)}: calibrate in the project that compiled it")
    cost = graph_cost_from_file(onnx, batch=check.batch, input_hw=check.input_hw)
    return {"model": result.artifact.model, "input_hw": list(cost.input_hw or (0, 0)), "batch": check.batch,
            "module": check.module, "power_mode": check.power_mode, "jetpack": check.jetpack,
            "tensorrt": check.tensorrt or "", "precision": check.precision, "latency_ms": check.measured_ms,
            "includes": check.includes, "source": f"your measurement on {check.ran_on}, {check.when}",
            "source_url": str(path.resolve()), "onnx_sha256": check.onnx_sha256, "when": check.when,
            "layers": compact_cost(cost)}, None


def _fit_sample(stored: JsonObject, catalog: Catalog) -> FitSample:
    hw = (int(stored["input_hw"][0]), int(stored["input_hw"][1]))
    row = PublishedLatency(stored["model"], hw, int(stored["batch"]), stored["module"], stored["power_mode"],
                           stored["jetpack"], stored["tensorrt"], stored["precision"], float(stored["latency_ms"]),
                           stored["includes"], stored["source"], stored["source_url"])
    perf = next(p for p in catalog.modules[row.module].performance if p.power_mode == row.power_mode)
    return FitSample(row, cost_from_compact(stored["layers"], row.batch, hw), perf)


def _key(stored: JsonObject) -> tuple:
    return (stored["onnx_sha256"], stored["module"], stored["power_mode"], stored["precision"], stored["batch"],
            stored["when"])


def calibrate_project(project_dir: Path, bench_files: list[Path], *, weight: float = USER_WEIGHT,
                      progress: Progress = lambda _: None) -> CalibrationRun:
    """Refit with the measurements in ``bench_files`` and those kept from earlier runs; write both files."""
    from edgebuild.project.config import load_project
    from edgebuild.targets.profiles import load_catalog

    folder = _project_folder(project_dir)
    layout = BuildLayout.of(load_project(project_dir, check_paths=False))
    model_path, measurements_path = project_latency_files(folder)
    catalog = load_catalog()
    kept = json.loads(measurements_path.read_text()).get("measurements", []) if measurements_path.is_file() else []
    stored = {_key(m): m for m in kept}
    skipped, new = [], 0
    for path in bench_files:
        for result in _results(path):
            for check in measurements_of(result):
                sample, why = _sample_of(path, result, check, layout, catalog)
                if sample is None:
                    skipped.append(why or f"{path}: not a measurement")
                elif _key(sample) not in stored:
                    stored[_key(sample)] = sample
                    new += 1
    if not stored:
        raise ConfigError("no measurement to calibrate with: " + ("; ".join(skipped) or "no configuration in the "
                                                                  "files"),
                          hint="calibrate with results of `edgebuild bench --json` run with TensorRT on a Jetson")
    progress(f"refitting with {len(stored)} of your measurements ({new} new); leave-one-out fits take a few seconds")
    calibration = calibrate([_fit_sample(s, catalog) for s in stored.values()], weight=weight)
    write_latency_model(calibration.model, model_path, written_by="edgebuild plan --calibrate")
    atomic_write_text(measurements_path, json.dumps({"schema": SCHEMA, "weight": weight,
                                                     "measurements": list(stored.values())}, indent=1))
    return CalibrationRun(calibration, new, len(stored) - new, tuple(skipped), model_path, measurements_path)
