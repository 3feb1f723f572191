"""A stand-in Jetson for Debian's real Mender client, run standalone (``mender install|commit|rollback``).

The client reads two fixed paths, ``/etc/mender/artifact_info`` and the update modules in
``/usr/share/mender/modules/v3/``; every call runs in a private mount namespace (``unshare
--mount``) where those two folders are bind-mounted from this device's folder, so nothing on the
host changes. The client's state (``-d``), device type and config are the device's own files.
The edgebuild update module is installed as on a device, with the device tool, the fleet's
public key and a stand-in root for the Jetson identity files (``EDGEBUILD_DEVICE_ROOT``); the
client passes its environment on to the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.jetson import write_device_root
from tests.support.project import REPO

#: an update module for the base artifact: it installs nothing (the rootfs stands in for itself)
NO_OP_MODULE = """#!/bin/sh
case "$1" in
    NeedsArtifactReboot|SupportsRollback) echo "No" ;;
esac
exit 0
"""


class MenderDevice:
    """One device: its Mender client state, its installed update modules and its edgebuild install root."""

    def __init__(self, folder: Path, profile: str, device_type: str, verify_key: Path) -> None:
        from edgebuild.devices.ssh import device_tool_archive

        self.folder = folder
        self.etc, self.modules, self.data = folder / "etc-mender", folder / "modules", folder / "data"
        for path in (self.etc, self.modules, self.data):
            path.mkdir(parents=True)
        (self.etc / "artifact_info").write_text("artifact_name=factory-image\n")
        (folder / "device_type").write_text(f"device_type={device_type}\n")
        self.config = folder / "mender.conf"
        self.config.write_text(json.dumps({"DeviceTypeFile": str(folder / "device_type"),
                                           "ArtifactVerifyKey": str(verify_key)}))
        module = self.modules / "edgebuild-model"
        shutil.copyfile(REPO / "docker" / "edgebuild-model.update-module", module)
        (self.modules / "l4t-base").write_text(NO_OP_MODULE)
        for path in self.modules.iterdir():
            path.chmod(0o755)
        tool = folder / "edgebuild-device.pyz"
        tool.write_bytes(device_tool_archive())
        self.install_root = folder / "models"
        self.env = {**os.environ,
                    # the module runs `python3`: this interpreter, which has numpy and ONNX Runtime
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                    "EDGEBUILD_DEVICE": str(tool), "EDGEBUILD_INSTALL_ROOT": str(self.install_root),
                    "EDGEBUILD_PUBLIC_KEY": str(verify_key), "EDGEBUILD_MODULE_CONF": str(folder / "module.conf"),
                    "EDGEBUILD_DEVICE_ROOT": str(write_device_root(folder / "root", profile))}

    def mender(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        script = ('mount --bind "$1" /etc/mender && mount --bind "$2" /usr/share/mender/modules/v3 && shift 2 && '
                  'exec mender -c "$CONF" -b "$CONF" -d "$DATA" --no-syslog "$@"')
        env = {**self.env, "CONF": str(self.config), "DATA": str(self.data)}
        return subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(self.etc), str(self.modules),
                               *args], capture_output=True, text=True, timeout=timeout, env=env)

    def ok(self, *args: str) -> subprocess.CompletedProcess:
        done = self.mender(*args)
        assert done.returncode == 0, f"mender {' '.join(args)}: rc {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def provides(self) -> dict[str, str]:
        lines = self.ok("show-provides").stdout.splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def artifact(self) -> str:
        return self.ok("show-artifact").stdout.strip()

    def active_model(self) -> str | None:
        from edgebuild.runtime.ota.ota import active_version

        return active_version(self.install_root)


def signed_device(folder: Path, private: Path, profile: str, device_type: str, l4t: str) -> MenderDevice:
    """A device trusting a fresh ECDSA P-256 key (written, SEC1 PEM, to ``private``: what mender-artifact signs
    with), with a rootfs-style artifact installed that provides ``edgebuild.l4t`` = ``l4t``, as a fleet's
    rootfs image does."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    public = folder / "fleet.pub"
    folder.mkdir(parents=True, exist_ok=True)
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    device = MenderDevice(folder / "device", profile, device_type, public)
    base = folder / "rootfs.mender"
    made = subprocess.run(["mender-artifact", "write", "module-image", "-T", "l4t-base", "-n", f"l4t-{l4t}",
                           "-t", device_type, "-p", f"edgebuild.l4t:{l4t}", "-k", str(private), "-o", str(base)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    device.ok("install", str(base))
    assert device.provides().get("edgebuild.l4t") == l4t
    return device

