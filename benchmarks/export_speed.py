"""How much does the export stage cost over a bare ``torch.onnx.export``? (the exporter's order and the checks)

For each project, on a fresh copy: the model stage once (untimed: it leaves the model's record,
as an earlier compile would); then, each in a fresh Python process that has imported torch and
nothing else yet, one run of

- the export stage as ``edgebuild export --force`` runs it (``select_work`` +
  ``compile_work(until="export", force={"export"})``: the model loaded, PyTorch's reference
  outputs, the export, its checks, onnxslim and its re-check, the record);
- a bare export as a user's script runs it: the model loaded (its entry point, which imports
  torchvision or Ultralytics where the model needs them, and its weights), then one
  ``torch.onnx.export`` with the exporter the stage chose, at the same opset with the same dynamic
  axes; both are timed, and the ratio is given against their sum (the goal) and against the
  export call alone;
- the other exporter's bare ``torch.onnx.export``, for comparison.

    python benchmarks/export_speed.py [PROJECT_DIR ...] [--target all] [--zoo resnet18]

``--zoo NAME`` adds a model of tests/zoo (torchvision through the shim in tests/support/zoo.py);
Ultralytics runs offline with its settings in a temporary folder. Last, a fresh process times the
imports of the stage's tools. Exits 1 when a stage costs more than 1.5x its bare export (model
load + ``torch.onnx.export``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GOAL = 1.5  # the stage against a bare export (model load + torch.onnx.export) with the exporter it chose


def _copy(project: Path, into: Path) -> Path:
    target = into / project.name
    shutil.copytree(project, target, ignore=shutil.ignore_patterns("build", "__pycache__", "data"))
    return target


def _zoo_project(name: str, into: Path) -> Path:
    from tests.support.zoo import project_toml, write_images
    from tests.zoo.test_zoo import CLASSES, MODELS, WRAPPERS

    zoo = MODELS[name]
    root = into / f"zoo_{name}"  # its wrappers import torchvision through the shim themselves
    package = root / f"zoo_{name}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(WRAPPERS, package / "model.py")
    outputs = ["boxes", "scores"] if zoo.task == "detection" else ["logits"]
    (root / "edgebuild.toml").write_text(project_toml(name.replace("_", "-"), f"zoo_{name}.model:{zoo.function}",
                                                      zoo.task, CLASSES, zoo.input_size, zoo.shapes, outputs,
                                                      zoo.extra))
    write_images(root, zoo.task, CLASSES)
    return root


def _bare_export(root: Path, exporter: str, opset: int) -> dict[str, float]:
    """Seconds of loading the model as the stage loads it and of one ``torch.onnx.export`` of it (outputs
    in order, the same example inputs) with ``exporter``, ``opset`` and the dynamic axes; export -1 when
    it raises."""
    import torch
    from torch.export import Dim

    from edgebuild.project.config import load_project
    from edgebuild.sources.entry_point import load_model
    from edgebuild.sources.export.onnx_export import _dynamic_axis_names, _example_args, _outputs_in_order
    from edgebuild.sources.export.tool_output import quiet

    project = load_project(root)
    started = time.perf_counter()  # a user's script builds the model too: its imports, its weights
    model = load_model(project)
    load = time.perf_counter() - started
    module = _outputs_in_order(model, list(project.model.outputs))
    args = _example_args(project)
    names = {"input_names": [s.name for s in project.model.inputs], "output_names": list(project.model.outputs)}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bare.onnx")
        started = time.perf_counter()
        try:
            with quiet():
                if exporter == "dynamo":
                    shapes = (tuple({a: Dim.DYNAMIC for a in s.dynamic_axes} for s in project.model.inputs),)
                    torch.onnx.export(module, args, path, dynamo=True, opset_version=opset, dynamic_shapes=shapes,
                                      report=False, **names)
                else:
                    axes = {n: {int(a): v for a, v in d.items()} for n, d in _dynamic_axis_names(project).items()}
                    torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, dynamic_axes=axes,
                                      **names)
        except Exception:  # the other exporter may not take this model at this opset
            return {"load": load, "export": -1.0}
        return {"load": load, "export": time.perf_counter() - started}


def _stage(root: Path, selector: str) -> dict:
    """One forced export stage, timed, with where its time went (from its own messages)."""
    from edgebuild.pipeline.runner import Options
    from edgebuild.project.config import load_project
    from edgebuild.stages import compile_work
    from edgebuild.stages.export import EXPORT
    from edgebuild.workflows.work import select_work

    work = select_work(load_project(root), selector)
    started = time.perf_counter()
    marks: list[tuple[float, str]] = []
    done = compile_work(work, until="export", options=Options(force=frozenset({"export"}), progress=False),
                        progress=lambda m: marks.append((time.perf_counter() - started, m)))
    end = time.perf_counter() - started
    outcome = done.outcome(EXPORT)
    if outcome.error is not None:
        sys.exit(f"{root.name}: the export stage failed: {outcome.error}")
    record = outcome.record()
    # before the first exporter (the model loaded, PyTorch's reference outputs), each exporter with the
    # ONNX checker, then onnxslim, ONNX Runtime and parity with PyTorch (on the model kept) and the record
    tried = next((t for t, m in marks if m.startswith("export: trying")), 0.0)
    slim = next((t for t, m in marks if m.startswith("export: simplifying")), end)
    return {"stage": outcome.units[0].seconds, "exporter": record.exporter, "opset": record.opset,
            "refused": record.failed_attempts, "phases": [tried, slim - tried, end - slim]}


def _import_seconds() -> dict[str, float]:
    """What importing the stage's tools costs, in the order the stage imports them."""
    import importlib

    seconds = {}
    for name in ("torch.onnx", "onnx", "onnxruntime", "onnxslim"):
        started = time.perf_counter()
        importlib.import_module(name)
        seconds[name] = time.perf_counter() - started
    return seconds


def _child(*args: str) -> dict:
    """Run this script's ``--child`` in a fresh process (torch imported before any clock starts)."""
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    line = next((line for line in reversed(out.stdout.splitlines()) if line.startswith("{")), None)
    if out.returncode != 0 or line is None:
        sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
    return json.loads(line)


def measure(root: Path, selector: str) -> dict:
    from edgebuild.pipeline.runner import Options
    from edgebuild.project.config import load_project
    from edgebuild.stages import compile_work
    from edgebuild.stages.model import MODEL
    from edgebuild.workflows.work import select_work

    first = compile_work(select_work(load_project(root), selector), until="model",
                         options=Options(progress=False)).outcome(MODEL)
    if first.error is not None:
        sys.exit(f"{root.name}: the model stage failed: {first.error}")
    row = {"project": root.name.removeprefix("zoo_"), **_child("stage", str(root), selector)}
    other = "dynamo" if row["exporter"] == "torchscript" else "torchscript"
    bare = _child("bare", str(root), row["exporter"], str(row["opset"]))
    row["load"], row["bare"] = bare["load"], bare["export"]
    row["other"], row["bare_other"] = other, _child("bare", str(root), other, str(row["opset"]))["export"]
    return row


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        import torch  # noqa: F401  (both sides start with torch imported)

        what = sys.argv[2]
        if what == "imports":
            result = _import_seconds()
        elif what == "stage":
            result = _stage(Path(sys.argv[3]), sys.argv[4])
        else:
            result = _bare_export(Path(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="*", type=Path,
                        default=[REPO / "examples/shapes-detector", REPO / "examples/digits-classifier"])
    parser.add_argument("--target", default="all", help="fleet groups, as edgebuild export --target (default: all)")
    parser.add_argument("--zoo", action="append", default=[], help="a tests/zoo model, e.g. resnet18")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(tmp) / "ultralytics"))  # offline, no settings written
        os.environ.setdefault("YOLO_OFFLINE", "1")
        os.environ.setdefault("YOLO_VERBOSE", "False")
        roots = [_copy(p.resolve(), Path(tmp)) for p in args.projects]
        if args.zoo:
            roots += [_zoo_project(name, Path(tmp)) for name in args.zoo]
        for root in roots:
            rows.append(measure(root, args.target))
            print(f"{rows[-1]['project']}: measured", file=sys.stderr, flush=True)
    print("| project | exporter (opset) | export stage s | bare: model load s | bare: torch.onnx.export s "
          "| ratio to load + export | ratio to the export alone | other exporter, bare s "
          "| stage: before the export / export + ONNX checker / onnxslim + ONNX Runtime parity + record s |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = []
    for r in rows:
        ratio = r["stage"] / (r["load"] + r["bare"]) if r["bare"] > 0 else float("inf")
        alone = r["stage"] / r["bare"] if r["bare"] > 0 else float("inf")
        other = f"{r['other']} {r['bare_other']:.2f}" if r["bare_other"] >= 0 else f"{r['other']} raises"
        phases = " / ".join(f"{p:.2f}" for p in r["phases"])
        print(f"| {r['project']} | {r['exporter']} ({r['opset']}) | {r['stage']:.2f} | {r['load']:.2f} "
              f"| {r['bare']:.2f} | {ratio:.2f}x | {alone:.2f}x | {other} | {phases} |")
        for why in r["refused"]:
            print(f"|   | refused first: {why} | | | | | | | |")
        if ratio > GOAL:
            failed.append(r["project"])
    imports = _child("imports")
    print("\ntool imports in a fresh process with torch imported (each stage pays them once): "
          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in imports.items()))
    if failed:
        sys.exit(f"FAIL: the export stage costs more than {GOAL}x the bare export (model load + torch.onnx.export) "
                 f"for {', '.join(failed)}")


if __name__ == "__main__":
    main()
