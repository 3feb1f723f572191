"""Is a delta bundle as small as the change? Its size against the compressed size of the changed files.

Builds, from one compiled model folder, a full bundle of version A, then version B in which one
payload file changed, as a full bundle and as a delta over A (``write_bundle(..., base=A)``, what
`edgebuild package --since` writes). The delta's size is compared with the gzip-compressed size
of the changed files alone; the target is at most 1.05x.

The changed file is the one that changes between releases of a group: the engine where it was
built for the device, else (deferred groups, and every group on a machine without TensorRT, such
as ours) the ONNX the device builds it from. B's ONNX is A's re-saved with other weights' bytes
shuffled (same size, same graph), so that no byte stream is shared with A.

    python benchmarks/delta_size.py build/engines/<group>
    python benchmarks/delta_size.py examples/shapes-detector/build/engines/yard-cams   # after `make demo`
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from edgebuild.shipping.ota import bundle_payload, read_bundle_manifest, write_bundle


def _shuffled_weights(onnx_bytes: bytes) -> bytes:
    model = onnx.load_from_string(onnx_bytes)
    rng = np.random.default_rng(1)
    for index, tensor in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.size > 16:
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(rng.permutation(array.reshape(-1))
                                                                            .reshape(array.shape), tensor.name))
    return model.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path, help="a folder written by `edgebuild compile` (build/engines/<group>)")
    args = parser.parse_args()
    recipe, files_a = bundle_payload(args.artifact, None)
    changed = "engine.plan" if "engine.plan" in files_a else recipe.onnx
    files_b = dict(files_a)
    if changed == "engine.plan":
        sys.exit("this folder has a built engine; rebuild it to get version B's engine, then compare (not scripted)")
    files_b[changed] = _shuffled_weights(files_a[changed])
    manifest = {"model": recipe.model_name, "group": recipe.group, "target": recipe.target,
                "compatibility": recipe.compatibility()}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write_bundle(folder / "a.edgebundle", manifest=dict(manifest, version="A"), files=files_a)
        base = read_bundle_manifest(folder / "a.edgebundle")
        write_bundle(folder / "b-full.edgebundle", manifest=dict(manifest, version="B"), files=files_b)
        write_bundle(folder / "b-delta.edgebundle", manifest=dict(manifest, version="B"), files=files_b, base=base)
        full, delta = (folder / "b-full.edgebundle").stat().st_size, (folder / "b-delta.edgebundle").stat().st_size
    changed_gz = len(gzip.compress(files_b[changed], compresslevel=9, mtime=0))
    ratio = delta / changed_gz
    print(f"{args.artifact}: changed file {changed} ({len(files_b[changed])} bytes, {changed_gz} gzip-compressed); "
          f"full bundle {full} bytes, delta {delta} bytes -> {ratio:.3f}x the compressed change  "
          f"{'PASS' if ratio <= 1.05 else 'FAIL'} (target <= 1.05x)")
    print(json.dumps({"changed": changed, "changed_gzip_bytes": changed_gz, "full_bytes": full, "delta_bytes": delta,
                      "ratio": round(ratio, 4)}))
    sys.exit(0 if ratio <= 1.05 else 1)


if __name__ == "__main__":
    main()
