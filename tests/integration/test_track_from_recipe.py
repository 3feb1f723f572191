"""The container's entry point tracks what edgebuild.toml's ``[[streams]]`` names: the shapes example compiled with a
stream (a short generated video) and ``[runtime.tracking]``, started as the entry point starts it (the device CLI's
``serve`` of the model folder), writes JSON lines with the stream's name while the server answers ready."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.runtime.cli import main as device_main
from edgebuild.runtime.streams.records import TrackedFrame
from tests.support.runtime_artifacts import Client
from tests.unit.runtime.streams.video import write_video

FRAMES = 12
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def _lines(path: Path) -> list[TrackedFrame]:
    """The tracked frames' lines (the region events' lines left out)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [TrackedFrame.from_dict(line) for line in lines if "tracks" in line]


def test_the_entry_point_tracks_the_projects_streams_beside_the_server(compiled_example, tmp_path: Path) -> None:
    root = compiled_example("shapes-detector", "yard-cams")
    video = write_video(tmp_path / "gate.mp4", frames=FRAMES)
    (root / "regions.json").write_text('[{"name": "left", "box": [0, 0, 160, 240]}]')
    jsonl = tmp_path / "out" / "tracks.jsonl"
    (root / "edgebuild.toml").write_text((root / "edgebuild.toml").read_text() + f"""
[[streams]]
source = "{video}"
name = "yard-gate"
max_fps = 30

[[streams]]
source = "/dev/video0"
group = "dock"

[runtime.tracking]
jsonl = "{jsonl}"
regions = "regions.json"
""")
    result = CliRunner().invoke(main, ["compile", "--project", str(root), "--target", "yard-cams", "--no-progress"])
    assert result.exit_code == 0, result.output
    folder = root / "build" / "engines" / "yard-cams"
    recipe = Recipe.load(folder)
    assert recipe.streams is not None and [s.name for s in recipe.streams.sources] == ["yard-gate"]  # not dock's
    assert (folder / "regions.json").read_text() == (root / "regions.json").read_text()

    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    server = subprocess.Popen([sys.executable, "-m", "edgebuild.runtime", "serve", str(folder), "--host", "127.0.0.1",
                               "--port", str(port), "--grpc-port", "0", "--backend", "onnxruntime"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = Client(port)
        ready = client.wait_ready(timeout=60)
        assert ready["ready"] is True and ready["tracking"] in ("waiting", "running", "ended")
        deadline = time.time() + 30
        while (streams := client.json("GET", "/v2/streams")[1])["state"] in ("waiting", "running"):
            assert time.time() < deadline, streams
            time.sleep(0.2)
        assert streams["state"] == "ended", streams
        assert streams["streams"] == [{"stream": 0, "name": "yard-gate", "source": str(video), "frames": FRAMES,
                                       "last_time": streams["streams"][0]["last_time"]}]
        status, ready = client.json("GET", "/v2/health/ready")
        assert status == 200 and ready["tracking"] == "ended"  # the server still answers once the video ended
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    frames = _lines(jsonl)
    assert [(f.stream, f.frame, f.name) for f in frames] == [(0, n, "yard-gate") for n in range(FRAMES)], err
    assert any(f.tracks for f in frames), err

    # [runtime.tracking] mode = "instead": the entry point only tracks, and ends with the tracking's summary
    instead = dataclasses.replace(recipe, streams=dataclasses.replace(recipe.streams, mode="instead",
                                                                      jsonl=str(tmp_path / "instead.jsonl")))
    instead.save(folder)
    assert device_main(["serve", str(folder), "--backend", "onnxruntime", "--port", str(port)]) == 0
    assert {f.name for f in _lines(tmp_path / "instead.jsonl")} == {"yard-gate"}
