"""The HTTP server's worker pool (``httpd.py``): complete requests handed to worker threads.

Python 3.8 and the standard library.
"""

# ruff: noqa: UP006, UP035

import collections
import threading
from typing import Generic, List, Optional, TypeVar

__all__ = []

#: what a worker is handed: the server's (connection, request); None instead tells a worker to stop
Job = TypeVar("Job")


class Worker(Generic[Job]):
    """A worker thread's wake-up: a lock it blocks on, released by whoever gives it a job."""

    __slots__ = ("wake", "job")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.job = None  # type: Optional[Job]


class Pool(Generic[Job]):
    """Complete requests to worker threads.

    The worker that went idle last takes the next request (its core's caches hold the model's
    weights and the code), woken by one lock release: no Condition round trip, no Queue. When
    every worker is busy, requests wait in a backlog the workers take from before going idle.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: List[Worker[Job]] = []
        self._backlog = collections.deque()  # type: collections.deque

    def submit(self, job: Optional[Job]) -> None:
        with self._lock:
            if not self._idle:
                self._backlog.append(job)
                return
            worker = self._idle.pop()
        worker.job = job
        worker.wake.release()

    def waiting(self) -> bool:
        """Whether requests wait for a worker (read without the lock: a hint, checked again by ``take``)."""
        return bool(self._backlog)

    def take(self, worker: Worker[Job]) -> Optional[Job]:
        """The next job for ``worker`` (blocks while there is none)."""
        with self._lock:
            if self._backlog:
                return self._backlog.popleft()
            self._idle.append(worker)
        worker.wake.acquire()
        job, worker.job = worker.job, None
        return job
