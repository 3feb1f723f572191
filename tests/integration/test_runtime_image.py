"""The CPU runtime image built and run with podman under a preset's limits (``container`` marker).

No registry is reachable from our machines, so the base image is made here: a Debian bookworm
minbase root filesystem from the host's own Debian mirror (debootstrap) with python3, plus the
numpy and ONNX Runtime packages of this test run's Python (same CPython minor as bookworm's), then
``podman import``. The image itself is built from the generated context with ``podman build
--pull=never``, exactly as `edgebuild container --flavor cpu --build` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edgebuild.errors import LimitError
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.shipping.container import (
    build_image,
    container_spec,
    inspect_container,
    remove_container,
    run_once,
    start_container,
    write_container,
)
from edgebuild.targets.limits import fit_to_host
from edgebuild.targets.presets import load_preset
from edgebuild.targets.profiles import load_catalog
from tests.support.runtime_artifacts import Client, check_answers_match_the_host, free_port, write_artifact

pytestmark = [pytest.mark.container, pytest.mark.slow]

SUITE = "bookworm"
#: packages of this Python copied into the image: what `edgebuild-device.pyz serve` imports on the CPU
COPIED_PACKAGES = ("numpy", "numpy.libs", "onnxruntime")


def _debian_mirror() -> str:
    """The host's Debian mirror (deb822 .sources or a one-line sources.list), else deb.debian.org."""
    texts = [p.read_text() for p in sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    for text in texts:
        for block in text.split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.MULTILINE)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.MULTILINE)
            if uris and suites and SUITE in suites.group(1).split() and "security" not in uris.group(1):
                return uris.group(1)
    sources = Path("/etc/apt/sources.list")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                return parts[1]
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="session")
def containers_conf(tmp_path_factory) -> Path:
    """Our machines' quirks, for this test's podman only: a low RLIMIT_NOFILE hard limit and a hybrid
    cgroup layout crun refuses (../shared/tools.md). Nothing of this is in the product."""
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
                    '[engine]\nruntime = "runc"\n')
    os.environ["CONTAINERS_CONF"] = str(conf)
    yield conf
    os.environ.pop("CONTAINERS_CONF", None)


@pytest.fixture(scope="session")
def base_image(containers_conf) -> str:
    site = Path(np.__file__).resolve().parent.parent
    versions = f"{sys.version_info[:2]} numpy {np.__version__} onnxruntime {ort.__version__}"
    tag = f"localhost/edgebuild-test-base:{SUITE}-{hashlib.sha256(versions.encode()).hexdigest()[:12]}"
    if subprocess.run(["podman", "image", "exists", tag]).returncode == 0:
        if _imports_work(tag):
            return tag
        subprocess.run(["podman", "rmi", "--force", tag], capture_output=True)  # a broken leftover: make it again
    assert shutil.which("debootstrap"), "debootstrap is needed to make the base image (apt-get install debootstrap)"
    rootfs = Path(tempfile.mkdtemp(prefix="edgebuild-rootfs-"))
    try:
        done = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3-minimal,libpython3.11-stdlib",
                               SUITE, str(rootfs), _debian_mirror()], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        image_python = subprocess.run(["chroot", str(rootfs), "python3", "-c",
                                       "import sys; print(sys.version_info[0], sys.version_info[1])"],
                                      capture_output=True, text=True).stdout.split()
        assert tuple(map(int, image_python)) == sys.version_info[:2], (
            f"bookworm's python3 is {image_python}, this test runs on {sys.version_info[:2]}: the copied "
            "numpy/onnxruntime builds would not load")
        target = rootfs / "usr/local/lib" / f"python3.{sys.version_info[1]}" / "dist-packages"
        target.mkdir(parents=True, exist_ok=True)
        for name in COPIED_PACKAGES:
            if (site / name).exists() or name != "numpy.libs":  # numpy.libs exists only in manylinux wheels
                shutil.copytree(site / name, target / name, symlinks=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["podman", "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True)
        tar.wait()
        assert imported.returncode == 0, imported.stderr
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    assert _imports_work(tag), f"{tag}: numpy and onnxruntime do not import in the new base image"
    return tag


def _imports_work(tag: str) -> bool:
    done = subprocess.run(["podman", "run", "--rm", tag, "python3", "-c", "import numpy, onnxruntime"],
                          capture_output=True, text=True, timeout=120)
    return done.returncode == 0


@pytest.fixture(scope="session")
def runtime_image(base_image, tmp_path_factory):
    """The generated CPU context of a compiled model folder, built with podman."""
    root = tmp_path_factory.mktemp("container")
    folder = write_artifact(root / "engines" / "yard")
    recipe = Recipe.load(folder)
    target = load_catalog().parse_target(recipe.target)
    preset = fit_to_host(load_preset(target.module.id), print)  # this host has fewer cores than the module
    spec = container_spec(recipe, target, preset, flavor="cpu", base_image=base_image,
                          image=f"localhost/edgebuild-test-runtime:{os.getpid()}")
    write_container(folder, root / "context", spec)
    build_image(root / "context", spec, tool="podman", pull=False)
    yield spec, folder
    subprocess.run(["podman", "rmi", "--force", spec.image], capture_output=True)


def test_the_runtime_image_serves_under_the_presets_limits(runtime_image) -> None:
    spec, folder = runtime_image
    port = free_port()
    name = start_container(spec, tool="podman", publish=f"127.0.0.1:{port}:{spec.port}")
    try:
        client = Client(port)
        ready = client.wait_ready(timeout=120)
        assert ready["warmup"]["runs"] >= 1
        check_answers_match_the_host(client, folder)  # the host-side evaluation of the same model
        # the limits as podman set them, and as the kernel has them inside the container
        info = inspect_container(name, tool="podman")
        host = info["HostConfig"]
        assert host["Memory"] == spec.preset.memory and host["PidsLimit"] == spec.preset.pids
        assert host["NanoCpus"] == int(spec.preset.cpus * 1e9) and host["CpusetCpus"] == spec.preset.cpuset
        assert host["ReadonlyRootfs"] is True and info["Config"]["User"] == "10001:10001"
        limit = subprocess.run(["podman", "exec", name, "sh", "-c",
                                "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
                                "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"],
                               capture_output=True, text=True)
        assert int(limit.stdout.split()[0]) == spec.preset.memory, limit
        user = subprocess.run(["podman", "exec", name, "id", "-u"], capture_output=True, text=True).stdout.strip()
        assert user == "10001"
        # the root filesystem is read-only; the engine cache volume is writable by the server's user
        assert subprocess.run(["podman", "exec", name, "touch", "/opt/edgebuild/x"]).returncode != 0
        assert subprocess.run(["podman", "exec", name, "touch", "/var/cache/edgebuild/x"]).returncode == 0
        # the image's HEALTHCHECK asks /v2/health/ready
        assert subprocess.run(["podman", "healthcheck", "run", name], capture_output=True).returncode == 0
    finally:
        logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
        remove_container(name, tool="podman")
        subprocess.run(["podman", "volume", "rm", "--force", spec.volume], capture_output=True)
    assert "ready:" in logs.stderr + logs.stdout


def test_a_process_over_the_memory_limit_is_oom_killed_and_reported(runtime_image) -> None:
    spec, _ = runtime_image
    small = dataclasses.replace(spec, preset=spec.preset.with_overrides(memory="96M"))
    assert run_once(small, ["python3", "-c", "x = bytearray(16 << 20)"], tool="podman") == 0
    with pytest.raises(LimitError, match="killed by the OOM killer at the memory limit 96.0 MiB"):
        run_once(small, ["python3", "-c", "x = bytearray(400 << 20)"], tool="podman")
