"""The labgrid coordinator, from this process: two clients with one interface.

``_LabgridApi`` runs labgrid's own gRPC client session in a thread of its own (the release we
pin, about 5 ms a call); ``_LabgridCli`` drives the documented ``labgrid-client`` command line
(any release, about 0.35 s a call, mostly Python start-up). ``connect`` picks the first where it
can. Both list places with their tags, holders and reservations, reserve and wait, acquire and
release, cancel reservations, and read a place's ``NetworkService`` as an ``ssh://`` URL.
``devices.farm`` builds the farm's jobs on them.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgebuild.errors import CapabilityMissing, ConfigError, RemoteError
from edgebuild.jsontypes import JsonObject

__all__ = []

COORDINATOR_ENV = "LG_COORDINATOR"


@dataclass(frozen=True)
class Place:
    name: str
    tags: dict[str, str]
    acquired: str | None  # HOST/USER holding it
    reservation: str | None

    def has_tags(self, tags: dict[str, str]) -> bool:
        return all(self.tags.get(k) == v for k, v in tags.items())


def profiles_of(places: list[Place]) -> list[str]:
    """The module@jetpack profiles a farm's places are tagged with."""
    return sorted({f"{p.tags.get('module', '?')}@{p.tags.get('jetpack', '?')}" for p in places})


def labgrid_tool(name: str) -> str | None:
    """A labgrid command: on PATH, else beside this Python (a venv that is not activated)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.is_file() else None)


class _LabgridCli:
    """The coordinator through ``labgrid-client`` (one process per call, about 0.35 s each)."""

    def __init__(self, coordinator: str, client: str) -> None:
        self.coordinator, self.client = coordinator, client
        self.calls = 0
        self._processes: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def run(self, *args: str, user: str, timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, COORDINATOR_ENV: self.coordinator, "LG_USERNAME": user,
               "LG_HOSTNAME": socket.gethostname()}
        env.pop("LG_PLACE", None)
        env.pop("LG_TOKEN", None)
        process = subprocess.Popen([self.client, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env, start_new_session=True)  # our Ctrl-C does not kill it mid-release
        with self._lock:
            self._processes.add(process)
            self.calls += 1
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            if args[0] == "wait":
                raise TimeoutError(f"labgrid-client {' '.join(args)}") from None
            raise RemoteError(f"labgrid-client {' '.join(args)} did not answer within {timeout_s:.0f} s "
                              f"(coordinator {self.coordinator})") from None
        finally:
            with self._lock:
                self._processes.discard(process)
        if check and process.returncode != 0:
            text = (err.strip() or out.strip()).splitlines()
            raise RemoteError(f"labgrid-client {' '.join(args)}: {text[-1] if text else f'exit {process.returncode}'}",
                              hint=f"is the labgrid coordinator at {self.coordinator} running? "
                                   "(`labgrid-client places` with LG_COORDINATOR set)")
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def places(self, user: str) -> list[Place]:
        found: list[JsonObject] = []
        for line in self.run("-v", "places", user=user).stdout.splitlines():
            start = re.match(r"^Place '(.+)':$", line)
            if start:
                found.append({"name": start[1], "tags": {}, "acquired": None, "reservation": None})
            elif found:
                current = found[-1]
                tags = re.match(r"^  tags: (.*)$", line)
                if tags and tags[1].strip():
                    current["tags"] = dict(kv.split("=", 1) for kv in tags[1].split(", ") if "=" in kv)
                held = re.match(r"^  acquired: (.*)$", line)
                if held:
                    current["acquired"] = None if held[1].strip() == "None" else held[1].strip()
                reserved = re.match(r"^  reservation: (.*)$", line)
                if reserved:
                    current["reservation"] = reserved[1].strip()
        return [Place(**p) for p in found]

    def reserve(self, tags: dict[str, str], user: str) -> str:
        answer = self.run("reserve", "--shell", *[f"{k}={v}" for k, v in tags.items()], user=user).stdout
        token = re.search(r"export LG_TOKEN=(\w+)", answer)
        if token is None:
            raise RemoteError(f"labgrid-client reserve: no token in its answer: {answer.strip()}")
        return token[1]

    def wait(self, token: str, timeout_s: float, user: str, closed: Callable[[], bool]) -> str:
        self.run("wait", token, user=user, timeout_s=timeout_s)
        self.run("-p", f"+{token}", "acquire", user=user)
        shown = self.run("-p", f"+{token}", "show", user=user).stdout
        name = re.search(r"^Place '(.+)':$", shown, re.M)
        if name is None:
            raise RemoteError(f"labgrid-client show of reservation {token}: no place in its answer")
        return name[1]

    def ssh_url(self, place: str, user: str) -> str:
        return _ssh_url(place, self.run("-p", place, "show", user=user).stdout)

    def cancel(self, token: str, user: str) -> None:
        self.run("cancel-reservation", token, user=user, check=False)

    def release(self, place: str, user: str) -> str | None:
        done = self.run("-p", place, "release", user=user, check=False)
        return None if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())

    def close(self) -> None:
        with self._lock:
            running = list(self._processes)
        for process in running:  # a `wait` still polling keeps its reservation alive
            process.kill()

    def disconnect(self) -> None:
        pass


class _LabgridApi:
    """The coordinator through labgrid's own gRPC client session, in a thread of its own (about 5 ms a call).

    labgrid's client is asyncio; its session and event loop live in one thread and every call is
    handed to it. Its Python API changed with labgrid 24 (gRPC), so it is used only for the
    labgrid release we pin (26.x); otherwise edgebuild uses the CLI.
    """

    POLL_S = 0.25

    def __init__(self, coordinator: str, identity: str) -> None:
        import asyncio

        from labgrid.remote.client import start_session  # noqa: F401 (fails early when labgrid is missing)

        self.calls = 0
        self._loop = asyncio.new_event_loop()
        started: JsonObject = {}
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            before = os.environ.get("LG_USERNAME")
            try:
                os.environ["LG_USERNAME"] = identity  # the session's name, HOST/USER, read once at its start
                from labgrid.remote.client import start_session

                started["session"] = start_session(coordinator, loop=self._loop)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller)
                started["error"] = exc
            finally:
                if before is None:
                    os.environ.pop("LG_USERNAME", None)
                else:
                    os.environ["LG_USERNAME"] = before
            ready.set()
            if "session" in started:
                self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="edgebuild-labgrid", daemon=True)
        self._thread.start()
        ready.wait(30)
        if "session" not in started:
            raise RemoteError(f"cannot reach the labgrid coordinator at {coordinator}: "
                              f"{started.get('error', 'no answer within 30 s')}",
                              hint="is labgrid-coordinator running there? (LG_COORDINATOR=host:port)")
        self._session = started["session"]

    def _call(self, coroutine: Any, timeout_s: float = 60.0) -> Any:
        import asyncio

        import grpc

        self.calls += 1
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise RemoteError(f"labgrid coordinator: {exc.code().name}: {exc.details()}") from None

    def _rpc(self, name: str, request: Any) -> Any:
        async def call() -> Any:  # grpc.aio makes the call object in the loop's own thread
            return await getattr(self._session.stub, name)(request)

        return self._call(call())

    def _synced(self) -> None:
        async def sync() -> None:
            await self._session.sync_with_coordinator()

        self._call(sync())

    def places(self, user: str) -> list[Place]:
        async def read() -> list[Place]:
            return [Place(name, dict(p.tags), p.acquired, p.reservation) for name, p in self._session.places.items()]

        self._synced()
        return self._call(read())

    def reserve(self, tags: dict[str, str], user: str) -> str:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        answer = self._rpc("CreateReservation", pb2.CreateReservationRequest(
            filters={"main": pb2.Reservation.Filter(filter=tags)}, prio=0.0))
        return answer.reservation.token

    def wait(self, token: str, timeout_s: float, user: str, closed: Callable[[], bool]) -> str:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        deadline = time.monotonic() + timeout_s
        while True:  # each poll also keeps the reservation alive
            found = self._rpc("PollReservation", pb2.PollReservationRequest(token=token)).reservation
            place = found.allocations.get("main")
            if place:
                break
            if closed():
                raise RemoteError("the farm run was interrupted")
            if time.monotonic() > deadline:
                raise TimeoutError(token)
            time.sleep(self.POLL_S)
        self._rpc("AcquirePlace", pb2.AcquirePlaceRequest(placename=place))
        self._synced()
        return place

    def ssh_url(self, place: str, user: str) -> str:
        async def read() -> str:
            session = self._session
            wanted = session.places[place]
            return _service_url(place, [
                resource.params for exporter, groups in session.resources.items()
                for group_name, group in groups.items() for name, resource in group.items()
                if resource.cls == "NetworkService" and wanted.hasmatch((exporter, group_name, resource.cls, name))])

        return self._call(read())

    def cancel(self, token: str, user: str) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        try:
            self._rpc("CancelReservation", pb2.CancelReservationRequest(token=token))
        except RemoteError:
            pass  # already gone

    def release(self, place: str, user: str) -> str | None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        try:
            self._rpc("ReleasePlace", pb2.ReleasePlaceRequest(placename=place))
        except RemoteError as exc:
            return exc.message
        return None

    def close(self) -> None:
        pass  # the session stays for the releases that follow; disconnect() ends it

    def disconnect(self) -> None:
        async def stop() -> None:
            await self._session.stop()
            await self._session.close()

        try:
            self._call(stop(), timeout_s=10)
        except Exception:  # noqa: BLE001 (the coordinator may be gone already)
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)


def connect(coordinator: str, identity: str, client: str | None) -> Any:
    """labgrid's gRPC client in this process where it is the release we pin, else ``labgrid-client``."""
    try:
        from importlib.metadata import version

        if version("labgrid").split(".")[0] == "26" and not client:
            return _LabgridApi(coordinator, identity)
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 (a labgrid we do not know: its CLI still works)
        pass
    found = client or labgrid_tool("labgrid-client")
    if found is None:
        raise CapabilityMissing("labgrid is not installed on this host (the device farm needs it)",
                                hint="pip install 'edgebuild[farm]' (labgrid 26)")
    return _LabgridCli(coordinator, found)


def _ssh_url(place: str, shown: str) -> str:
    """ssh://user@address:port of the place's NetworkService, from `labgrid-client show`."""
    services = []
    for match in re.finditer(r"^(?:Acquired|Matching) resource '[^']*' \(([^)]*)\):\n((?:  .*\n?)+)", shown, re.M):
        try:
            resource = ast.literal_eval(match[2].strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(resource, dict) and resource.get("cls") == "NetworkService":
            services.append(resource.get("params", {}))
    return _service_url(place, services)


def _service_url(place: str, services: list[JsonObject]) -> str:
    """ssh://user@address:port of the first of a place's NetworkService params that has an address."""
    for params in services:
        user, address, port = params.get("username"), params.get("address"), params.get("port")
        if address:
            return f"ssh://{user + '@' if user else ''}{address}{':' + str(port) if port else ''}"
    raise ConfigError(f"farm place {place} has no NetworkService resource (address, username, port)",
                      hint="export the board's SSH service with a NetworkService entry and add-match it")
