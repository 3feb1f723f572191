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
the same bytes.

Native bundles (for fleets without Mender) are described in ``edgebuild/runtime/ota/bundle.py``;
``edgebuild/runtime/ota/ota.py`` verifies and installs them on the device; this module writes them.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.datafiles import data_dir
from edgebuild.errors import ConfigError
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_bytes, atomic_write_text, sha256_bytes, sha256_file
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.text import Progress

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

    from edgebuild.shipping.shipped import Shipped
    from edgebuild.targets.profiles import SelectedGroup

    MenderKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    BundleKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

__all__ = ["PackageRecord", "PackagedAcceptance", "bundle_payload", "package_group", "read_bundle_manifest",
           "write_bundle", "write_fleet_manifest"]

FORMAT_VERSION = 3
#: the payload type of our update module (the device's ``/usr/share/mender/modules/v3/edgebuild-model``)
PAYLOAD_TYPE = "edgebuild-model"


def _private_key(path: Path) -> PrivateKeyTypes:
    """A PEM private key without a passphrase, or a ConfigError that names the file."""
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a PEM private key without a passphrase ({exc})") from None


def load_signing_key(path: Path) -> MenderKey:
    """A PEM private key (ECDSA P-256 or RSA) for signing Mender artifacts."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = _private_key(path)
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name != "secp256r1":
        raise ConfigError(f"{path}: an ECDSA key on {key.curve.name}; Mender takes P-256 (secp256r1) or RSA")
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ConfigError(f"{path}: a {type(key).__name__}; Mender artifacts are signed with ECDSA P-256 or RSA")
    return key


def sign_manifest(key: MenderKey, manifest: bytes) -> bytes:
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
                    clears_provides: list[str] | None = None, depends: Mapping[str, Any] | None = None,
                    meta_data: Mapping[str, Any] | None = None, signing_key: MenderKey | None = None) -> bytes:
    """The bytes of a format-3 Mender artifact with one payload.

    ``provides``/``depends`` are the payload's own keys (``type-info``), e.g. the model version
    it provides and the L4T release it needs; ``device_types`` go to the artifact's depends.
    ``clears_provides`` are the patterns (``*`` the only wildcard) of the device's provides this
    artifact replaces. The Mender client drops every provide the device has when an artifact
    names none, and an empty list means the same to it, so an artifact that provides anything
    must name what it clears.
    """
    if not device_types:
        raise ConfigError("a Mender artifact needs at least one device type it depends on")
    if provides and not clears_provides:
        raise ConfigError("a Mender artifact that provides keys must say which provides it clears "
                          "(clears_provides); without it the Mender client drops every provide of the device")
    names = sorted(files)
    for name in names:
        if "/" in name or name in ("", ".", ".."):
            raise ConfigError(f"payload file name {name!r}: Mender payloads are flat (no folders)")
    given = {name: files[name] for name in names}
    payload = {name: content if isinstance(content, bytes) else Path(content).read_bytes()
               for name, content in given.items()}
    version = _json({"format": "mender", "version": FORMAT_VERSION})
    header_info = {"payloads": [{"type": payload_type}], "artifact_provides": {"artifact_name": artifact_name},
                   "artifact_depends": {"device_type": list(device_types)}}
    type_info: JsonObject = {"type": payload_type}
    if provides:
        type_info["artifact_provides"] = dict(provides)
    if clears_provides:
        type_info["clears_artifact_provides"] = list(clears_provides)
    if depends:
        type_info["artifact_depends"] = dict(depends)
    header = _gzip(_tar([("header-info", _json(header_info)), ("headers/0000/type-info", _json(type_info)),
                         ("headers/0000/meta-data", _json(dict(meta_data or {})))]))
    data = _gzip(_tar([(name, payload[name]) for name in names]))
    checksums = {"version": version, "header.tar.gz": header}
    checksums.update({f"data/0000/{name}": payload[name] for name in names})
    manifest = "".join(f"{sha256_bytes(content)}  {name}\n"
                       for name, content in sorted(checksums.items())).encode()
    members = [("version", version), ("manifest", manifest)]
    if signing_key is not None:
        members.append(("manifest.sig", sign_manifest(signing_key, manifest)))
    members += [("header.tar.gz", header), ("data/0000.tar.gz", data)]
    return _tar(members)


# -- native bundles -------------------------------------------------------------------------------

BUNDLE_SUFFIX = ".edgebundle"


def load_bundle_key(path: Path) -> BundleKey:
    """A PEM private key for native bundles: Ed25519, ECDSA P-256 or RSA."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    key = _private_key(path)
    if isinstance(key, (ed25519.Ed25519PrivateKey, rsa.RSAPrivateKey)):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
        return key
    raise ConfigError(f"{path}: bundles are signed with Ed25519, ECDSA P-256 or RSA, not {type(key).__name__}"
                      + (f" on {key.curve.name}" if isinstance(key, ec.EllipticCurvePrivateKey) else ""))


def sign_bundle_manifest(key: BundleKey, manifest: bytes) -> bytes:
    """``manifest.sig`` of a native bundle: {"algorithm", "signature" (base64)} as JSON."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    if isinstance(key, ec.EllipticCurvePrivateKey):
        algorithm, signature = "ecdsa-p256-sha256", key.sign(manifest, ec.ECDSA(hashes.SHA256()))
    elif isinstance(key, rsa.RSAPrivateKey):
        algorithm, signature = "rsa-pkcs1v15-sha256", key.sign(manifest, padding.PKCS1v15(), hashes.SHA256())
    else:
        algorithm, signature = "ed25519", key.sign(manifest)
    return json.dumps({"algorithm": algorithm, "signature": base64.b64encode(signature).decode()}).encode()


def _file_entry(path: str, data: bytes) -> JsonObject:
    return {"path": path, "size": len(data), "sha256": sha256_bytes(data)}


def write_bundle(out: Path, *, manifest: JsonObject, files: Mapping[str, bytes],
                 signing_key: BundleKey | None = None, base: JsonObject | None = None) -> JsonObject:
    """Write a native bundle; returns its manifest.

    ``manifest`` holds model, version, group, target and compatibility; the file list is added
    here. With ``base`` (the manifest of the exact version this one replaces) the bundle is a
    delta: files whose hash is unchanged are listed ``from_base`` and not carried.
    """
    from edgebuild.runtime.ota.bundle import BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST, PAYLOAD, SIGNATURE

    entries = [_file_entry(name, files[name]) for name in sorted(files)]
    carried = [e["path"] for e in entries]
    full = dict(manifest, format=BUNDLE_FORMAT, format_version=BUNDLE_VERSION, delta=None)
    if base is not None:
        old = {e["path"]: e["sha256"] for e in base["files"]}
        for entry in entries:
            if old.get(entry["path"]) == entry["sha256"]:
                entry["from_base"] = True
        carried = [e["path"] for e in entries if not e.get("from_base")]
        full["delta"] = {"base_version": base["version"],
                         "base_manifest_sha256": sha256_bytes(json.dumps(base, sort_keys=True).encode())}
    full["files"] = entries
    manifest_bytes = json.dumps(full, indent=2, sort_keys=True).encode()
    members = [(MANIFEST, manifest_bytes)]
    if signing_key is not None:
        members.append((SIGNATURE, sign_bundle_manifest(signing_key, manifest_bytes)))
    members += [(PAYLOAD + name, files[name]) for name in carried]
    atomic_write_bytes(out, _gzip(_tar(members)))
    return full


def read_bundle_manifest(path: Path) -> JsonObject:
    """The manifest of a bundle (its first member), for ``--since``; the signature is checked on install."""
    from edgebuild.errors import BundleError
    from edgebuild.runtime.ota.bundle import MANIFEST, parse_manifest

    try:
        with tarfile.open(path, mode="r|gz") as tar:
            first = next(iter(tar), None)
            manifest = tar.extractfile(first) if first is not None and first.name == MANIFEST else None
            if manifest is None:  # no member, another first, or a MANIFEST that is not a file
                raise BundleError(f"{path}: not an edgebuild bundle (no {MANIFEST} first)")
            return parse_manifest(manifest.read())
    except (OSError, tarfile.TarError) as exc:
        raise ConfigError(f"{path}: cannot read the bundle: {exc}") from None


# -- per project: the package stage --------------------------------------------------------------

#: output tolerance of the health check's sanity inference, by the precision the device runs
REFERENCE_TOLERANCE = {"fp32": (1e-3, 1e-3), "fp16": (2e-2, 2e-2), "int8": (5e-2, 5e-2),
                       # not measured on a Thor yet: INT8's for FP8 (the same width); twice it for NVFP4
                       "fp8": (5e-2, 5e-2), "nvfp4": (1e-1, 1e-1)}


def reference_outputs(artifact: Path, recipe: Recipe) -> bytes:
    """``reference.npz``: an input at the profile's min shape and the outputs ONNX Runtime gives for it."""
    import numpy as np

    from edgebuild.runtime.engines.backends.onnxruntime import OnnxRuntimeRunner

    rng = np.random.default_rng(0)
    inputs = {name: rng.random(low, dtype=np.float32) for name, (low, _, _) in recipe.profiles.items()}
    emulated = artifact / recipe.EMULATED_ONNX  # NVFP4: ONNX Runtime has no FP4 kernels, it runs the emulation
    outputs = OnnxRuntimeRunner(emulated if emulated.is_file() else artifact / recipe.onnx,
                                basic_optimizations=recipe.precision in ("fp8", "nvfp4")).run(inputs)
    atol, rtol = REFERENCE_TOLERANCE.get(recipe.precision, REFERENCE_TOLERANCE["int8"])
    buffer = io.BytesIO()
    arrays = {**{f"input.{k}": v for k, v in inputs.items()}, **{f"output.{k}": v for k, v in outputs.items()}}
    # numpy's stub matches **arrays against its allow_pickle: bool
    np.savez(buffer, atol=np.float64(atol), rtol=np.float64(rtol), **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def bundle_payload(artifact: Path, containers: Path | None, *, hint: str | None = None
                   ) -> tuple[Recipe, dict[str, bytes]]:
    """(recipe, files) of one group: the servable model folder (or a group folder: its manifest and every
    model's folder, each with its health reference), the health reference and the run specs. The recipe
    returned is the model's, or the group's first model's (the target and module are the group's)."""
    from edgebuild.runtime.base.group import GROUP_FILE, GroupManifest, is_group_folder

    if is_group_folder(artifact):
        manifest = GroupManifest.load(artifact)
        files = {GROUP_FILE: (artifact / GROUP_FILE).read_bytes()}
        recipes = []
        for model in manifest.models:
            recipe, model_files = _model_payload(artifact / model.folder, hint)
            recipes.append(recipe)
            files.update({f"{model.folder}/{name}": data for name, data in model_files.items()})
        recipe = recipes[0]
    else:
        recipe, files = _model_payload(artifact, hint)
    if containers is not None and containers.is_dir():
        for spec in sorted(containers.iterdir()):
            if spec.is_file() and (spec.name in ("run.sh", "compose.yaml") or spec.suffix == ".service"):
                files[f"run/{spec.name}"] = spec.read_bytes()
    return recipe, files


def _model_payload(artifact: Path, hint: str | None) -> tuple[Recipe, dict[str, bytes]]:
    from edgebuild.runtime.ota.bundle import REFERENCE

    recipe = Recipe.load(artifact, hint=hint)
    names = recipe.file_names(engine=recipe.shippable_engine and Recipe.has_engine(artifact))
    files = {name: (artifact / name).read_bytes() for name in names}
    files[REFERENCE] = reference_outputs(artifact, recipe)
    if recipe.fallback:  # the fallback recipe's own health reference, for a device that serves it
        fallback = artifact / recipe.fallback
        files[f"{recipe.fallback}/{REFERENCE}"] = reference_outputs(fallback, Recipe.load(fallback))
    return recipe, files


def _signing_keys(project: Shipped) -> tuple[BundleKey | None, MenderKey | None, list[str]]:
    """(native bundle key, Mender key, notes) from ``[ota] signing_key``."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if not project.ota.signing_key:
        return None, None, ["unsigned: set [ota] signing_key (an Ed25519, ECDSA P-256 or RSA PEM) to sign"]
    key = load_bundle_key(project.path(project.ota.signing_key))
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key, None, ["Mender artifacts unsigned: Mender takes ECDSA P-256 or RSA keys, the signing key is "
                           "Ed25519 (the bundle inside is signed)"]
    return key, key, []


@dataclass(frozen=True)
class PackagedFile:
    """A file the package stage wrote: its path (relative to the project where it is inside it), size, sha256."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> PackagedFile:
        return cls(**data)


@dataclass(frozen=True)
class PackagedAcceptance:
    """The accept stage's measurement of a device-built engine, as the package and fleet.json show it
    (``edgebuild.devices.engines.Acceptance`` without the keys it is stored by)."""

    candidate: str
    where: str
    backend: str
    metric: str
    value: float
    images: int
    retention: float

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> PackagedAcceptance:
        return cls(**data)


@dataclass(frozen=True)
class PackagedModel:
    """One model of a group folder's bundle, switched together with the others."""

    name: str
    served_as: str
    version: str
    precision: str

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> PackagedModel:
        return cls(**data)


@dataclass(frozen=True)
class PackageRecord:
    """The package stage's result for one group: its bundle and Mender artifact (paths from the project)."""

    group: str
    target: str
    bundle: PackagedFile
    mender: PackagedFile
    signed: bool
    delta_over: str | None
    files: int
    carried: int  # files in the bundle itself (a delta leaves the unchanged ones out)
    notes: list[str]
    #: the accept stage's measurement of a device-built engine (where, backend, metric, retention), if any
    accepted: PackagedAcceptance | None = None
    #: a fleet group's models, switched together
    models: list[PackagedModel] | None = None

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> PackageRecord:
        accepted, models = data.get("accepted"), data.get("models")
        return cls(**{**data, "bundle": PackagedFile.from_dict(data["bundle"]),
                      "mender": PackagedFile.from_dict(data["mender"]),
                      "accepted": PackagedAcceptance.from_dict(accepted) if accepted else None,
                      "models": [PackagedModel.from_dict(m) for m in models] if models is not None else None})


def mender_keys(project: Shipped, name: str, version: str, group: str, l4t: str,
                models: list[PackagedModel] | None = None) -> JsonObject:
    """What a model artifact provides, clears and depends on in the device's Mender provides.

    It provides ``edgebuild.model.<name>.version`` and ``.group`` and clears only
    ``edgebuild.model.<name>.*``, so the rootfs's provides (``edgebuild.l4t``), other models'
    and everything else survive every update. It depends on ``[ota] l4t_provide`` (default
    ``edgebuild.l4t``) being the target's L4T release; ``l4t_provide = ""`` depends on the
    device type alone.
    """
    prefix = f"edgebuild.model.{name}"
    l4t_key = project.ota.l4t_provide
    provides = {f"{prefix}.version": version, f"{prefix}.group": group}
    for model in models or ():  # a group's artifact also says which version of each model it carries
        provides[f"{prefix}.models.{model.name}"] = model.version
    return {"provides": provides, "clears_provides": [f"{prefix}.*"], "depends": {l4t_key: l4t} if l4t_key else None}


def _group_models(folder: Path | None) -> list[PackagedModel]:
    """A group folder's models as the bundle manifest and fleet.json list them (empty: a model folder)."""
    from edgebuild.runtime.base.group import GroupManifest, is_group_folder

    if folder is None or not is_group_folder(folder):
        return []
    return [PackagedModel(m.name, m.served_as, m.version, m.precision) for m in GroupManifest.load(folder).models]


def _base_manifest(since: Path, group: str) -> JsonObject:
    previous = Path(since)
    if previous.is_dir():
        previous = next(iter(sorted((previous / group).glob(f"*{BUNDLE_SUFFIX}"))), previous / group)
    base = read_bundle_manifest(previous)
    if base.get("group") != group:
        raise ConfigError(f"{previous}: a bundle of group {base.get('group')}, not {group}")
    return base


def package_group(project: Shipped, group: SelectedGroup, *, model_folder: Path | None = None,
                  context: Path | None = None, since: Path | None = None, accepted: PackagedAcceptance | None = None,
                  progress: Progress = print) -> PackageRecord:
    """A native bundle and a Mender artifact in build/packages/<group>/, and the group's line in fleet.json.

    ``model_folder`` and ``context`` are the folders the engine and container stages' records
    name (by default the group's in the build folder's layout, for the jetson flavor).
    """
    bundle_key, mender_key, notes = _signing_keys(project)
    layout = BuildLayout.of(project)
    name, version, group_name = project.ota.artifact_name or project.project.name, project.ota.version, group.name
    recipe, files = bundle_payload(model_folder or layout.engine(group_name), context or layout.container(group_name),
                                   hint=f"run `edgebuild compile --target {group_name}` first")
    base = _base_manifest(since, group_name) if since is not None else None
    # sequence: when it was packaged (ms since the epoch), signed with the manifest; a device
    # refuses a bundle that is not newer than what it installed, even under a reused version string
    manifest = {"model": name, "version": version, "group": group_name, "target": recipe.target,
                "precision": recipe.precision, "compatibility": recipe.compatibility(),
                "sequence": time.time_ns() // 1_000_000}
    models = _group_models(model_folder)
    if models:  # a group folder: every model it switches together, with its version
        manifest["models"] = [m.as_dict() for m in models]
    folder = layout.package(group_name)
    bundle_path = folder / f"{name}-{version}-{group_name}{BUNDLE_SUFFIX}"
    written = write_bundle(bundle_path, manifest=manifest, files=files, signing_key=bundle_key, base=base)
    mender_path = folder / f"{name}-{version}-{group_name}.mender"
    atomic_write_bytes(mender_path, mender_artifact(
        artifact_name=f"{name}-{version}-{group_name}",
        device_types=project.ota.device_types.get(recipe.module.id, [recipe.module.id]),
        files={bundle_path.name: bundle_path.read_bytes()},
        **mender_keys(project, name, version, group_name, recipe.l4t, models),
        meta_data={"target": recipe.target, "group": group_name},
        signing_key=mender_key))
    record = PackageRecord(
        group=group_name, target=recipe.target, bundle=_described(bundle_path, project.root),
        mender=_described(mender_path, project.root), signed=bundle_key is not None,
        delta_over=(written.get("delta") or {}).get("base_version"), files=len(written["files"]),
        carried=sum(1 for f in written["files"] if not f.get("from_base")), notes=notes, accepted=accepted,
        models=models or None)
    progress(f"{group_name}: {bundle_path.name} ({record.bundle.size} bytes"
             + (f", delta over {record.delta_over}" if base else "") + f") and {mender_path.name}")
    write_fleet_manifest(project, [record])
    return record


def write_fleet_manifest(project: Shipped, records: list[PackageRecord]) -> JsonObject:
    """``build/packages/fleet.json`` (which artifact each group gets) with these groups' lines updated,
    and the Mender update module beside it. Groups packaged earlier and not named here keep their lines."""
    layout = BuildLayout.of(project)
    path = layout.fleet_manifest
    name, version = project.ota.artifact_name or project.project.name, project.ota.version
    groups: JsonObject = {}
    if path.is_file():
        try:
            previous = json.loads(path.read_text())
            if previous.get("model") == name:
                groups = {g: entry for g, entry in previous.get("groups", {}).items()
                          if (project.root / entry["bundle"]["path"]).is_file()}
        except (ValueError, KeyError, TypeError, AttributeError):
            groups = {}  # unreadable: rewritten from what is packaged now
    for record in records:
        groups[record.group] = {k: v for k, v in record.as_dict().items() if k not in ("group", "notes")}
    notes = sorted({note for record in records for note in record.notes})
    module_script = layout.packages / "edgebuild-model"
    atomic_write_text(module_script, (data_dir("docker") / "edgebuild-model.update-module").read_text())
    module_script.chmod(0o755)
    fleet = {"model": name, "version": version, "groups": dict(sorted(groups.items())),
             "update_module": "edgebuild-model", "notes": notes}
    atomic_write_text(path, json.dumps(fleet, indent=2))
    return fleet


def _described(path: Path, root: Path) -> PackagedFile:
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
    return PackagedFile(shown, path.stat().st_size, sha256_file(path))
