"""The device side of an OTA update: ``edgebuild-device.pyz ota-install BUNDLE`` and ``ota-rollback``.

A bundle (its format, signature and streamed checks: ``bundle.py``) is verified as it is
extracted. Installation extracts into a new versioned slot (``versions/<version>``), switches
the ``current`` link atomically, runs the health check (the runtime's warm-up and a sanity
inference compared with the reference stored in the bundle) and switches back if it fails; a
process killed before the switch leaves ``current`` as it was.

Three more guards. Downgrades: the newest installed version (and the manifest's ``sequence``,
the packaging time in ms, signed with it) is recorded in ``installed.json`` after a healthy
install, and a bundle that is not newer (semantic version, then sequence) is refused unless
``allow_downgrade``; a sequence at or below the recorded one is a replay even under a new
version string. Power loss: every extracted file and folder is fsynced before ``current`` is
switched and the install root after, so a link that names a version never points at files
that a power cut can still empty. One installer: install and rollback hold an exclusive
``flock`` on ``ota.lock`` in the install root; a second one exits at once and changes nothing.

Python 3.8; ``cryptography`` for signatures (``bundle.py``); numpy for the health check.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional

from edgebuild.errors import BuildLocked, BundleError, EdgebuildError
from edgebuild.runtime.base import semver
from edgebuild.runtime.base.files import atomic_write_text, fsync_dir, sha256_file
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.ota.bundle import (
    MANIFEST,
    REFERENCE,
    BundleReader,
    check_compatible,
    verified_head,
    walk_payload,
)

if TYPE_CHECKING:  # cryptography is imported where a signature is checked (a device may lack it)
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

__all__ = ["install"]

DEFERRED_BUILD_S = 1800  # the longest a health check waits for a deferred engine build
INSTALLED = "installed.json"  # the newest installed version, sequence and manifest sha256
LOCK = "ota.lock"
DOWNGRADE_HINT = ("pass --allow-downgrade to ota-install to install it anyway (in the Mender update module: "
                  "EDGEBUILD_ALLOW_DOWNGRADE=1)")


class InstallBusy(BuildLocked):
    """Another ota-install or ota-rollback holds the install root's lock (exit code 16, as BuildLocked)."""

    kind = "install root busy"


def _log(message: str) -> None:
    import sys

    print("ota: " + message, file=sys.stderr, flush=True)


# -- installing ------------------------------------------------------------------------------

def _switch(root: Path, version: Optional[str]) -> None:
    """Point ``root/current`` at ``versions/<version>`` in one rename (or remove it for None)."""
    link = root / "current"
    if version is None:
        if link.is_symlink():
            link.unlink()
        return
    staging = root / ".current.tmp-{}".format(os.getpid())
    if staging.is_symlink() or staging.exists():
        staging.unlink()
    os.symlink(os.path.join("versions", version), str(staging))
    os.replace(str(staging), str(link))
    fsync_dir(root)


def active_version(root: Path) -> Optional[str]:
    link = Path(root) / "current"
    return os.path.basename(os.readlink(str(link))) if link.is_symlink() else None


def health_check(folder: Path, warmup_budget_s: float = 10.0) -> JsonObject:
    """The runtime's warm-up, then the bundle's reference input must give its reference output.

    A group folder (several models, ``edgebuild.runtime.base.group``) passes only when every model
    does: the first that fails names itself, and the install rolls the whole set back."""
    from edgebuild.runtime.base.group import is_group_folder, model_folders

    if not is_group_folder(folder):
        return _model_health_check(folder, warmup_budget_s)
    checked = {}
    for name, model_folder in model_folders(folder).items():
        try:
            checked[name] = _model_health_check(model_folder, warmup_budget_s)
        except BundleError as exc:
            raise BundleError("model {}: {}".format(name, exc.message)) from None
    return {"models": checked}


def _model_health_check(folder: Path, warmup_budget_s: float) -> JsonObject:
    import numpy as np

    from edgebuild.runtime.serving.service import ModelService

    service = ModelService(folder, warmup_budget_s=warmup_budget_s)
    service.start()
    deadline = time.monotonic() + warmup_budget_s + DEFERRED_BUILD_S  # a deferred engine is built first
    while not service.ready.is_set() and service.failed is None and time.monotonic() < deadline:
        service.ready.wait(0.1)
    if not service.ready.is_set():
        raise BundleError("health check: the new version does not start: {}".format(service.failed or "timeout"))
    reference_path = service.serving_folder / REFERENCE  # the fallback recipe has its own reference
    if not reference_path.is_file():
        raise BundleError("health check: the bundle has no {} to check the output against".format(REFERENCE))
    with np.load(str(reference_path)) as stored:
        inputs = {k[len("input."):]: stored[k] for k in stored.files if k.startswith("input.")}
        expected = {k[len("output."):]: stored[k] for k in stored.files if k.startswith("output.")}
        atol, rtol = float(stored["atol"]), float(stored["rtol"])
    outputs, ms, _ = service.infer(inputs)
    worst = {}
    for name, value in expected.items():
        got = outputs.get(name)
        if got is None or got.shape != value.shape or not np.allclose(got, value, atol=atol, rtol=rtol):
            diff = float(np.max(np.abs(got - value))) if got is not None and got.shape == value.shape else None
            raise BundleError("health check: output {!r} differs from the bundle's reference (max |diff| {}, "
                              "tolerance atol {} rtol {})".format(name, diff, atol, rtol))
        worst[name] = float(np.max(np.abs(got - value))) if value.size else 0.0
    return {"backend": service.backend, "warmup": service.warmup, "inference_ms": round(ms, 3), "max_abs_diff": worst,
            "acceptance": service.acceptance, "fallback": service.fallback}


def install(bundle: Path, install_root: Path, public_key: Optional["PublicKeyTypes"] = None, *,
            require_signature: bool = True, root: Optional[Path] = None, keep: int = 2,
            health: Callable[[Path], JsonObject] = health_check,
            before_switch: Optional[Callable[[Path], None]] = None, allow_downgrade: bool = False,
            state_file: Optional[Path] = None) -> JsonObject:
    """Verify, extract into a new slot, switch ``current`` atomically, health-check, roll back on failure.

    Holds the install root's lock throughout. With ``state_file``, writes {"previous", "installed"}
    there: the version active before, and the one ``current`` was switched to (null until the
    switch, and again after rolling back itself), for Mender's ArtifactRollback (``rollback_recorded``).
    """
    install_root = Path(install_root)
    install_root.mkdir(parents=True, exist_ok=True)
    with install_lock(install_root, "ota-install"):
        return _install_locked(bundle, install_root, public_key, require_signature=require_signature, root=root,
                               keep=keep, health=health, before_switch=before_switch,
                               allow_downgrade=allow_downgrade, state_file=state_file)


def _install_locked(bundle: Path, install_root: Path, public_key: Optional["PublicKeyTypes"], *,
                    require_signature: bool, root: Optional[Path], keep: int, health: Callable[[Path], JsonObject],
                    before_switch: Optional[Callable[[Path], None]], allow_downgrade: bool,
                    state_file: Optional[Path]) -> JsonObject:
    versions = install_root / "versions"
    if not versions.is_dir():
        versions.mkdir()
        fsync_dir(install_root)
    previous = active_version(install_root)
    if state_file is not None:
        _write_state(state_file, previous, None)
    reader = BundleReader(bundle)
    try:
        manifest = verified_head(reader, public_key, require_signature)
        check_compatible(manifest, root)
        version = str(manifest["version"])
        if "/" in version or version in ("", ".", ".."):
            raise BundleError("version {!r} cannot name a folder".format(version))
        if version == previous:
            raise BundleError("version {} is already the active one".format(version))
        check_newer(version, _sequence(manifest), read_installed(install_root), allow_downgrade)
        delta = manifest.get("delta")
        if delta and previous != delta["base_version"]:
            raise BundleError("this delta bundle applies only over version {}; the active version is {}".format(
                delta["base_version"], previous or "none"))
        slot = versions / version
        _extract(reader, manifest, versions, slot, versions / previous if delta and previous else None)
    finally:
        reader.close()
    _log("version {} extracted into {} and synced to disk".format(version, slot))
    if before_switch is not None:
        before_switch(slot)
    if state_file is not None:
        _write_state(state_file, previous, version)  # before the switch: a kill after it still gets rolled back
    _switch(install_root, version)
    _log("current -> {}; running the health check".format(version))
    try:
        checked = health(slot)
    except Exception as exc:
        _switch(install_root, previous)
        shutil.rmtree(str(slot), ignore_errors=True)
        if state_file is not None:
            _write_state(state_file, previous, None)
        reason = exc.message if isinstance(exc, EdgebuildError) else "{}: {}".format(type(exc).__name__, exc)
        raise BundleError("version {} failed its health check and was rolled back to {}: {}".format(
            version, previous or "no version", reason)) from None
    record = _record(manifest)
    atomic_write_text(install_root / INSTALLED, json.dumps(record, indent=2) + "\n")
    removed = _prune(install_root, keep)
    return {"installed": version, "previous": previous, "health": checked, "removed_versions": removed,
            "slot": str(slot), "sequence": record["sequence"], "manifest_sha256": record["manifest_sha256"]}


def _extract(reader: BundleReader, manifest: JsonObject, versions: Path, slot: Path, base: Optional[Path]) -> None:
    """Payload (and a delta's unchanged files from ``base``) into ``slot``, every file and folder fsynced."""
    staging = versions / ".{}.tmp-{}".format(slot.name, os.getpid())
    shutil.rmtree(str(staging), ignore_errors=True)
    staging.mkdir()
    try:
        walk_payload(reader, manifest, staging)
        if base is not None:
            _copy_from_base(base, staging, manifest)
        with open(str(staging / MANIFEST), "wb") as handle:  # the signed bytes, as the bundle had them
            handle.write(manifest["_bytes"])
            handle.flush()
            os.fsync(handle.fileno())
        for folder, _, _ in os.walk(str(staging), topdown=False):  # new entries in each folder, deepest first
            fsync_dir(folder)
        shutil.rmtree(str(slot), ignore_errors=True)  # an orphan of an install killed before its switch
        os.replace(str(staging), str(slot))
        fsync_dir(versions)
    finally:
        shutil.rmtree(str(staging), ignore_errors=True)


def _sequence(manifest: JsonObject) -> Optional[int]:
    sequence = manifest.get("sequence")
    if sequence is not None and (isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0):
        raise BundleError("the manifest's sequence {!r} is not a whole number".format(sequence))
    return sequence


def _record(manifest: JsonObject) -> JsonObject:
    return {"model": manifest.get("model"), "version": str(manifest["version"]), "sequence": _sequence(manifest),
            "manifest_sha256": manifest.get("_sha256")}


def read_installed(install_root: Path) -> Optional[JsonObject]:
    """The newest installed version's record (version, sequence, manifest_sha256), or None."""
    path = Path(install_root) / INSTALLED
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BundleError("{} is unreadable ({}); it records the newest installed version, which a bundle must "
                          "be newer than".format(path, exc), hint=DOWNGRADE_HINT) from None
    if not isinstance(record, dict) or not isinstance(record.get("version"), str):
        raise BundleError("{} has no version record".format(path), hint=DOWNGRADE_HINT)
    return record


def check_newer(version: str, sequence: Optional[int], newest: Optional[JsonObject],
                allow_downgrade: bool = False) -> None:
    """Refuse a bundle that is not newer than ``newest`` (downgrade protection), unless allowed.

    Newer means a higher semantic version, or the same one with a higher sequence; a sequence at
    or below the recorded one is refused whatever the version says (a replayed bundle). A bundle
    or record without a sequence is judged by its version alone.
    """
    if newest is None:
        return
    try:
        _check_newer(version, sequence, newest)
    except BundleError as exc:
        if not allow_downgrade:
            raise
        _log("--allow-downgrade: installing although " + exc.message)


def _check_newer(version: str, sequence: Optional[int], newest: JsonObject) -> None:
    old_version, old_sequence = newest["version"], newest.get("sequence")
    this = "version {}{}".format(version, " (sequence {})".format(sequence) if sequence is not None else "")
    that = "version {}{}, the newest installed here".format(
        old_version, " (sequence {})".format(old_sequence) if old_sequence is not None else "")
    both = sequence is not None and isinstance(old_sequence, int)  # an older record may have none
    if sequence is not None and isinstance(old_sequence, int) and sequence <= old_sequence:
        raise BundleError("{} is a replayed or older bundle: its sequence is not above {}".format(this, that),
                          hint=DOWNGRADE_HINT)
    if semver.parse(version) is None or semver.parse(old_version) is None:
        raise BundleError("{} cannot be checked newer than {}: {!r} is not a semantic version "
                          "(MAJOR.MINOR.PATCH[-prerelease][+build])".format(
                              this, that, version if semver.parse(version) is None else old_version),
                          hint=DOWNGRADE_HINT)
    order = semver.compare(version, old_version)
    if order > 0 or (order == 0 and both):  # same version, higher sequence: a rebuild of it
        return
    raise BundleError("{} is {} {}; a device installs only newer bundles".format(
        this, "the same version as" if order == 0 else "older than", that), hint=DOWNGRADE_HINT)


def _write_state(path: Path, previous: Optional[str], installed: Optional[str]) -> None:
    atomic_write_text(path, json.dumps({"previous": previous, "installed": installed}) + "\n")


@contextmanager
def install_lock(install_root: Path, what: str) -> Iterator[None]:
    """An exclusive, non-blocking flock on ``install_root/ota.lock``; InstallBusy names the holder."""
    path = Path(install_root) / LOCK
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise InstallBusy("{} is busy: {} is installing or rolling back there; this {} changed nothing".format(
                install_root, holder, what), hint="wait for it to finish, then try again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, "{} (pid {})\n".format(what, os.getpid()).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


def _copy_from_base(base: Path, staging: Path, manifest: JsonObject) -> None:
    for entry in manifest["files"]:
        if not entry.get("from_base"):
            continue
        source = base / entry["path"]
        digest = sha256_file(source) if source.is_file() else None
        if digest != entry["sha256"]:
            raise BundleError("delta: {} of the active version is missing or changed; install the full "
                              "bundle".format(entry["path"]))
        target = staging / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(str(source), "rb") as reading, open(str(target), "wb") as writing:
            shutil.copyfileobj(reading, writing, 1 << 20)
            writing.flush()
            os.fsync(writing.fileno())


def _prune(install_root: Path, keep: int) -> List[str]:
    """Keep the active version and the ``keep`` newest before it."""
    active = active_version(install_root)
    slots = sorted((p for p in (install_root / "versions").iterdir() if p.is_dir() and not p.name.startswith(".")),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    others = [p for p in slots if p.name != active]
    removed = []
    for old in others[keep:]:
        shutil.rmtree(str(old), ignore_errors=True)
        removed.append(old.name)
    return removed


def rollback(install_root: Path, to: Optional[str] = None) -> JsonObject:
    """Switch ``current`` to version ``to``, or without it to the newest other version slot.

    Holds the install root's lock. The newest-installed record becomes the version switched to, so
    the update rolled back from can be installed again later, and anything older than the version
    switched to stays refused.
    """
    install_root = Path(install_root)
    with install_lock(install_root, "ota-rollback") if install_root.is_dir() else _no_lock():
        active = active_version(install_root)
        if to is not None:
            if to == active:
                _log("version {} is already the active one; nothing to roll back".format(to))
                return {"active": to, "was": active, "changed": False}
            if "/" in to or to in ("", ".", "..") or not (install_root / "versions" / to).is_dir():
                raise BundleError("no version {} in {} to roll back to (active: {})".format(
                    to, install_root / "versions", active or "none"))
            target = to
        else:
            slots = sorted((p for p in (install_root / "versions").iterdir() if p.is_dir()
                            and not p.name.startswith(".") and p.name != active),
                           key=lambda p: p.stat().st_mtime, reverse=True) \
                if (install_root / "versions").is_dir() else []
            if not slots:
                raise BundleError("nothing to roll back to in {} (active: {})".format(install_root, active or "none"))
            target = slots[0].name
        _switch(install_root, target)
        _record_slot(install_root, target)
        _log("current -> {} (was {})".format(target, active or "none"))
        result = {"active": target, "was": active}  # type: JsonObject
        if to is not None:
            result["changed"] = True
        return result


def rollback_recorded(install_root: Path, state_file: Path) -> JsonObject:
    """Undo exactly what one ``install(..., state_file=...)`` did (Mender's ArtifactRollback).

    Nothing recorded, or an install that never switched or already rolled itself back: nothing
    to do. Otherwise back to the version that was active before it (none: ``current`` removed).
    """
    install_root, state_file = Path(install_root), Path(state_file)
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError) as exc:
        raise BundleError("{} is not an ota-install state file: {}".format(state_file, exc)) from None
    active = active_version(install_root) if install_root.is_dir() else None
    if not state.get("installed"):
        why = "no install recorded in {}".format(state_file) if not state else \
            "the install never switched, or already rolled itself back"
        _log("{}: nothing to roll back; {} stays active".format(why, active or "no version"))
        return {"active": active, "was": active, "changed": False, "reason": why}
    previous = state.get("previous")
    if previous is not None:
        return rollback(install_root, to=previous)
    with install_lock(install_root, "ota-rollback"):
        _switch(install_root, None)  # there was no model before this install
        _record_slot(install_root, None)
        _log("current removed: no version was active before {}".format(state["installed"]))
        return {"active": None, "was": active, "changed": active is not None}


@contextmanager
def _no_lock() -> Iterator[None]:
    yield


def _record_slot(install_root: Path, version: Optional[str]) -> None:
    """The newest-installed record after a rollback: what the slot switched to was installed from."""
    path = install_root / INSTALLED
    if version is None:
        if path.exists():
            path.unlink()
            fsync_dir(install_root)
        return
    manifest_path = install_root / "versions" / version / MANIFEST
    try:
        data = manifest_path.read_bytes()
        manifest = json.loads(data)
        manifest["_sha256"] = hashlib.sha256(data).hexdigest()
        record = _record(manifest)
    except (OSError, ValueError, KeyError, BundleError):
        record = {"model": None, "version": version, "sequence": None, "manifest_sha256": None}
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
