"""The model's key covers every file the model is loaded from: its code, ``[model] weights``, and
each file the entry point itself read while it built the model (a checkpoint named in its code or
in an environment variable), recorded in the ModelRecord and hashed again by the next key."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from edgebuild.pipeline.runner import Options
from edgebuild.project.config import load_project
from edgebuild.sources.entry_point import (
    LastModelRun,
    TorchRunner,
    check_model,
    loaded_file_parts,
    model_key_parts,
    model_source_digest,
)
from edgebuild.stages import compile_work
from edgebuild.workflows.work import select_work
from tests.support.project import TINY_TOML, write_tiny_project

TORCHSCRIPT = TINY_TOML.replace("[accuracy]", '[export]\nexporter = "torchscript"\n\n[accuracy]')

LOADS_ITS_OWN = '''
import os
from pathlib import Path

import torch

from tinydet.model import TinyDetector

PROJECT = Path(__file__).resolve().parent.parent
CHECKPOINT = PROJECT / "checkpoints" / "best.pt"  # a path in code, as a training run leaves it


def from_checkpoint():
    model = TinyDetector()
    model.load_state_dict(torch.load(CHECKPOINT, map_location="cpu", weights_only=True))
    return model


def from_everywhere():
    """Reads what a model is made of, and what it is not: only the first kind is the model's."""
    model = from_checkpoint()
    (PROJECT / "labels.json").read_text()  # part of the model: under the project folder
    os.close(os.open(PROJECT / "anchors.bin", os.O_RDONLY))  # os.open counts too
    (PROJECT / "tinydet" / "model.py").read_text()  # Python source: model_source_digest hashes it
    (PROJECT / "build").mkdir(exist_ok=True)
    (PROJECT / "build" / "cache.bin").write_bytes(b"x")  # written, and in the build folder
    (PROJECT / "build" / "cache.bin").read_bytes()
    (PROJECT / ".cache").mkdir(exist_ok=True)
    (PROJECT / ".cache" / "hub.bin").write_bytes(b"x")
    (PROJECT / ".cache" / "hub.bin").read_bytes()  # a hidden folder: a library's cache
    (PROJECT / "written.log").open("w").close()  # opened for writing only
    Path(torch.__file__).with_name("py.typed").read_text()  # the installed torch: a version, not the model
    return model


def from_torchscript():
    return torch.jit.load(PROJECT / "checkpoints" / "scripted.pt")  # opened by C++, past the audit hook
'''


def _checkpoint(path: Path, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"conv.weight": torch.randn(6, 3, 3, 3, generator=generator),
                "conv.bias": torch.randn(6, generator=generator)}, path)


def _project(root: Path, entry: str = "from_checkpoint") -> Path:
    write_tiny_project(root, TORCHSCRIPT.replace("tinydet.model:build_model", f"tinydet.ckpt:{entry}"))
    (root / "tinydet" / "ckpt.py").write_text(LOADS_ITS_OWN)
    _checkpoint(root / "checkpoints" / "best.pt", seed=0)
    return root


def _run(root: Path, until: str) -> dict[str, tuple[str, str]]:
    """{stage: (ran or reused, why)} for ``until`` and the stages it reads."""
    done = compile_work(select_work(load_project(root), "orin"), until=until, options=Options(progress=False))
    assert all(o.error is None for o in done.stages), [o.error for o in done.stages]
    return {o.stage.name: (o.status, o.units[0].why) for o in done.stages}


def test_a_checkpoint_loaded_from_a_path_in_code_is_recorded_and_hashed_by_the_next_key(tmp_path: Path) -> None:
    root = _project(tmp_path)
    project = load_project(root)
    runner = TorchRunner(project)
    record = check_model(project, runner)
    best = root / "checkpoints" / "best.pt"
    assert record.loaded_files == runner.loaded_files == {"checkpoints/best.pt": _sha256(best)}

    assert loaded_file_parts(project, LastModelRun()) == {}  # no model stage run yet
    assert _run(root, "model")["model"][0] == "ran"
    stored = json.loads((root / "build" / ".records" / "model.json").read_text())["body"]
    assert stored["result"]["loaded_files"] == {"checkpoints/best.pt": _sha256(best)}
    last = LastModelRun(key_parts=stored["key_parts"], loaded_files=stored["result"]["loaded_files"])
    assert loaded_file_parts(project, last) == {}  # unchanged since it was loaded: the stored key stays valid

    _checkpoint(best, seed=1)  # retrained: the same name, other weights
    assert loaded_file_parts(project, last) == {"loaded:checkpoints/best.pt": _sha256(best)}
    best.unlink()
    assert loaded_file_parts(project, last) == {"loaded:checkpoints/best.pt": "missing"}
    # once in the stored key, a file's part stays there, with its hash now
    keyed = LastModelRun(key_parts={"loaded:checkpoints/best.pt": "old"}, loaded_files=last.loaded_files)
    _checkpoint(best, seed=0)
    assert loaded_file_parts(project, keyed) == {"loaded:checkpoints/best.pt": _sha256(best)}


def test_a_rewritten_checkpoint_reruns_model_reference_and_export_naming_it_and_nothing_else(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _run(root, "export") == {"model": ("ran", "no earlier run"), "export": ("ran", "no earlier run")}
    assert _run(root, "reference") == {"model": ("reused", "up to date"), "reference": ("ran", "no earlier run")}
    # the second compile reuses everything: the files the first run found are no reason to run again
    assert {s for s, _ in _run(root, "export").values()} == {"reused"}
    assert {s for s, _ in _run(root, "reference").values()} == {"reused"}

    _checkpoint(root / "checkpoints" / "best.pt", seed=1)
    why = "changed since the last run: loaded:checkpoints/best.pt"
    assert _run(root, "export") == {"model": ("ran", why), "export": ("ran", why)}
    assert _run(root, "reference") == {"model": ("reused", "up to date"), "reference": ("ran", why)}
    assert {s for s, _ in _run(root, "export").values()} == {"reused"}
    assert {s for s, _ in _run(root, "reference").values()} == {"reused"}

    _checkpoint(root / "checkpoints" / "best.pt", seed=0)  # and back: its part stays in the key
    assert _run(root, "export") == {"model": ("ran", why), "export": ("ran", why)}
    assert {s for s, _ in _run(root, "export").values()} == {"reused"}


def test_an_unrelated_file_does_not_change_the_key(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _run(root, "model")["model"][0] == "ran"
    project = load_project(root)
    key = model_key_parts(project)
    (root / "notes.txt").write_text("not read by the entry point\n")
    _checkpoint(root / "checkpoints" / "other.pt", seed=3)  # beside the checkpoint, never opened
    (root / "data" / "calibration" / "0.png").write_bytes(b"")  # the project's data: not the model
    assert model_key_parts(project) == key
    assert _run(root, "model")["model"] == ("reused", "up to date")


def test_only_the_models_files_are_recorded(tmp_path: Path) -> None:
    root = _project(tmp_path, "from_everywhere")
    (root / "labels.json").write_text('["a", "b"]')
    (root / "anchors.bin").write_bytes(b"\0" * 16)
    runner = TorchRunner(load_project(root))
    assert sorted(runner.loaded_files) == ["anchors.bin", "checkpoints/best.pt", "labels.json"]


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_a_torchscript_archive_opened_by_native_code_is_recorded(tmp_path: Path) -> None:
    root = _project(tmp_path, "from_torchscript")
    sys.path.insert(0, str(root))
    try:
        from tinydet.model import TinyDetector  # the project's own module, for its scripted copy

        torch.jit.script(TinyDetector()).save(str(root / "checkpoints" / "scripted.pt"))
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "tinydet" or n.startswith("tinydet.")]:
            del sys.modules[name]
    runner = TorchRunner(load_project(root))
    assert runner.loaded_files == {"checkpoints/scripted.pt": _sha256(root / "checkpoints" / "scripted.pt")}
    assert not hasattr(torch.jit.load, "_edgebuild_recorded")  # restored after the entry point ran


def test_an_entry_point_package_outside_python_path_is_hashed(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "project"
    root.mkdir()
    write_tiny_project(root, TINY_TOML.replace("tinydet.model:build_model", "outsidepkg.model:build_model"))
    package = tmp_path / "elsewhere" / "outsidepkg"  # e.g. installed in development mode
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text((root / "tinydet" / "model.py").read_text())
    monkeypatch.syspath_prepend(str(package.parent))
    project = load_project(root)
    before = model_source_digest(project)
    (package / "model.py").write_text((package / "model.py").read_text() + "\nWIDTH = 7\n")
    assert model_source_digest(project) != before
    assert "outsidepkg" not in sys.modules  # found, not imported


def test_an_entry_point_in_an_installed_distribution_counts_by_its_version(tmp_path: Path) -> None:
    import importlib.metadata

    from edgebuild.sources.entry_point import _outside_package_entries

    write_tiny_project(tmp_path, TINY_TOML.replace("tinydet.model:build_model", "torch.nn:Identity"))
    project = load_project(tmp_path)
    assert _outside_package_entries(project, [tmp_path]) == [f"torch: torch=={importlib.metadata.version('torch')}"]


@pytest.mark.parametrize("mode", ["w", "a", "r+"])
def test_files_opened_for_writing_are_not_recorded(tmp_path: Path, mode: str) -> None:
    from edgebuild.sources.entry_point import _files_opened

    target = tmp_path / "f.bin"
    target.write_bytes(b"x")
    with _files_opened() as opened:
        target.open(mode).close()
        fd = os.open(target, os.O_WRONLY)
        os.close(fd)
    assert str(target) not in opened
    with _files_opened() as opened:
        target.read_bytes()
    assert opened == [str(target)]


def _sha256(path: Path) -> str:
    from edgebuild.content import file_sha256

    return file_sha256(path)
