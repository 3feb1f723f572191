"""A "Jetson" reached over SSH: a real sshd on a loopback port, sessions seeing a fake device root."""

from __future__ import annotations

import sys
from pathlib import Path

SSHD = "/usr/sbin/sshd"

JETSON_FILES = {
    # what `cat /etc/nv_tegra_release` and /proc/device-tree/compatible show on an Orin Nano 4GB, JetPack 6.2
    "orin-nano-4gb@6.2": ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
                          "DATE: Wed Jan  8 01:49:37 UTC 2025\n",
                          b"nvidia,p3768-0000+p3767-0004\0nvidia,p3767-0004\0nvidia,tegra234\0"),
    "orin-nano-8gb@6.2": ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
                          "DATE: Wed Jan  8 01:49:37 UTC 2025\n",
                          b"nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0"),
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
        deadline = time.monotonic() + 120  # a cap: a loaded machine starts sshd slowly
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
