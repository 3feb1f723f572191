"""A real labgrid farm on loopback: a coordinator, an exporter, and stand-in Jetsons as its places.

The coordinator and exporter are child processes on free ports; each board is a LoopbackJetson
(a real sshd with its own device root) exported as a ``NetworkService`` whose address is an ssh
alias, so one ssh client config (``EDGEBUILD_SSH_CONFIG``) reaches every board with its own key.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from edgebuild.devices.labgrid import labgrid_tool
from tests.support.jetson import LoopbackJetson


def _tool(name: str) -> str:
    return labgrid_tool(name) or name


class LabgridFarm:
    def __init__(self, folder: Path, boards: dict[str, tuple[str, dict[str, str]]],
                 extra_pythonpath: Path | None = None) -> None:
        """``boards``: place name -> (stand-in profile, tags)."""
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        self.jetsons = {name: LoopbackJetson(folder / name, profile, extra_pythonpath)
                        for name, (profile, _) in boards.items()}
        config = []
        for name, jetson in self.jetsons.items():
            text = jetson.client_config.read_text().replace("Host jetson-under-test", f"Host {name}")
            config.append(text)
        self.ssh_config = folder / "ssh_config"
        self.ssh_config.write_text("\n".join(config))
        coordinator_log = folder / "coordinator.log"
        coordinator = subprocess.Popen([_tool("labgrid-coordinator"), "-l", "127.0.0.1:0"], cwd=folder,
                                       stdout=open(coordinator_log, "w"), stderr=subprocess.STDOUT)
        self.processes.append(coordinator)
        self.address = self._wait_for(coordinator_log, r"listening on (\S+:\d+)")
        exporter_yaml = folder / "exporter.yaml"
        exporter_yaml.write_text("".join(
            f"{name}:\n  NetworkService: {{address: {name}, username: root, port: {jetson.port}}}\n"
            for name, jetson in self.jetsons.items()))
        self.exporter = subprocess.Popen([_tool("labgrid-exporter"), "-c", self.address, "--name", "farm1",
                                          str(exporter_yaml)], cwd=folder,
                                         stdout=open(folder / "exporter.log", "w"), stderr=subprocess.STDOUT)
        self.processes.append(self.exporter)
        deadline = time.monotonic() + 120  # a cap, not a speed: a loaded machine starts labgrid slowly
        while self.client("resources").stdout.count("NetworkService") < len(boards):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the exporter did not register: {(folder / 'exporter.log').read_text()}")
            time.sleep(0.1)
        for name, (_, tags) in boards.items():
            self.client("-p", name, "create", check=True)
            self.client("-p", name, "add-match", f"farm1/{name}/NetworkService", check=True)
            self.client("-p", name, "set-tags", *[f"{k}={v}" for k, v in tags.items()], check=True)

    def _wait_for(self, log: Path, pattern: str) -> str:
        deadline = time.monotonic() + 120  # a cap, not a speed: a loaded machine starts labgrid slowly
        while time.monotonic() < deadline:
            found = re.search(pattern, log.read_text()) if log.is_file() else None
            if found:
                return found[1]
            time.sleep(0.05)
        raise RuntimeError(f"labgrid-coordinator did not start: {log.read_text()}")

    def client(self, *args: str, check: bool = False, user: str = "tester") -> subprocess.CompletedProcess:
        env = {**os.environ, "LG_COORDINATOR": self.address, "LG_USERNAME": user, "LG_HOSTNAME": "test"}
        done = subprocess.run([_tool("labgrid-client"), *args], capture_output=True, text=True, timeout=60,
                              env=env)
        if check and done.returncode != 0:
            raise RuntimeError(f"labgrid-client {' '.join(args)}: {done.stderr or done.stdout}")
        return done

    def reservations(self) -> str:
        return self.client("reservations").stdout

    def acquired(self) -> list[str]:
        """Places someone holds now."""
        out = self.client("-v", "places").stdout
        return re.findall(r"^Place '(.+)':\n(?:  .*\n)*?  acquired: (?!None)", out, re.M)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for jetson in self.jetsons.values():
            jetson.stop()
