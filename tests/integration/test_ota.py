"""OTA bundles: signed packaging, device-side verification, install with health check and rollback, deltas.

Each refusal must leave the running version untouched; the device is a folder of the test's
(its /etc/nv_tegra_release and device tree), the install root another.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from edgebuild.errors import BundleError
from edgebuild.ota import bundle_payload, write_bundle
from edgebuild.runtime.ota import active_version, install, rollback, verify
from tests.support.jetson import write_device_root
from tests.support.runtime_artifacts import recipe_for, write_artifact

TARGET = "agx-orin-64gb@5.1.2"


def _keys(kind: str = "ed25519"):
    key = {"ed25519": ed25519.Ed25519PrivateKey.generate, "ecdsa": lambda: ec.generate_private_key(ec.SECP256R1()),
           "rsa": lambda: rsa.generate_private_key(65537, 2048)}[kind]()
    return key, key.public_key()


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    """A compiled model folder for TARGET, as the engine stage writes it."""
    folder = write_artifact(tmp_path / "engines" / "dock")
    recipe_for(folder, TARGET, group="dock").save(folder)
    return folder


@pytest.fixture
def device(tmp_path: Path) -> Path:
    return write_device_root(tmp_path / "device", TARGET)


def _bundle(artifact: Path, out: Path, version: str, key=None, *, files=None, base=None) -> Path:
    recipe, payload = bundle_payload(artifact, None)
    manifest = {"model": "tiny", "version": version, "group": "dock", "target": TARGET, "precision": "fp32",
                "compatibility": recipe.compatibility()}
    write_bundle(out, manifest=manifest, files=files or payload, signing_key=key, base=base)
    return out


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def _rewrite(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    path.write_bytes(out.getvalue())
    return path


@pytest.fixture
def installed(tmp_path: Path, artifact: Path, device: Path):
    """Version 1.0.0 installed and healthy; returns (install root, key pair)."""
    key, public = _keys()
    root = tmp_path / "models"
    done = install(_bundle(artifact, tmp_path / "v1.edgebundle", "1.0.0", key), root, public, root=device)
    assert done["installed"] == "1.0.0" and done["health"]["max_abs_diff"]["scores"] == 0.0
    assert active_version(root) == "1.0.0"
    return root, key, public


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_a_signed_bundle_verifies(tmp_path: Path, artifact: Path, device: Path, kind: str) -> None:
    key, public = _keys(kind)
    manifest = verify(_bundle(artifact, tmp_path / "b.edgebundle", "1.0.0", key), public, root=device)
    paths = {f["path"]: f for f in manifest["files"]}
    assert set(paths) == {"recipe.json", "model.onnx", "reference.npz"} and manifest["_signed"]
    assert paths["model.onnx"]["size"] == (artifact / "model.onnx").stat().st_size


def _refused(root: Path, bundle: Path, public, device: Path, words: str, **options) -> None:
    """The install fails with ``words`` and version 1.0.0 keeps serving, its files intact."""
    before = {p.name: p.read_bytes() for p in (root / "versions" / "1.0.0").iterdir() if p.is_file()}
    with pytest.raises(BundleError, match=words):
        install(bundle, root, public, root=options.pop("device_root", device), **options)
    assert active_version(root) == "1.0.0"
    assert {p.name: p.read_bytes() for p in (root / "versions" / "1.0.0").iterdir() if p.is_file()} == before
    assert sorted(p.name for p in (root / "versions").iterdir()) == ["1.0.0"]  # no half-written slot


def test_tampered_payload(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    members = _members(_bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key))
    members = [(m, d[:-1] + bytes([d[-1] ^ 1]) if m.name == "payload/model.onnx" else d) for m, d in members]
    _refused(root, _rewrite(tmp_path / "t.edgebundle", members), public, device, "does not match its sha256")


def test_tampered_manifest(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    members = _members(_bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key))
    members = [(m, d.replace(b'"version": "2.0.0"', b'"version": "3.0.0"') if m.name == "manifest.json" else d)
               for m, d in members]
    _refused(root, _rewrite(tmp_path / "t.edgebundle", members), public, device, "signature does not verify")


def test_wrong_key_and_unsigned(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    other, _ = _keys()
    _refused(root, _bundle(artifact, tmp_path / "other.edgebundle", "2.0.0", other), public, device,
             "signature does not verify")
    unsigned = _bundle(artifact, tmp_path / "unsigned.edgebundle", "2.0.0")
    _refused(root, unsigned, public, device, "not signed, and a signature is required")
    _, ecdsa_public = _keys("ecdsa")
    _refused(root, _bundle(artifact, tmp_path / "ed.edgebundle", "2.0.0", key), ecdsa_public, device,
             "signed with ed25519, which the given key")


def test_wrong_device_type_and_wrong_l4t(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    bundle = _bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key)
    nano = write_device_root(tmp_path / "nano", "orin-nano-4gb@6.2")
    _refused(root, bundle, public, device, "is not a Jetson AGX Orin 64GB", device_root=nano)
    (device / "etc" / "nv_tegra_release").write_text("# R35 (release), REVISION: 3.1, GCID: 1, BOARD: t186ref\n")
    _refused(root, bundle, public, device, "runs L4T R35.3.1, the bundle is for L4T R35.4.1")


@pytest.mark.parametrize(("name", "kind", "words"), [
    ("/etc/passwd", tarfile.REGTYPE, "outside payload/"),
    ("payload/../../escape", tarfile.REGTYPE, r"'\.\.' path part"),
    ("payload/model.onnx", tarfile.SYMTYPE, "is a link"),
    ("payload/dev", tarfile.CHRTYPE, "not a regular file"),
])
def test_tar_slip_entries(tmp_path: Path, artifact: Path, device: Path, installed, name, kind, words) -> None:
    root, key, public = installed
    members = _members(_bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key))
    evil = tarfile.TarInfo(name)
    evil.type = kind
    evil.linkname = "/etc/shadow" if kind == tarfile.SYMTYPE else ""
    members = [members[0], members[1], (evil, b"owned" if kind == tarfile.REGTYPE else b""), *members[2:]]
    _refused(root, _rewrite(tmp_path / "evil.edgebundle", members), public, device, words)
    assert not (tmp_path / "escape").exists() and not (root.parent / "escape").exists()


def test_truncated_bundle(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    data = _bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key).read_bytes()
    (tmp_path / "cut.edgebundle").write_bytes(data[: len(data) * 2 // 3])
    _refused(root, tmp_path / "cut.edgebundle", public, device, "truncated|corrupt|does not match")


def test_a_failed_health_check_rolls_back(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    _, files = bundle_payload(artifact, None)
    with np.load(io.BytesIO(files["reference.npz"])) as stored:
        wrong = {k: stored[k] for k in stored.files}
    wrong["output.scores"] = wrong["output.scores"] + 1.0  # a model that answers differently than it should
    buffer = io.BytesIO()
    np.savez(buffer, **wrong)
    files["reference.npz"] = buffer.getvalue()
    bundle = _bundle(artifact, tmp_path / "bad.edgebundle", "2.0.0", key, files=files)
    _refused(root, bundle, public, device, "failed its health check and was rolled back to 1.0.0: .*'scores' differs")


def test_a_process_killed_before_the_switch_leaves_the_previous_version_serving(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    bundle = _bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key)
    pem = tmp_path / "public.pem"
    pem.write_bytes(public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    script = (
        "import os, sys\nfrom pathlib import Path\n"
        "from edgebuild.runtime.ota import install, load_public_key\n"
        "install(Path(sys.argv[1]), Path(sys.argv[2]), load_public_key(Path(sys.argv[3])), root=Path(sys.argv[4]),\n"
        "        before_switch=lambda slot: os.kill(os.getpid(), 9))\n")
    done = subprocess.run([sys.executable, "-c", script, str(bundle), str(root), str(pem), str(device)],
                          capture_output=True, text=True)
    assert done.returncode == -9, done.stderr  # killed after extraction, before the switch
    assert active_version(root) == "1.0.0" and (root / "versions" / "2.0.0" / "model.onnx").is_file()
    # the next install of that version replaces the orphaned slot and succeeds
    assert install(bundle, root, public, root=device)["installed"] == "2.0.0"
    assert rollback(root) == {"active": "1.0.0", "was": "2.0.0"}


def test_old_versions_are_pruned_to_keep(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    for version in ("2.0.0", "3.0.0", "4.0.0"):
        install(_bundle(artifact, tmp_path / f"{version}.edgebundle", version, key), root, public, root=device, keep=1)
    assert active_version(root) == "4.0.0"
    assert sorted(p.name for p in (root / "versions").iterdir()) == ["3.0.0", "4.0.0"]


def test_a_delta_carries_only_changed_files_and_installs_only_over_its_base(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    base = verify(tmp_path / "v1.edgebundle", public, root=device)
    _, files = bundle_payload(artifact, None)
    import onnx

    model = onnx.load_from_string(files["model.onnx"])
    model.doc_string = "retrained"  # the model changed; its outputs, and so the health reference, stay the same
    files["model.onnx"] = model.SerializeToString()
    # and with it the recipe, which records the model's hash (the files the delta leaves out are unchanged)
    recipe = json.loads(files["recipe.json"])
    recipe["onnx_sha256"] = hashlib.sha256(files["model.onnx"]).hexdigest()
    files["recipe.json"] = json.dumps(recipe, indent=2).encode()
    delta = _bundle(artifact, tmp_path / "delta.edgebundle", "2.0.0", key, files=files, base=base)
    names = [m.name for m, _ in _members(delta)]
    assert sorted(names) == ["manifest.json", "manifest.sig", "payload/model.onnx", "payload/recipe.json"]
    done = install(delta, root, public, root=device)
    assert done["installed"] == "2.0.0"
    slot = root / "versions" / "2.0.0"
    assert (slot / "model.onnx").read_bytes() == files["model.onnx"]
    assert (slot / "reference.npz").read_bytes() == (root / "versions" / "1.0.0" / "reference.npz").read_bytes()
    # over anything but 1.0.0 it is refused
    with pytest.raises(BundleError, match="applies only over version 1.0.0; the active version is 2.0.0"):
        install(_bundle(artifact, tmp_path / "delta3.edgebundle", "3.0.0", key, files=files, base=base), root,
                public, root=device)
    assert active_version(root) == "2.0.0"


def test_the_mender_update_module_installs_and_rolls_back_through_the_device_tool(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    """The script Mender runs (update module protocol v3), driving the real edgebuild-device.pyz."""
    import os

    from edgebuild.profiles import data_dir
    from edgebuild.remote import device_tool_archive

    root, key, public = installed
    tool = tmp_path / "edgebuild-device.pyz"
    tool.write_bytes(device_tool_archive())
    pem = tmp_path / "public.pem"
    pem.write_bytes(public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    files = tmp_path / "mender-files"
    (files / "files").mkdir(parents=True)
    _bundle(artifact, files / "files" / "tiny-2.0.0-dock.edgebundle", "2.0.0", key)
    env = {**os.environ, "EDGEBUILD_DEVICE": str(tool), "EDGEBUILD_INSTALL_ROOT": str(root),
           "EDGEBUILD_PUBLIC_KEY": str(pem), "EDGEBUILD_DEVICE_ROOT": str(device),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    module = data_dir("docker") / "edgebuild-model.update-module"

    def state(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(module), name, str(files)], capture_output=True, text=True, env=env)

    assert state("NeedsArtifactReboot").stdout.strip() == "No"
    assert state("SupportsRollback").stdout.strip() == "Yes"
    assert state("Download").returncode == 0
    done = state("ArtifactInstall")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["installed"] == "2.0.0"
    assert active_version(root) == "2.0.0"
    assert state("ArtifactRollback").returncode == 0 and active_version(root) == "1.0.0"
    # a bundle for another module: the install state fails and 1.0.0 keeps serving
    (files / "files" / "tiny-2.0.0-dock.edgebundle").unlink()
    write_device_root(tmp_path / "nano", "orin-nano-4gb@6.2")
    env["EDGEBUILD_DEVICE_ROOT"] = str(tmp_path / "nano")
    _bundle(artifact, files / "files" / "tiny-3.0.0-dock.edgebundle", "3.0.0", key)
    refused = state("ArtifactInstall")
    assert refused.returncode == 15 and "bundle rejected" in refused.stderr and active_version(root) == "1.0.0"
