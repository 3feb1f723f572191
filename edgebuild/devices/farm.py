"""A device farm: Jetsons reserved through a labgrid coordinator, one job per board at a time.

Each board is a labgrid *place* whose tags say what it is and whose resources include a
``NetworkService`` (address, username, port) for SSH, the only thing edgebuild needs on it:

    labgrid-client -p orin-nano-1 create
    labgrid-client -p orin-nano-1 add-match farm1/board-orin-nano-1/NetworkService
    labgrid-client -p orin-nano-1 set-tags module=orin-nano-8gb jetpack=6.2 [power_mode=MAXN]

A job for a fleet group reserves a place whose tags match the group's target (``module``,
``jetpack``, and ``power_mode`` where the group names one), waits while every such board is
busy (up to the farm timeout), acquires it, reads its SSH service, runs, and always releases:
on success, failure, Ctrl-C or SIGTERM (``Farm.close`` cancels every reservation and releases
every place this process holds). A board that stops answering (ssh exits 255) is released and
the job runs once more on another board of the profile.

We drive labgrid's documented CLI, ``labgrid-client`` (pip ``edgebuild[farm]``), rather than its
Python internals, which changed with every major release; a call costs about 0.35 s, mostly
Python start-up. Reservations: ``reserve --shell`` returns a token at once, ``wait TOKEN`` polls
until a place is allocated (labgrid expires a reservation 60 s after its last poll, and never
while its place is acquired), then ``acquire``. Teardown cancels the reservation before releasing
the place, so the next waiter gets it at once.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from edgebuild.errors import CapabilityMissing, ConfigError, DeviceUnreachable, EdgebuildError, RemoteError

COORDINATOR_ENV = "LG_COORDINATOR"
DEFAULT_TIMEOUT_S = 600.0
Report = Callable[[str], None]


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


@dataclass(frozen=True)
class Board:
    """A place this process holds, and how to reach it."""

    place: str
    url: str  # ssh://user@address:port
    token: str


def labgrid_tool(name: str) -> str | None:
    """A labgrid command: on PATH, else beside this Python (a venv that is not activated)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.is_file() else None)


def target_tags(group: Any) -> dict[str, str]:
    """The place tags a fleet group's board must have: module, jetpack, power_mode if the group names one."""
    tags = {"module": group.target.module.id, "jetpack": group.target.release.jetpack}
    if getattr(group, "power_mode", None):
        tags["power_mode"] = group.power_mode
    return tags


def coordinator_address(project: Any = None, given: str | None = None) -> str | None:
    """``--farm ADDRESS``, else ``[farm] coordinator``, else ``$LG_COORDINATOR`` (host:port)."""
    farm = getattr(project, "farm", None)
    return given or (farm.coordinator if farm else None) or os.environ.get(COORDINATOR_ENV) or None


class NoCoordinator(ConfigError):
    """A farm command with no coordinator to ask (the command line makes this a usage error)."""


def open_farm(project: Any, address: str | None = None, timeout_s: float | None = None, *,
              report: Report = lambda _: None) -> Farm:
    """The project's farm: ``address`` (bare ``--farm`` gives ""), else ``[farm] coordinator``, else
    ``$LG_COORDINATOR``; a job waits ``timeout_s`` for a busy board, else ``[farm] timeout_s``."""
    found = coordinator_address(project, address or None)
    if not found:
        raise NoCoordinator("--farm needs a labgrid coordinator: --farm HOST:PORT, [farm] coordinator in "
                            "edgebuild.toml, or $LG_COORDINATOR")
    return Farm(found, timeout_s=timeout_s or project.farm.timeout_s, report=report)


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
        found: list[dict[str, Any]] = []
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
        started: dict[str, Any] = {}
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


def _connect(coordinator: str, identity: str, client: str | None) -> Any:
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


class Farm:
    """The labgrid coordinator at ``coordinator``, as this process sees it."""

    def __init__(self, coordinator: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, report: Report = lambda _: None,
                 client: str | None = None) -> None:
        self.coordinator = coordinator
        self.timeout_s = timeout_s
        self.report = report
        self.identity = f"edgebuild-{os.getpid()}"
        self._coordinator = _connect(coordinator, self.identity, client)
        self._held: dict[str, tuple[str | None, str]] = {}  # token -> (place, user)
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False

    @property
    def calls(self) -> int:
        """Coordinator round trips so far (for the overhead benchmark)."""
        return self._coordinator.calls

    def places(self) -> list[Place]:
        """Every place of the farm with its tags and who holds it."""
        return self._coordinator.places(self.identity)

    def matching(self, tags: dict[str, str]) -> list[Place]:
        return [p for p in self.places() if p.has_tags(tags)]

    # -- leases ------------------------------------------------------------------------------

    @contextmanager
    def lease(self, tags: dict[str, str], *, avoid: frozenset[str] = frozenset(), job: str = "") -> Iterator[Board]:
        """Reserve, wait for, acquire and yield a board with ``tags``; always released afterwards.

        ``avoid``: places not to run on (a board that stopped answering); one the coordinator
        allocates anyway is held while another is reserved, so the job lands elsewhere.
        """
        wanted = " ".join(f"{k}={v}" for k, v in tags.items())
        places = self.places()
        matching = [p for p in places if p.has_tags(tags)]
        if not matching:
            raise ConfigError(f"the farm at {self.coordinator} has no board tagged {wanted}"
                              + (f" (its profiles: {', '.join(profiles_of(places))})" if places
                                 else " (it has no places)"),
                              hint="tag a place with labgrid-client -p PLACE set-tags " + wanted)
        if not {p.name for p in matching} - avoid:
            raise RemoteError(f"no other board tagged {wanted} to run {job or 'the job'} on: "
                              f"{', '.join(sorted(avoid))} stopped answering")
        skipped: list[Board] = []
        board = None
        try:
            while True:
                board = self._acquire(tags, wanted, job)
                if board.place not in avoid:
                    break
                skipped.append(board)  # keep it held: the next reservation gets another board
                board = None
            for held in skipped:
                self._release(held.token)
            skipped = []
            yield board
        finally:
            for held in skipped:
                self._release(held.token)
            if board is not None:
                self._release(board.token)

    def _acquire(self, tags: dict[str, str], wanted: str, job: str) -> Board:
        with self._lock:
            if self._closed:
                raise RemoteError("the farm run was interrupted; nothing more is reserved")
            self._count += 1
            user = f"{self.identity}-{self._count}"  # one labgrid identity per lease (CLI)
        token = self._coordinator.reserve(tags, user)
        with self._lock:
            self._held[token] = (None, user)
        try:
            started = time.monotonic()
            self.report(f"farm: {job}: waiting for a board tagged {wanted} (reservation {token})")
            try:
                place = self._coordinator.wait(token, self.timeout_s, user, lambda: self._closed)
            except TimeoutError:
                holders = ", ".join(f"{p.name} held by {p.acquired}" for p in self.matching(tags) if p.acquired)
                raise RemoteError(f"no board tagged {wanted} became free within {self.timeout_s:.0f} s"
                                  + (f" ({holders})" if holders else ""),
                                  hint="raise --farm-timeout, or free a board") from None
            with self._lock:
                self._held[token] = (place, user)
            url = self._coordinator.ssh_url(place, user)
            self.report(f"farm: {job}: {place} ({url}) after {time.monotonic() - started:.1f} s")
            return Board(place, url, token)
        except BaseException:
            self._release(token)
            raise

    def _release(self, token: str) -> None:
        """Cancel the reservation first (the next waiter gets the place at once), then release the place."""
        with self._lock:
            place, user = self._held.pop(token, (None, self.identity))
        self._coordinator.cancel(token, user)
        if place is not None:
            problem = self._coordinator.release(place, user)
            if problem and "not acquired" not in problem:
                self.report(f"farm: WARNING: releasing {place} failed: {problem}")

    def disconnect(self) -> None:
        """Release what is still held and end the session with the coordinator."""
        self.close()
        self._coordinator.disconnect()

    def close(self) -> None:
        """Release everything this process still holds (after Ctrl-C, SIGTERM or an error)."""
        with self._lock:
            self._closed = True
        self._coordinator.close()
        with self._lock:
            tokens = list(self._held)
        for token in tokens:
            self._release(token)


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


def _service_url(place: str, services: list[dict[str, Any]]) -> str:
    """ssh://user@address:port of the first of a place's NetworkService params that has an address."""
    for params in services:
        user, address, port = params.get("username"), params.get("address"), params.get("port")
        if address:
            return f"ssh://{user + '@' if user else ''}{address}{':' + str(port) if port else ''}"
    raise ConfigError(f"farm place {place} has no NetworkService resource (address, username, port)",
                      hint="export the board's SSH service with a NetworkService entry and add-match it")


@dataclass
class JobResult:
    """One job's run on the farm: where and when, its result or error, and the board it retried from."""

    group: str
    board: str = ""
    url: str = ""
    started: float = 0.0
    ended: float = 0.0
    result: Any = None
    error: EdgebuildError | None = None
    retried_from: str | None = None
    log: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["error"] = str(self.error) if self.error else None
        data.pop("result")
        return data


def run_on_board(farm: Farm, group: str, tags: dict[str, str], job: Callable[[Board], Any]) -> JobResult:
    """``job`` on a board with ``tags``; once more on another board if the first stops answering."""
    outcome = JobResult(group)
    avoid: frozenset[str] = frozenset()
    for attempt in (1, 2):
        try:
            with farm.lease(tags, avoid=avoid, job=group) as board:
                outcome.board, outcome.url, outcome.started = board.place, board.url, time.time()
                try:
                    outcome.result = job(board)
                    return outcome
                finally:
                    outcome.ended = time.time()
        except DeviceUnreachable as exc:
            if attempt == 2:
                outcome.error = RemoteError(f"{group}: {outcome.board} stopped answering and so did the retry: "
                                            f"{exc.message}")
                return outcome
            farm.report(f"farm: {group}: {outcome.board} stopped answering ({exc.message}); released it, "
                        "running once more on another board of the profile")
            outcome.retried_from, avoid = outcome.board, frozenset({outcome.board})
        except EdgebuildError as exc:
            outcome.error = exc
            return outcome
    return outcome  # not reached


def fan_out(farm: Farm, jobs: list[tuple[str, dict[str, str], Callable[[Board], Any]]], *,
            max_jobs: int | None = None) -> list[JobResult]:
    """Run (group, tags, job) on boards concurrently: as many at once as there are free matching
    boards (the coordinator queues the rest), at most ``max_jobs``. Releases everything on the way
    out, also on Ctrl-C and SIGTERM."""
    workers = max(1, min(max_jobs or len(jobs), len(jobs)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgebuild-farm")
    try:
        with release_on_exit(farm):  # closes the farm first: the workers' labgrid calls end, then they do
            futures = [pool.submit(run_on_board, farm, group, tags, job) for group, tags, job in jobs]
            return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def fan_out_groups(farm: Farm, groups: Iterable[Any], job: Callable[[Any, Board], Any], *,
                   max_jobs: int | None = None) -> list[JobResult]:
    """``job(group, board)`` for every fleet group on a board tagged for it (:func:`target_tags`), as
    :func:`fan_out` runs them; the farm is disconnected afterwards. What ``validate --farm`` and
    ``bench --farm`` both are."""
    try:
        return fan_out(farm, [(g.name, target_tags(g), partial(job, g)) for g in groups], max_jobs=max_jobs)
    finally:
        farm.disconnect()


def write_jobs_file(path: Path, results: list[JobResult], extra: dict[str, Any] | None = None) -> Path:
    """``build/farm/<command>.json``: every job's board, start and end, error, and the command's records."""
    import json

    from edgebuild.runtime.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"jobs": [r.as_dict() for r in results], **(extra or {})}, indent=2,
                                       default=str))
    return path


@contextmanager
def release_on_exit(farm: Farm) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here (in the main thread) so that, like Ctrl-C, it ends in
    ``farm.close``: no reservation or acquired place of ours is left in the coordinator."""
    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except BaseException:
        farm.close()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
