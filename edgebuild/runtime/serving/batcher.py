"""The dynamic batcher and the model instances of a model service (``service.py``).

- ``gather``: the next batch, as Triton's dynamic batcher forms one: the oldest waiting request and
  the others that share its non-batch dimensions, run at once when ``max_batch_size`` rows are
  there, or a preferred batch size with nothing more already waiting (cut to the largest preferred
  size reached), else when ``max_queue_delay_ms`` have passed since the oldest request arrived;
- ``instances``: ``instance_count`` runners of one loaded model (``runner.instance``: another ONNX
  Runtime session, the cores split between the instances' intra-op threads; another TensorRT
  execution context of the same engine);
- ``Answer``: where an instance's worker puts one request's result.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import collections
import os
import queue
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

__all__ = []


class Runner(Protocol):
    """A backend as the service runs it (``load_backend``'s: TensorRT's or ONNX Runtime's runner)."""

    backend: str

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]: ...


#: a request for an instance's worker: its inputs, and where its result goes
Job = Tuple[Dict[str, np.ndarray], "Answer"]
#: a request's result: (outputs, backend ms of its run, rows in that run), or the error its run raised
Result = Union[Tuple[Dict[str, np.ndarray], float, int], Exception]


class Answer:
    """Where an instance's worker puts one request's result, when the request was queued and its run started.

    The caller waits on a lock the worker releases: one wake-up, where an ``Event`` would go
    through a ``Condition`` (a lock made per wait, and a second lock to take back).
    """

    def __init__(self, queued: float = 0.0) -> None:
        self.queued = queued  # when the request was queued: its batching delay counts from then
        self.started = 0.0
        self._done = threading.Lock()
        self._done.acquire()
        self._value = ({}, 0.0, 0)  # type: Result

    def put(self, value: Result) -> None:
        self._value = value
        self._done.release()

    def get(self) -> Result:
        self._done.acquire()
        return self._value


def gather(first: Job, waiting: Deque[Job], jobs: "queue.SimpleQueue[Job]", limit: int, delay_ms: float,
           preferred: Sequence[int]) -> List[Job]:
    """``first`` and the requests that can share its batch (the same non-batch dims): from ``waiting`` (those
    an earlier batch set aside, first) and ``jobs``; those that cannot join go to ``waiting``."""
    key = batch_key(first[0])
    if key is None:
        return [first]
    batch = [first]
    total = [rows(first[0])]
    skipped = collections.deque()  # type: Deque[Job]

    def add(job: Job, aside: Deque[Job]) -> None:
        size = rows(job[0])
        if total[0] + size <= limit and batch_key(job[0]) == key:
            batch.append(job)
            total[0] += size
        else:
            aside.append(job)

    while waiting and total[0] < limit:
        add(waiting.popleft(), skipped)
    skipped.extend(waiting)
    waiting.clear()
    waiting.extend(skipped)
    deadline = first[1].queued + delay_ms / 1000.0
    while total[0] < limit:
        try:  # what is already waiting joins without a wait
            add(jobs.get_nowait(), waiting)
            continue
        except queue.Empty:
            pass
        if preferred and total[0] >= preferred[0]:
            return cut_to_preferred(batch, waiting, preferred)
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        try:
            add(jobs.get(timeout=left), waiting)
        except queue.Empty:
            break
    return batch


def cut_to_preferred(batch: List[Job], waiting: Deque[Job], preferred: Sequence[int]) -> List[Job]:
    """The longest start of ``batch`` whose rows are a preferred size; the rest goes back to the front of
    ``waiting`` (in order), for the next batch."""
    total, cut = 0, 0
    for index, (inputs, _) in enumerate(batch, 1):
        total += rows(inputs)
        if total in preferred:
            cut = index
    if cut == 0 or cut == len(batch):
        return batch
    waiting.extendleft(reversed(batch[cut:]))
    return batch[:cut]


def preferred_sizes(sizes: Sequence[int], max_batch_size: int, log: Callable[[str], None]) -> Tuple[int, ...]:
    """The preferred batch sizes the max batch allows (a batch of one is never waited for)."""
    from edgebuild.errors import ConfigError

    if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ConfigError("preferred_batch_size must be whole numbers of at least 1, not {}".format(list(sizes)))
    dropped = sorted({s for s in sizes if s > max_batch_size})
    if dropped and max_batch_size > 1:
        log("WARNING: preferred_batch_size {} past the max batch {} is left out".format(dropped, max_batch_size))
    return tuple(sorted({s for s in sizes if 1 < s <= max_batch_size}))


def instances(runner: Runner, count: int, log: Callable[[str], None]) -> List[Runner]:
    """``count`` runners of the loaded model, ``runner`` first where it can stay as it is.

    ONNX Runtime: one session per instance, the cores split between their intra-op threads (one run
    at a time per instance); TensorRT: an execution context per instance on the one engine.
    """
    make = getattr(runner, "instance", None)
    if make is None:
        if count > 1:
            log("WARNING: backend {} has one instance only; instance_count {} is ignored".format(
                runner.backend, count))
        return [runner]
    threads = max(1, cores() // count)
    if getattr(runner, "threads", threads) != threads:
        runner = make(threads=threads)
    runners = [runner] + [make(threads=threads) for _ in range(count - 1)]
    if count > 1:
        log("{} instances of {}".format(count, runner.backend) + (
            ", {} intra-op thread{} each".format(threads, "s" if threads > 1 else "")
            if hasattr(runner, "threads") else ""))
    return runners


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def rows(inputs: Dict[str, np.ndarray]) -> int:
    return int(next(iter(inputs.values())).shape[0])


def batch_key(inputs: Dict[str, np.ndarray]) -> Optional[Tuple[Tuple[str, Tuple[int, ...]], ...]]:
    """What requests must share to be stacked: every input's non-batch dims (None: not batchable)."""
    if len({a.shape[0] for a in inputs.values()}) != 1:
        return None
    return tuple(sorted((n, a.shape[1:]) for n, a in inputs.items()))
