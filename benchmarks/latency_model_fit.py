"""Fit the latency plan's efficiency factors to published TensorRT latencies, and say how wrong it is.

Reads ``profiles/reference/published_latency.csv`` (one published figure a row, with its source),
makes each model's ONNX without downloading anything (Ultralytics architectures from their YAML
with random weights; MLPerf's and NVIDIA's DLA reference models and the DLA tutorial's CNNs from
``benchmarks/_latency_models.py``; cached under ``build/latency-onnx/``, never committed), counts
each graph's FLOPs and bytes per fused layer (``edgebuild/latency/graph.py``) and fits the GPU's
factors of ``edgebuild/latency/model.py`` (five, and a per-layer overhead and memory factor for
Blackwell, AGX Thor's GPU) to the GPU figures, then the DLA's five of ``edgebuild/latency/dla.py``
to the DLA figures (their fallback layers at the GPU fit's prediction). Then, for every model,
fits again without that model's figures and predicts them: the leave-one-model-out error, printed
per figure and summarised per accelerator (gpu, dla) and for AGX Thor (median and max relative
error, per precision, module, source and power mode). Writes the full fit, the left-out band and
the errors per accelerator to ``profiles/reference/latency_model.toml``, and the fitted figures'
per-layer counts to ``profiles/reference/published_costs.json`` (what ``edgebuild plan --calibrate``
refits with; ``--no-write`` to only print).

    python benchmarks/latency_model_fit.py [--no-write] [--onnx-dir build/latency-onnx]

Fitted: GPU compute figures (``gpu_compute``, trtexec's GPU Compute Time), figures timed from a
framework (``framework``: Ultralytics' "inference" time, TensorRT called from Python with the input
on the GPU), the latter as if they were GPU compute (a fitted per-call constant was tried: with
three GPU compute figures it could not be told from the per-layer overhead), and the time per batch
a published throughput of one core implies (``throughput``: the DLA's figures). Kept as data and
only compared with the full fit: figures with host transfers (``host_latency``) and MLPerf's
(``harness``: NVIDIA's hand-tuned engines and harness, not a TensorRT build of an ONNX export).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgebuild.latency.dla import dla_time, fit_dla, leave_one_out_dla  # noqa: E402
from edgebuild.latency.graph import GraphCost, graph_cost_from_file  # noqa: E402
from edgebuild.latency.model import (  # noqa: E402
    FITTED,
    OWN_OVERHEAD_ARCHS,
    DlaFit,
    FitSample,
    LatencyModel,
    PublishedLatency,
    fit_latency_model,
    leave_one_out,
    load_published_latencies,
    predict_ms,
    write_latency_model,
    write_published_costs,
)
from edgebuild.targets.profiles import load_catalog  # noqa: E402
from edgebuild.text import python_output_dropped, table  # noqa: E402


def onnx_for(model: str, hw: tuple[int, int], onnx_dir: Path) -> Path:
    """The model's ONNX at input size ``hw``, made once and cached (random weights: only shapes count)."""
    path = onnx_dir / f"{model}-{hw[0]}x{hw[1]}.onnx"
    if path.is_file():
        return path
    onnx_dir.mkdir(parents=True, exist_ok=True)
    if model.startswith("yolo"):
        os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ultralytics-"))
        os.environ.setdefault("YOLO_OFFLINE", "1")
        from ultralytics import YOLO

        with python_output_dropped(stderr=True):
            exported = YOLO(f"{model}.yaml").export(format="onnx", imgsz=list(hw), simplify=False, dynamic=False)
        Path(exported).replace(path)
        return path
    import torch

    from benchmarks._latency_models import MODELS

    if model not in MODELS:
        raise SystemExit(f"{model}: no way to build it here (add it to benchmarks/_latency_models.py)")
    net = MODELS[model]().eval()
    with torch.no_grad(), python_output_dropped(stderr=True):
        torch.onnx.export(net, torch.zeros(1, 3, *hw), str(path), opset_version=17, dynamo=False)
    return path


def samples_for(rows: list[PublishedLatency], onnx_dir: Path) -> list[FitSample]:
    catalog = load_catalog()
    costs: dict[tuple[str, tuple[int, int], int], GraphCost] = {}
    samples = []
    for row in rows:
        key = (row.model, row.input_hw, row.batch)
        if key not in costs:
            costs[key] = graph_cost_from_file(onnx_for(row.model, row.input_hw, onnx_dir), batch=row.batch,
                                              input_hw=row.input_hw)
        module = catalog.modules[row.module]
        modes = [p for p in module.performance if p.power_mode == row.power_mode]
        if not modes:
            raise SystemExit(f"{row.module} has no [[performance]] entry for power mode {row.power_mode}")
        samples.append(FitSample(row, costs[key], modes[0], row.model))
    return samples


def family(model: str) -> str:
    """``yolo11s`` -> ``yolo11``: the sizes of one architecture."""
    return re.sub(r"[nsmlx]$", "", model) if model.startswith("yolo") else model


def _error(measured: float, predicted: float) -> float:
    return abs(predicted - measured) / measured


def summarize(pairs: list[tuple[FitSample, float]], by) -> list[list[str]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for sample, predicted in pairs:
        groups[by(sample)].append(_error(sample.row.latency_ms, predicted))
    return [[name, str(len(errs)), f"{statistics.median(errs):.0%}", f"{max(errs):.0%}"]
            for name, errs in sorted(groups.items())]


def _thor(sample: FitSample) -> bool:
    return sample.performance.gpu_arch in OWN_OVERHEAD_ARCHS


def _errors(pairs: list[tuple[FitSample, float]]) -> tuple[int, float, float]:
    errs = [_error(s.row.latency_ms, p) for s, p in pairs]
    return (len(errs), statistics.median(errs), max(errs)) if errs else (0, 0.0, 0.0)


def _print_gpu(samples: list[FitSample], full: LatencyModel) -> tuple[list, list, list]:
    """The GPU fit's left-out errors, printed; returns the model-, module- and family-left-out pairs."""
    pairs = leave_one_out(samples, lambda s: s.row.model)
    # the band also holds every figure of a module the fit never saw: the plan answers for modules no one
    # published a figure for. A module whose architecture nothing else was measured on (AGX Thor) left out
    # is an architecture left out: printed, not banded (like Xavier's, its prediction is an extrapolation)
    archs = {s.performance.gpu_arch for s in samples}
    by_module = leave_one_out(samples, lambda s: s.row.module)
    banded_modules = [(s, p) for s, p in by_module
                      if sum(1 for o in samples if o.performance.gpu_arch == s.performance.gpu_arch
                             and o.row.module != s.row.module) > 0 or len(archs) == 1]
    by_family = leave_one_out(samples, lambda s: family(s.row.model))
    print(table([[s.row.model, s.row.module, s.row.power_mode, s.row.precision, s.row.includes,
                  f"{s.row.latency_ms:.2f}", f"{p:.2f}",
                  f"{predict_ms(s.cost, s.performance, s.row.precision, full):.2f}",
                  f"{(p - s.row.latency_ms) / s.row.latency_ms:+.0%}"] for s, p in pairs],
                ["model", "module", "power mode", "precision", "includes", "measured ms", "left-out ms",
                 "full-fit ms", "left-out error"]))
    print()
    for title, by in (("precision", lambda s: s.row.precision), ("module", lambda s: s.row.module),
                      ("source", lambda s: s.row.source.split(",")[0]), ("model", lambda s: s.row.model)):
        print(table(summarize(pairs, by), [title, "figures", "median error", "max error"]))
        print()
    print(table(summarize(by_module, lambda s: s.row.module),
                ["module left out", "figures", "median error", "max error"]))
    print()
    print(table(summarize(by_family, lambda s: family(s.row.model)),
                ["family left out", "figures", "median error", "max error"]))
    print()
    print(table(summarize(by_family, lambda s: f"{family(s.row.model)} {s.row.precision}"),
                ["family left out, precision", "figures", "median error", "max error"]))
    print()
    e = full.compute_efficiency
    own = ", ".join(f"{arch}: overhead x{o:.2f}, memory x{m:.2f}" for arch, (o, m) in full.arch_factors.items())
    print(f"GPU fit: compute efficiency fp32 {e['fp32']:.3f} fp16 {e['fp16']:.3f} int8 {e['int8']:.3f}, "
          f"memory {full.memory_efficiency:.3f}, {full.layer_overhead_us:.1f} us per layer at 1 GHz"
          + (f" ({own})" if own else ""))
    for name, chosen in (("gpu (all but Thor)", [x for x in pairs if not _thor(x[0])]),
                         ("thor", [x for x in pairs if _thor(x[0])])):
        n, median, worst = _errors(chosen)
        if n:
            print(f"leave-one-model-out, {name}: {n} figures, median error {median:.1%}, max {worst:.1%}")
    n, median, worst = _errors([x for x in by_module if not _thor(x[0])])
    print(f"leave-one-module-out (all but Thor): median error {median:.1%}, max {worst:.1%}")
    n, median, worst = _errors([x for x in by_module if _thor(x[0])])
    if n:
        print(f"AGX Thor left out (no Blackwell figure left: Ampere's per-layer overhead): median error {median:.1%}, "
              f"max {worst:.1%}")
    n, median, worst = _errors(by_family)
    print(f"leave-one-family-out: median error {median:.1%}, max {worst:.1%}")
    return pairs, banded_modules, by_family


def _print_dla(dla_samples: list[FitSample], gpu: LatencyModel) -> tuple[DlaFit, list]:
    """The DLA fit and its left-out errors, printed; returns the fit (with its band) and the model-left-out pairs."""
    fit = fit_dla(dla_samples, gpu)
    pairs = leave_one_out_dla(dla_samples, gpu)
    by_mode = leave_one_out_dla(dla_samples, gpu, lambda s: s.row.power_mode)
    full = replace(gpu, dla=fit)
    rows = []
    for s, p in pairs:
        parts = dla_time(s.cost, s.performance, s.row.precision, full)
        rows.append([s.row.model, s.row.power_mode, str(s.row.batch), s.row.precision, f"{s.row.latency_ms:.2f}",
                     f"{p:.2f}", f"{parts.seconds * 1e3:.2f}", f"{(p - s.row.latency_ms) / s.row.latency_ms:+.0%}",
                     str(len(parts.fallback_ops)), str(parts.crossings)])
    print(table(rows, ["model", "power mode", "batch", "precision", "measured ms", "left-out ms", "full-fit ms",
                       "left-out error", "fallback layers", "crossings"]))
    print()
    print(table(summarize(pairs, lambda s: s.row.model), ["DLA model", "figures", "median error", "max error"]))
    print()
    print(table(summarize(by_mode, lambda s: s.row.power_mode),
                ["DLA power mode left out", "figures", "median error", "max error"]))
    print()
    n, median, worst = _errors(pairs)
    print(f"DLA fit: INT8 efficiency {fit.compute_int8:.3f}, other layers {fit.other_per_clock:.1f} FLOP per clock, "
          f"memory {fit.memory:.3f}, {fit.layer_overhead_us:.2f} us per layer at 1 GHz, "
          f"{fit.transition_us:.1f} us per GPU<->DLA hand-over")
    print(f"leave-one-model-out, dla: {n} figures, median error {median:.1%}, max {worst:.1%}")
    n, median, worst = _errors(by_mode)
    print(f"leave-one-power-mode-out, dla: median error {median:.1%}, max {worst:.1%}")
    ratios = [s.row.latency_ms / p for s, p in pairs]
    return replace(fit, band_low=min(ratios), band_high=max(ratios)), pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only; leave latency_model.toml as it is")
    parser.add_argument("--onnx-dir", type=Path, default=REPO / "build" / "latency-onnx")
    args = parser.parse_args()

    published = load_published_latencies()
    fitted = [r for r in published if r.includes in FITTED]
    samples = samples_for([r for r in fitted if r.accelerator == "gpu"], args.onnx_dir)
    dla_samples = samples_for([r for r in fitted if r.accelerator == "dla"], args.onnx_dir)
    checked = samples_for([r for r in published if r.includes not in FITTED], args.onnx_dir)
    full = fit_latency_model(samples)
    pairs, by_module, _ = _print_gpu(samples, full)
    # the band: models and modules left out. A family left out is printed, not banded: with YOLO11 out,
    # few figures (most of them FP32) are left to fit the factors
    ratios = [s.row.latency_ms / p for s, p in pairs + by_module]
    print(f"band (measured/predicted, a model or a module left out): {min(ratios):.2f} to {max(ratios):.2f}")
    print()
    dla, dla_pairs = _print_dla(dla_samples, full)

    if checked:
        print()
        print("not fitted (host transfers included, or an engine tuned by hand): the full fit against them")
        print(table([[s.row.model, s.row.module, s.row.precision, s.row.includes, f"{s.row.latency_ms:.2f}",
                      f"{p:.2f}", f"{(p - s.row.latency_ms) / s.row.latency_ms:+.0%}", s.row.source.split(",")[0]]
                     for s in checked for p in [predict_ms(s.cost, s.performance, s.row.precision, full)]],
                    ["model", "module", "precision", "includes", "measured ms", "predicted ms", "error", "source"]))

    models = sorted({s.row.model for s in samples})
    modules = sorted({s.row.module for s in samples})
    errors = [_error(s.row.latency_ms, p) for s, p in pairs if not _thor(s)]
    stored = LatencyModel(
        full.compute_efficiency, full.memory_efficiency, full.layer_overhead_us, min(ratios), max(ratios),
        statistics.median(errors), max(errors),
        (f"{len(samples)} GPU figures + {len(dla_samples)} DLA figures", "models: " + ", ".join(models),
         "DLA models: " + ", ".join(sorted({s.row.model for s in dla_samples})), "modules: " + ", ".join(modules)),
        tuple(sorted({s.row.source_url for s in samples + dla_samples})), tuple(modules),
        arch_factors=full.arch_factors, dla=dla,
        errors={"gpu": _errors([x for x in pairs if not _thor(x[0])]), "dla": _errors(dla_pairs),
                "thor": _errors([x for x in pairs if _thor(x[0])])},
    )
    if not args.no_write:
        print(f"wrote {write_latency_model(stored).relative_to(REPO)}")
        # the graphs' counts, for `edgebuild plan --calibrate` on machines without Ultralytics
        print(f"wrote {write_published_costs(samples + dla_samples).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
