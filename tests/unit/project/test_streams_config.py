"""``[[streams]]`` and ``[runtime.tracking]`` in edgebuild.toml: what loads, and what is refused naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from edgebuild.project.streams_schema import streams_of_group
from tests.support.project import TINY_TOML, write_tiny_project

STREAMS = """
[[streams]]
source = "rtsp://10.0.0.21/stream1"
name = "gate"
max_fps = 15

[[streams]]
source = "/dev/video0"
group = "dock"

[[streams]]
source = "clips/dock.mp4"
"""
TRACKING = """
[runtime.tracking]
tracker = "ocsort"
mode = "instead"
jsonl = "/var/log/edgebuild/tracks.jsonl"
sse_port = 8090
mqtt = "broker.local:1883"
mqtt_topic = "site/yard"
regions = "regions.json"
"""


def test_streams_and_tracking_load_and_each_group_gets_its_own(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML + STREAMS + TRACKING)
    (tmp_path / "regions.json").write_text('[{"name": "door", "box": [0, 0, 10, 10]}]')
    project = load_project(tmp_path)
    tracking = project.runtime.tracking
    assert tracking is not None and (tracking.tracker, tracking.mode, tracking.sse_port) == ("ocsort", "instead", 8090)
    assert [s.name for s in project.streams] == ["gate", None, None]
    assert [s.source for s in streams_of_group(project.streams, "yard-cams")] == ["rtsp://10.0.0.21/stream1",
                                                                                 "clips/dock.mp4"]
    assert len(streams_of_group(project.streams, "dock")) == 3


def test_without_streams_nothing_is_tracked_and_tracking_has_its_defaults(tmp_path: Path) -> None:
    write_tiny_project(tmp_path, TINY_TOML + STREAMS)
    project = load_project(tmp_path)
    assert project.runtime.tracking is None  # the recipe's defaults apply (bytetrack, beside, tracks.jsonl)
    write_tiny_project(tmp_path, TINY_TOML)
    assert load_project(tmp_path).streams == []


BROKEN = [
    ("no-source", STREAMS.replace('source = "/dev/video0"\n', ""), "streams[1].source", "required key is missing"),
    ("empty-source", STREAMS.replace('"clips/dock.mp4"', '" "'), "streams[2].source", "is empty"),
    ("camera-without-number", STREAMS.replace("/dev/video0", "/dev/videoX"), "streams[1].source",
     "/dev/videoN, v4l2://N or csi://N"),
    ("unknown-scheme", STREAMS.replace("rtsp://10.0.0.21", "ftp://10.0.0.21"), "streams[0].source",
     "a URL must be rtsp://"),
    ("zero-fps", STREAMS.replace("max_fps = 15", "max_fps = 0"), "streams[0].max_fps", "greater than 0"),
    ("unknown-group", STREAMS.replace('group = "dock"', 'group = "docks"'), "streams[1].group",
     "'docks' is not a fleet group"),
    ("same-name", STREAMS.replace('source = "clips/dock.mp4"', 'source = "clips/dock.mp4"\nname = "gate"'),
     "streams", "the name 'gate' is given to more than one stream"),
    ("bad-name", STREAMS.replace('name = "gate"', 'name = "the gate"'), "streams[0].name", "letters, digits"),
    ("unknown-stream-key", STREAMS.replace("max_fps = 15", "fps = 15"), "streams[0].fps",
     "unknown key (allowed here: source, name, max_fps, group)"),
    ("one-table", '\n[streams]\nsource = "a.mp4"\n', "streams", "write [[streams]]"),
    ("unknown-tracker", STREAMS + TRACKING.replace('"ocsort"', '"sort"'), "runtime.tracking.tracker",
     "'bytetrack' or 'ocsort'"),
    ("unknown-mode", STREAMS + TRACKING.replace('"instead"', '"alone"'), "runtime.tracking.mode",
     "'beside' or 'instead'"),
    ("sse-port", STREAMS + TRACKING.replace("8090", "70000"), "runtime.tracking.sse_port", "less than or equal"),
    ("mqtt-url", STREAMS + TRACKING.replace('"broker.local:1883"', '"mqtt://broker.local"'),
     "runtime.tracking.mqtt", "HOST or HOST:PORT"),
    ("mqtt-wildcard", STREAMS + TRACKING.replace('"site/yard"', '"site/#"'), "runtime.tracking.mqtt_topic",
     "without '#'"),
    ("jsonl-folder", STREAMS + TRACKING.replace('"/var/log/edgebuild/tracks.jsonl"', '"/var/log/"'),
     "runtime.tracking.jsonl", "must name a file"),
    ("regions-missing", STREAMS + TRACKING, "runtime.tracking.regions", "file not found"),
    ("tracking-without-streams", TRACKING.replace('regions = "regions.json"\n', ""), "runtime.tracking",
     "no [[streams]] says what to track"),
]


@pytest.mark.parametrize("case, extra, key, words", BROKEN, ids=[c[0] for c in BROKEN])
def test_a_bad_stream_or_tracking_value_names_its_key(tmp_path: Path, case, extra, key, words) -> None:
    write_tiny_project(tmp_path, TINY_TOML + extra)
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "edgebuild.toml") + ":")
    assert f"{key}:" in message, message
    assert words in message, message
    assert len(message.splitlines()) <= 3, message


def test_a_classifier_has_no_boxes_to_track(tmp_path: Path) -> None:
    text = TINY_TOML.replace('outputs = ["boxes", "scores"]', 'outputs = ["logits"]').replace(
        'kind = "detection"', 'kind = "classification"')
    write_tiny_project(tmp_path, text + STREAMS)
    with pytest.raises(ConfigError, match="streams: tracking follows a detector's boxes; task.kind is 'classif"):
        load_project(tmp_path)
