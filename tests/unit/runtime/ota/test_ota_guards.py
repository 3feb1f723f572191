"""The device installer's guards, without a bundle: the downgrade rule, the key file formats, the lock."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from edgebuild.errors import BuildLocked, BundleError, ConfigError
from edgebuild.runtime.ota.bundle import load_verify_key
from edgebuild.runtime.ota.ota import InstallBusy, check_newer, install_lock


@pytest.mark.parametrize(("version", "sequence", "newest", "accepted"), [
    ("2.0.0", None, {"version": "1.0.0"}, True),
    ("2.0.0", 5, {"version": "1.0.0", "sequence": 4}, True),
    ("1.0.0", 5, {"version": "1.0.0", "sequence": 4}, True),  # the same version, packaged again later
    ("1.0.0+b", 5, {"version": "1.0.0+a", "sequence": 4}, True),
    ("1.0.0", 4, {"version": "1.0.0", "sequence": 4}, False),
    ("1.0.0", None, {"version": "1.0.0", "sequence": 4}, False),  # no sequence: by version alone
    ("1.0.0", 5, {"version": "1.0.0"}, False),
    ("3.0.0", 3, {"version": "2.0.0", "sequence": 4}, False),  # a replay under a new version string
    ("1.9.9", 9, {"version": "2.0.0", "sequence": 4}, False),
    ("2.0.0-rc.1", 9, {"version": "2.0.0", "sequence": 4}, False),
    ("2.0.0", 9, {"version": "2.0.0-rc.1", "sequence": 4}, True),
    ("nightly", 9, {"version": "2.0.0", "sequence": 4}, False),
    ("2.0.0", 9, {"version": "nightly", "sequence": 4}, False),
])
def test_the_downgrade_rule(version: str, sequence: int | None, newest: dict, accepted: bool) -> None:
    if accepted:
        check_newer(version, sequence, newest)
    else:
        with pytest.raises(BundleError, match=f"version {version}.*{newest['version']}") as refused:
            check_newer(version, sequence, newest)
        assert "--allow-downgrade" in refused.value.hint and "EDGEBUILD_ALLOW_DOWNGRADE=1" in refused.value.hint
        check_newer(version, sequence, newest, allow_downgrade=True)  # and allowed, it passes
    check_newer(version, sequence, None)  # nothing installed yet: anything goes


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_key_files_public_and_private(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pem, raw, none = serialization.Encoding.PEM, serialization.PrivateFormat, serialization.NoEncryption()
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    rsa_key = rsa.generate_private_key(65537, 2048)
    ed = ed25519.Ed25519PrivateKey.generate()
    cases = {
        "rsa-spki": (rsa_key.public_key().public_bytes(pem, spki), "rsa-2048", False),
        "rsa-pkcs1": (rsa_key.public_key().public_bytes(pem, serialization.PublicFormat.PKCS1), "rsa-2048", False),
        "rsa-private": (rsa_key.private_bytes(pem, raw.TraditionalOpenSSL, none), "rsa-2048", True),
        "ed25519": (ed.public_key().public_bytes(pem, spki), "ed25519", False),
        "ed25519-private": (ed.private_bytes(pem, raw.PKCS8, none), "ed25519", True),
    }
    fingerprints = {}
    for name, (data, kind, private) in cases.items():
        loaded = load_verify_key(_write(tmp_path / f"{name}.pem", data))
        assert (loaded.type, loaded.from_private_key) == (kind, private), name
        assert len(loaded.fingerprint) == 16 and int(loaded.fingerprint, 16) >= 0
        fingerprints.setdefault(kind, set()).add(loaded.fingerprint)
    assert all(len(found) == 1 for found in fingerprints.values())
    assert "rsa-private.pem is a PRIVATE key; using its public half" in capsys.readouterr().err


def test_key_files_that_are_refused(tmp_path: Path) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ConfigError, match="an ECDSA key on secp384r1; bundles are signed with P-256"):
        load_verify_key(_write(tmp_path / "p384.pem", p384))
    with pytest.raises(ConfigError, match="not a PEM public key"):
        load_verify_key(_write(tmp_path / "junk.pem", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
    encrypted = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"))
    with pytest.raises(ConfigError, match="nor an unencrypted PEM private key"):
        load_verify_key(_write(tmp_path / "encrypted.pem", encrypted))
    with pytest.raises(ConfigError, match="cannot read the public key"):
        load_verify_key(tmp_path / "missing.pem")


def test_the_install_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    import os

    with install_lock(tmp_path, "ota-install"):
        assert (tmp_path / "ota.lock").read_text() == f"ota-install (pid {os.getpid()})\n"
        with pytest.raises(InstallBusy, match=rf"ota-install \(pid {os.getpid()}\) is installing") as busy:
            with install_lock(tmp_path, "ota-rollback"):
                pass  # flock locks are per open file, so a second open in the same process is refused too
        assert isinstance(busy.value, BuildLocked) and busy.value.exit_code == 16
    with install_lock(tmp_path, "ota-rollback"):
        pass
