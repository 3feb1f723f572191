"""edgebuild/runtime/ runs on the device: Python 3.8, numpy only, nothing from the build side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "edgebuild" / "runtime"
ALLOWED_THIRD_PARTY = {"numpy", "tensorrt", "pycuda", "cuda"}
BUILD_SIDE_ONLY = {"torch", "click", "pydantic", "onnx", "tqdm", "PIL", "pycocotools"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(RUNTIME.rglob("*.py")), ids=lambda p: p.name)
def test_runtime_imports_only_device_safe_modules(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in BUILD_SIDE_ONLY, f"{path.name} imports {name}"
        if top == "edgebuild":
            assert name.startswith("edgebuild.runtime"), f"{path.name} imports build-side {name}"
        elif top not in sys.stdlib_module_names:
            assert top in ALLOWED_THIRD_PARTY, f"{path.name} imports {name}"


def test_runtime_syntax_is_python_3_8() -> None:
    vermin = Path(sys.executable).with_name("vermin")
    if not vermin.exists():
        pytest.fail("vermin is not installed (it is in the dev extra); it checks the 3.8 target")
    out = subprocess.run([str(vermin), "--no-tips", "--violations", "--target=3.8-", "--eval-annotations",
                          "--backport", "dataclasses", str(RUNTIME)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
