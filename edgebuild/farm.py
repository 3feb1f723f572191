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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
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


class Farm:
    """The labgrid coordinator at ``coordinator``, as this process sees it."""

    def __init__(self, coordinator: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, report: Report = lambda _: None,
                 client: str | None = None) -> None:
        self.coordinator = coordinator
        self.timeout_s = timeout_s
        self.report = report
        self.client = client or labgrid_tool("labgrid-client")
        if self.client is None:
            raise CapabilityMissing("labgrid-client is not installed on this host (the device farm needs it)",
                                    hint="pip install 'edgebuild[farm]' (labgrid 26)")
        self.identity = f"edgebuild-{os.getpid()}"
        self._held: dict[str, tuple[str | None, str]] = {}  # token -> (place, user)
        self._processes: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False
        self.calls = 0  # coordinator round trips (labgrid-client calls), for the overhead benchmark

    # -- labgrid-client ----------------------------------------------------------------------

    def _run(self, *args: str, user: str | None = None, timeout_s: float = 60.0, check: bool = True
             ) -> subprocess.CompletedProcess:
        env = {**os.environ, COORDINATOR_ENV: self.coordinator, "LG_USERNAME": user or self.identity,
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
            out, err = process.communicate()
            raise RemoteError(f"labgrid-client {' '.join(args)} did not finish within {timeout_s:.0f} s "
                              f"(coordinator {self.coordinator})") from None
        finally:
            with self._lock:
                self._processes.discard(process)
        done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        if check and done.returncode != 0:
            text = (err.strip() or out.strip()).splitlines()
            raise RemoteError(f"labgrid-client {' '.join(args)}: {text[-1] if text else f'exit {done.returncode}'}",
                              hint=f"is the labgrid coordinator at {self.coordinator} running? "
                                   "(`labgrid-client places` with LG_COORDINATOR set)")
        return done

    def places(self) -> list[Place]:
        """Every place of the farm with its tags and who holds it."""
        found: list[Place] = []
        current: dict[str, Any] | None = None
        for line in self._run("-v", "places").stdout.splitlines():
            start = re.match(r"^Place '(.+)':$", line)
            if start:
                current = {"name": start[1], "tags": {}, "acquired": None, "reservation": None}
                found.append(current)  # type: ignore[arg-type]
            elif current is not None:
                tags = re.match(r"^  tags: (.*)$", line)
                if tags and tags[1].strip():
                    current["tags"] = dict(kv.split("=", 1) for kv in tags[1].split(", ") if "=" in kv)
                held = re.match(r"^  acquired: (.*)$", line)
                if held:
                    current["acquired"] = None if held[1].strip() == "None" else held[1].strip()
                reserved = re.match(r"^  reservation: (.*)$", line)
                if reserved:
                    current["reservation"] = reserved[1].strip()
        return [Place(**p) if isinstance(p, dict) else p for p in found]  # type: ignore[arg-type]

    def matching(self, tags: dict[str, str]) -> list[Place]:
        return [p for p in self.places() if all(p.tags.get(k) == v for k, v in tags.items())]

    def profiles(self) -> list[str]:
        return sorted({f"{p.tags.get('module', '?')}@{p.tags.get('jetpack', '?')}" for p in self.places()})

    # -- leases ------------------------------------------------------------------------------

    @contextmanager
    def lease(self, tags: dict[str, str], *, avoid: frozenset[str] = frozenset(), job: str = "") -> Iterator[Board]:
        """Reserve, wait for, acquire and yield a board with ``tags``; always released afterwards.

        ``avoid``: places not to run on (a board that stopped answering); one the coordinator
        allocates anyway is held while another is reserved, so the job lands elsewhere.
        """
        wanted = " ".join(f"{k}={v}" for k, v in tags.items())
        matching = self.matching(tags)
        if not matching:
            raise ConfigError(f"the farm at {self.coordinator} has no board tagged {wanted}"
                              + (f" (its profiles: {', '.join(self.profiles())})" if self.places() else
                                 " (it has no places)"),
                              hint="tag a place with labgrid-client -p PLACE set-tags " + wanted)
        if not {p.name for p in matching} - avoid:
            raise RemoteError(f"no other board tagged {wanted} to run {job or 'the job'} on: "
                              f"{', '.join(sorted(avoid))} stopped answering")
        skipped: list[Board] = []
        try:
            while True:
                board = self._acquire(tags, wanted, job)
                if board.place not in avoid:
                    break
                skipped.append(board)  # keep it held: the next reservation gets another board
            for held in skipped:
                self._give_back(held)
            skipped = []
            yield board
        finally:
            for held in skipped:
                self._give_back(held)
            if "board" in locals():
                self._give_back(board)

    def _acquire(self, tags: dict[str, str], wanted: str, job: str) -> Board:
        with self._lock:
            if self._closed:
                raise RemoteError("the farm run was interrupted; nothing more is reserved")
            self._count += 1
            user = f"{self.identity}-{self._count}"  # one labgrid identity per lease
        reserved = self._run("reserve", "--shell", *[f"{k}={v}" for k, v in tags.items()], user=user)
        token = re.search(r"export LG_TOKEN=(\w+)", reserved.stdout)
        if token is None:
            raise RemoteError(f"labgrid-client reserve {wanted}: no token in its answer: {reserved.stdout.strip()}")
        token_s = token[1]
        with self._lock:
            self._held[token_s] = (None, user)
        try:
            started = time.monotonic()
            self.report(f"farm: {job}: waiting for a board tagged {wanted} (reservation {token_s})")
            try:
                self._run("wait", token_s, user=user, timeout_s=self.timeout_s)
            except RemoteError:
                holders = ", ".join(f"{p.name} held by {p.acquired}" for p in self.matching(tags) if p.acquired)
                raise RemoteError(f"no board tagged {wanted} became free within {self.timeout_s:.0f} s"
                                  + (f" ({holders})" if holders else ""),
                                  hint="raise --farm-timeout, or free a board") from None
            self._run("-p", f"+{token_s}", "acquire", user=user)
            shown = self._run("-p", f"+{token_s}", "show", user=user).stdout
            name = re.search(r"^Place '(.+)':$", shown, re.M)
            if name is None:
                raise RemoteError(f"labgrid-client show of reservation {token_s}: no place in its answer")
            with self._lock:
                self._held[token_s] = (name[1], user)
            url = _ssh_url(name[1], shown)
            self.report(f"farm: {job}: {name[1]} ({url}) after {time.monotonic() - started:.1f} s")
            return Board(name[1], url, token_s)
        except BaseException:
            self._release(token_s)
            raise

    def _give_back(self, board: Board) -> None:
        self._release(board.token)

    def _release(self, token: str) -> None:
        """Cancel the reservation first (the next waiter gets the place at once), then release the place."""
        with self._lock:
            place, user = self._held.pop(token, (None, self.identity))
        self._run("cancel-reservation", token, user=user, check=False)
        if place is not None:
            done = self._run("-p", place, "release", user=user, check=False)
            if done.returncode != 0 and "not acquired" not in (done.stderr + done.stdout):
                self.report(f"farm: WARNING: releasing {place} failed: {done.stderr.strip()}")

    def close(self) -> None:
        """Release everything this process still holds (after Ctrl-C, SIGTERM or an error)."""
        with self._lock:
            self._closed = True
            running = list(self._processes)
        for process in running:  # a `wait` still polling keeps its reservation alive
            process.kill()
        with self._lock:
            tokens = list(self._held)
        for token in tokens:
            self._release(token)


def _ssh_url(place: str, shown: str) -> str:
    """ssh://user@address:port of the place's NetworkService, from `labgrid-client show`."""
    for match in re.finditer(r"^(?:Acquired|Matching) resource '[^']*' \(([^)]*)\):\n((?:  .*\n?)+)", shown, re.M):
        try:
            resource = ast.literal_eval(match[2].strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(resource, dict) and resource.get("cls") == "NetworkService":
            params = resource.get("params", {})
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
