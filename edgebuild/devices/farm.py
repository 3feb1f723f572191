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

The coordinator clients are in ``devices.labgrid`` (labgrid's gRPC client in-process, or its
``labgrid-client`` command line; pip ``edgebuild[farm]``). Reservations: ``reserve`` returns a
token at once, ``wait TOKEN`` polls until a place is allocated (labgrid expires a reservation
60 s after its last poll, and never while its place is acquired), then ``acquire``. Teardown
cancels the reservation before releasing the place, so the next waiter gets it at once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from edgebuild.devices.labgrid import COORDINATOR_ENV, Place, connect, profiles_of
from edgebuild.errors import ConfigError, DeviceUnreachable, EdgebuildError, RemoteError
from edgebuild.jsontypes import JsonObject
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = ["Farm", "JobResult", "NoCoordinator", "fan_out_groups", "open_farm", "release_on_exit", "run_on_board",
           "target_tags", "write_jobs_file"]

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Board:
    """A place this process holds, and how to reach it."""

    place: str
    url: str  # ssh://user@address:port
    token: str


def target_tags(group: SelectedGroup) -> dict[str, str]:
    """The place tags a fleet group's board must have: module, jetpack, power_mode if the group names one."""
    tags = {"module": group.target.module.id, "jetpack": group.target.release.jetpack}
    if group.power_mode:
        tags["power_mode"] = group.power_mode
    return tags


def coordinator_address(project: Project | None = None, given: str | None = None) -> str | None:
    """``--farm ADDRESS``, else ``[farm] coordinator``, else ``$LG_COORDINATOR`` (host:port)."""
    farm = getattr(project, "farm", None)
    return given or (farm.coordinator if farm else None) or os.environ.get(COORDINATOR_ENV) or None


class NoCoordinator(ConfigError):
    """A farm command with no coordinator to ask (the command line makes this a usage error)."""


def open_farm(project: Project, address: str | None = None, timeout_s: float | None = None, *,
              progress: Progress = lambda _: None) -> Farm:
    """The project's farm: ``address`` (bare ``--farm`` gives ""), else ``[farm] coordinator``, else
    ``$LG_COORDINATOR``; a job waits ``timeout_s`` for a busy board, else ``[farm] timeout_s``."""
    found = coordinator_address(project, address or None)
    if not found:
        raise NoCoordinator("--farm needs a labgrid coordinator: --farm HOST:PORT, [farm] coordinator in "
                            "edgebuild.toml, or $LG_COORDINATOR")
    return Farm(found, timeout_s=timeout_s or project.farm.timeout_s, progress=progress)


class Farm:
    """The labgrid coordinator at ``coordinator``, as this process sees it."""

    def __init__(self, coordinator: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, progress: Progress = lambda _: None,
                 client: str | None = None) -> None:
        self.coordinator = coordinator
        self.timeout_s = timeout_s
        self.progress = progress
        self.identity = f"edgebuild-{os.getpid()}"
        self._coordinator = connect(coordinator, self.identity, client)
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
            self.progress(f"farm: {job}: waiting for a board tagged {wanted} (reservation {token})")
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
            self.progress(f"farm: {job}: {place} ({url}) after {time.monotonic() - started:.1f} s")
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
                self.progress(f"farm: WARNING: releasing {place} failed: {problem}")

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

    def as_dict(self) -> JsonObject:
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
            farm.progress(f"farm: {group}: {outcome.board} stopped answering ({exc.message}); released it, "
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
            # waits in slices: a signal the kernel hands to a worker thread only sets Python's flag, and its
            # handler runs when the main thread next runs Python; a wait with no timeout would never wake to it
            while wait(futures, timeout=0.25).not_done:
                pass
            return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def fan_out_groups(farm: Farm, groups: Iterable[SelectedGroup], job: Callable[[SelectedGroup, Board], object], *,
                   max_jobs: int | None = None) -> list[JobResult]:
    """``job(group, board)`` for every fleet group on a board tagged for it (:func:`target_tags`), as
    :func:`fan_out` runs them; the farm is disconnected afterwards. What ``validate --farm`` and
    ``bench --farm`` both are."""
    try:
        return fan_out(farm, [(g.name, target_tags(g), partial(job, g)) for g in groups], max_jobs=max_jobs)
    finally:
        farm.disconnect()


def write_jobs_file(path: Path, results: list[JobResult], extra: JsonObject | None = None) -> Path:
    """``build/farm/<command>.json``: every job's board, start and end, error, and the command's records."""
    import json

    from edgebuild.runtime.base.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"jobs": [r.as_dict() for r in results], **(extra or {})}, indent=2,
                                       default=str))
    return path


@contextmanager
def release_on_exit(farm: Farm) -> Iterator[None]:
    """SIGTERM and Ctrl-C raise KeyboardInterrupt here (in the main thread), so that either ends in
    ``farm.close``: no reservation or acquired place of ours is left in the coordinator. SIGINT is
    set too, not left to Python's default: a process started in the background by a
    non-interactive shell (``cmd &`` in a script, a CI job) inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler, so a SIGINT sent to the run went nowhere while it waited
    for a board (the farm's interrupt test failed exactly when the suite was started with ``&``)."""
    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except BaseException:
        farm.close()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
