"""A Jetson reached over SSH: run edgebuild's device-side tool there and move files both ways.

Only the ``ssh`` client is needed on the build host, and only ``sh``, ``tar`` and ``python3`` on
the device: the device-side code (``edgebuild/runtime`` and ``edgebuild/errors.py``) travels as one
zipapp, ``edgebuild-device.pyz``, uploaded once per version into the device's work folder
(``$EDGEBUILD_DEVICE_WORKDIR`` there, else ``~/.cache/edgebuild``). SSH runs with ``BatchMode=yes``
(it never waits for a password); hosts, users, keys and ports come from the URL and from the
user's ssh configuration, or from the file ``$EDGEBUILD_SSH_CONFIG`` names.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from edgebuild import errors
from edgebuild.errors import CapabilityMissing, DeviceUnreachable, EdgebuildError, RemoteError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.addresses import parse_ssh_url

__all__ = ["device_tool_archive"]

SSH_CONFIG_ENV = "EDGEBUILD_SSH_CONFIG"
WORKDIR = '"${EDGEBUILD_DEVICE_WORKDIR:-$HOME/.cache/edgebuild}"'
PACKAGE = Path(__file__).resolve().parents[1]  # edgebuild/


def device_tool_files() -> list[Path]:
    """The modules that run on a device: the runtime package, the error classes, the version."""
    files = [PACKAGE / "__init__.py", PACKAGE / "errors.py"]
    files += sorted(p for p in (PACKAGE / "runtime").rglob("*.py") if "__pycache__" not in p.parts)
    return files


@lru_cache(maxsize=1)
def device_tool_archive() -> bytes:
    """``edgebuild-device.pyz``: a zipapp of the device-side code, byte-identical for identical sources."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in device_tool_files():
            info = zipfile.ZipInfo(str(Path("edgebuild") / path.relative_to(PACKAGE)), date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo("__main__.py", date_time=(1980, 1, 1, 0, 0, 0))
        archive.writestr(info, "import sys\nfrom edgebuild.runtime.cli import main\nsys.exit(main())\n")
    return b"#!/usr/bin/env python3\n" + buffer.getvalue()


def _error_class(name: str, exit_code: int) -> type[EdgebuildError]:
    found = getattr(errors, name, None)
    if isinstance(found, type) and issubclass(found, EdgebuildError):
        return found
    return next((c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, EdgebuildError)
                 and c.exit_code == exit_code), RemoteError)


@dataclass(frozen=True)
class SshDevice:
    url: str
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        try:
            parse_ssh_url(self.url)
        except ValueError as exc:
            raise RemoteError(str(exc)) from None

    @property
    def destination(self) -> str:
        user, host, _ = parse_ssh_url(self.url)
        return f"{user}@{host}" if user else host

    def ssh_command(self, remote_command: str) -> list[str]:
        _, _, port = parse_ssh_url(self.url)
        command = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.timeout_s)}"]
        if os.environ.get(SSH_CONFIG_ENV):
            command += ["-F", os.environ[SSH_CONFIG_ENV]]
        if port:
            command += ["-p", str(port)]
        return [*command, "--", self.destination, remote_command]

    def run(self, remote_command: str, *, stdin: bytes | None = None, timeout_s: float | None = None,
            what: str = "the command") -> subprocess.CompletedProcess[bytes]:
        """Run a shell command on the device; ssh's own failures (exit 255) raise RemoteError."""
        try:
            done = subprocess.run(self.ssh_command(remote_command), input=stdin, capture_output=True,
                                  timeout=timeout_s)
        except FileNotFoundError:
            raise CapabilityMissing("the ssh client is not installed on this host",
                                    hint="install openssh-client") from None
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.url}: {what} did not finish within {timeout_s:.0f} s") from None
        if done.returncode == 255:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise DeviceUnreachable(f"cannot reach {self.url} over SSH: {message[-1] if message else 'ssh exited 255'}",
                              hint="check that `ssh " + " ".join(shlex.quote(a) for a in self.ssh_command("true")[1:])
                                   + "` works without a password prompt")
        return done

    # -- files -------------------------------------------------------------------------------------

    def put(self, files: Mapping[str, Path | bytes], remote_dir: str) -> None:
        """Write files (relative name -> local path or bytes) into ``remote_dir`` under the work folder."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, source in files.items():
                data = source if isinstance(source, bytes) else Path(source).read_bytes()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        folder = f"{WORKDIR}/{shlex.quote(remote_dir)}"
        done = self.run(f"mkdir -p {folder} && tar -xf - -C {folder}", stdin=buffer.getvalue(),
                        what=f"copying {len(files)} file(s)")
        if done.returncode != 0:
            raise RemoteError(f"{self.url}: copying into {remote_dir} failed: {done.stderr.decode(errors='replace')}")

    def put_once(self, files: Mapping[str, Path | bytes], remote_dir: str, marker: str) -> bool:
        """``put`` unless ``remote_dir/marker`` is on the device already: for folders named by the
        hash of their content, which a second copy would only repeat. True when it copied."""
        if self.run(f"test -f {WORKDIR}/{shlex.quote(remote_dir)}/{shlex.quote(marker)}",
                    what=f"looking for {remote_dir}/{marker}").returncode == 0:
            return False
        self.put(files, remote_dir)
        return True

    def fetch(self, remote_paths: Iterable[str]) -> dict[str, bytes]:
        """Read regular files (paths relative to the work folder) from the device."""
        names = list(remote_paths)
        quoted = " ".join(shlex.quote(n) for n in names)
        done = self.run(f"cd {WORKDIR} && tar -cf - {quoted}", what=f"fetching {len(names)} file(s)")
        if done.returncode != 0:
            raise RemoteError(f"{self.url}: fetching {', '.join(names)} failed: {done.stderr.decode(errors='replace')}")
        found: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as tar:
            for member in tar.getmembers():
                if member.name not in names or not member.isfile():
                    raise RemoteError(f"{self.url}: unexpected entry {member.name!r} in the fetched files")
                found[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
        missing = sorted(set(names) - set(found))
        if missing:
            raise RemoteError(f"{self.url}: the device did not send {', '.join(missing)}")
        return found

    # -- the device-side tool ------------------------------------------------------------------------

    def device_tool(self, args: list[str], *, timeout_s: float | None = None) -> JsonObject:
        """Run ``edgebuild-device.pyz ARGS`` on the device (uploading it first if needed).

        Returns its JSON answer; a device-side EdgebuildError comes back as the same class, its
        message prefixed with the device's address.
        """
        archive = device_tool_archive()
        name = f"edgebuild-device-{hashlib.sha256(archive).hexdigest()[:12]}.pyz"
        self.put_once({name: archive}, ".", name)
        command = f"cd {WORKDIR} && python3 {name} " + " ".join(shlex.quote(a) for a in args)
        done = self.run(command, timeout_s=timeout_s, what=f"edgebuild-device {args[0]}")
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        stderr = done.stderr.decode(errors="replace").strip()
        try:
            answer = json.loads(lines[-1])
        except (IndexError, ValueError):
            hint = "the device needs python3 (3.8 or newer)" if done.returncode == 127 else None
            raise RemoteError(f"{self.url}: edgebuild-device {args[0]} gave no answer (exit {done.returncode}): "
                              f"{stderr[-2000:] or 'no output'}", hint=hint) from None
        if not answer.get("ok"):
            cls = _error_class(answer.get("error", ""), int(answer.get("exit_code", 1)))
            raise cls(f"on {self.url}: {answer.get('message')}", hint=answer.get("hint"))
        answer["log"] = stderr
        return answer
