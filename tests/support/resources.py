"""The resources that the gpu, jetson, container, ssh, cgroup, mender, mender_client, strace, farm, chromium,
zoo, perf_analyzer, mqtt and gstreamer markers stand for.

Each probe says whether its resource is on this host and, when it is not, why; the plugin
(tests/support/plugin.py) turns that into a skip, or a failure under EDGEBUILD_REQUIRE.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from tests.support.jetson import SSHD


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
        from edgebuild.targets.limits import host_cgroup

        host_cgroup("probe")
    except Exception as exc:  # CapabilityMissing, or no /proc/mounts
        return False, str(exc)
    return True, ""


@cache
def _mender() -> tuple[bool, str]:
    if shutil.which("mender-artifact") is None:
        return False, "mender-artifact not installed (apt-get install mender-artifact)"
    return True, ""


@cache
def _mender_client() -> tuple[bool, str]:
    if shutil.which("mender") is None or shutil.which("mender-artifact") is None:
        return False, "the Mender client is not installed (apt-get install mender-client mender-artifact)"
    if os.geteuid() != 0:
        return False, "the Mender client tests run it as root in a private mount namespace (unshare --mount)"
    for path in ("/etc/mender", "/usr/share/mender/modules/v3"):
        if not os.path.isdir(path):
            return False, f"{path} is missing (the mender-client package makes it)"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return False, f"unshare --mount fails here: {probe.stderr.strip()}"
    return True, ""


@cache
def _strace() -> tuple[bool, str]:
    if shutil.which("strace") is None:
        return False, "strace not installed (apt-get install strace)"
    return True, ""


@cache
def _chromium() -> tuple[bool, str]:
    if shutil.which("chromium") is None:
        return False, "chromium not installed (apt-get install chromium): it renders the build report headless"
    return True, ""


@cache
def _farm() -> tuple[bool, str]:
    from edgebuild.devices.labgrid import labgrid_tool

    missing = [tool for tool in ("labgrid-client", "labgrid-coordinator", "labgrid-exporter")
               if labgrid_tool(tool) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed (pip install 'edgebuild[farm]')"
    return _ssh()


@cache
def _zoo() -> tuple[bool, str]:
    from tests.support.zoo import zoo_available

    return zoo_available()  # torchvision (through the shim), timm and ultralytics import


#: where the perf_analyzer tests find Triton's perf_analyzer when it is not on PATH
PERF_ANALYZER_ENV = "EDGEBUILD_PERF_ANALYZER"
_PERF_ANALYZER_INSTALL = ("python3 -m venv VENV && VENV/bin/pip install 'tritonclient[all]==2.41.0' "
                          "'nvidia-cuda-runtime-cu12==12.9.79', apt-get install libb64-0d, and libcudart.so.12 from "
                          "the nvidia-cuda-runtime-cu12 wheel on LD_LIBRARY_PATH; .ci/run does it")


def perf_analyzer_path() -> str | None:
    """Triton's perf_analyzer: $EDGEBUILD_PERF_ANALYZER, else ``perf_analyzer`` on PATH (None: neither)."""
    given = os.environ.get(PERF_ANALYZER_ENV)
    if given:
        return given
    return shutil.which("perf_analyzer")


@cache
def _perf_analyzer() -> tuple[bool, str]:
    path = perf_analyzer_path()
    if path is None:
        return False, f"perf_analyzer not found (${PERF_ANALYZER_ENV} unset, none on PATH): {_PERF_ANALYZER_INSTALL}"
    if not os.access(path, os.X_OK):
        return False, f"${PERF_ANALYZER_ENV}={path} is not an executable file"
    try:  # 2.41 has no --version: --help prints its usage (and exits 99) once its libraries load
        probe = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{path} does not run: {exc}"
    if "==== SYNOPSIS ====" not in probe.stdout + probe.stderr:
        why = (probe.stderr.strip() or probe.stdout.strip() or f"exit {probe.returncode}").splitlines()[0]
        return False, f"{path} does not run: {why} ({_PERF_ANALYZER_INSTALL})"
    return True, ""


#: where the mqtt tests find the broker when it is not on PATH (Debian installs it in /usr/sbin)
MOSQUITTO_FALLBACK = "/usr/sbin/mosquitto"


def mosquitto_path() -> str | None:
    """The mosquitto broker: on PATH, else Debian's /usr/sbin/mosquitto (None: neither)."""
    found = shutil.which("mosquitto")
    if found is None and os.access(MOSQUITTO_FALLBACK, os.X_OK):
        found = MOSQUITTO_FALLBACK
    return found


@cache
def _mqtt() -> tuple[bool, str]:
    if mosquitto_path() is None:
        return False, "the mosquitto broker is not installed (apt-get install mosquitto)"
    if importlib.util.find_spec("paho") is None:
        return False, "paho-mqtt is not installed (pip install paho-mqtt; it is in the dev extra)"
    return True, ""


@cache
def _gstreamer() -> tuple[bool, str]:
    if shutil.which("gst-launch-1.0") is None:
        return False, ("GStreamer's gst-launch-1.0 is not installed (apt-get install gstreamer1.0-tools "
                       "gstreamer1.0-plugins-base gstreamer1.0-plugins-good)")
    return True, ""


RESOURCES = {"gpu": _gpu, "jetson": _jetson, "container": _container, "ssh": _ssh, "cgroup": _cgroup,
             "mender": _mender, "mender_client": _mender_client, "farm": _farm, "strace": _strace,
             "chromium": _chromium, "zoo": _zoo, "perf_analyzer": _perf_analyzer, "mqtt": _mqtt,
             "gstreamer": _gstreamer}


def required_resources() -> set[str]:
    return {r.strip() for r in os.environ.get("EDGEBUILD_REQUIRE", "").split(",") if r.strip()}


