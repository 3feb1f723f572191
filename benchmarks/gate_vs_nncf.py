"""edgebuild's INT8 gate against NNCF's accuracy-controlled quantization, in one run.

Both start from the same FP32 ONNX (edgebuild's export of the project), the same calibration
images, the same validation images, the same metric (edgebuild's decode and COCO mAP / top-1)
and the same threshold (``accuracy.min_retention`` as NNCF's relative ``max_drop``):

- edgebuild: `edgebuild validate --force --json` (the whole command: Python start-up, every
  candidate measured again, the INT8 fallback if plain INT8 fails);
- NNCF: `nncf.quantize_with_accuracy_control` on the ONNX model (its default INT8 PTQ, then
  reverting quantized layers until the drop is within max_drop), timed in this process.

Prints, for both: wall time, the selected model's metric and retention, weighted layers (Conv,
ConvTranspose, Gemm, MatMul) left in float, weighted layers with quantized weights; and the
ratios. Both final models are scored by the same evaluation code.

    pip install 'nncf>=2.14'      # benchmark-only (the `bench` extra), never a runtime dependency
    python benchmarks/gate_vs_nncf.py [PROJECT_DIR]   (default: examples/shapes-detector)
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from edgebuild.project.schema import WEIGHTED_OPS

ROOT = Path(__file__).resolve().parent.parent


def weighted_layers(model) -> tuple[int, int]:
    """(weighted layers whose weight comes through DequantizeLinear, weighted layers in all)."""
    produced = {out: node.op_type for node in model.graph.node for out in node.output}
    weighted = [n for n in model.graph.node if n.op_type in WEIGHTED_OPS]
    quantized = [n for n in weighted if len(n.input) > 1 and produced.get(n.input[1]) == "DequantizeLinear"]
    return len(quantized), len(weighted)


def run_edgebuild(project: Path) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "edgebuild", "validate", "--project", str(project), "--force", "--json",
           "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 11):
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


class Scorer:
    """The project's metric on any subset of the validation set, with edgebuild's evaluation code."""

    def __init__(self, project) -> None:
        from edgebuild.accuracy.evaluate import ValidationSet

        self.project = project
        self.data = ValidationSet(project, batch_size=1)
        self.items = list(self.data.batches())  # (samples, batch, transforms), one image each

    def __call__(self, onnx_model, items) -> float:
        import onnxruntime as ort

        from edgebuild.accuracy.evaluate import _ClassificationCollector, _DetectionCollector

        session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        outputs = [o.name for o in session.get_outputs()]
        items = list(items)
        detection = self.project.task.kind == "detection"
        collect = (_DetectionCollector if detection else _ClassificationCollector)(self.project, self.data)
        for samples, batch, transforms in items:
            collect.add(samples, transforms, dict(zip(outputs, session.run(outputs, {name: batch}))))
        if detection:  # mAP over just these images
            from edgebuild.accuracy.metrics import coco_detection_metrics

            ids = {s.image_id for samples, _, _ in items for s in samples}
            gt = copy.deepcopy(self.data.coco.ground_truth)
            gt["images"] = [i for i in gt["images"] if i["id"] in ids]
            gt["annotations"] = [a for a in gt["annotations"] if a["image_id"] in ids]
            return coco_detection_metrics(gt, collect.results)[self.project.metric]
        return collect.metrics()[self.project.metric]


def run_nncf(project, onnx_path: Path) -> tuple[float, object, float]:
    import nncf
    import onnx

    from edgebuild.accuracy.quantize import _CalibrationImages

    model = onnx.load(str(onnx_path))
    scorer = Scorer(project)
    reader = _CalibrationImages(project, progress=False)
    calibration = [item for item in iter(reader.get_next, None)]
    started = time.perf_counter()
    quantized = nncf.quantize_with_accuracy_control(
        model, nncf.Dataset(calibration), nncf.Dataset(scorer.items), scorer,
        max_drop=1 - project.accuracy.min_retention, drop_type=nncf.DropType.RELATIVE,
        subset_size=len(calibration))
    seconds = time.perf_counter() - started
    return seconds, quantized, scorer(quantized, scorer.items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", nargs="?", default=str(ROOT / "examples/shapes-detector"))
    args = parser.parse_args()
    try:
        import nncf  # noqa: F401
    except ImportError:
        sys.exit("NNCF is not installed: pip install 'nncf>=2.14' (benchmark only)")
    import onnx

    from edgebuild.project.config import load_project

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(args.project, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
        for command in (["data", "prepare"], ["export"]):  # shared inputs, not timed
            subprocess.run([sys.executable, "-m", "edgebuild", *command, "--project", str(root)], check=True,
                           capture_output=True)
        project = load_project(root)
        onnx_path = next((root / "build" / "export").glob("opset*/model.onnx"))
        ours_s, gate = run_edgebuild(root)
        fp32 = next(c for c in gate["candidates"] if c["precision"] == "fp32")["value"]
        chosen = next((c for c in gate["candidates"] if c["precision"] == gate["selected"]), None)
        int8 = next((c for c in reversed(gate["candidates"]) if c["precision"].startswith("int8")), None)
        shown = int8 if chosen is None or not chosen["precision"].startswith("int8") else chosen
        ours_model = onnx.load(str(root / "build" / "gate" / shown["onnx"]))
        nncf_s, nncf_model, nncf_value = run_nncf(project, onnx_path)
    ours_q, total = weighted_layers(ours_model)
    nncf_q, _ = weighted_layers(nncf_model)
    rows = [("edgebuild validate --force", ours_s, shown["precision"], shown["value"], shown["value"] / fp32,
             total - ours_q, ours_q),
            ("NNCF quantize_with_accuracy_control", nncf_s, "int8", nncf_value, nncf_value / fp32,
             total - nncf_q, nncf_q)]
    print(f"{project.project.name}: FP32 {project.metric} {fp32:.4f}, min retention {project.accuracy.min_retention},"
          f" {gate['images']} validation images, {total} weighted layers (Conv/ConvTranspose/Gemm/MatMul)\n")
    print(f"{'':<38} {'wall s':>7} {'model':>10} {project.metric:>9} {'retention':>9} {'in float':>8} "
          f"{'quantized':>9}")
    for name, seconds, what, value, retention, in_float, quantized in rows:
        print(f"{name:<38} {seconds:7.2f} {what:>10} {value:9.4f} {retention:9.3f} {in_float:8d} {quantized:9d}")
    print(f"\nwall time edgebuild/NNCF: {ours_s / nncf_s:.2f}x; retention edgebuild - NNCF: "
          f"{shown['value'] / fp32 - nncf_value / fp32:+.3f}; layers in float edgebuild - NNCF: "
          f"{(total - ours_q) - (total - nncf_q):+d}")
    print(f"edgebuild selected {gate['selected']} ({gate['selection_rule']}) [{gate['backend']}]")
    if np.isnan(nncf_value):
        sys.exit("NNCF's model could not be scored")


if __name__ == "__main__":
    main()
