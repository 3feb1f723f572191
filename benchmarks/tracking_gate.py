"""The tracking gate's numbers for every candidate the gate measured, INT8 variants it did not choose included.

    .venv/bin/edgebuild validate -p PROJECT          # a project with [accuracy.tracking]: FP32 and the chosen tracked
    .venv/bin/python benchmarks/tracking_gate.py PROJECT [--out table.md]

Reads ``build/gate/gate.json`` and every candidate folder under ``build/gate/measured/<model>/`` that holds a
measurement (FP32, FP16, each INT8 variant measured with the metric), tracks each with the gate's own
``TrackingRun`` (stored results are reused, so the gate's candidates cost nothing more) and prints one Markdown
table: mAP and its retention, HOTA, IDF1, MOTA, id switches and the tracking metric's retention of FP32's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgebuild.accuracy.gate import GateResult  # noqa: E402
from edgebuild.accuracy.tracking.gate import TrackingRun  # noqa: E402
from edgebuild.project.config import load_project  # noqa: E402
from edgebuild.project.layout import BuildLayout  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    project = load_project(args.project)
    if project.accuracy.tracking is None or not project.accuracy.tracking.enabled:
        sys.exit(f"{project.source}: no [accuracy.tracking] table: add one and run `edgebuild validate` first")
    gate = GateResult.load(BuildLayout.of(project).gate)
    root = (gate.folder / gate.candidate("fp32").onnx).parents[1]
    run = TrackingRun(project, root, force=False, progress=False, say=lambda line: print(line, file=sys.stderr))
    found = []
    for folder in sorted(root.iterdir()):
        if (folder / "measurement.json").is_file():
            m = json.loads((folder / "measurement.json").read_text())
            label = m["precision"] + (f" ({m['variant']})" if m.get("variant") else "")
            found.append((label, m["value"], gate.folder / (m.get("shipped") or m["onnx"])))
    found.sort(key=lambda f: (not f[0].startswith("fp32"), not f[0].startswith("fp16"), f[0]))
    metric, rows = project.accuracy.tracking.metric, []
    reference_map, reference = found[0][1], None
    chosen = {(gate.folder / c.onnx).resolve() for c in gate.candidates}
    for label, value, onnx in found:
        tracked, seconds, _stored = run.measure(label, onnx)
        reference = reference or getattr(tracked, metric)
        mark = " *" if onnx.resolve() in chosen else ""
        rows.append(f"| {label}{mark} | {value:.4f} | {value / reference_map:.3f} | "
                    f"{tracked.HOTA:.4f} | {tracked.IDF1:.4f} | {tracked.MOTA:.4f} | {tracked.IDSW} | "
                    f"{getattr(tracked, metric) / reference:.3f} | {seconds:.1f} |")
    head = [f"{run.words}, {run.section.tracker} (* a candidate of the gate)", "",
            f"| candidate | {project.metric} | retention | HOTA | IDF1 | MOTA | IDSW | {metric} retention | track s |",
            "|---|---|---|---|---|---|---|---|---|"]
    text = "\n".join(head + rows)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
