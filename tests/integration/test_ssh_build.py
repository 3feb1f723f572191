"""The ``ssh://`` engine placement end to end, against a real sshd on a loopback port.

The "Jetson" is this machine seen through sshd: its /etc/nv_tegra_release and device tree come
from a fixture folder (EDGEBUILD_DEVICE_ROOT, set by sshd for the session). Without TensorRT
there, the device-side builder must refuse clearly. For the transfer and hash checks, one test
puts the TensorRT test double on the device's Python path; what comes back is the double's engine,
written only under tmp_path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.accuracy.gate import GateResult, gate_dir
from edgebuild.cli import main
from edgebuild.devices.engines import build_over_ssh, place_and_build_engine
from edgebuild.devices.ssh import SshDevice
from edgebuild.errors import RemoteError
from edgebuild.project.config import load_project
from edgebuild.runtime.engines.device import DeviceFacts
from edgebuild.workflows.work import select_work
from tests.fakes.tensorrt_double import PLAN
from tests.support.project import EXAMPLES, REPO

pytestmark = pytest.mark.ssh

NO_TENSORRT_HERE = DeviceFacts(None, "import tensorrt failed: No module named 'tensorrt'", None, None, ())


@pytest.fixture(scope="module")
def validated_digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits example with its gate already run (the SSH tests only need its recipe)."""
    root = tmp_path_factory.mktemp("ssh") / "digits-classifier"
    shutil.copytree(EXAMPLES / "digits-classifier", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    result = CliRunner().invoke(main, ["validate", "-p", str(root), "--target", "sorters"])
    assert result.exit_code == 0, result.output
    return root


def _place_and_build(root: Path, url: str | None, **kwargs):
    project = load_project(root)
    gate = GateResult.load(gate_dir(project))
    group = select_work(project, "sorters").groups[0]
    return place_and_build_engine(project, group, gate, host=NO_TENSORRT_HERE, build_on=url, **kwargs)


def _engine_json(root: Path, record) -> Path:
    return root / "build" / record.folder / "engine.json"


def _tensorrt_double_on_the_device(folder: Path) -> Path:
    package = folder / "tensorrt"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.fakes.tensorrt_double import make_tensorrt\n"
        "sys.modules[__name__] = make_tensorrt('10.3.0')\n")
    return folder


def test_compile_reports_that_the_device_has_no_tensorrt(validated_digits: Path, loopback_jetson) -> None:
    jetson = loopback_jetson("orin-nano-4gb@6.2")
    result = CliRunner().invoke(main, ["compile", "-p", str(validated_digits), "--target", "sorters",
                                       "--build-on", jetson.url])
    assert result.exit_code == 10, result.output
    assert "TensorRT is not installed on the device" in result.output
    assert f"on {jetson.url}" in result.output and "FAILED" in result.output
    # it got as far as the build: the device matched the profile and the recipe was copied
    copied = list((jetson.workdir / "builds").glob("sorters-*/recipe.json"))
    assert len(copied) == 1 and json.loads(copied[0].read_text())["placement"] == jetson.url
    assert not list((validated_digits / "build" / "engines" / "sorters").glob("engine.*"))


def test_a_device_of_another_profile_is_refused_before_anything_is_copied(validated_digits: Path,
                                                                         loopback_jetson) -> None:
    jetson = loopback_jetson("agx-orin-64gb@5.1.2")
    result = CliRunner().invoke(main, ["compile", "-p", str(validated_digits), "--target", "sorters",
                                       "--build-on", jetson.url])
    assert result.exit_code == 4, result.output
    assert "does not match the recipe's target orin-nano-4gb@6.2" in result.output
    assert "L4T is R35.4.1 but JetPack 6.2 is L4T R36.4.3" in result.output
    assert "not a Jetson Orin Nano 4GB" in result.output
    assert not (jetson.workdir / "builds").exists()


def test_engine_file_engine_json_and_timing_cache_come_back_with_hashes_checked(
        validated_digits: Path, loopback_jetson, tmp_path: Path) -> None:
    jetson = loopback_jetson("orin-nano-4gb@6.2", _tensorrt_double_on_the_device(tmp_path / "device-python"))
    record = _place_and_build(validated_digits, jetson.url)
    assert record.built and not record.kept
    engine_json = _engine_json(validated_digits, record)
    engine = json.loads(engine_json.read_text())
    assert engine["placement"] == jetson.url and engine["shippable"] is True
    assert engine["compute_capability"] == "8.7"  # from the verified module: the double has no CUDA
    assert engine["built_on"]["l4t"] == "36.4.3" and engine["tensorrt_version"] == "10.3.0"
    assert (engine_json.parent / "engine.plan").read_bytes() == PLAN
    cache = validated_digits / "build" / "engines" / "timing-caches" / "orin-nano-4gb-trt10.3.0.30.cache"
    assert cache.is_file() and engine["timing_cache"]["loaded"] is False

    # unchanged: the engine built on the device is kept, nothing goes over SSH
    messages: list[str] = []
    kept = _place_and_build(validated_digits, jetson.url, progress=messages.append)
    assert kept.kept and messages == [f"engine: sorters: kept the int8 engine built {jetson.url} (ONNX, builder "
                                      "settings, module, L4T and TensorRT unchanged)"]
    assert (engine_json.parent / "engine.plan").read_bytes() == PLAN

    # a run that names no build device (a later `package`) keeps it too, instead of deferring
    later = _place_and_build(validated_digits, None)
    assert later.kept and later.placement == jetson.url and (engine_json.parent / "engine.plan").read_bytes() == PLAN

    # a forced build sends the host's timing cache to the device, which loads it
    again = _place_and_build(validated_digits, jetson.url, force=True)
    assert not again.kept
    assert json.loads(_engine_json(validated_digits, again).read_text())["timing_cache"]["loaded"] is True


def test_a_corrupted_transfer_is_refused(validated_digits: Path, loopback_jetson, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    jetson = loopback_jetson("orin-nano-4gb@6.2", _tensorrt_double_on_the_device(tmp_path / "device-python"))
    deferred = _place_and_build(validated_digits, None, force=True)  # a deferred recipe to build from
    recipe = validated_digits / "build" / deferred.folder / "recipe.json"
    real_fetch = SshDevice.fetch

    def flip_a_byte(self, names):
        files = real_fetch(self, names)
        name = next(n for n in files if n.endswith("engine.plan"))
        files[name] = bytes([files[name][0] ^ 1]) + files[name][1:]
        return files

    monkeypatch.setattr(SshDevice, "fetch", flip_a_byte)
    with pytest.raises(RemoteError, match="another sha256 than the device computed"):
        build_over_ssh(recipe, jetson.url)
    assert not (recipe.parent / "engine.plan").exists()


def test_an_unreachable_device_is_a_remote_error(validated_digits: Path, loopback_jetson) -> None:
    jetson = loopback_jetson("orin-nano-4gb@6.2")
    jetson.stop()
    result = CliRunner().invoke(main, ["compile", "-p", str(validated_digits), "--target", "sorters",
                                       "--build-on", jetson.url])
    assert result.exit_code == 12, result.output
    assert "cannot reach ssh://jetson-under-test over SSH" in result.output
