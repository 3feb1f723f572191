"""The options of ``serve``, ``bench``, ``track`` and the OTA commands, defined once for both command lines.

The device's ``edgebuild-device.pyz`` (argparse, ``add_arguments`` here) and the build host's
``edgebuild`` (click, ``edgebuild/cli/options.py``) build their commands from these tables, so a
flag, its type, default, range and help text cannot drift apart between them. ``as_argv`` turns
option values back into a device command line (what the host runs over SSH). Options only the
host has (``--device``, ``--json``, ``--plot``, ``--project``, ...) stay in the host's CLI.

Python 3.8, standard library only; no click here.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from edgebuild.runtime.engines.backends.select import BACKENDS, ENGINE_CACHE_ENV
from edgebuild.runtime.serving.ports import GRPC_PORT

__all__ = ["Option"]


@dataclass(frozen=True)
class Option:
    """One command-line parameter; no ``flags`` makes it a positional argument."""

    name: str  # the parameter's name in the command function / argparse namespace
    flags: Tuple[str, ...]
    help: str
    type: Optional[type] = None  # int, float or None (text); paths use ``path``
    default: Union[str, int, float, None] = None
    choices: Optional[Tuple[str, ...]] = None
    is_flag: bool = False
    multiple: bool = False  # may be repeated; the values come as a list (argparse) or tuple (click)
    required: bool = False
    minimum: Optional[float] = None
    path: Optional[str] = None  # "dir" or "file": the value is a pathlib.Path
    exists: bool = False  # with ``path``: it must exist already
    metavar: Optional[str] = None
    show_default: bool = False

    @property
    def positional(self) -> bool:
        return not self.flags


ARTIFACT = Option("artifact", (), "A folder `edgebuild compile` wrote for a fleet group (build/engines/<group>).",
                  path="dir", exists=True)
BACKEND = Option("backend", ("--backend",), "auto: the TensorRT engine where it can run here, else ONNX Runtime on "
                 "the CPU (and it says so).", choices=BACKENDS, default="auto", show_default=True)
ENGINE_CACHE = Option("engine_cache", ("--engine-cache",), "Where a deferred engine is built once and kept, one "
                      "folder per TensorRT version and compute capability (default: ${}, else "
                      "ARTIFACT/engine-cache).".format(ENGINE_CACHE_ENV), path="dir")

SERVE = (
    ARTIFACT,
    Option("host", ("--host",), "Address to listen on.", default="0.0.0.0", show_default=True),
    Option("port", ("--port",), "Port (default: the project's [runtime] port, 8000).", type=int, minimum=0),
    Option("grpc_port", ("--grpc-port",), "Port of KServe v2 over gRPC beside HTTP (Triton's "
           "inference.GRPCInferenceService, for tritonclient.grpc and DeepStream's nvinferserver; needs grpcio, "
           "tritonclient[grpc] and hpack: pip3 install grpcio 'tritonclient[grpc]' hpack); 0 serves HTTP only "
           "(default: {} where those are installed and the port is free, else HTTP only with a warning).".format(
               GRPC_PORT), type=int, minimum=0),
    BACKEND,
    Option("warmup_budget_s", ("--warmup-budget-s",), "Longest warm-up before ready (default: the project's "
           "[runtime] warmup_budget_s).", type=float, minimum=0),
    ENGINE_CACHE,
    Option("max_batch_size", ("--max-batch-size",), "Dynamic batching: stack up to this many rows of waiting "
           "requests into one backend run (default: the project's [runtime] max_batch_size; 1 is off).",
           type=int, minimum=1),
    Option("max_queue_delay_ms", ("--max-queue-delay-ms",), "How long the first waiting request waits for others "
           "to join its batch (default: the project's [runtime] max_queue_delay_ms, 2).", type=float, minimum=0),
    Option("preferred_batch_size", ("--preferred-batch-size",), "Dynamic batching: run a batch as soon as it holds "
           "this many rows and no more wait; repeat for several (default: the project's [runtime] "
           "preferred_batch_size).", type=int, minimum=1, multiple=True),
    Option("instance_count", ("--instance-count",), "Instances of the model that run batches at once (Triton's "
           "instance_group count: ONNX Runtime sessions sharing the cores, or TensorRT execution contexts; default: "
           "the project's [runtime] instance_count, 1).", type=int, minimum=1),
)

BENCH = (
    ARTIFACT,
    BACKEND,
    Option("batch", ("--batch",), "Batch sizes, comma-separated (default: 1 and the profile's opt batch)."),
    Option("concurrency", ("--concurrency",), "Concurrent callers, comma-separated.", default="1",
           show_default=True),
    Option("shape", ("--shape",), "An input's dims after the batch axis (default: its opt shape); repeat per input.",
           multiple=True, metavar="NAME:CxHxW"),
    Option("iterations", ("--iterations",), "Fixed number of runs per configuration.", type=int, minimum=1),
    Option("duration", ("--duration",), "Run each configuration this long (90s, 30m, 2h, 1h30m, or seconds) "
           "and report it in windows: p50/p99 and throughput per window, the last window against the first, and on "
           "a Jetson clocks, temperatures and throttle events from tegrastats per window.", metavar="DURATION"),
    Option("window", ("--window",), "With --duration: the window length (default: 1m).", metavar="DURATION"),
    Option("drift_warn", ("--drift-warn",), "With --duration: warn when the last window's p50 is slower than the "
           "first's by more than this percentage.", type=float, minimum=0, default=10.0, show_default=True),
    Option("warmup", ("--warmup",), "Runs before each configuration is measured.", type=int, minimum=0, default=20,
           show_default=True),
    Option("ci_pct", ("--ci-pct",), "Without --iterations/--duration: stop when the p50's 95% confidence interval "
           "is within this percentage of it ...", type=float, minimum=0.01, default=1.0, show_default=True),
    Option("budget_s", ("--budget-s",), "... or when this many seconds per configuration have passed (the result "
           "says which).", type=float, minimum=0.1, default=30.0, show_default=True),
    Option("min_iterations", ("--min-iterations",), "Runs per round of that confidence-interval rule.", type=int,
           minimum=2, default=50, show_default=True),
    ENGINE_CACHE,
)

TRACK = (
    Option("artifact", (), "A folder `edgebuild compile` wrote: a model folder (build/engines/<group>) or a fleet "
           "group's folder (build/groups/<group>; --model picks its detector where it has several).",
           path="dir", exists=True),
    Option("source", ("--source",), "A video file, rtsp://URL, /dev/videoN (or N) or csi://N (a Jetson's CSI "
           "camera); repeat for several streams, numbered from 0 in the order given.", multiple=True,
           required=True, metavar="S"),
    Option("jsonl", ("--jsonl",), "Write one JSON line per stream and frame here: {\"stream\", \"frame\", "
           "\"tracks\": [{\"id\", \"box\": [x1, y1, x2, y2] in the source's pixels, \"class\", \"score\"}], "
           "\"time\"}.", path="file", required=True, metavar="FILE"),
    Option("tracker", ("--tracker",), "The tracker run per stream (Roboflow's trackers).",
           choices=("bytetrack", "ocsort"), default="bytetrack", show_default=True),
    Option("max_fps", ("--max-fps",), "Track at most this many frames a second per stream (a camera's frames in "
           "between are dropped; a file is read at this pace).", type=float, minimum=0.1, metavar="N"),
    Option("frames", ("--frames",), "Stop each stream after this many frames (default: until the sources end, "
           "or Ctrl-C).", type=int, minimum=1, metavar="N"),
    Option("seconds", ("--seconds",), "Stop after this many seconds.", type=float, minimum=0.1, metavar="S"),
    Option("min_score", ("--min-score",), "Detections below this score are not given to the tracker.",
           type=float, minimum=0, default=0.1, show_default=True),
    Option("codec", ("--codec",), "What RTSP streams and video files hold, for a Jetson's hardware decoder "
           "(GStreamer pipeline); OpenCV's own decoders find out for themselves.", choices=("h264", "h265"),
           default="h264", show_default=True),
    Option("model", ("--model",), "In a group folder: the model to track with (its served name)."),
    Option("sse_port", ("--sse-port",), "Also serve the tracked frames and region events as HTTP server-sent "
           "events on this port (GET /tracks, /events, /health; ?stream=I for one stream).", type=int, minimum=0,
           metavar="PORT"),
    Option("mqtt", ("--mqtt",), "Also publish each frame's JSON line to this MQTT broker (HOST or HOST:PORT, "
           "1883 by default) under PREFIX/stream/<i>/tracks, region events under .../events.", metavar="HOST"),
    Option("mqtt_topic", ("--mqtt-topic",), "The MQTT topics' PREFIX.", default="edgebuild", show_default=True,
           metavar="PREFIX"),
    Option("regions", ("--regions",), "A JSON file of named regions ({\"regions\": [{\"name\", \"box\": [x1, y1, "
           "x2, y2] or \"polygon\": [[x, y], ...], \"stream\"}]}): an event when a track's box bottom centre "
           "enters or leaves one.", path="file", exists=True, metavar="FILE"),
    Option("video", ("--video",), "Also write one stream's frames with their tracks drawn to this MP4, for a "
           "person to look at.", path="file", metavar="FILE"),
    Option("video_stream", ("--video-stream",), "The stream --video draws.", type=int, minimum=0, default=0,
           show_default=True, metavar="I"),
    BACKEND,
    ENGINE_CACHE,
)

BUNDLE = Option("bundle", (), "An .edgebundle written by `edgebuild package`.", path="file", exists=True)
PUBLIC_KEY = Option("public_key", ("--public-key",), "PEM public key of the fleet's signing key.", path="file",
                    exists=True)
ALLOW_UNSIGNED = Option("allow_unsigned", ("--allow-unsigned",), "Accept a bundle without a signature "
                        "(development only).", is_flag=True)
INSTALL_ROOT = Option("install_root", ("--install-root",), "Where the version slots (versions/<version>) and the "
                      "`current` link live.", path="dir", required=True)

OTA_VERIFY = (
    BUNDLE, PUBLIC_KEY, ALLOW_UNSIGNED,
    Option("any_device", ("--any-device",), "Skip the check that this device is the bundle's module and L4T.",
           is_flag=True),
)
STATE_FILE_HELP = ("Mender's ArtifactInstall/ArtifactRollback hand-over: ota-install writes {\"previous\": "
                   "VERSION|null, \"installed\": VERSION|null} here (installed: what `current` was switched to and "
                   "not rolled back); ota-rollback --state-file undoes exactly that, and nothing if installed is null.")
OTA_INSTALL = (
    BUNDLE, INSTALL_ROOT, PUBLIC_KEY, ALLOW_UNSIGNED,
    Option("keep", ("--keep",), "Previous versions to keep.", type=int, minimum=0, default=2, show_default=True),
    Option("allow_downgrade", ("--allow-downgrade",), "Install even if the bundle is not newer than the newest "
           "version installed here (semantic version, then the manifest's sequence), or replays an older "
           "sequence. The installed version becomes the one later bundles must be newer than.", is_flag=True),
)
# device only: the host's `edgebuild ota install` installs into a local folder and has no Mender hand-over
OTA_INSTALL_DEVICE = OTA_INSTALL + (
    Option("state_file", ("--state-file",), STATE_FILE_HELP, path="file", metavar="PATH"),
)
OTA_ROLLBACK = (
    INSTALL_ROOT,
    Option("to", ("--to",), "Switch exactly to this version's slot (nothing to do if it is already active); "
           "without it, to the newest other slot.", metavar="VERSION"),
    Option("state_file", ("--state-file",), STATE_FILE_HELP, path="file", metavar="PATH"),
)


# -- argparse ---------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser, specs: Sequence[Option]) -> None:
    """Add ``specs`` to an argparse parser, with the same types, ranges and help as the click side."""
    for spec in specs:
        text = spec.help.replace("%", "%%")
        if spec.show_default:
            text += " (default: {})".format(spec.default)
        if spec.minimum is not None:
            text += " (at least {:g})".format(spec.minimum)
        if spec.positional:
            parser.add_argument(spec.name, type=_convert(spec), help=text)
            continue
        options = {"dest": spec.name, "help": text}  # type: dict
        if spec.is_flag:
            options["action"] = "store_true"
        else:
            options.update(type=_convert(spec), default=spec.default, required=spec.required)
            if spec.choices:
                options["choices"] = list(spec.choices)
            if spec.multiple:
                options["action"] = "append"
            if spec.metavar:
                options["metavar"] = spec.metavar
        parser.add_argument(*spec.flags, **options)


def _convert(spec: Option) -> Callable[[str], Union[str, int, float, Path]]:
    """The argparse ``type=`` of a spec: parse, then check the range or the path."""
    def convert(text: str) -> Union[str, int, float, Path]:
        if spec.path:
            return _checked_path(spec, Path(text))
        base = spec.type or str
        try:
            value = base(text)
        except ValueError:
            raise argparse.ArgumentTypeError("{!r} is not a {}".format(
                text, "whole number" if base is int else "number")) from None
        if spec.minimum is not None and value < spec.minimum:
            raise argparse.ArgumentTypeError("{} is less than the smallest allowed value, {:g}".format(
                text, spec.minimum))
        return value

    convert.__name__ = (spec.type or str).__name__
    return convert


def _checked_path(spec: Option, path: Path) -> Path:
    if spec.exists and not path.exists():
        raise argparse.ArgumentTypeError("{} does not exist".format(path))
    if path.exists() and spec.path == "dir" and not path.is_dir():
        raise argparse.ArgumentTypeError("{} is not a folder".format(path))
    if path.exists() and spec.path == "file" and path.is_dir():
        raise argparse.ArgumentTypeError("{} is a folder, not a file".format(path))
    return path


# -- back to a command line -------------------------------------------------------------------

def as_argv(specs: Sequence[Option], values: Mapping[str, Any]) -> List[str]:
    """The options (not the positionals) that give a parser built from ``specs`` these values.

    Values that are None, False or empty are left out; a list for an option that is not
    ``multiple`` is written comma-separated (``--batch 1,4``).
    """
    argv = []  # type: List[str]
    for spec in specs:
        value = values.get(spec.name)
        if spec.positional or value is None or value is False or value == [] or value == ():
            continue
        flag = spec.flags[0]
        if spec.is_flag:
            argv.append(flag)
        elif spec.multiple:
            for item in value:
                argv += [flag, str(item)]
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv
