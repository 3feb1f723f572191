"""The device farm against a real labgrid coordinator and exporter on loopback (``farm`` marker).

Three stand-in Jetsons (loopback sshd, each with its own device root): two Orin Nano 8GB on
JetPack 6.2, one AGX Orin 64GB on JetPack 5.1.2. They have no TensorRT, so the jobs are the
device jobs that do run there: each group's model folder evaluated on ONNX Runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.farm import LabgridFarm
from tests.support.project import EXAMPLES

pytestmark = pytest.mark.farm

NANO = {"module": "orin-nano-8gb", "jetpack": "6.2"}
AGX = {"module": "agx-orin-64gb", "jetpack": "5.1.2"}
FLEET = "".join(f'\n[[fleet]]\nname = "{name}"\nmodule = "{module}"\njetpack = "{jetpack}"\n'
                for name, module, jetpack in (("yard-a", "orin-nano-8gb", "6.2"), ("yard-b", "orin-nano-8gb", "6.2"),
                                              ("yard-c", "orin-nano-8gb", "6.2"), ("dock", "agx-orin-64gb", "5.1.2")))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shapes example with four groups on two profiles (48 validation images), compiled up to its engines."""
    root = tmp_path_factory.mktemp("farm") / "shapes-detector"
    shutil.copytree(EXAMPLES / "shapes-detector", root, ignore=shutil.ignore_patterns("build", "data", "__pycache__"))
    toml = root / "edgebuild.toml"
    text = toml.read_text().replace('images = "data/val/images"', 'images = "data/val/images"\nmax_images = 48')
    head, rest = text.split("[[fleet]]", 1)
    toml.write_text(head + FLEET.lstrip("\n") + "\n[runtime]" + rest.split("[runtime]", 1)[1])
    done = CliRunner().invoke(main, ["compile", "-p", str(root), "--no-progress"])
    assert done.exit_code == 0, done.output
    return root


@pytest.fixture
def farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    running = LabgridFarm(tmp_path / "farm", {"orin-nano-1": ("orin-nano-8gb@6.2", NANO),
                                              "orin-nano-2": ("orin-nano-8gb@6.2", NANO),
                                              "agx-orin-1": ("agx-orin-64gb@5.1.2", AGX)},
                          extra_pythonpath=Path(numpy.__file__).parent.parent)
    monkeypatch.setenv("EDGEBUILD_SSH_CONFIG", str(running.ssh_config))
    monkeypatch.setenv("LG_COORDINATOR", running.address)
    yield running
    running.stop()


def _nothing_left(farm: LabgridFarm) -> None:
    assert "edgebuild" not in farm.reservations(), farm.reservations()
    assert farm.acquired() == [], farm.client("-v", "places").stdout


def _validate(root: Path, *args: str):
    return CliRunner().invoke(main, ["validate", "-p", str(root), "--farm", "--json", *args])


def test_groups_fan_out_over_the_farm_one_job_per_board(project: Path, farm: LabgridFarm) -> None:
    done = _validate(project)
    assert done.exit_code == 0, done.output
    assert done.stdout.strip(), done.output  # the answer printed last (a race once dropped it: tests/unit/test_text.py)
    answer = json.loads(done.stdout)
    boards = {g["group"]: g["board"] for g in answer["groups"]}
    assert set(boards) == {"yard-a", "yard-b", "yard-c", "dock"} and boards["dock"] == "agx-orin-1"
    assert {boards[g] for g in ("yard-a", "yard-b", "yard-c")} <= {"orin-nano-1", "orin-nano-2"}
    assert all(g["backend"].startswith("onnxruntime") for g in answer["groups"])
    values = {g["value"] for g in answer["groups"]}
    assert len(values) == 1  # the same model folder on the same backend: the same mAP on every board
    jobs = json.loads((project / "build" / "farm" / "validate.json").read_text())["jobs"]
    for board in {j["board"] for j in jobs}:
        spans = sorted((j["started"], j["ended"]) for j in jobs if j["board"] == board)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans
    _nothing_left(farm)


def test_a_board_held_by_someone_else_makes_the_group_wait(project: Path, farm: LabgridFarm) -> None:
    token = farm.client("reserve", "--wait", "--shell", "module=agx-orin-64gb", check=True).stdout.split("=")[1].strip()
    farm.client("-p", "+" + token, "acquire", check=True)
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(done=_validate(project, "--target", "dock")))
    runner.start()
    time.sleep(4)
    assert runner.is_alive()  # waiting for the board
    farm.client("cancel-reservation", token, check=True)
    farm.client("-p", "agx-orin-1", "release", check=True)
    runner.join(900)  # a cap: the run ends once the board is free
    assert result["done"].exit_code == 0, result["done"].output
    assert json.loads(result["done"].stdout)["groups"][0]["board"] == "agx-orin-1"
    _nothing_left(farm)


def test_a_board_that_stops_answering_mid_job_is_released_and_the_job_runs_on_its_twin(
        project: Path, farm: LabgridFarm, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgebuild.devices.ssh import SshDevice

    real = SshDevice.device_tool
    killed: list[str] = []

    def lose_the_first_board(self, args, **kwargs):
        if not killed:  # its sshd dies after the job reached it: the next call cannot connect
            place = self.url.split("@")[1].split(":")[0]
            farm.jetsons[place].process.kill()
            killed.append(place)
        return real(self, args, **kwargs)

    monkeypatch.setattr(SshDevice, "device_tool", lose_the_first_board)
    done = _validate(project, "--target", "yard-a")
    assert done.exit_code == 0, done.output
    group = json.loads(done.stdout)["groups"][0]
    assert group["retried_from"] == killed[0] and group["board"] != killed[0]
    _nothing_left(farm)


def test_interrupting_a_farm_run_leaves_no_reservation(project: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    token = farm.client("reserve", "--wait", "--shell", "module=agx-orin-64gb", check=True).stdout.split("=")[1].strip()
    farm.client("-p", "+" + token, "acquire", check=True)  # so the run waits
    for sig in (signal.SIGINT, signal.SIGTERM):
        command = [str(Path(sys.executable).parent / "edgebuild"), "validate", "-p", str(project), "--farm",
                   "--target", "dock"]
        # PYTHONFAULTHANDLER: a run that does not end after the signal is asked for its threads' stacks
        # started with SIGINT ignored, as a shell script's `cmd &` starts it: the run must still take it
        run = subprocess.Popen(command, env={**os.environ, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        # until the run has reserved (it first checks its stages: how long depends on the machine's
        # load, so no time limit of its own here; the cap only stops a hung run from hanging the suite)
        deadline = time.monotonic() + 900
        while "edgebuild" not in farm.reservations() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "edgebuild" in farm.reservations(), run.communicate(timeout=300)
        run.send_signal(sig)
        try:
            _, err = run.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # a run that ignores the signal: say where it waits
            run.send_signal(signal.SIGABRT)
            stacks = run.communicate(timeout=60)[1]
            raise AssertionError(f"{sig!r} did not end the run; its threads:\n{stacks}") from None
        assert run.returncode != 0, err
        assert "edgebuild" not in farm.reservations(), (sig, farm.reservations())
    farm.client("cancel-reservation", token, check=True)
    farm.client("-p", "agx-orin-1", "release", check=True)
    _nothing_left(farm)


def test_a_profile_the_farm_lacks_is_a_clear_error(project: Path, farm: LabgridFarm) -> None:
    toml = project / "edgebuild.toml"
    text = toml.read_text()
    try:
        toml.write_text(text + '\n[[fleet]]\nname = "legacy"\nmodule = "xavier-nx"\njetpack = "5.1.2"\n')
        done = CliRunner().invoke(main, ["validate", "-p", str(project), "--farm", "--target", "legacy"])
        assert done.exit_code == 3, done.output
        assert "no board tagged module=xavier-nx jetpack=5.1.2" in done.output
        assert "agx-orin-64gb@5.1.2, orin-nano-8gb@6.2" in done.output
    finally:
        toml.write_text(text)
    _nothing_left(farm)


def test_compile_builds_each_group_on_a_board_of_its_profile(project: Path, farm: LabgridFarm) -> None:
    done = CliRunner().invoke(main, ["compile", "-p", str(project), "--farm", "--no-progress", "--target",
                                     "yard-a,dock"])
    # the stand-ins have no TensorRT: each group's build stops there, on its own board, as over plain SSH
    assert done.exit_code == 10, done.output
    assert "TensorRT is not installed on the device" in done.output
    assert "ssh://root@agx-orin-1" in done.output and ("ssh://root@orin-nano-1" in done.output
                                                       or "ssh://root@orin-nano-2" in done.output)
    assert "yard-a: failed" in done.output and "dock: failed" in done.output
    _nothing_left(farm)


def test_bench_runs_each_group_on_its_own_profile_and_writes_one_fleet_table(
        project: Path, farm: LabgridFarm, tmp_path: Path) -> None:
    plot = tmp_path / "fleet.png"
    done = CliRunner().invoke(main, ["bench", "-p", str(project), "--farm", "--target", "yard-a,dock",
                                     "--iterations", "20", "--warmup", "2", "--plot", str(plot)])
    assert done.exit_code == 0, done.output
    summary = json.loads((project / "build" / "bench" / "fleet.json").read_text())
    boards = {g["group"]: g["board"] for g in summary["groups"]}
    assert boards["dock"] == "agx-orin-1" and boards["yard-a"].startswith("orin-nano-")
    assert all(g["configs"] and g["backend"].startswith("onnxruntime") for g in summary["groups"])
    for group in ("yard-a", "dock"):
        assert json.loads((project / "build" / "bench" / f"{group}.json").read_text())["artifact"]["group"] == group
    assert plot.stat().st_size > 10_000 and "agx-orin-1" in done.output
    _nothing_left(farm)


def test_farm_status_lists_places_what_they_serve_and_who_holds_them(project: Path, farm: LabgridFarm) -> None:
    token = farm.client("reserve", "--wait", "--shell", "module=agx-orin-64gb", check=True).stdout.split("=")[1].strip()
    farm.client("-p", "+" + token, "acquire", check=True)
    done = CliRunner().invoke(main, ["farm", "status", "-p", str(project), "--json"])
    assert done.exit_code == 0, done.output
    places = {p["place"]: p for p in json.loads(done.stdout)["places"]}
    assert places["agx-orin-1"]["serves"] == ["dock"] and places["agx-orin-1"]["held_by"] == "test/tester"
    assert places["orin-nano-1"]["serves"] == ["yard-a", "yard-b", "yard-c"]
    assert places["orin-nano-1"]["held_by"] is None
    table = CliRunner().invoke(main, ["farm", "status", "-p", str(project)])
    assert "module=orin-nano-8gb" in table.output and "test/tester" in table.output
    farm.client("cancel-reservation", token, check=True)
    farm.client("-p", "agx-orin-1", "release", check=True)


@pytest.mark.parametrize("through", ["grpc", "labgrid-client"])
def test_a_lease_through_either_client_reaches_the_board_and_is_released(farm: LabgridFarm, through: str) -> None:
    from edgebuild.devices.farm import Farm
    from edgebuild.devices.labgrid import labgrid_tool
    from edgebuild.devices.ssh import SshDevice

    client = Farm(farm.address, client=labgrid_tool("labgrid-client") if through == "labgrid-client" else None)
    try:
        with client.lease(AGX, job="probe") as board:
            assert board.place == "agx-orin-1" and board.url == f"ssh://root@agx-orin-1:{farm.jetsons[board.place].port}"
            assert SshDevice(board.url).device_tool(["probe"])["device"]["l4t"] == "35.4.1"
            assert farm.acquired() == ["agx-orin-1"]
    finally:
        client.disconnect()
    _nothing_left(farm)


def test_a_board_held_past_the_farm_timeout_is_a_clear_error(project: Path, farm: LabgridFarm) -> None:
    token = farm.client("reserve", "--wait", "--shell", "module=agx-orin-64gb", check=True).stdout.split("=")[1].strip()
    farm.client("-p", "+" + token, "acquire", check=True)
    done = CliRunner().invoke(main, ["validate", "-p", str(project), "--farm", "--target", "dock",
                                     "--farm-timeout", "3"])
    assert done.exit_code == 12, done.output
    assert "no board tagged module=agx-orin-64gb jetpack=5.1.2 became free within 3 s" in done.output
    assert "agx-orin-1 held by test/tester" in done.output
    farm.client("cancel-reservation", token, check=True)
    farm.client("-p", "agx-orin-1", "release", check=True)
    _nothing_left(farm)
