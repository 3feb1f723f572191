"""The signed bundle format of a native OTA update: ``edgebuild-device.pyz ota-verify BUNDLE``.

A native bundle (written by ``edgebuild package``) is a gzip-compressed tar whose first members
are ``manifest.json`` and, when signed, ``manifest.sig``; every other member is ``payload/<file>``.
The manifest lists each payload file's path, size and sha256, the compatibility block (module
device-tree strings, accepted L4T releases), the model version, and for a delta bundle the exact
version it applies over.

Verification reads the manifest and its signature before any payload byte, then streams the
payload checking every entry: only regular files under ``payload/``, no absolute paths, no
``..``, no links or device files, nothing larger than the manifest says or than the size limit,
every hash right, nothing missing or extra. Here: the format's names, the verifying keys
(Ed25519, ECDSA P-256, RSA), the signature check, the streaming reader and ``verify``; installing
a verified bundle is ``ota.py``.

Python 3.8; ``cryptography`` for signatures.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import base64
import hashlib
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

from edgebuild.errors import BundleError, CapabilityMissing, ConfigError
from edgebuild.runtime.base.identity import read_identity
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.engines import device

if TYPE_CHECKING:  # cryptography is imported where a signature is checked (a device may lack it)
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

__all__ = ["BUNDLE_FORMAT", "BUNDLE_VERSION", "MANIFEST", "PAYLOAD", "REFERENCE", "SIGNATURE", "load_public_key",
           "parse_manifest", "verify"]

BUNDLE_FORMAT = "edgebuild-bundle"
BUNDLE_VERSION = 1
MANIFEST, SIGNATURE = "manifest.json", "manifest.sig"
PAYLOAD = "payload/"
MAX_FILE_BYTES = 8 << 30  # no model file is this large; a bigger entry is an attack or a broken bundle
MAX_MANIFEST_BYTES = 1 << 20
REFERENCE = "reference.npz"


def _log(message: str) -> None:
    import sys

    print("ota: " + message, file=sys.stderr, flush=True)


# -- signatures -----------------------------------------------------------------------------

def _require_cryptography() -> None:
    try:
        from cryptography.hazmat.primitives import serialization  # noqa: F401
    except ImportError:
        raise CapabilityMissing("the Python package cryptography is not installed here; it checks bundle "
                                "signatures", hint="pip3 install cryptography") from None


@dataclass(frozen=True)
class VerifyKey:
    """The key bundles are checked with, and what the install output says about it."""

    key: "PublicKeyTypes"
    file: str
    type: str  # ed25519, ecdsa-p256 or rsa-<bits>
    fingerprint: str  # sha256 of the DER SubjectPublicKeyInfo, first 16 hex digits
    from_private_key: bool

    def as_dict(self) -> JsonObject:
        return {"file": self.file, "type": self.type, "fingerprint": self.fingerprint,
                "from_private_key": self.from_private_key}


def load_public_key(path: Path) -> "PublicKeyTypes":
    return load_verify_key(path).key


def load_verify_key(path: Path) -> VerifyKey:
    """A PEM key file: SPKI "PUBLIC KEY" (Ed25519, ECDSA P-256, RSA) or PKCS#1 "RSA PUBLIC KEY".

    A private key (PKCS#1, SEC1 or PKCS#8, unencrypted) is accepted too, as mender-artifact accepts
    it, and its public half used, with a warning: a device should hold only the public key.
    """
    _require_cryptography()
    from cryptography.hazmat.primitives import serialization

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError("{}: cannot read the public key: {}".format(path, exc)) from None
    private = b"PRIVATE KEY-----" in data
    try:
        key = (serialization.load_pem_private_key(data, password=None).public_key() if private
               else serialization.load_pem_public_key(data))
    except Exception as exc:  # ValueError, TypeError (encrypted), UnsupportedAlgorithm
        raise ConfigError("{}: not a PEM public key (BEGIN PUBLIC KEY or BEGIN RSA PUBLIC KEY) nor an unencrypted "
                          "PEM private key ({})".format(path, exc)) from None
    kind = _key_type(path, key)
    if private:
        _log("warning: {} is a PRIVATE key; using its public half. A device should hold only the public key "
             "(openssl pkey -in {} -pubout -out public.pem)".format(path, path))
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return VerifyKey(key=key, file=str(path), type=kind, fingerprint=hashlib.sha256(der).hexdigest()[:16],
                     from_private_key=private)


def _key_type(path: Path, key: "PublicKeyTypes") -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(key, rsa.RSAPublicKey):
        return "rsa-{}".format(key.key_size)
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name == "secp256r1":
            return "ecdsa-p256"
        raise ConfigError("{}: an ECDSA key on {}; bundles are signed with P-256 (secp256r1)".format(
            path, key.curve.name))
    raise ConfigError("{}: a {}; bundles are signed with Ed25519, ECDSA P-256 or RSA".format(path, type(key).__name__))


def verify_signature(public_key: "PublicKeyTypes", manifest: bytes, signature_file: bytes) -> str:
    """Check ``manifest.sig`` over the manifest bytes; returns the algorithm. Raises BundleError."""
    _require_cryptography()
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    try:
        record = json.loads(signature_file)
        algorithm, signature = record["algorithm"], base64.b64decode(record["signature"], validate=True)
    except (ValueError, KeyError, TypeError):
        raise BundleError("manifest.sig is not a signature record") from None
    try:
        if algorithm == "ed25519" and isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, manifest)
        elif algorithm == "ecdsa-p256-sha256" and isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(signature, manifest, ec.ECDSA(hashes.SHA256()))
        elif algorithm == "rsa-pkcs1v15-sha256" and isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(signature, manifest, padding.PKCS1v15(), hashes.SHA256())
        else:
            raise BundleError("the bundle is signed with {}, which the given key ({}) cannot check".format(
                algorithm, type(public_key).__name__))
    except InvalidSignature:
        raise BundleError("the manifest's signature does not verify with the given key: the manifest was "
                          "changed, or it was signed with another key") from None
    return algorithm


# -- reading a bundle -----------------------------------------------------------------------

class BundleReader:
    """Streams a bundle: the manifest (and signature) first, then each payload file, checked."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._tar = tarfile.open(str(self.path), mode="r|gz")
        except (OSError, tarfile.TarError) as exc:
            raise BundleError("{}: not a bundle (gzip tar): {}".format(self.path, exc)) from None
        self._members = iter(self._tar)

    def _next(self) -> Optional[tarfile.TarInfo]:
        try:
            return next(self._members)
        except StopIteration:
            return None
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise BundleError("{}: truncated or corrupt archive: {}".format(self.path, exc)) from None

    def _read(self, member: tarfile.TarInfo, limit: int) -> bytes:
        if not member.isfile() or member.size > limit:
            raise BundleError("{}: entry {!r} is not a regular file within {} bytes".format(
                self.path, member.name, limit))
        handle = self._tar.extractfile(member)
        try:
            data = handle.read() if handle else b""
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleError("{}: entry {!r} is truncated: {}".format(self.path, member.name, exc)) from None
        if len(data) != member.size:
            raise BundleError("{}: entry {!r} is truncated".format(self.path, member.name))
        return data

    def head(self) -> "tuple":
        first = self._next()
        if first is None or first.name != MANIFEST:
            raise BundleError("{}: the first entry must be {} (found {!r})".format(
                self.path, MANIFEST, first.name if first else None))
        manifest = self._read(first, MAX_MANIFEST_BYTES)
        second = self._next()
        signature = None
        if second is not None and second.name == SIGNATURE:
            signature = self._read(second, 64 << 10)
            second = self._next()
        self._pending = second
        return manifest, signature

    def payload(self) -> Iterator[Tuple[str, tarfile.TarInfo]]:
        """(relative path, member) for each payload entry, after checking the entry is safe."""
        member = self._pending
        while member is not None:
            yield _safe_payload_name(self.path, member), member
            member = self._next()

    def check(self, member: tarfile.TarInfo, expected: JsonObject, target: Optional[Path] = None) -> None:
        """Stream one payload entry (to ``target`` if given), checking its size and sha256."""
        if member.size != expected["size"]:
            raise BundleError("{}: {} is {} bytes; the manifest says {}".format(
                self.path, member.name, member.size, expected["size"]))
        handle = self._tar.extractfile(member)
        digest, written = hashlib.sha256(), 0
        out = None
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            out = open(str(target), "wb")
        try:
            while True:
                block = handle.read(1 << 20) if handle else b""
                if not block:
                    break
                digest.update(block)
                written += len(block)
                if out is not None:
                    out.write(block)
            if out is not None:  # on disk before `current` can name it (see install)
                out.flush()
                os.fsync(out.fileno())
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleError("{}: {} is truncated: {}".format(self.path, member.name, exc)) from None
        finally:
            if out is not None:
                out.close()
        if written != expected["size"] or digest.hexdigest() != expected["sha256"]:
            raise BundleError("{}: {} does not match its sha256 in the manifest (tampered or damaged)".format(
                self.path, member.name))

    def close(self) -> None:
        self._tar.close()


def _safe_payload_name(bundle: Path, member: tarfile.TarInfo) -> str:
    name = member.name
    if not name.startswith(PAYLOAD) or name.startswith("/") or "\\" in name:
        raise BundleError("{}: entry {!r} is outside payload/ (absolute or unexpected path)".format(bundle, name))
    relative = name[len(PAYLOAD):]
    parts = relative.split("/")
    if not relative or any(p in ("", ".", "..") for p in parts):
        raise BundleError("{}: entry {!r} has an empty, '.' or '..' path part".format(bundle, name))
    if member.issym() or member.islnk():
        raise BundleError("{}: entry {!r} is a link ({} -> {}); bundles carry regular files only".format(
            bundle, name, name, member.linkname))
    if not member.isfile():
        raise BundleError("{}: entry {!r} is not a regular file (device, fifo or folder)".format(bundle, name))
    if member.size > MAX_FILE_BYTES:
        raise BundleError("{}: entry {!r} is {} bytes, past the limit of {}".format(
            bundle, name, member.size, MAX_FILE_BYTES))
    return relative


def parse_manifest(data: bytes) -> JsonObject:
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise BundleError("manifest.json is not JSON: {}".format(exc)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError("manifest.json is not an edgebuild bundle manifest")
    if manifest.get("format_version") != BUNDLE_VERSION:
        raise BundleError("bundle format version {} is not {} (this edgebuild-device reads {})".format(
            manifest.get("format_version"), BUNDLE_VERSION, BUNDLE_VERSION))
    for key in ("model", "version", "compatibility", "files"):
        if key not in manifest:
            raise BundleError("manifest.json has no {!r}".format(key))
    return manifest


def check_compatible(manifest: JsonObject, root: Optional[Path] = None) -> device.DeviceFacts:
    """The device (L4T and module, read under ``root``) must be one the bundle is for."""
    l4t, compatible = read_identity(root)
    facts = device.DeviceFacts(tensorrt=None, tensorrt_problem="", compute_capability=None, l4t=l4t,
                               compatible=compatible)
    wanted = manifest["compatibility"]
    module = wanted["module"]
    if not device.module_matches(facts, module["compatible"]):
        raise BundleError("this device ({}) is not a {}, which the bundle is for (device tree {})".format(
            ", ".join(compatible) or "no /proc/device-tree/compatible", module["name"],
            ", ".join(module["compatible"][:-1])))
    accepted = wanted["l4t_accepted"]
    if l4t not in accepted:
        raise BundleError("this device runs L4T {}, the bundle is for L4T R{} (JetPack {})".format(
            "R" + l4t if l4t else "unknown (no /etc/nv_tegra_release)", " or R".join(accepted),
            wanted.get("jetpack")))
    return facts


def verify(bundle: Path, public_key: Optional["PublicKeyTypes"] = None, *, require_signature: bool = True,
           root: Optional[Path] = None, check_device: bool = True) -> JsonObject:
    """Check signature, compatibility and every payload file without installing; returns the manifest."""
    reader = BundleReader(bundle)
    try:
        manifest = verified_head(reader, public_key, require_signature)
        if check_device:
            check_compatible(manifest, root)
        walk_payload(reader, manifest, None)
    finally:
        reader.close()
    manifest.pop("_bytes")
    return manifest


def verified_head(reader: BundleReader, public_key: Optional["PublicKeyTypes"], require_signature: bool) -> JsonObject:
    manifest_bytes, signature = reader.head()
    if signature is None:
        if require_signature:
            raise BundleError("{}: the bundle is not signed, and a signature is required (pass the public key "
                              "of the signing key; --allow-unsigned only for development)".format(reader.path))
    elif public_key is not None:
        verify_signature(public_key, manifest_bytes, signature)
    elif require_signature:
        raise BundleError("a public key is needed to check the bundle's signature")
    manifest = parse_manifest(manifest_bytes)
    # for the caller's report and the installed record; not part of the signed bytes
    manifest["_signed"] = signature is not None
    manifest["_sha256"] = hashlib.sha256(manifest_bytes).hexdigest()
    manifest["_bytes"] = manifest_bytes
    return manifest


def walk_payload(reader: BundleReader, manifest: JsonObject, into: Optional[Path]) -> None:
    files = {f["path"]: f for f in manifest["files"] if not f.get("from_base")}
    seen = set()
    for relative, member in reader.payload():
        expected = files.get(relative)
        if expected is None:
            raise BundleError("{}: entry payload/{} is not in the manifest".format(reader.path, relative))
        if relative in seen:
            raise BundleError("{}: entry payload/{} appears twice".format(reader.path, relative))
        seen.add(relative)
        reader.check(member, expected, into / relative if into is not None else None)
    missing = sorted(set(files) - seen)
    if missing:
        raise BundleError("{}: the bundle ends before {} (truncated)".format(reader.path, ", ".join(missing)))
