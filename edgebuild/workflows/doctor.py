"""``edgebuild doctor``: what this host can do, and what each missing piece would enable."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Check", "run_checks"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    found: str
    enables: str

    def as_dict(self) -> dict:
        return asdict(self)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _python_package(name: str, dists: tuple[str, ...], enables: str) -> Check:
    for dist in dists:
        version = _version(dist)
        if version:
            return Check(name, True, f"{dist} {version}", enables)
    return Check(name, False, "not installed", enables)


def _importable(module: str) -> tuple[bool, str]:
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # a broken install raises more than ImportError (e.g. missing .so)
        return False, f"import failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return True, getattr(imported, "__version__", "importable")


def _tool(command: str, version_args: list[str], enables: str) -> Check:
    path = shutil.which(command)
    if not path:
        return Check(command, False, "not on PATH", enables)
    try:
        out = subprocess.run([path, *version_args], capture_output=True, text=True, timeout=10)
        text = (out.stdout or out.stderr).strip().splitlines()
        found = text[0] if text else path
    except (OSError, subprocess.TimeoutExpired) as exc:
        found = f"{path} (version check failed: {exc})"
    return Check(command, True, found, enables)


def cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> str:
    """'v2' (unified), 'v1' (legacy or hybrid), or 'none'."""
    if (root / "cgroup.controllers").exists():
        return "v2"
    if (root / "memory").is_dir() or (root / "cpu").is_dir():
        return "v1"
    return "none"


def writable_cgroup_controllers(root: Path = Path("/sys/fs/cgroup")) -> list[str]:
    version = cgroup_version(root)
    if version == "v2":
        try:
            enabled = (root / "cgroup.subtree_control").read_text().split()
        except OSError:
            return []
        return enabled if os.access(root, os.W_OK) else []
    if version == "v1":
        return sorted(c for c in ("memory", "cpu", "cpuset", "pids")
                      if (root / c).is_dir() and os.access(root / c, os.W_OK))
    return []


def _gpu() -> Check:
    enables = "TensorRT engine builds and runs (with TensorRT), GPU latency numbers"
    if Path("/dev/nvidia0").exists() or Path("/dev/nvhost-ctrl-gpu").exists():
        smi = shutil.which("nvidia-smi")
        found = "NVIDIA device present"
        if smi:
            out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            found = out.stdout.strip() or found
        return Check("cuda gpu", True, found, enables)
    return Check("cuda gpu", False, "no NVIDIA GPU device (/dev/nvidia0, /dev/nvhost-ctrl-gpu)", enables)


def _jetson() -> Check:
    release = Path("/etc/nv_tegra_release")
    enables = "shippable engines built here (placement 'local'), on-device benchmarks and tegrastats"
    if release.exists():
        return Check("jetson", True, release.read_text().splitlines()[0].strip(), enables)
    return Check("jetson", False, "not a Jetson (/etc/nv_tegra_release absent)", enables)


def run_checks() -> list[Check]:
    checks = [
        Check("python", True, f"{platform.python_implementation()} {platform.python_version()} "
              f"({sys.executable})", "the build side (needs >= 3.10)"),
        _python_package("torch", ("torch",), "loading the PyTorch model, export"),
        _python_package("onnx", ("onnx",), "ONNX export, checks and preflight"),
        _python_package("onnxruntime", ("onnxruntime", "onnxruntime-gpu"),
                        "the CPU reference backend: parity checks, calibration, accuracy gating"),
        _python_package("faster-coco-eval", ("faster_coco_eval",), "COCO mAP for detection projects"),
    ]
    trt_ok, trt_found = _importable("tensorrt") if _version("tensorrt") or _has_module("tensorrt") \
        else (False, "not installed")
    checks.append(Check("tensorrt", trt_ok, trt_found,
                        "TensorRT engine builds, host checks and the TensorRT runner"))
    cuda_binding = next((c for c in (_python_package("pycuda", ("pycuda",), ""),
                                     _python_package("cuda-python", ("cuda-python", "cuda-bindings"), ""))
                         if c.ok), None)
    checks.append(Check("cuda bindings", cuda_binding is not None,
                        cuda_binding.found if cuda_binding else "neither pycuda nor cuda-python installed",
                        "device buffers for the TensorRT runner"))
    checks.append(_gpu())
    checks.append(_jetson())
    version = cgroup_version()
    controllers = writable_cgroup_controllers()
    checks.append(Check("cgroups", bool(controllers),
                        f"{version}; writable controllers: {', '.join(controllers) or 'none'}",
                        "`edgebuild run --limits` inside a real cgroup"))
    checks.append(_tool("podman", ["--version"], "building and running runtime containers"))
    checks.append(_tool("buildah", ["--version"], "building runtime images without a daemon"))
    checks.append(_tool("mender-artifact", ["--version"], "validating Mender OTA artifacts with the real tool"))
    checks.append(_tool("ssh", ["-V"], "benchmarks and engine builds on a device over SSH"))
    return checks


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
