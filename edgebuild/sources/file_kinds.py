"""What a model file's bytes are, told without loading it: ONNX, an Ultralytics checkpoint, TorchScript, another
zip or pickle; or empty, truncated, a folder. Messages about a model file say it in these words."""

from __future__ import annotations

import zipfile
from pathlib import Path

__all__ = []

KIND_WORDS = {"onnx": "an ONNX model", "ultralytics": "an Ultralytics checkpoint", "torchscript": "a TorchScript file",
              "zip": "a zip archive (a PyTorch checkpoint?)", "pickle": "a Python pickle (a PyTorch checkpoint?)"}


def content_kind(path: Path) -> tuple[str, str]:
    """What a model file's bytes are: (``"onnx"``, ``"ultralytics"``, ``"torchscript"``, ``"zip"``,
    ``"pickle"``, ``"empty"``, ``"truncated"``, ``"folder"``, ``"missing"`` or ``"unknown"``, in words)."""
    if path.is_dir():
        return "folder", f"{path} is a folder, not a model file"
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as exc:
        return "missing", f"cannot read {path}: {exc.strerror or exc}"
    if size == 0:
        return "empty", f"{path.name} is empty (0 bytes): a download or copy that failed?"
    if head == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
        except (OSError, zipfile.BadZipFile):
            return "truncated", (f"{path.name} is a truncated or damaged zip archive ({size:,} bytes; its table of "
                                 "contents at the end is missing): a download or copy that did not finish?")
        from edgebuild.project.config import is_torchscript_archive
        from edgebuild.project.ultralytics_facts import facts_from_checkpoint

        if is_torchscript_archive(path):
            return "torchscript", KIND_WORDS["torchscript"]
        if facts_from_checkpoint(path) is not None:
            return "ultralytics", KIND_WORDS["ultralytics"]
        return "zip", KIND_WORDS["zip"]
    if head[:1] == b"\x80":
        return "pickle", KIND_WORDS["pickle"]
    if len(head) > 1 and head[0] == 0x08 and 0 < head[1] < 64:  # a ModelProto starts with ir_version (field 1)
        return "onnx", KIND_WORDS["onnx"]
    return "unknown", "neither ONNX, a zip archive nor a pickle by its first bytes"
