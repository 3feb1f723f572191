"""The device-side code (edgebuild/runtime/, errors.py) runs on Python 3.8 with numpy, nothing from the build side.

The files checked are the ones that travel to a device in edgebuild-device.pyz (edgebuild.devices.ssh).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from edgebuild.devices.ssh import device_tool_archive, device_tool_files

DEVICE_FILES = device_tool_files()
# imported inside functions; cryptography only by the OTA verifier (bundle signatures); grpcio and tritonclient's
# KServe v2 stubs (google.protobuf), and hpack (HTTP/2 header blocks), only by the gRPC server, where a gRPC port is
# asked for
ALLOWED_THIRD_PARTY = {"numpy", "tensorrt", "pycuda", "cuda", "onnxruntime", "cryptography", "grpc", "tritonclient",
                       "google", "hpack"}
SHARED_WITH_THE_BUILD_SIDE = {"edgebuild", "edgebuild.errors"}
BUILD_SIDE_ONLY = {"torch", "click", "pydantic", "onnx", "tqdm", "PIL", "pycocotools"}
#: imported where present, inside a try that says what is missing: the bench's JPEG decode (a device
#: image may have PIL, OpenCV or neither; the bench then says preprocessing was not measured); the streams'
#: video capture (OpenCV) and trackers (Roboflow's trackers and supervision: Python 3.10 and newer); the tracked
#: results' MQTT publisher (paho-mqtt) and annotated video (OpenCV), each only when asked for: each raises
#: CapabilityMissing saying what to install; the letterbox's resize (OpenCV's where installed, else numpy's)
OPTIONAL_ON_THE_DEVICE = {"bench_request.py": {"PIL", "cv2"}, "sources.py": {"cv2"}, "vision.py": {"cv2"},
                          "tracking.py": {"trackers", "supervision"}, "publish.py": {"paho", "cv2"}}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", DEVICE_FILES, ids=lambda p: p.name)
def test_runtime_imports_only_device_safe_modules(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        if top in OPTIONAL_ON_THE_DEVICE.get(path.name, ()):
            continue
        assert top not in BUILD_SIDE_ONLY, f"{path.name} imports {name}"
        if top == "edgebuild":
            assert name.startswith("edgebuild.runtime") or name in SHARED_WITH_THE_BUILD_SIDE, \
                f"{path.name} imports build-side {name}"
        elif top not in sys.stdlib_module_names:
            assert top in ALLOWED_THIRD_PARTY, f"{path.name} imports {name}"


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", DEVICE_FILES, ids=lambda p: p.name)
def test_optional_device_libraries_are_imported_only_inside_functions(path: Path) -> None:
    """The device side imports without OpenCV or the trackers; only a command that needs them says they are missing."""
    optional = OPTIONAL_ON_THE_DEVICE.get(path.name, set())
    assert not optional & _module_level_imports(path), f"{path.name} imports {optional} at module level"


def test_runtime_syntax_is_python_3_8() -> None:
    vermin = Path(sys.executable).with_name("vermin")
    if not vermin.exists():
        pytest.fail("vermin is not installed (it is in the dev extra); it checks the 3.8 target")
    out = subprocess.run([str(vermin), "--no-tips", "--violations", "--target=3.8-", "--eval-annotations",
                          "--backport", "dataclasses", *map(str, DEVICE_FILES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_device_tool_runs_from_its_archive_alone(tmp_path: Path) -> None:
    """edgebuild-device.pyz holds all it needs: it runs with no edgebuild installed beside it."""
    archive = tmp_path / "edgebuild-device.pyz"
    archive.write_bytes(device_tool_archive())
    out = subprocess.run([sys.executable, "-S", "-I", str(archive), "--root", str(tmp_path), "probe"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"ok": true' in out.stdout.splitlines()[-1] and '"l4t": null' in out.stdout
