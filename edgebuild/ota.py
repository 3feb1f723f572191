"""Fleet OTA artifacts: Mender artifacts (format version 3) written with the standard library and ``cryptography``.

A Mender artifact is an uncompressed tar whose members come in a fixed order (Mender's
``Documentation/artifact-format-v3.md``):

- ``version``: ``{"format": "mender", "version": 3}``;
- ``manifest``: ``<sha256>  <name>`` lines for ``version``, ``header.tar.gz`` and every payload file
  (as ``data/0000/<file>``), sorted by name;
- ``manifest.sig`` (signed artifacts): the base64 signature of ``manifest``; ECDSA P-256 as the raw
  r||s pair, RSA as PKCS#1 v1.5, both over SHA-256;
- ``header.tar.gz``: ``header-info`` first (payload types, ``artifact_provides``,
  ``artifact_depends``), then ``headers/0000/type-info`` and ``headers/0000/meta-data``;
- ``data/0000.tar.gz``: the payload files.

Archives are written deterministically (fixed mtime, owner and mode), so the same inputs give
the same bytes. Not wired into ``compile`` yet: the ``package`` stage is still to come.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgebuild.errors import ConfigError

FORMAT_VERSION = 3
#: the payload type of our update module (the device's ``/usr/share/mender/modules/v3/edgebuild-model``)
PAYLOAD_TYPE = "edgebuild-model"


def load_signing_key(path: Path) -> Any:
    """A PEM private key (ECDSA P-256 or RSA) for signing Mender artifacts."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a PEM private key without a passphrase ({exc})") from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name != "secp256r1":
        raise ConfigError(f"{path}: an ECDSA key on {key.curve.name}; Mender takes P-256 (secp256r1) or RSA")
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ConfigError(f"{path}: a {type(key).__name__}; Mender artifacts are signed with ECDSA P-256 or RSA")
    return key


def sign_manifest(key: Any, manifest: bytes) -> bytes:
    """``manifest.sig``: base64 of the signature Mender checks (raw r||s for ECDSA)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    if isinstance(key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(key.sign(manifest, ec.ECDSA(hashes.SHA256())))
        size = (key.curve.key_size + 7) // 8
        raw = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    else:
        raw = key.sign(manifest, padding.PKCS1v15(), hashes.SHA256())
    return base64.b64encode(raw)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname, info.gname = len(data), 0o644, 0, "root", "root"
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, sort_keys=True).encode()


def mender_artifact(*, artifact_name: str, device_types: list[str], files: Mapping[str, bytes | Path],
                    payload_type: str = PAYLOAD_TYPE, provides: Mapping[str, str] | None = None,
                    depends: Mapping[str, Any] | None = None, meta_data: Mapping[str, Any] | None = None,
                    signing_key: Any = None) -> bytes:
    """The bytes of a format-3 Mender artifact with one payload.

    ``provides``/``depends`` are the payload's own keys (``type-info``), e.g. the model version
    it provides and the L4T release it needs; ``device_types`` go to the artifact's depends.
    """
    if not device_types:
        raise ConfigError("a Mender artifact needs at least one device type it depends on")
    names = sorted(files)
    for name in names:
        if "/" in name or name in ("", ".", ".."):
            raise ConfigError(f"payload file name {name!r}: Mender payloads are flat (no folders)")
    payload = {name: files[name] if isinstance(files[name], bytes) else Path(files[name]).read_bytes()
               for name in names}
    version = _json({"format": "mender", "version": FORMAT_VERSION})
    header_info = {"payloads": [{"type": payload_type}], "artifact_provides": {"artifact_name": artifact_name},
                   "artifact_depends": {"device_type": list(device_types)}}
    type_info: dict[str, Any] = {"type": payload_type}
    if provides:
        type_info["artifact_provides"] = dict(provides)
    if depends:
        type_info["artifact_depends"] = dict(depends)
    header = _gzip(_tar([("header-info", _json(header_info)), ("headers/0000/type-info", _json(type_info)),
                         ("headers/0000/meta-data", _json(dict(meta_data or {})))]))
    data = _gzip(_tar([(name, payload[name]) for name in names]))
    checksums = {"version": version, "header.tar.gz": header}
    checksums.update({f"data/0000/{name}": payload[name] for name in names})
    manifest = "".join(f"{hashlib.sha256(content).hexdigest()}  {name}\n"
                       for name, content in sorted(checksums.items())).encode()
    members = [("version", version), ("manifest", manifest)]
    if signing_key is not None:
        members.append(("manifest.sig", sign_manifest(signing_key, manifest)))
    members += [("header.tar.gz", header), ("data/0000.tar.gz", data)]
    return _tar(members)
