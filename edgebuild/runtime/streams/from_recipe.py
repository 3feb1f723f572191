"""The streams a recipe names (``[[streams]]`` and ``[runtime.tracking]`` of edgebuild.toml), run by the
container's entry point: ``serve`` starts them in a thread once the server is warm ("beside"), or runs only
them ("instead"). What each stream has done so far is ``RecipeTracking.status()``, which the server answers
at ``/v2/streams`` and in ``/v2/health/ready``.

Python 3.8, the standard library.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edgebuild.errors import ConfigError, EdgebuildError
from edgebuild.runtime.base.group import model_folders
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.recipe import Recipe, RecipeStreams
from edgebuild.runtime.engines.backends.select import ENGINE_CACHE_ENV
from edgebuild.runtime.streams.pipeline import Progress, TrackSettings, run_tracking
from edgebuild.runtime.streams.records import TrackedFrame

__all__: List[str] = []


def recipe_tracking(folder: Path, backend: str = "auto", engine_cache: Optional[Path] = None,
                    progress: Progress = lambda message: None) -> Optional["RecipeTracking"]:
    """The tracking a served folder's recipe asks for (a group folder: its one model with streams), or None."""
    tracked: List[Tuple[str, Path, RecipeStreams]] = []
    for name, path in model_folders(Path(folder)).items():
        streams = Recipe.load(path).streams
        if streams is not None:
            tracked.append((name, path, streams))
    if not tracked:
        return None
    if len(tracked) > 1:
        raise ConfigError("{}: {} models track streams ({}); the entry point runs one model's streams".format(
            folder, len(tracked), ", ".join(n for n, _, _ in tracked)),
            hint="keep [[streams]] in one model project of the fleet")
    name, path, streams = tracked[0]
    return RecipeTracking(path, streams, backend, engine_cache, progress)


class RecipeTracking:
    """One model folder's streams, run as ``edgebuild track`` with the recipe's sources and options."""

    def __init__(self, folder: Path, streams: RecipeStreams, backend: str, engine_cache: Optional[Path],
                 progress: Progress) -> None:
        self.folder, self.streams, self.progress = folder, streams, progress
        cache = Path(engine_cache or os.environ.get(ENGINE_CACHE_ENV) or folder / "engine-cache")
        self.jsonl = cache / streams.jsonl  # an absolute jsonl stays itself
        self.settings = TrackSettings(
            sources=[s.source for s in streams.sources], tracker=streams.tracker, backend=backend,
            engine_cache=engine_cache, sse_port=streams.sse_port, mqtt=streams.mqtt, mqtt_topic=streams.mqtt_topic,
            regions=folder / streams.regions if streams.regions else None,
            names=[s.name for s in streams.sources], stream_max_fps=[s.max_fps for s in streams.sources])
        self.state = "waiting"  # for the server's warm-up; then running, ended or failed
        self.error: Optional[str] = None
        self.summary: Optional[JsonObject] = None
        self._frames = [0] * len(streams.sources)
        self._last: List[Optional[float]] = [None] * len(streams.sources)
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        return self.streams.mode

    def _seen(self, frame: TrackedFrame, image: Any) -> None:
        with self._lock:
            self._frames[frame.stream] += 1
            self._last[frame.stream] = frame.time

    def run(self) -> JsonObject:
        """Track until every source has ended; the summary (``run_tracking``'s)."""
        self.jsonl.parent.mkdir(parents=True, exist_ok=True)
        self.state = "running"
        try:
            self.summary = run_tracking(self.folder, self.settings, self.jsonl, progress=self.progress,
                                        on_frame=[self._seen])
        except (EdgebuildError, OSError, ValueError) as exc:
            self.state, self.error = "failed", str(exc)
            raise
        self.state = "ended"
        return self.summary

    def start(self) -> threading.Thread:
        """``run`` in a thread of its own (the server's ``after_ready``); a failure is its state, not a crash."""
        def run() -> None:
            try:
                self.run()
            except (EdgebuildError, OSError, ValueError) as exc:
                self.progress("track: FAILED: {}".format(exc))

        thread = threading.Thread(target=run, name="edgebuild-track", daemon=True)
        thread.start()
        return thread

    def status(self) -> JsonObject:
        """``{"state", "mode", "jsonl", "streams": [{"stream", "name", "source", "frames", "last_time"}]}``."""
        with self._lock:
            streams = [{"stream": i, "name": s.name, "source": s.source, "frames": self._frames[i],
                        "last_time": self._last[i]} for i, s in enumerate(self.streams.sources)]
        found: Dict[str, Any] = {"state": self.state, "mode": self.mode, "jsonl": str(self.jsonl),
                                 "streams": streams}
        if self.error:
            found["error"] = self.error
        return found
