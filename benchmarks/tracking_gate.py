"""The tracking gate's numbers for every candidate the gate measured, INT8 variants it did not choose included.

    .venv/bin/edgebuild validate -p PROJECT          # a project with [accuracy.tracking]: FP32 and the chosen tracked
    .venv/bin/python benchmarks/tracking_gate.py PROJECT [--out table.md] [--peer]

Reads ``build/gate/gate.json`` and every candidate folder under ``build/gate/measured/<model>/`` that holds a
measurement (FP32, FP16, each INT8 variant measured with the metric), tracks each with the gate's own
``TrackingRun`` (stored results are reused, so the gate's candidates cost nothing more) and prints one Markdown
table: mAP and its retention, HOTA, IDF1, MOTA, id switches and the tracking metric's retention of FP32's.

``--peer`` (the shapes example) also tracks the gate's own set (the PNG frames under ``build/gate/tracking-set/``,
written once) with the issue's peer, the example's FP32 PyTorch detector fed to Ultralytics' BYTETracker
(``track_example_detector`` in benchmarks/tracking_vs_ultralytics.py), and prints it beside the gate's candidates
with the differences: the goals are FP32 >= peer - 0.01 on HOTA and IDF1, INT8 >= 0.99 of FP32's HOTA.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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
    parser.add_argument("--peer", action="store_true", help="track the same set with Ultralytics' BYTETracker too")
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
    if args.peer:
        text += "\n\n" + _against_peer(run, gate)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def _against_peer(run: TrackingRun, gate: GateResult) -> str:
    """The peer on the gate's own set, then the gate's candidates (FP32 first), with the differences."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tracking_vs_ultralytics import track_example_detector  # keeps YOLO_AUTOINSTALL off

    from edgebuild.accuracy.tracking.metrics import tracking_metrics

    started = time.perf_counter()
    tracks = {i: track_example_detector(s.frames[0].parents[1], "png") for i, s in enumerate(run.sequences)}
    peer = tracking_metrics([s.ground_truth for s in run.sequences], tracks)
    seconds = time.perf_counter() - started
    lines = [f"{run.words}: the peer and the gate's candidates on the same frames", "",
             "| tracker | HOTA | IDF1 | MOTA | IDSW | HOTA - peer | IDF1 - peer | HOTA / FP32 | track s |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| peer: shapes FP32 (PyTorch) + Ultralytics BYTETracker | {peer.HOTA:.4f} | {peer.IDF1:.4f} | "
             f"{peer.MOTA:.4f} | {peer.IDSW} | | | | {seconds:.1f} |"]
    fp32 = None
    for candidate in gate.candidates:
        tracked, took, _stored = run.measure(candidate.precision, gate.folder / candidate.onnx)
        fp32 = fp32 or tracked
        lines.append(f"| edgebuild {candidate.precision} (ONNX Runtime, {run.section.tracker}) | {tracked.HOTA:.4f} | "
                     f"{tracked.IDF1:.4f} | {tracked.MOTA:.4f} | {tracked.IDSW} | {tracked.HOTA - peer.HOTA:+.4f} | "
                     f"{tracked.IDF1 - peer.IDF1:+.4f} | {tracked.HOTA / fp32.HOTA:.3f} | {took:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
