"""Shared fixtures and the resource markers (gpu, jetson, container, ssh, cgroup).

A marked test is skipped only when its resource is missing, and says why. Listing the
resource in EDGEBUILD_REQUIRE (comma-separated, e.g. ``gpu,container``) turns that skip into
a failure, so a CI machine that should have the resource cannot silently pass without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import textwrap
from functools import cache
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@cache
def _gpu() -> tuple[bool, str]:
    if importlib.util.find_spec("tensorrt") is None:
        return False, "TensorRT is not installed (it comes only from NVIDIA's package index)"
    if not (Path("/dev/nvidia0").exists() or Path("/dev/nvhost-ctrl-gpu").exists()):
        return False, "no NVIDIA GPU device on this host"
    return True, ""


@cache
def _jetson() -> tuple[bool, str]:
    if Path("/etc/nv_tegra_release").exists():
        return True, ""
    return False, "not a Jetson (/etc/nv_tegra_release is absent)"


@cache
def _container() -> tuple[bool, str]:
    missing = [tool for tool in ("podman", "buildah") if shutil.which(tool) is None]
    if missing:
        return False, f"{' and '.join(missing)} not installed"
    if os.geteuid() != 0:
        return False, "container tests need root"
    return True, ""


@cache
def _ssh() -> tuple[bool, str]:
    missing = [tool for tool in ("ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not Path(SSHD).is_file():
        missing.append(SSHD)
    if missing:
        return False, f"{', '.join(missing)} not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return False, "a loopback sshd that accepts the test's key needs root"
    return True, ""


@cache
def _cgroup() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "creating cgroups needs root"
    try:
        from edgebuild.limits import host_cgroup

        host_cgroup("probe")
    except Exception as exc:  # CapabilityMissing, or no /proc/mounts
        return False, str(exc)
    return True, ""


@cache
def _mender() -> tuple[bool, str]:
    if shutil.which("mender-artifact") is None:
        return False, "mender-artifact not installed (apt-get install mender-artifact)"
    return True, ""


SSHD = "/usr/sbin/sshd"
RESOURCES = {"gpu": _gpu, "jetson": _jetson, "container": _container, "ssh": _ssh, "cgroup": _cgroup,
             "mender": _mender}


def required_resources() -> set[str]:
    return {r.strip() for r in os.environ.get("EDGEBUILD_REQUIRE", "").split(",") if r.strip()}


def pytest_runtest_setup(item: pytest.Item) -> None:
    required = required_resources()
    for marker in item.iter_markers():
        probe = RESOURCES.get(marker.name)
        if probe is None:
            continue
        available, reason = probe()
        if available:
            continue
        if marker.name in required:
            pytest.fail(f"EDGEBUILD_REQUIRE includes {marker.name!r}, but {reason}", pytrace=False)
        pytest.skip(f"{marker.name}: {reason}")


# -- a small, valid project for fast tests -----------------------------------------------

TINY_MODEL = '''
import torch


class TinyDetector(torch.nn.Module):
    """Not a useful detector: just enough shape to exercise the pipeline quickly."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=8, padding=1)

    def forward(self, images):
        y = self.conv(images).flatten(2).transpose(1, 2)
        return {"boxes": y[..., :4].abs() * 8.0, "scores": torch.sigmoid(y[..., 4:])}


def build_model():
    return TinyDetector()


def broken_model():
    raise RuntimeError("cannot build")


def not_a_module():
    return 42
'''

TINY_TOML = """\
[project]
name = "tiny"

[model]
entry_point = "tinydet.model:build_model"
outputs = ["boxes", "scores"]

[[model.inputs]]
name = "images"
dtype = "float32"
min_shape = [1, 3, 32, 32]
opt_shape = [2, 3, 64, 64]
max_shape = [4, 3, 96, 96]

[task]
kind = "detection"
classes = ["a", "b"]

[task.preprocess]
input_size = [64, 64]
resize = "letterbox"

[data]
calibration_images = "data/calibration"

[data.validation]
annotations = "data/val/annotations.json"
images = "data/val/images"

[accuracy]
min_retention = 0.92

[[fleet]]
name = "yard-cams"
module = "orin-nano-8gb"
jetpack = "6.2"

[[fleet]]
name = "dock"
module = "agx-orin-64gb"
jetpack = "5.1.2"

[[fleet]]
name = "legacy"
module = "xavier-nx"
jetpack = "5.1.2"
"""


def write_tiny_project(root: Path, toml_text: str = TINY_TOML) -> Path:
    from PIL import Image

    (root / "tinydet").mkdir(parents=True, exist_ok=True)
    (root / "tinydet" / "__init__.py").write_text("")
    (root / "tinydet" / "model.py").write_text(textwrap.dedent(TINY_MODEL))
    rng = np.random.default_rng(0)
    for folder in ("data/calibration", "data/val/images"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(4):
        pixels = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "data/calibration" / f"{i}.png")
        Image.fromarray(pixels).save(root / "data/val/images" / f"{i}.png")
        images.append({"id": i + 1, "file_name": f"{i}.png", "width": 64, "height": 48})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 1 + i % 2,
                            "bbox": [4.0, 4.0, 20.0, 16.0], "area": 320.0, "iscrowd": 0})
    coco = {"images": images, "annotations": annotations,
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    (root / "data/val/annotations.json").write_text(json.dumps(coco))
    path = root / "edgebuild.toml"
    path.write_text(toml_text)
    return path


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A valid detection project with a tiny model and four images; returns its folder."""
    write_tiny_project(tmp_path)
    return tmp_path


@pytest.fixture
def example_copy(tmp_path: Path):
    """Copy a bundled example (without its build folder) into tmp_path and return the copy."""

    def copy(name: str) -> Path:
        source = EXAMPLES / name
        if not (source / "edgebuild.toml").is_file():
            pytest.fail(f"{source}/edgebuild.toml is missing")
        target = tmp_path / name
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("build", "__pycache__"))
        return target

    return copy


# -- a "Jetson" reached over SSH: a real sshd on a loopback port ----------------------------------

JETSON_FILES = {
    # what `cat /etc/nv_tegra_release` and /proc/device-tree/compatible show on an Orin Nano 4GB, JetPack 6.2
    "orin-nano-4gb@6.2": ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
                          "DATE: Wed Jan  8 01:49:37 UTC 2025\n",
                          b"nvidia,p3768-0000+p3767-0004\0nvidia,p3767-0004\0nvidia,tegra234\0"),
    "agx-orin-64gb@5.1.2": ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64\n",
                            b"nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0"),
}


def write_device_root(root: Path, profile: str) -> Path:
    release, compatible = JETSON_FILES[profile]
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "nv_tegra_release").write_text(release)
    (root / "proc" / "device-tree").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "device-tree" / "compatible").write_bytes(compatible)
    return root


class LoopbackJetson:
    """sshd on 127.0.0.1 whose sessions see a device root and a work folder of the test's.

    ``url`` is ``ssh://jetson-under-test``; the ssh client config that resolves it (port, key, no
    host-key prompts) is handed to edgebuild through EDGEBUILD_SSH_CONFIG, as a user's
    ~/.ssh/config would. ``extra_pythonpath`` lets a test put modules (a TensorRT test double)
    on the device's Python path.
    """

    def __init__(self, folder: Path, profile: str, extra_pythonpath: Path | None = None) -> None:
        import socket
        import subprocess
        import time

        self.folder = folder
        folder.mkdir(parents=True)
        self.root = write_device_root(folder / "device-root", profile)
        self.workdir = folder / "device-workdir"
        self.workdir.mkdir()
        key, host_key = folder / "client_key", folder / "host_key"
        for path in (key, host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = [f"EDGEBUILD_DEVICE_ROOT={self.root}", f"EDGEBUILD_DEVICE_WORKDIR={self.workdir}",
               # the device's python3: the test interpreter, so the double (if any) finds numpy
               f"PATH={Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"]
        if extra_pythonpath is not None:
            env.append(f"PYTHONPATH={extra_pythonpath}")
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"AuthorizedKeysFile {folder / 'authorized_keys'}", f"PidFile {folder / 'sshd.pid'}",
            "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "PermitRootLogin prohibit-password", "LogLevel ERROR", f"SetEnv {' '.join(env)}", ""]))
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=open(folder / "sshd.log", "w"))
        self.client_config = folder / "ssh_config"
        self.client_config.write_text("\n".join([
            "Host jetson-under-test", "  HostName 127.0.0.1", f"  Port {self.port}", "  User root",
            f"  IdentityFile {key}", "  IdentitiesOnly yes", "  StrictHostKeyChecking no",
            "  UserKnownHostsFile /dev/null", "  LogLevel ERROR", ""]))
        self.url = "ssh://jetson-under-test"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def loopback_jetson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Start a LoopbackJetson for a profile: ``loopback_jetson("orin-nano-4gb@6.2")``."""
    started: list[LoopbackJetson] = []

    def start(profile: str, extra_pythonpath: Path | None = None) -> LoopbackJetson:
        jetson = LoopbackJetson(tmp_path / f"jetson-{len(started)}", profile, extra_pythonpath)
        started.append(jetson)
        monkeypatch.setenv("EDGEBUILD_SSH_CONFIG", str(jetson.client_config))
        return jetson

    yield start
    for jetson in started:
        jetson.stop()
