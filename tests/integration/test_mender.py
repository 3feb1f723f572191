"""Mender artifacts written by edgebuild, checked by the real `mender-artifact` tool (``mender`` marker)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from edgebuild.errors import ConfigError
from edgebuild.shipping.ota import load_signing_key, mender_artifact

FILES = {"model.onnx": bytes(range(256)) * 400, "recipe.json": b'{"group": "yard-cams"}'}
COMMON = dict(artifact_name="shapes-detector-1.0.0-yard-cams", device_types=["jetson-orin-nano-devkit"], files=FILES,
              provides={"edgebuild.model.shapes-detector.version": "1.0.0"},
              clears_provides=["edgebuild.model.shapes-detector.*"], depends={"edgebuild.l4t": "36.4.3"},
              meta_data={"group": "yard-cams"})


def _keys(folder: Path, kind: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1()) if kind == "ecdsa" else rsa.generate_private_key(65537, 3072)
    private, public = folder / f"{kind}.pem", folder / f"{kind}.pub"
    # RSA in PKCS#1 ("traditional"): what the mender-artifact CLI itself signs with
    form = serialization.PrivateFormat.TraditionalOpenSSL if kind == "rsa" else serialization.PrivateFormat.PKCS8
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mender-artifact", *args], capture_output=True, text=True, timeout=60)


def _replace_member(artifact: bytes, name: str, change) -> bytes:
    """The same outer tar with one member's bytes changed (what an attacker or a bad disk does)."""
    source = tarfile.open(fileobj=io.BytesIO(artifact))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as target:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if member.name == name:
                data = change(data)
                member.size = len(data)
            target.addfile(member, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.mender
def test_unsigned_artifact_is_accepted_and_reads_back(tmp_path: Path) -> None:
    artifact = tmp_path / "unsigned.mender"
    artifact.write_bytes(mender_artifact(**COMMON))
    assert _tool("validate", str(artifact)).returncode == 0
    read = _tool("read", str(artifact))
    assert read.returncode == 0, read.stderr
    for text in ("Name: shapes-detector-1.0.0-yard-cams", "Version: 3",
                 "Compatible devices: '[jetson-orin-nano-devkit]'", "Type:   edgebuild-model",
                 "edgebuild.model.shapes-detector.version: 1.0.0", "edgebuild.l4t: 36.4.3",
                 "name:     model.onnx", "name:     recipe.json", '"group": "yard-cams"'):
        assert text in read.stdout, text


@pytest.mark.mender
@pytest.mark.parametrize("kind", ["ecdsa", "rsa"])
def test_signed_artifact_is_accepted_with_the_key_and_refused_with_another(tmp_path: Path, kind: str) -> None:
    private, public = _keys(tmp_path, kind)
    (tmp_path / "other").mkdir()
    _, other = _keys(tmp_path / "other", kind)
    artifact = tmp_path / f"{kind}.mender"
    artifact.write_bytes(mender_artifact(**COMMON, signing_key=load_signing_key(private)))
    done = _tool("validate", "-k", str(public), str(artifact))
    assert done.returncode == 0 and "validated successfully" in done.stdout + done.stderr
    assert _tool("validate", "-k", str(other), str(artifact)).returncode != 0
    # a manifest changed after signing no longer matches its signature
    forged = tmp_path / "forged.mender"
    forged.write_bytes(_replace_member(artifact.read_bytes(), "manifest",
                                       lambda m: m.replace(b"  version", b"  versiom")))
    assert _tool("validate", "-k", str(public), str(forged)).returncode != 0


@pytest.mark.mender
def test_a_tampered_payload_is_refused(tmp_path: Path) -> None:
    import gzip

    artifact = mender_artifact(**COMMON)

    def swap_payload(data: bytes) -> bytes:
        inner = tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)))
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as target:
            for member in inner.getmembers():
                content = inner.extractfile(member).read()
                if member.name == "model.onnx":
                    content = content[:-1] + b"\x00"
                target.addfile(member, io.BytesIO(content))
        return gzip.compress(out.getvalue())

    tampered = tmp_path / "tampered.mender"
    tampered.write_bytes(_replace_member(artifact, "data/0000.tar.gz", swap_payload))
    done = _tool("validate", str(tampered))
    assert done.returncode != 0 and "checksum" in (done.stdout + done.stderr).lower()


def test_the_same_inputs_give_the_same_bytes() -> None:
    assert mender_artifact(**COMMON) == mender_artifact(**COMMON)


def test_keys_and_payloads_mender_cannot_take_are_refused(tmp_path: Path) -> None:
    edwards = tmp_path / "ed25519.pem"
    edwards.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(ConfigError, match="signed with ECDSA P-256 or RSA"):
        load_signing_key(edwards)
    p384 = tmp_path / "p384.pem"
    p384.write_bytes(ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(ConfigError, match="secp384r1"):
        load_signing_key(p384)
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(ConfigError, match="not a PEM private key"):
        load_signing_key(tmp_path / "junk.pem")
    with pytest.raises(ConfigError, match="payloads are flat"):
        mender_artifact(**{**COMMON, "files": {"sub/model.onnx": b"x"}})
    with pytest.raises(ConfigError, match="at least one device type"):
        mender_artifact(**{**COMMON, "device_types": []})


def _compiled_tiny(tiny_project: Path, signed: bool, version: str = "2.1.0"):
    """The tiny project with [ota] settings and a compiled folder for group dock; returns (project, public key)."""

    from edgebuild.project.config import load_project
    from edgebuild.targets.profiles import load_catalog
    from tests.support.runtime_artifacts import recipe_for, write_artifact

    key_pem, public = _keys(tiny_project, "ecdsa")
    toml = tiny_project / "edgebuild.toml"
    toml.write_text(toml.read_text() + f'\n[ota]\nversion = "{version}"\n'
                    + 'device_types = {"agx-orin-64gb" = ["jetson-agx-orin-devkit"]}\n'
                    + (f'signing_key = "{key_pem.name}"\n' if signed else ""))
    project = load_project(tiny_project)
    target = load_catalog().parse_target("agx-orin-64gb@5.1.2")
    folder = write_artifact(project.build_dir / "engines" / "dock")
    recipe_for(folder, target.id, group="dock").save(folder)
    return project, public


DOCK = [SimpleNamespace(name="dock")]  # what package_group (the package stage's entry point) reads of a group


@pytest.mark.mender
@pytest.mark.parametrize("signed", [True, False])
def test_package_writes_artifacts_mender_accepts(tiny_project: Path, signed: bool) -> None:
    """`edgebuild package` for a compiled group: its Mender artifact validates; its bundle is inside."""
    import json

    from edgebuild.runtime.ota.bundle import verify
    from edgebuild.shipping.ota import package_group

    project, public = _compiled_tiny(tiny_project, signed)
    package_group(project, DOCK[0], progress=lambda _: None)
    fleet = json.loads((project.build_dir / "packages" / "fleet.json").read_text())
    entry = fleet["groups"]["dock"]
    mender = tiny_project / entry["mender"]["path"]
    args = ["validate", "-k", str(public), str(mender)] if signed else ["validate", str(mender)]
    done = _tool(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    read = _tool("read", str(mender)).stdout
    assert "Compatible devices: '[jetson-agx-orin-devkit]'" in read and "edgebuild.l4t: 35.4.1" in read
    assert f"edgebuild.model.tiny.version: {project.ota.version}" in read
    assert 'Clears Provides: ["edgebuild.model.tiny.*"]' in read
    assert entry["signed"] is signed and (fleet["notes"] == [] if signed else "unsigned" in fleet["notes"][0])
    bundle = tiny_project / entry["bundle"]["path"]
    manifest = verify(bundle, _public(public) if signed else None, require_signature=signed, check_device=False)
    assert {f["path"] for f in manifest["files"]} == {"recipe.json", "model.onnx", "reference.npz"}
    assert json.loads((project.build_dir / "packages" / "fleet.json").read_text())["groups"]["dock"] == entry
    assert (project.build_dir / "packages" / "edgebuild-model").stat().st_mode & 0o111


def test_package_since_a_previous_release_writes_deltas(tiny_project: Path, tmp_path: Path) -> None:
    import shutil

    from edgebuild.project.config import load_project
    from edgebuild.shipping.ota import package_group

    project, _ = _compiled_tiny(tiny_project, signed=True, version="1.0.0")
    package_group(project, DOCK[0], progress=lambda _: None)
    shutil.copytree(project.build_dir / "packages", tmp_path / "release-1.0.0")
    toml = tiny_project / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('version = "1.0.0"', 'version = "1.1.0"'))
    engine_dir = project.build_dir / "engines" / "dock"
    recipe = (engine_dir / "recipe.json").read_text()
    (engine_dir / "recipe.json").write_text(recipe.replace('"port": 8000', '"port": 8001'))  # only the recipe changed
    record = package_group(load_project(tiny_project), DOCK[0], since=tmp_path / "release-1.0.0",
                           progress=lambda _: None)
    entry = record.as_dict()
    assert entry["delta_over"] == "1.0.0" and entry["carried"] == 1 and entry["files"] == 3
def _public(path: Path):
    from edgebuild.runtime.ota.bundle import load_public_key

    return load_public_key(path)


def test_fleet_manifest_carries_the_device_measurement_and_keeps_other_groups(tiny_project: Path) -> None:
    import json

    from edgebuild.shipping.ota import PackagedAcceptance, package_group

    project, _ = _compiled_tiny(tiny_project, False)
    accepted = {"candidate": "int8", "where": "ssh://nvidia@orin-01", "backend": "tensorrt 8.5.2.2",
                "metric": "mAP50-95", "value": 0.77, "images": 200, "retention": 0.98}
    record = package_group(project, DOCK[0], accepted=PackagedAcceptance.from_dict(accepted), progress=lambda _: None)
    fleet = json.loads((tiny_project / "build" / "packages" / "fleet.json").read_text())
    assert record.accepted is not None and record.accepted.as_dict() == accepted
    assert fleet["groups"]["dock"]["accepted"] == accepted
    fleet["groups"]["yard-cams"] = {**fleet["groups"]["dock"], "target": "orin-nano-8gb@6.2"}  # packaged earlier
    (tiny_project / "build" / "packages" / "fleet.json").write_text(json.dumps(fleet))
    package_group(project, DOCK[0], progress=lambda _: None)
    again = json.loads((tiny_project / "build" / "packages" / "fleet.json").read_text())
    assert sorted(again["groups"]) == ["dock", "yard-cams"] and again["groups"]["dock"]["accepted"] is None


def test_model_artifacts_clear_only_their_own_provides_and_can_depend_on_the_device_type_alone(
        tiny_project: Path) -> None:
    from edgebuild.project.config import load_project
    from edgebuild.shipping.ota import mender_keys

    project = load_project(tiny_project)
    keys = mender_keys(project, "tiny", "1.2.0", "dock", "36.4.3")
    assert keys == {"provides": {"edgebuild.model.tiny.version": "1.2.0", "edgebuild.model.tiny.group": "dock"},
                    "clears_provides": ["edgebuild.model.tiny.*"], "depends": {"edgebuild.l4t": "36.4.3"}}
    toml = tiny_project / "edgebuild.toml"
    toml.write_text(toml.read_text() + '\n[ota]\nl4t_provide = ""\n')
    assert mender_keys(load_project(tiny_project), "tiny", "1.2.0", "dock", "36.4.3")["depends"] is None
    with pytest.raises(ConfigError, match="must say which provides it clears"):
        mender_artifact(**{**COMMON, "clears_provides": []})
    toml.write_text(toml.read_text().replace('l4t_provide = ""', 'artifact_name = "tiny*"'))
    with pytest.raises(ConfigError, match="must not contain"):
        load_project(tiny_project)
