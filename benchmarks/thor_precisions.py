"""FP8 and NVFP4 on trained detectors for a Jetson AGX Thor group: the numbers of docs/accuracy.md.

    python benchmarks/thor_precisions.py [--steps 200] [--batch 16]

Two trained detectors, each gated for one ``agx-thor@7.0`` group (TensorRT 10.13) with ``edgebuild validate``
on ONNX Runtime on the CPU (FP8 as float8e4m3fn Q/DQ, NVFP4 on its FP32 emulation; docs/accuracy.md says what
differs from the device):

1. the shapes detector (examples/shapes-detector, its trained weights): INT8, FP8 against FP32 (NVFP4 has no
   candidate there: convolutions only);
2. the hybrid shapes detector (tests/support/hybrid_detector.py: a token MLP on the stride-32 map, two GEMMs),
   fine-tuned ``--steps`` steps from the trained weights (cached under ``build/bench-models/hybrid-shapes-<key>/``,
   a second run reuses it): INT8, FP8 and NVFP4 against FP32.

Prints one markdown row per candidate: metric, retention, whether it passes 0.995 (FP8's goal) and the gate's
0.92. Exits 1 when FP8 keeps less than 0.995 of FP32 on either detector.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHE = ROOT / "build" / "bench-models"
WORK = ROOT / "build" / "bench-thor-precisions"
EXAMPLE = ROOT / "examples" / "shapes-detector"
THOR = '[[fleet]]\nname = "thor"\nmodule = "agx-thor"\njetpack = "7.0"\n\n'
FP8_GOAL = 0.995


def _project(name: str, precisions: str, entry_point: str | None = None, weights: str | None = None) -> Path:
    """A fresh copy of the example (its generated data kept between runs) with one Thor group."""
    root = WORK / name
    if root.exists():
        shutil.rmtree(root / "build", ignore_errors=True)
    shutil.copytree(EXAMPLE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("build", "__pycache__"))
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    head, tail = text.split("[[fleet]]", 1)
    text = head + THOR + f"[quantize]\nprecisions = {precisions}\n\n[runtime]" + tail.split("[runtime]", 1)[1]
    if entry_point:
        text = text.replace('entry_point = "shapes_detector.model:build_model"', f'entry_point = "{entry_point}"')
    if weights:
        text = text.replace('weights = "weights/shapes_detector.pt"', f'weights = "{weights}"')
    toml.write_text(text)
    return root


def _hybrid_weights(steps: int, batch: int) -> Path:
    import torch

    from tests.support import hybrid_detector

    source = Path(hybrid_detector.__file__).read_bytes() + (EXAMPLE / "weights" / "shapes_detector.pt").read_bytes()
    key = hashlib.sha256(json.dumps({"steps": steps, "batch": batch, "torch": torch.__version__}).encode()
                         + source).hexdigest()[:12]
    out = CACHE / f"hybrid-shapes-{key}" / "hybrid.pt"
    if out.is_file():
        print(f"hybrid detector: reusing {out}")
        return out
    started = time.perf_counter()
    print(f"hybrid detector: fine-tuning {steps} steps of batch {batch} from the trained shapes detector ...")
    hybrid_detector.fine_tune(EXAMPLE, out, steps=steps, batch_size=batch)
    print(f"hybrid detector: fine-tuned in {time.perf_counter() - started:.0f} s -> {out}")
    return out


def _gate(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "edgebuild", "validate", "-p", str(root), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{root}: validate exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads((root / "build" / "gate" / "gate.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="fine-tuning steps of the hybrid detector")
    parser.add_argument("--batch", type=int, default=16, help="its batch size")
    args = parser.parse_args()

    from tests.support import hybrid_detector

    shapes = _project("shapes", '["int8", "fp8", "nvfp4", "fp32"]')
    hybrid = _project("hybrid", '["int8", "fp8", "nvfp4", "fp32"]', hybrid_detector.ENTRY_POINT, "weights/hybrid.pt")
    shutil.copy(hybrid_detector.__file__, hybrid / "hybrid_detector.py")
    shutil.copy(_hybrid_weights(args.steps, args.batch), hybrid / "weights" / "hybrid.pt")

    rows, failed = [], False
    for name, root in (("shapes detector", shapes), (f"hybrid shapes detector ({args.steps} steps)", hybrid)):
        started = time.perf_counter()
        gate = _gate(root)
        print(f"{name}: gated in {time.perf_counter() - started:.0f} s [{gate['backend']}]")
        for note in gate["notes"]:
            print(f"  note: {note}")
        for c in gate["candidates"]:
            rows.append(f"| {name} | {c['precision']} | {c['value']:.4f} | {c['retention']:.4f} | "
                        f"{'yes' if c['retention'] >= FP8_GOAL else 'no'} | {'pass' if c['passed'] else 'FAIL'} |")
            failed |= c["precision"] == "fp8" and c["retention"] < FP8_GOAL
    print(f"\n| detector | candidate | mAP50-95 | retention | >= {FP8_GOAL} | gate (0.92) |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
