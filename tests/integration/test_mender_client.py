"""Model updates through Debian's real Mender client in standalone mode (``mender_client`` marker).

The device (tests/support/mender.py) first installs a rootfs-style artifact that provides
``edgebuild.l4t``, as a fleet's rootfs image does, then edgebuild's model artifacts through the
``edgebuild-model`` update module: each must leave the device's other provides alone, so that
the next one (which depends on ``edgebuild.l4t``) is still accepted.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.mender import signed_device

pytestmark = pytest.mark.mender_client

DEVICE_TYPE = "jetson-agx-orin-devkit"
PROFILE = "agx-orin-64gb@5.1.2"  # L4T R35.4.1
L4T = "35.4.1"


@pytest.fixture
def fleet(tiny_project: Path, tmp_path: Path):
    """The tiny project signed with an ECDSA P-256 key (SEC1, what mender-artifact signs with), and a device."""
    from edgebuild.project.config import load_project
    from edgebuild.targets.profiles import load_catalog
    from tests.support.runtime_artifacts import recipe_for, write_artifact

    private = tiny_project / "fleet.pem"
    device = signed_device(tmp_path, private, PROFILE, DEVICE_TYPE, L4T)
    toml = tiny_project / "edgebuild.toml"
    toml.write_text(toml.read_text() + '\n[ota]\nversion = "1.0.0"\nsigning_key = "fleet.pem"\n'
                    f'device_types = {{"agx-orin-64gb" = ["{DEVICE_TYPE}"]}}\n')
    project = load_project(tiny_project)
    folder = write_artifact(project.build_dir / "engines" / "dock")
    recipe_for(folder, load_catalog().parse_target(PROFILE).id, group="dock").save(folder)
    return tiny_project, device, private


def _release(root: Path, version: str) -> Path:
    """`edgebuild package` of the tiny project at ``version``; returns its Mender artifact."""
    from edgebuild.project.config import load_project
    from edgebuild.shipping.ota import package_group

    toml = root / "edgebuild.toml"
    text = toml.read_text()
    start = text.index('version = "', text.index("[ota]")) + len('version = "')
    toml.write_text(text[:start] + version + text[text.index('"', start):])
    record = package_group(load_project(root), SimpleNamespace(name="dock"), progress=lambda _: None)
    return root / record.mender.path


def test_successive_model_updates_keep_the_rootfs_provides(fleet) -> None:
    root, device, _ = fleet
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        artifact = _release(root, version)
        installed = device.ok("install", str(artifact))
        assert "Use 'commit' to update" in installed.stdout, installed.stdout
        assert device.active_model() == version  # switched and health-checked by the module
        device.ok("commit")
        provides = device.provides()
        assert provides["edgebuild.l4t"] == L4T, provides  # the rootfs's provide survives
        assert provides["edgebuild.model.tiny.version"] == version and provides["edgebuild.model.tiny.group"] == "dock"
        assert provides["artifact_name"] == device.artifact() == f"tiny-{version}-dock"
        assert provides["rootfs-image.l4t-base.version"] == f"l4t-{L4T}"


def test_rollback_before_commit_returns_the_previous_model(fleet) -> None:
    root, device, _ = fleet
    device.ok("install", str(_release(root, "1.0.0")))
    device.ok("commit")
    device.ok("install", str(_release(root, "1.1.0")))
    assert device.active_model() == "1.1.0"
    rolled = device.ok("rollback")
    assert "Rolling back" in rolled.stdout
    assert device.active_model() == "1.0.0" and device.artifact() == "tiny-1.0.0-dock"
    assert device.provides()["edgebuild.model.tiny.version"] == "1.0.0"


def _broken_release(root: Path, version: str, private: Path) -> Path:
    """A validly signed release whose model does not give its health reference's output (a bad model)."""
    import json
    import tarfile

    from edgebuild.project.config import load_project
    from edgebuild.runtime.ota.bundle import MANIFEST, PAYLOAD, REFERENCE
    from edgebuild.shipping.ota import load_bundle_key, mender_artifact, mender_keys, write_bundle

    good = _release(root, version)
    bundle = next(good.parent.glob(f"*-{version}-dock.edgebundle"))
    files, manifest = {}, None
    with tarfile.open(bundle, mode="r:gz") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            if member.name == MANIFEST:
                manifest = json.loads(data)
            elif member.name.startswith(PAYLOAD):
                files[member.name[len(PAYLOAD):]] = data
    with np.load(io.BytesIO(files[REFERENCE])) as stored:
        changed = {k: (stored[k] + 1.0 if k.startswith("output.") else stored[k]) for k in stored.files}
    out = io.BytesIO()
    np.savez(out, **changed)
    files[REFERENCE] = out.getvalue()
    key = load_bundle_key(private)
    keep = {k: manifest[k] for k in ("model", "version", "group", "target", "precision", "compatibility", "sequence")}
    write_bundle(bundle, manifest=keep, files=files, signing_key=key)

    artifact = good.parent / f"broken-{version}.mender"
    artifact.write_bytes(mender_artifact(
        artifact_name=f"tiny-{version}-dock", device_types=[DEVICE_TYPE], files={bundle.name: bundle.read_bytes()},
        **mender_keys(load_project(root), "tiny", version, "dock", L4T), signing_key=key))
    return artifact


def test_an_update_whose_health_check_fails_is_reported_failed_and_the_previous_model_keeps_serving(fleet) -> None:
    root, device, private = fleet
    device.ok("install", str(_release(root, "1.0.0")))
    device.ok("commit")
    device.ok("install", str(_release(root, "1.1.0")))
    device.ok("commit")
    failed = device.mender("install", str(_broken_release(root, "2.0.0", private)))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "health check" in failed.stderr and "rolled back to 1.1.0" in failed.stderr, failed.stderr
    assert device.active_model() == "1.1.0"  # not the older 1.0.0: the module rolls back what it did, once
    assert device.artifact() == "tiny-1.1.0-dock"
    assert device.provides()["edgebuild.model.tiny.version"] == "1.1.0"


def test_an_artifact_for_another_device_or_with_another_signature_is_refused(fleet, tmp_path: Path) -> None:
    from edgebuild.shipping.ota import load_bundle_key, mender_artifact

    root, device, _ = fleet
    good = _release(root, "1.0.0")
    other = tmp_path / "other-device.mender"
    stranger = ec.generate_private_key(ec.SECP256R1())
    payload = {p.name: p.read_bytes() for p in good.parent.glob("*-1.0.0-dock.edgebundle")}
    common = dict(artifact_name="tiny-1.0.0-dock", files=payload, provides={"edgebuild.model.tiny.version": "1.0.0"},
                  clears_provides=["edgebuild.model.tiny.*"], depends={"edgebuild.l4t": L4T})
    other.write_bytes(mender_artifact(device_types=["jetson-orin-nano-devkit"],
                                      signing_key=load_bundle_key(root / "fleet.pem"), **common))
    refused = device.mender("install", str(other))
    assert refused.returncode == 1 and "not compatible with device jetson-agx-orin-devkit" in refused.stderr
    forged = tmp_path / "forged.mender"
    forged.write_bytes(mender_artifact(device_types=[DEVICE_TYPE], signing_key=stranger, **common))
    refused = device.mender("install", str(forged))
    assert refused.returncode == 1 and "verification failed" in refused.stderr, refused.stderr
    assert device.active_model() is None and device.artifact() == f"l4t-{L4T}"


def test_a_replayed_older_release_is_refused_unless_the_module_allows_downgrades(fleet) -> None:
    root, device, _ = fleet
    old = _release(root, "1.0.0")
    kept = old.with_name("kept-1.0.0.mender")
    old.rename(kept)
    device.ok("install", str(_release(root, "2.0.0")))
    device.ok("commit")
    replay = device.mender("install", str(kept))  # validly signed, for this device: only older
    assert replay.returncode == 1 and "replayed or older bundle" in replay.stderr, replay.stderr
    assert device.active_model() == "2.0.0" and device.artifact() == "tiny-2.0.0-dock"
    (device.folder / "module.conf").write_text("EDGEBUILD_ALLOW_DOWNGRADE=1\n")
    device.ok("install", str(kept))
    device.ok("commit")
    assert device.active_model() == "1.0.0" and device.provides()["edgebuild.model.tiny.version"] == "1.0.0"
