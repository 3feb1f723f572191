"""OTA bundles: signed packaging, device-side verification, install with health check and rollback, deltas.

Each refusal must leave the running version untouched; the device is a folder of the test's
(its /etc/nv_tegra_release and device tree), the install root another.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from edgebuild.errors import BundleError
from edgebuild.runtime.ota.bundle import verify
from edgebuild.runtime.ota.ota import active_version, install, rollback
from edgebuild.shipping.ota import bundle_payload, write_bundle
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


def _bundle(artifact: Path, out: Path, version: str, key=None, *, files=None, base=None, sequence=None) -> Path:
    recipe, payload = bundle_payload(artifact, None)
    manifest = {"model": "tiny", "version": version, "group": "dock", "target": TARGET, "precision": "fp32",
                "compatibility": recipe.compatibility()}
    if sequence is not None:
        manifest["sequence"] = sequence
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
        "from edgebuild.runtime.ota.bundle import load_public_key\nfrom edgebuild.runtime.ota.ota import install\n"
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

    from edgebuild.datafiles import data_dir
    from edgebuild.devices.ssh import device_tool_archive

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


# -- downgrade and replay protection ----------------------------------------------------------

@pytest.mark.parametrize(("version", "words"), [
    ("0.9.0", "version 0.9.0 is older than version 1.0.0, the newest installed here"),
    ("1.0.0-rc.1", "version 1.0.0-rc.1 is older than version 1.0.0"),
    ("1.0.0+rebuild", "version 1.0.0\\+rebuild is the same version as version 1.0.0"),
    ("latest", "'latest' is not a semantic version"),
])
def test_a_bundle_not_newer_than_the_newest_installed_is_refused(
        tmp_path: Path, artifact: Path, device: Path, installed, version: str, words: str) -> None:
    root, key, public = installed
    bundle = _bundle(artifact, tmp_path / "old.edgebundle", version, key)
    _refused(root, bundle, public, device, "(?s)" + words + ".*hint: pass --allow-downgrade")
    assert json.loads((root / "installed.json").read_text())["version"] == "1.0.0"


def test_a_replayed_sequence_is_refused_even_under_a_new_version(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    done = install(_bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key, sequence=2000), root, public,
                   root=device)
    assert done["sequence"] == 2000
    record = json.loads((root / "installed.json").read_text())
    assert record["version"] == "2.0.0" and record["sequence"] == 2000
    assert record["manifest_sha256"] == done["manifest_sha256"] and len(record["manifest_sha256"]) == 64
    # a validly signed older bundle re-labelled 3.0.0 (or any bundle packaged before 2.0.0 was)
    with pytest.raises(BundleError, match=r"(?s)version 3.0.0 \(sequence 1500\) is a replayed or older bundle: its "
                                          r"sequence is not above version 2.0.0 \(sequence 2000\).*--allow-downgrade"):
        install(_bundle(artifact, tmp_path / "replay.edgebundle", "3.0.0", key, sequence=1500), root, public,
                root=device)
    with pytest.raises(BundleError, match="version 1.5.0 .* is older than version 2.0.0"):
        install(_bundle(artifact, tmp_path / "old.edgebundle", "1.5.0", key, sequence=3000), root, public, root=device)
    assert active_version(root) == "2.0.0" and not (root / "versions" / "3.0.0").exists()
    # allowed: it installs, and becomes what later bundles must be newer than
    done = install(tmp_path / "old.edgebundle", root, public, root=device, allow_downgrade=True)
    assert done["installed"] == "1.5.0" and active_version(root) == "1.5.0"
    assert json.loads((root / "installed.json").read_text())["sequence"] == 3000
    # a bundle without a sequence is judged by its version alone
    assert install(_bundle(artifact, tmp_path / "v4.edgebundle", "4.0.0", key), root, public,
                   root=device)["installed"] == "4.0.0"


def test_a_failed_health_check_does_not_raise_the_recorded_version(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    with pytest.raises(BundleError, match="failed its health check"):
        install(_bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key, sequence=5), root, public, root=device,
                health=lambda slot: (_ for _ in ()).throw(RuntimeError("no")))
    assert json.loads((root / "installed.json").read_text())["version"] == "1.0.0"
    assert install(tmp_path / "v2.edgebundle", root, public, root=device)["installed"] == "2.0.0"


def _device_tool(*args: str, env: dict | None = None) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "edgebuild.runtime", *args], capture_output=True, text=True, env=env)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _pem(public, path: Path) -> Path:
    path.write_bytes(public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


def test_ota_install_allow_downgrade_and_the_key_it_used(tmp_path: Path, artifact: Path, device: Path,
                                                         installed) -> None:
    root, key, public = installed
    pem = _pem(public, tmp_path / "public.pem")
    bundle = _bundle(artifact, tmp_path / "old.edgebundle", "0.9.0", key)
    base = ["--root", str(device), "ota-install", str(bundle), "--install-root", str(root), "--public-key", str(pem)]
    code, out, err = _device_tool(*base)
    assert code == 15 and not out["ok"] and "0.9.0 is older than version 1.0.0" in out["message"]
    assert "--allow-downgrade" in out["hint"] and active_version(root) == "1.0.0"
    code, out, err = _device_tool(*base, "--allow-downgrade")
    assert code == 0 and out["installed"] == "0.9.0", err
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert out["key"] == {"file": str(pem), "type": "ed25519", "fingerprint": hashlib.sha256(der).hexdigest()[:16],
                          "from_private_key": False}
    assert f"checking signatures with {pem} (ed25519, fingerprint {out['key']['fingerprint']}" in err


# -- durability: the order of fsync, rename and symlink -----------------------------------------

def _strace_calls(log: Path) -> list[tuple[str, str]]:
    """(call, arguments) of each completed call in an ``strace -f -y`` log."""
    calls = []
    for line in log.read_text().splitlines():
        match = re.match(r"^\d+\s+(\w+)\((.*)\)\s+=\s+0$", line)
        if match:
            calls.append((match.group(1), match.group(2)))
    return calls


@pytest.mark.strace
def test_every_file_and_folder_is_on_disk_before_current_is_switched(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    import os
    import shutil

    root, key, public = installed
    bundle = _bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key)
    pem = _pem(public, tmp_path / "public.pem")
    log = tmp_path / "strace.log"
    script = ("import sys\nfrom pathlib import Path\nfrom edgebuild.runtime.ota.bundle import load_public_key\n"
              "from edgebuild.runtime.ota.ota import install\n"
              "install(Path(sys.argv[1]), Path(sys.argv[2]), load_public_key(Path(sys.argv[3])), "
              "root=Path(sys.argv[4]))\n")
    done = subprocess.run([shutil.which("strace"), "-f", "-y", "-qq", "-s", "4096", "-e", "signal=none", "-e",
                           "trace=fsync,fdatasync,rename,renameat,renameat2,symlink,symlinkat", "-o", str(log),
                           sys.executable, "-c", script, str(bundle), str(root), str(pem), str(device)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = _strace_calls(log)
    real = os.path.realpath(root)
    versions = f"{real}/versions"

    def first(predicate) -> int:
        return next(i for i, call in enumerate(calls) if predicate(*call))

    def renamed_to(target: str):  # rename("a", "b"), renameat(AT_FDCWD, "a", AT_FDCWD, "b"), renameat2(..., 0)
        return lambda name, args: name.startswith("rename") and re.findall(r'"([^"]*)"', args)[-1:] == [target]

    switch = first(renamed_to(f"{real}/current"))
    into_slot = first(renamed_to(f"{versions}/2.0.0"))
    staging = re.search(r'"([^"]*/versions/\.2\.0\.0\.tmp-\d+)"', calls[into_slot][1]).group(1)
    synced = {i: args for i, (name, args) in enumerate(calls) if name in ("fsync", "fdatasync")}
    for name in ("model.onnx", "recipe.json", "reference.npz", "manifest.json"):
        at = [i for i, args in synced.items() if args.endswith(f"{os.path.realpath(staging)}/{name}>")]
        assert at and at[0] < into_slot, f"{name} is not fsynced before its slot is renamed into place"
    assert any(i < into_slot and args.endswith(f"{os.path.realpath(staging)}>") for i, args in synced.items()), \
        "the slot folder is not fsynced before it is renamed into place"
    assert any(into_slot < i < switch and args.endswith(f"{versions}>") for i, args in synced.items()), \
        "versions/ is not fsynced between the slot's rename and the switch"
    link = first(lambda name, args: name.startswith("symlink") and '"versions/2.0.0"' in args)
    assert into_slot < link < switch
    assert any(i > switch and args.endswith(f"{real}>") for i, args in synced.items()), \
        "the install root is not fsynced after current is switched"
    recorded = first(renamed_to(f"{real}/installed.json"))
    assert recorded > switch  # recorded only after the health check passed


# -- one installer at a time --------------------------------------------------------------------

def test_a_second_install_while_one_runs_is_refused_and_changes_nothing(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    import os
    import time

    root, key, public = installed
    pem = _pem(public, tmp_path / "public.pem")
    first_bundle = _bundle(artifact, tmp_path / "v2.edgebundle", "2.0.0", key)
    second_bundle = _bundle(artifact, tmp_path / "v3.edgebundle", "3.0.0", key)
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom edgebuild.runtime.ota.bundle import load_public_key\n"
        "from edgebuild.runtime.ota.ota import install\n"
        "ready, go = Path(sys.argv[5]), Path(sys.argv[6])\n"
        "def wait(slot):\n    ready.touch()\n    deadline = time.time() + 120\n"
        "    while not go.exists() and time.time() < deadline:\n        time.sleep(0.05)\n"
        "install(Path(sys.argv[1]), Path(sys.argv[2]), load_public_key(Path(sys.argv[3])), root=Path(sys.argv[4]),\n"
        "        before_switch=wait)\n")
    first = subprocess.Popen([sys.executable, "-c", script, str(first_bundle), str(root), str(pem), str(device),
                              str(ready), str(go)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not ready.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the first install never reached its switch"
        before = sorted(p.name for p in (root / "versions").iterdir())
        code, out, _ = _device_tool("--root", str(device), "ota-install", str(second_bundle), "--install-root",
                                    str(root), "--public-key", str(pem))
        assert code == 16 and out["kind"] == "install root busy", out
        assert f"ota-install (pid {first.pid}) is installing or rolling back there" in out["message"]
        assert "changed nothing" in out["message"]
        code, out, _ = _device_tool("ota-rollback", "--install-root", str(root))
        assert code == 16 and f"pid {first.pid}" in out["message"]
        assert sorted(p.name for p in (root / "versions").iterdir()) == before == ["1.0.0", "2.0.0"]
        assert active_version(root) == "1.0.0"
    finally:
        go.touch()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert active_version(root) == "2.0.0"
    # the lock is free again
    assert install(second_bundle, root, public, root=device)["installed"] == "3.0.0"
    assert os.path.getsize(root / "ota.lock") == 0


# -- key formats --------------------------------------------------------------------------------

OPENSSL_KEYS = {
    "rsa-pkcs1": ["genrsa", "-traditional", "-out", "{out}", "2048"],
    "rsa-pkcs8": ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "{out}"],
    "ec-sec1": ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "{out}"],
    "ec-pkcs8": ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "{out}"],
}
OPENSSL_HEADERS = {"rsa-pkcs1": b"BEGIN RSA PRIVATE KEY", "rsa-pkcs8": b"BEGIN PRIVATE KEY",
                   "ec-sec1": b"BEGIN EC PRIVATE KEY", "ec-pkcs8": b"BEGIN PRIVATE KEY"}


def _openssl(*args: str) -> None:
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("form", list(OPENSSL_KEYS))
def test_bundles_signed_with_openssl_rsa_and_ec_keys_verify(tmp_path: Path, artifact: Path, device: Path,
                                                            form: str) -> None:
    from edgebuild.runtime.ota.bundle import load_verify_key
    from edgebuild.shipping.ota import load_bundle_key

    private = tmp_path / f"{form}.pem"
    _openssl(*[a.replace("{out}", str(private)) for a in OPENSSL_KEYS[form]])
    assert OPENSSL_HEADERS[form] in private.read_bytes()
    spki = tmp_path / "public.pem"
    _openssl("pkey", "-in", str(private), "-pubout", "-out", str(spki))
    public_files = [spki, private]  # a private key file works too, with a warning
    if form.startswith("rsa"):
        pkcs1 = tmp_path / "public-pkcs1.pem"
        _openssl("rsa", "-in", str(private), "-RSAPublicKey_out", "-out", str(pkcs1))
        assert b"BEGIN RSA PUBLIC KEY" in pkcs1.read_bytes()
        public_files.append(pkcs1)
    bundle = _bundle(artifact, tmp_path / "b.edgebundle", "1.0.0", load_bundle_key(private))
    fingerprints = set()
    for path in public_files:
        loaded = load_verify_key(path)
        assert loaded.type == ("rsa-2048" if form.startswith("rsa") else "ecdsa-p256")
        assert loaded.from_private_key == (path == private)
        fingerprints.add(loaded.fingerprint)
        assert verify(bundle, loaded.key, root=device)["_signed"]
    assert len(fingerprints) == 1  # the same key, whichever file it came from
    root = tmp_path / "models"
    code, out, err = _device_tool("--root", str(device), "ota-install", str(bundle), "--install-root", str(root),
                                  "--public-key", str(private))
    assert code == 0 and out["installed"] == "1.0.0", err
    assert out["key"]["file"] == str(private) and out["key"]["from_private_key"]
    assert "is a PRIVATE key; using its public half" in err


# -- the update module's rollback after a failed or a committed-not install ----------------------

def _module(tmp_path: Path, root: Path, public, device: Path):
    """A Mender-like driver of the update module: ``state(name, tree)`` with a fresh tree per artifact."""
    import os

    from edgebuild.datafiles import data_dir
    from edgebuild.devices.ssh import device_tool_archive

    tool = tmp_path / "edgebuild-device.pyz"
    tool.write_bytes(device_tool_archive())
    env = {**os.environ, "EDGEBUILD_DEVICE": str(tool), "EDGEBUILD_INSTALL_ROOT": str(root),
           "EDGEBUILD_PUBLIC_KEY": str(_pem(public, tmp_path / "public.pem")), "EDGEBUILD_DEVICE_ROOT": str(device),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    module = data_dir("docker") / "edgebuild-model.update-module"

    def state(name: str, tree: Path, **settings: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(module), name, str(tree)], capture_output=True, text=True,
                              env={**env, **settings})

    return state


def _tree(tmp_path: Path, artifact: Path, version: str, key, **options) -> Path:
    """Mender's module tree for one artifact (files/ holds the payload; no tmp/ yet)."""
    tree = tmp_path / f"tree-{version}"
    (tree / "files").mkdir(parents=True)
    _bundle(artifact, tree / "files" / f"tiny-{version}-dock.edgebundle", version, key, **options)
    return tree


def test_the_update_module_rolls_back_only_what_its_install_did(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    state = _module(tmp_path, root, public, device)
    for version in ("2.0.0", "3.0.0"):
        tree = _tree(tmp_path, artifact, version, key)
        assert state("ArtifactInstall", tree).returncode == 0 and state("ArtifactCommit", tree).returncode == 0
    assert active_version(root) == "3.0.0"
    # a refused bundle (older): ArtifactInstall fails, and the rollback Mender still calls changes nothing
    tree = _tree(tmp_path, artifact, "2.5.0", key)
    refused = state("ArtifactInstall", tree)
    assert refused.returncode == 15 and "older than version 3.0.0" in refused.stderr
    assert json.loads((tree / "tmp" / "edgebuild-state.json").read_text()) == {"previous": "3.0.0",
                                                                                "installed": None}
    back = state("ArtifactRollback", tree)
    assert back.returncode == 0, back.stderr
    assert "nothing to roll back" in back.stderr and active_version(root) == "3.0.0"  # not 2.0.0
    # a failed health check: ota-install rolled back itself; ArtifactRollback leaves 3.0.0 serving
    _, files = bundle_payload(artifact, None)
    files["reference.npz"] = b"not an npz"
    tree = tmp_path / "tree-bad"
    (tree / "files").mkdir(parents=True)
    _bundle(artifact, tree / "files" / "tiny-4.0.0-dock.edgebundle", "4.0.0", key, files=files)
    assert state("ArtifactInstall", tree).returncode == 15 and active_version(root) == "3.0.0"
    assert state("ArtifactRollback", tree).returncode == 0 and active_version(root) == "3.0.0"
    # an installed, not yet committed update rolled back: exactly the version before it
    tree = _tree(tmp_path, artifact, "4.0.0", key)
    assert state("ArtifactInstall", tree).returncode == 0 and active_version(root) == "4.0.0"
    assert state("ArtifactRollback", tree).returncode == 0 and active_version(root) == "3.0.0"
    assert json.loads((root / "installed.json").read_text())["version"] == "3.0.0"  # 4.0.0 may come again
    assert state("ArtifactRollback", tree).returncode == 0 and active_version(root) == "3.0.0"  # twice: a no-op
    # no state recorded at all (a tree whose install never ran): nothing to do, exit 0
    empty = tmp_path / "tree-empty"
    (empty / "files").mkdir(parents=True)
    back = state("ArtifactRollback", empty)
    assert back.returncode == 0 and "no install recorded" in back.stderr and active_version(root) == "3.0.0"


def test_the_update_module_allows_a_downgrade_only_when_its_setting_says_so(
        tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    state = _module(tmp_path, root, public, device)
    tree = _tree(tmp_path, artifact, "0.9.0", key)
    refused = state("ArtifactInstall", tree)
    assert refused.returncode == 15 and "EDGEBUILD_ALLOW_DOWNGRADE=1" in refused.stderr
    assert state("ArtifactInstall", tree, EDGEBUILD_ALLOW_DOWNGRADE="maybe").returncode == 1
    done = state("ArtifactInstall", tree, EDGEBUILD_ALLOW_DOWNGRADE="1")
    assert done.returncode == 0, done.stderr
    assert active_version(root) == "0.9.0"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["key"]["type"] == "ed25519" and out["key"]["file"].endswith("public.pem")


def test_the_first_install_rolled_back_leaves_no_version(tmp_path: Path, artifact: Path, device: Path) -> None:
    key, public = _keys()
    root = tmp_path / "models"
    state = _module(tmp_path, root, public, device)
    tree = _tree(tmp_path, artifact, "1.0.0", key)
    assert state("ArtifactInstall", tree).returncode == 0 and active_version(root) == "1.0.0"
    assert state("ArtifactRollback", tree).returncode == 0
    assert active_version(root) is None and not (root / "installed.json").exists()


def test_rollback_to_a_given_version(tmp_path: Path, artifact: Path, device: Path, installed) -> None:
    root, key, public = installed
    for version in ("2.0.0", "3.0.0"):
        install(_bundle(artifact, tmp_path / f"{version}.edgebundle", version, key), root, public, root=device)
    assert rollback(root, to="1.0.0") == {"active": "1.0.0", "was": "3.0.0", "changed": True}
    assert rollback(root, to="1.0.0") == {"active": "1.0.0", "was": "1.0.0", "changed": False}
    with pytest.raises(BundleError, match="no version 9.9.9 in .* to roll back to"):
        rollback(root, to="9.9.9")
    code, out, err = _device_tool("ota-rollback", "--install-root", str(root), "--to", "2.0.0")
    assert code == 0 and out["active"] == "2.0.0" and active_version(root) == "2.0.0", err
