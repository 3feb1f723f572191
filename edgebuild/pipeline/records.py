"""Stage records: what each stage run leaves in ``build/.records/<stage>[/<group>].json``.

A record holds the stage's key parts, the files it vouches for (size, mtime, sha256) and its
typed result. It is written last, in one rename, and carries a checksum of its own body, so a
record that was cut short, edited by hand, written by another edgebuild or for another project
is never trusted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgebuild import __version__
from edgebuild.content import changed_parts, digest, file_sha256
from edgebuild.jsontypes import JsonObject
from edgebuild.project.layout import BuildLayout
from edgebuild.runtime.base.files import atomic_write_text

__all__ = ["load_stage_record"]

RECORD_FORMAT = "edgebuild.stage-record/1"


@dataclass(frozen=True)
class FileStamp:
    """What a record remembers of an output file: cheap stat first, the hash when the stat moved."""

    sha256: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileStamp:
        stat = path.stat()
        return cls(file_sha256(path), stat.st_size, stat.st_mtime_ns)

    def matches(self, path: Path) -> bool:
        try:
            stat = path.stat()
        except OSError:
            return False
        if stat.st_size != self.size:
            return False
        return stat.st_mtime_ns == self.mtime_ns or file_sha256(path) == self.sha256


@dataclass(frozen=True)
class StageRecord:
    """One stage run as stored: what went in (key parts), what came out (files, result)."""

    stage: str  # "export", or "engine/<group>" for a per-group stage
    project: str
    key_parts: dict[str, str]
    outputs: dict[str, FileStamp]  # path relative to the build folder -> stamp
    result: JsonObject  # the stage's typed record, as its to_dict() wrote it

    def body(self) -> JsonObject:
        return {"stage": self.stage, "project": self.project, "edgebuild": __version__,
                "key_parts": self.key_parts, "result": self.result,
                "outputs": {k: vars(v) for k, v in sorted(self.outputs.items())}}


def record_path(build_dir: Path, stage: str) -> Path:
    return BuildLayout(build_dir).record(stage)


def stamp_outputs(build_dir: Path, paths: list[Path]) -> dict[str, FileStamp]:
    """Stamps of every file in ``paths`` (folders are walked), keyed relative to the build folder."""
    stamps = {}
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            stamps[str(file.relative_to(build_dir))] = FileStamp.of(file)
    return stamps


def write_stage_record(build_dir: Path, record: StageRecord) -> Path:
    """Write a stage record in one rename; a run killed before this leaves the previous record."""
    body = record.body()
    path = record_path(build_dir, record.stage)
    atomic_write_text(path, json.dumps({"format": RECORD_FORMAT, "sha256": digest(body), "body": body}, indent=1))
    return path


def stale_because(build_dir: Path, stored: StageRecord, key_parts: dict[str, str]) -> str | None:
    """Why a trusted stored record (``load_stage_record``) is not up to date, or None when it is.

    Cheapest check first: same key parts, then output files intact.
    """
    changed = changed_parts(stored.key_parts, key_parts)
    if changed:
        return f"changed since the last run: {', '.join(changed)}"
    broken = [name for name, stamp in stored.outputs.items() if not stamp.matches(build_dir / name)]
    if broken:
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
        return f"output files missing or modified: {shown}"
    return None


def load_stage_record(build_dir: Path, stage: str, project: str) -> tuple[StageRecord | None, str]:
    """The stored record of ``stage`` whatever its key, if it is intact and ours; else None and why."""
    path = record_path(build_dir, stage)
    if not path.is_file():
        return None, "no earlier run"
    try:
        stored = json.loads(path.read_text())
        body = stored["body"]
        if stored.get("format") != RECORD_FORMAT:
            return None, f"record {path.name} has format {stored.get('format')!r}, not {RECORD_FORMAT}"
        if stored.get("sha256") != digest(body):
            return None, f"record {path} was modified outside edgebuild (checksum differs)"
        if body["edgebuild"] != __version__:
            return None, f"record written by edgebuild {body['edgebuild']}, this is {__version__}"
        if body["project"] != project or body["stage"] != stage:
            return None, f"record is for project {body['project']!r} stage {body['stage']!r}"
        record = StageRecord(stage=body["stage"], project=body["project"], key_parts=dict(body["key_parts"]),
                             outputs={k: FileStamp(**v) for k, v in body["outputs"].items()},
                             result=dict(body["result"]))
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        return None, f"record {path.name} unreadable ({type(exc).__name__}: {exc})"
    return record, "intact"


