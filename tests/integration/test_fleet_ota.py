"""One update per fleet group with Debian's real Mender client: every model of the group switches together,
a failed health check of any one model rolls the whole set back, and a delta carries only the model that
changed (``mender_client`` marker; the device is tests/support/mender.py's stand-in)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from tests.support.mender import signed_device

pytestmark = pytest.mark.mender_client

DEVICE_TYPE = "jetson-orin-nano-devkit"
PROFILE = "orin-nano-8gb@6.2"


@pytest.fixture
def box(example_copy, tmp_path: Path):
    """The camera box's yard-cams group, signed with an ECDSA P-256 key, and a device with its rootfs."""
    from edgebuild.targets.profiles import load_catalog

    for name in ("shapes-detector", "digits-classifier"):
        example_copy(name)
    root = example_copy("camera-box")
    private = root / "fleet.pem"
    toml = root / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('[ota]\nversion = "1.0.0"\n', '[ota]\nversion = "1.0.0"\nsigning_key = '
                                             f'"fleet.pem"\ndevice_types = {{"orin-nano-8gb" = ["{DEVICE_TYPE}"]}}\n'))
    device = signed_device(tmp_path, private, PROFILE, DEVICE_TYPE, load_catalog().parse_target(PROFILE).release.l4t)
    return root, device, private


def _release(root: Path, version: str, since: Path | None = None) -> Path:
    """`edgebuild package` of the fleet's yard-cams group at ``version``; its Mender artifact."""
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    start = text.index('version = "', text.index("[ota]")) + len('version = "')
    toml.write_text(text[:start] + version + text[text.index('"', start):])
    done = CliRunner().invoke(main, ["package", "-p", str(root), "--target", "yard-cams", "--json"]
                              + (["--since", str(since)] if since else []))
    assert done.exit_code == 0, done.output
    fleet = json.loads(done.output[done.output.index("{"):])
    return root / fleet["groups"]["yard-cams"]["mender"]["path"]


def _with_broken_model(root: Path, artifact: Path, model: str, private: Path) -> Path:
    """The same release, validly signed, whose ``model`` no longer gives its health reference's output."""
    from edgebuild.runtime.ota.bundle import MANIFEST, PAYLOAD
    from edgebuild.shipping.ota import load_bundle_key, mender_artifact, write_bundle

    bundle = artifact.with_suffix(".edgebundle")
    files, manifest = {}, {}
    with tarfile.open(bundle, mode="r:gz") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            if member.name == MANIFEST:
                manifest = json.loads(data)
            elif member.name.startswith(PAYLOAD):
                files[member.name[len(PAYLOAD):]] = data
    reference = f"models/{model}/reference.npz"
    with np.load(io.BytesIO(files[reference])) as stored:
        changed = {k: (stored[k] + 1.0 if k.startswith("output.") else stored[k]) for k in stored.files}
    out = io.BytesIO()
    np.savez(out, **changed)
    files[reference] = out.getvalue()
    key = load_bundle_key(private)
    keep = {k: manifest[k] for k in ("model", "version", "group", "target", "precision", "compatibility", "sequence",
                                     "models")}
    write_bundle(bundle, manifest=keep, files=files, signing_key=key)
    broken = artifact.with_name("broken.mender")
    from edgebuild.project.fleet_file import load_fleet
    from edgebuild.shipping.ota import PackagedModel, mender_keys
    from edgebuild.shipping.shipped import FleetShipping

    fleet = load_fleet(root)
    models = [PackagedModel.from_dict(m) for m in manifest["models"]]
    broken.write_bytes(mender_artifact(
        artifact_name=f"camera-box-{manifest['version']}-yard-cams", device_types=[DEVICE_TYPE],
        files={bundle.name: bundle.read_bytes()}, signing_key=key,
        **mender_keys(FleetShipping(fleet), "camera-box", manifest["version"], "yard-cams",
                      manifest["compatibility"]["l4t_accepted"][0], models)))
    return broken


def test_a_group_update_switches_every_model_and_rolls_back_the_set_when_one_fails(box) -> None:
    root, device, private = box
    device.ok("install", str(_release(root, "1.0.0")))
    device.ok("commit")
    provides = device.provides()
    assert provides["edgebuild.model.camera-box.version"] == "1.0.0"
    assert provides["edgebuild.model.camera-box.models.detector"] == "1.0.0"  # each model's own version
    assert provides["edgebuild.model.camera-box.models.classifier"] == "0.1.0"
    active = device.install_root / "current"
    assert {p.name for p in (active / "models").iterdir()} == {"detector", "classifier"}

    broken = _with_broken_model(root, _release(root, "1.1.0"), "classifier", private)
    failed = device.mender("install", str(broken))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "model digits-classifier" in failed.stderr and "rolled back to 1.0.0" in failed.stderr, failed.stderr
    assert device.active_model() == "1.0.0"  # the detector, which passed, went back too: all or nothing
    assert device.provides()["edgebuild.model.camera-box.version"] == "1.0.0"


def test_a_delta_of_a_group_carries_only_the_model_that_changed(box) -> None:
    root, device, _ = box
    first = _release(root, "1.0.0")
    device.ok("install", str(first))
    device.ok("commit")
    earlier = root / "v1-packages"
    subprocess.run(["cp", "-r", str(first.parent.parent), str(earlier)], check=True)
    classifier = root.parent / "digits-classifier" / "edgebuild.toml"  # only the classifier changes: FP16 now
    text = classifier.read_text()
    classifier.write_text(text + ("\n[quantize]\nprecisions = [\"fp16\", \"fp32\"]\n" if "[quantize]" not in text
                                  else ""))
    delta = _release(root, "1.1.0", since=earlier)
    bundle = delta.with_suffix(".edgebundle")
    with tarfile.open(bundle, mode="r:gz") as tar:
        carried = {m.name.removeprefix("payload/") for m in tar.getmembers() if m.name.startswith("payload/")}
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert manifest["delta"]["base_version"] == "1.0.0"
    assert any(p.startswith("models/classifier/") for p in carried), carried
    assert not any(p.startswith("models/detector/") for p in carried), carried
    device.ok("install", str(delta))
    device.ok("commit")
    active = device.install_root / "current"
    assert (active / "models/detector/model.onnx").is_file()  # from the base: unchanged, not carried
    assert json.loads((active / "models/classifier/recipe.json").read_text())["precision"] == "fp16"
