"""Where a stream's frames come from: a video file, an RTSP URL, a V4L2 camera (/dev/videoN) or a CSI camera.

Each source has a reader thread of its own (:class:`StreamReader`) that hands its newest frame to a one-slot
buffer (:class:`FrameSlot`): a live source never waits for the model (a frame not taken before the next one
arrives is dropped, and counted), a video file waits for its frame to be taken (a file is not live: every frame
is tracked). A dropped connection is reopened with a growing pause (:class:`Backoff`), in that source's thread
alone, so one camera that fails never stalls the others.

On a Jetson, decoding and colour conversion stay on the hardware: OpenCV opens the GStreamer pipeline
:func:`gstreamer_pipeline` writes (nvv4l2decoder and nvvidconv, nvarguscamerasrc for CSI) where its build has
GStreamer; elsewhere OpenCV's own capture (FFmpeg, V4L2) opens the source.

Python 3.8, numpy; OpenCV (cv2) is imported only when a source is opened.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, Optional

from edgebuild.errors import CapabilityMissing, ConfigError

__all__: List[str] = []

SOURCE_KINDS = ("file", "rtsp", "v4l2", "csi")
CODECS = ("h264", "h265")
_NETWORK = re.compile(r"^(rtsp|rtsps|rtmp|http|https)://", re.IGNORECASE)
_V4L2 = re.compile(r"^(/dev/video(\d+)|v4l2://(\d+)|(\d+))$")
_CSI = re.compile(r"^csi://(\d+)$")


@dataclass(frozen=True)
class Source:
    """One ``--source``: its index (the stream number in the output), kind, what opens it (a path, a URL, a
    device node) and, for V4L2 and CSI, the camera's number; ``codec``: what an RTSP stream or file holds."""

    index: int
    kind: str
    uri: str
    camera: Optional[int] = None
    codec: str = "h264"

    @property
    def live(self) -> bool:
        """A camera or a network stream: frames not taken in time are dropped, a lost one is reopened."""
        return self.kind != "file"


def parse_source(text: str, index: int, codec: str = "h264") -> Source:
    """A ``--source`` as written: ``rtsp://...`` (also rtsps, rtmp, http), ``/dev/videoN`` (or ``v4l2://N``, or
    just ``N``), ``csi://N`` (a CSI camera's sensor id), anything else a video file."""
    if codec not in CODECS:
        raise ConfigError("codec {!r}: one of {}".format(codec, ", ".join(CODECS)))
    text = text.strip()
    if not text:
        raise ConfigError("--source is empty", hint="give a video file, rtsp://..., /dev/videoN or csi://N")
    if _NETWORK.match(text):
        return Source(index, "rtsp", text, codec=codec)
    v4l2 = _V4L2.match(text)
    if v4l2:
        number = int(next(g for g in v4l2.groups()[1:] if g is not None))
        return Source(index, "v4l2", "/dev/video{}".format(number), camera=number)
    csi = _CSI.match(text)
    if csi:
        return Source(index, "csi", text, camera=int(csi.group(1)))
    return Source(index, "file", text, codec=codec)


# -- GStreamer pipelines ------------------------------------------------------------------------------------

#: the caps and sink every pipeline ends in: BGR frames to OpenCV, the newest only, never waiting on the clock
_APPSINK = "video/x-raw,format=BGR ! appsink drop=true max-buffers=1 sync=false"
#: NVMM (the hardware's memory) to BGRx in system memory; videoconvert drops the x (nvvidconv writes no BGR)
_NV_TO_BGR = "nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! "


def gstreamer_pipeline(source: Source, jetpack_major: Optional[int]) -> str:
    """The GStreamer pipeline OpenCV opens ``source`` with (``cv2.VideoCapture(p, cv2.CAP_GSTREAMER)``).

    ``jetpack_major`` 5 or 6: NVIDIA's elements (the same in both: nvv4l2decoder, nvvidconv,
    nvarguscamerasrc); None: software elements only (decodebin, videoconvert), for a host with GStreamer.
    JetPack 4 is refused: its Python (3.6) cannot run the device side.
    """
    if jetpack_major is None:
        return _software_pipeline(source)
    if jetpack_major not in (5, 6):
        raise CapabilityMissing("GStreamer pipelines are written for JetPack 5 and 6, not {}".format(jetpack_major),
                                hint="JetPack 5 or 6 (Python 3.8 or newer) runs edgebuild's device side")
    if source.kind == "csi":
        return ("nvarguscamerasrc sensor-id={} ! video/x-raw(memory:NVMM),format=NV12 ! ".format(source.camera)
                + _NV_TO_BGR + _APPSINK)
    if source.kind == "v4l2":  # a USB camera's raw frames, converted by the VIC (nvvidconv), not the CPU
        return "v4l2src device={} ! video/x-raw ! {}{}".format(source.uri, _NV_TO_BGR, _APPSINK)
    parse = "{}parse".format(source.codec)
    depay = "rtp{}depay".format(source.codec)
    decode = "{} ! nvv4l2decoder ! {}{}".format(parse, _NV_TO_BGR, _APPSINK)
    if source.kind == "rtsp":
        return "rtspsrc location={} latency=200 ! {} ! {}".format(_quoted(source.uri), depay, decode)
    return "filesrc location={} ! {} ! {}".format(_quoted(source.uri), _demuxer(source.uri), decode)


def _software_pipeline(source: Source) -> str:
    if source.kind == "csi":
        raise CapabilityMissing("a CSI camera ({}) needs a Jetson's nvarguscamerasrc".format(source.uri))
    if source.kind == "v4l2":
        return "v4l2src device={} ! videoconvert ! {}".format(source.uri, _APPSINK)
    head = "uridecodebin uri={}".format(_quoted(source.uri)) if source.kind == "rtsp" else \
        "filesrc location={} ! decodebin".format(_quoted(source.uri))
    return "{} ! videoconvert ! {}".format(head, _APPSINK)


def _demuxer(path: str) -> str:
    suffix = path.lower().rsplit(".", 1)[-1]
    return {"mkv": "matroskademux", "webm": "matroskademux", "ts": "tsdemux", "avi": "avidemux"}.get(
        suffix, "qtdemux")


def _quoted(value: str) -> str:
    """A property value gst_parse_launch reads whole (spaces and ``!`` included)."""
    return '"{}"'.format(value.replace("\\", "\\\\").replace('"', '\\"'))


def opencv_has_gstreamer(build_information: str) -> bool:
    """Whether ``cv2.getBuildInformation()`` says its Video I/O has GStreamer."""
    return bool(re.search(r"^\s*GStreamer:\s*YES", build_information, re.MULTILINE))


def open_capture(source: Source, jetpack_major: Optional[int]) -> Any:
    """A ``cv2.VideoCapture`` of ``source``: the hardware pipeline on a Jetson whose OpenCV has GStreamer,
    else OpenCV's own backend. Not opened is not an error here: the reader reports and retries it."""
    try:
        import cv2
    except ImportError:
        raise CapabilityMissing("reading video needs OpenCV (cv2), which is not installed",
                                hint="on a Jetson: sudo apt install python3-opencv (JetPack's, with GStreamer); "
                                     "elsewhere: pip install opencv-python-headless") from None
    if jetpack_major is not None and opencv_has_gstreamer(cv2.getBuildInformation()):
        return cv2.VideoCapture(gstreamer_pipeline(source, jetpack_major), cv2.CAP_GSTREAMER)
    if source.kind == "csi":
        raise CapabilityMissing("a CSI camera ({}) needs a Jetson's OpenCV with GStreamer".format(source.uri),
                                hint="JetPack's python3-opencv has it; a pip opencv does not")
    if source.kind == "v4l2":
        return cv2.VideoCapture(source.camera if source.camera is not None else source.uri)
    return cv2.VideoCapture(source.uri)


# -- the reader ---------------------------------------------------------------------------------------------

class Frame(NamedTuple):
    """A frame read: its stream, its number in the stream (counting dropped ones), the BGR pixels, when it was
    read (``time.time()``) and how long reading and decoding it took."""

    stream: int
    number: int
    image: Any  # numpy HxWx3 uint8, BGR
    time: float
    decode_s: float


class FrameSlot:
    """A one-frame buffer between a reader and the pipeline: ``put`` replaces a frame not yet taken (and counts
    it dropped), or with ``wait`` blocks until it is taken (a file's reader: nothing dropped)."""

    def __init__(self) -> None:
        self._frame = None  # type: Optional[Frame]
        self._changed = threading.Condition()
        self.dropped = 0
        self.arrived = None  # type: Optional[threading.Event]  # set on every put: the pipeline waits on it

    def put(self, frame: Frame, wait: bool = False, stop: Optional[threading.Event] = None) -> None:
        with self._changed:
            while wait and self._frame is not None and not (stop is not None and stop.is_set()):
                self._changed.wait(0.05)
            if self._frame is not None:
                self.dropped += 1
            self._frame = frame
            self._changed.notify_all()
        if self.arrived is not None:
            self.arrived.set()

    def take(self) -> Optional[Frame]:
        """The newest frame not yet taken, or None."""
        with self._changed:
            frame, self._frame = self._frame, None
            if frame is not None:
                self._changed.notify_all()
            return frame

    def wait_for_any(self, timeout_s: float) -> bool:
        with self._changed:
            if self._frame is None:
                self._changed.wait(timeout_s)
            return self._frame is not None


class Backoff:
    """The pauses before reopening a lost source: ``first_s``, doubling up to ``max_s``; ``reset`` after a frame."""

    def __init__(self, first_s: float = 0.5, max_s: float = 8.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.next_s = first_s

    def pause(self) -> float:
        pause, self.next_s = self.next_s, min(self.next_s * 2, self.max_s)
        return pause

    def reset(self) -> None:
        self.next_s = self.first_s


class StreamReader(threading.Thread):
    """Reads one source into its :class:`FrameSlot` until it ends, ``stop()`` or ``max_frames`` frames.

    ``opener(source)`` gives a capture (``read() -> (ok, image)``, ``release()``, ``isOpened()``); a live source
    that cannot be opened or stops giving frames is reopened after :class:`Backoff`'s pauses, up to
    ``max_reconnects`` times in a row (None: for ever); a file that cannot be opened fails at once, and one that
    stops giving frames has ended. ``max_fps`` caps the frames handed on (a file is paced to it; a live source's
    frames in between are read and counted, not handed on). What went wrong is in ``errors``.
    """

    def __init__(self, source: Source, opener: Callable[[Source], Any], *, max_fps: Optional[float] = None,
                 max_frames: Optional[int] = None, max_reconnects: Optional[int] = 5, backoff: Optional[Backoff] = None,
                 sleep: Callable[[float], Any] = time.sleep, progress: Callable[[str], None] = lambda m: None) -> None:
        super().__init__(name="edgebuild-source-{}".format(source.index), daemon=True)
        self.source, self.opener = source, opener
        self.max_fps, self.max_frames, self.max_reconnects = max_fps, max_frames, max_reconnects
        self.backoff = backoff or Backoff()
        self.sleep, self.progress = sleep, progress
        self.slot = FrameSlot()
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.frames_read = 0
        self.skipped = 0  # read but not handed on: above --max-fps
        self.reconnects = 0
        self.errors: List[str] = []

    @property
    def dropped(self) -> int:
        return self.slot.dropped + self.skipped

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            self._read_all()
        except Exception as exc:  # a reader never takes the others down: what failed is reported
            self.errors.append("{}: {}".format(type(exc).__name__, exc))
        finally:
            self.finished.set()

    def _read_all(self) -> None:
        failures = 0
        while not self._done():
            capture = self.opener(self.source)
            got = self._read_from(capture) if capture is not None and capture.isOpened() else 0
            if capture is not None:
                capture.release()
            if self._done():
                return
            if not self.source.live:
                if got == 0 and self.frames_read == 0:
                    self._fail("cannot open or read {}".format(self.source.uri))
                return  # a file's end
            failures = 0 if got else failures + 1
            if self.max_reconnects is not None and failures > self.max_reconnects:
                self._fail("gave up on {} after {} attempts to reconnect".format(self.source.uri, failures - 1))
                return
            if got:
                self.backoff.reset()
            pause = self.backoff.pause()
            self.progress("stream {}: {} lost; reconnecting in {:.1f} s".format(
                self.source.index, self.source.uri, pause))
            self.reconnects += 1
            self._pause(pause)

    def _read_from(self, capture: Any) -> int:
        got = 0
        interval = 1.0 / self.max_fps if self.max_fps else 0.0
        next_due = 0.0
        while not self._done():
            start = time.perf_counter()
            ok, image = capture.read()
            decode_s = time.perf_counter() - start
            if not ok or image is None:
                return got
            got += 1
            number, self.frames_read = self.frames_read, self.frames_read + 1
            now = time.monotonic()
            if interval and now < next_due:
                if self.source.live:
                    self.skipped += 1
                    continue
                self._pause(next_due - now)
            next_due = max(next_due, now) + interval if interval else 0.0
            self.slot.put(Frame(self.source.index, number, image, time.time(), decode_s),
                          wait=not self.source.live, stop=self.stopping)
        return got

    def _done(self) -> bool:
        return self.stopping.is_set() or (self.max_frames is not None and self.frames_read >= self.max_frames)

    def _pause(self, seconds: float) -> None:
        if self.sleep is time.sleep:
            self.stopping.wait(seconds)  # a stop ends the pause at once
        else:
            self.sleep(seconds)

    def _fail(self, message: str) -> None:
        self.errors.append(message)
        self.progress("stream {}: {}".format(self.source.index, message))
