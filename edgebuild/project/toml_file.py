"""Reading an ``edgebuild.toml`` (a model project or a fleet file) and saying what is wrong with it.

Both kinds of file are found, read and reported the same way: a TOML syntax error with its line
and a caret, pydantic's errors as the keys the user wrote (with the keys allowed there and a close
match for a typo), every problem of a pass at once. ``config`` and ``fleet_file`` validate the
content; this module only reads it and words the problems.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from edgebuild._compat import tomllib
from edgebuild.errors import ConfigError
from edgebuild.project.schema import PROJECT_FILE, TASK_KINDS, DetectionTask, Project

__all__ = []


def find_project_file(location: str | Path) -> Path:
    """The edgebuild.toml at ``location`` (a folder or the file), or ConfigError saying what is there instead."""
    path = Path(location)
    if path.is_dir():
        path = path / PROJECT_FILE
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a project file", hint="remove the folder, or run `edgebuild init`")
    if not path.is_file():
        raise ConfigError(
            f"{path}: project file not found",
            hint="run `edgebuild init` to write a starter file, or pass --project DIR",
        )
    return path


def read_toml(source: Path) -> dict[str, Any]:
    """The TOML of a project or fleet file, or ConfigError saying why it cannot be read."""
    try:
        text = source.read_text(encoding="utf-8-sig")  # a UTF-8 BOM (Windows editors write one) is no TOML
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text: {exc}") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: a folder, not a project file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_toml_error(source, text, exc)) from None


_LISTS_OF_TABLES = {"fleet": "device group", "model.inputs": "model input", "streams": "stream"}


def _toml_error(source: Path, text: str, exc: Exception) -> str:
    """A TOML syntax error with its line: ``file: line N: not valid TOML: what`` and the line as written."""
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    if not found:
        return f"{source}: not valid TOML: {exc}"
    number, column = int(found.group(1)), int(found.group(2))
    lines = text.splitlines()
    what = str(exc)[:found.start()].strip()
    shown = lines[number - 1] if 0 < number <= len(lines) else ""
    hint = ""
    table = re.match(r"\s*\[\[?\s*([\w.]+)\s*\]", shown)
    if table and table.group(1) in _LISTS_OF_TABLES:
        name = table.group(1)
        hint = (f" ([{name}] is a list of tables, one per {_LISTS_OF_TABLES[name]}: write [[{name}]], two pairs of "
                "brackets, above each)")
    elif what.startswith("Cannot declare") or what.startswith("Cannot overwrite"):
        hint = " (a key or table written twice: keep one)"
    return (f"{source}: line {number}, column {column}: not valid TOML: {what}{hint}\n"
            f"    {number} | {shown}\n    {' ' * len(str(number))} | {' ' * max(0, column - 1)}^")


# -- pass 1: pydantic errors made readable ------------------------------------------------

def _key_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
        elif item in TASK_KINDS and parts and parts[-1] == "task":
            continue  # the discriminated-union branch is not a key the user wrote
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _allowed_keys(loc: tuple[Any, ...], raw: dict[str, Any], top: Any = Project) -> list[str]:
    model: Any = top
    node: Any = raw
    for item in loc[:-1]:
        if isinstance(item, int):
            node = node[item] if isinstance(node, list) and item < len(node) else {}
            continue
        if item in TASK_KINDS:
            model = TASK_KINDS[item][0]
            continue
        field = model.model_fields.get(str(item))
        node = node.get(item, {}) if isinstance(node, dict) else {}
        if field is None:
            return []
        model = _section_type(field.annotation, node)
        if model is None:
            return []
    # root and source are Project's own, set by the loader (a section's source, such as model.source, is a key)
    return [k for k in model.model_fields if model is not top or k not in ("root", "source")]


def _section_type(annotation: Any, node: Any) -> Any:
    for candidate in getattr(annotation, "__args__", ()) or (annotation,):
        inner = _section_type(candidate, node) if getattr(candidate, "__args__", None) else candidate
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            if issubclass(inner, tuple(section for section, _ in TASK_KINDS.values())):
                kind = node.get("kind") if isinstance(node, dict) else None
                return TASK_KINDS[kind][0] if kind in TASK_KINDS else DetectionTask
            return inner
    return None


def format_validation_error(source: Path, exc: ValidationError, raw: dict[str, Any], top: Any = Project) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        key = _key_path(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc, raw, top)
            lines.append(f"{key}: unknown key{_close_match(str(loc[-1]), allowed, loc, top)} "
                         f"(allowed here: {', '.join(allowed)})")
        elif kind == "list_type" and isinstance(err.get("input"), dict):
            table = key.split("[")[0]
            lines.append(f"{key}: written as one table [{table}]; it is a list of tables: write [[{table}]] (two "
                         f"pairs of brackets) above each entry's keys, one [[{table}]] per entry")
        elif kind in ("model_type", "dict_type", "model_attributes_type") and isinstance(err.get("input"), list):
            lines.append(f"{key}: written as a list of tables [[{key}]]; it is one table: write [{key}] (one pair "
                         "of brackets)")
        elif kind == "missing":
            lines.append(f"{key}: required key is missing")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            found = err["input"].get("kind") if isinstance(err.get("input"), dict) else err.get("input")
            kinds = [repr(kind) for kind in TASK_KINDS]
            lines.append(f"{key}: kind must be {', '.join(kinds[:-1])} or {kinds[-1]}, found {found!r}")
        else:
            message = err["msg"].removeprefix("Value error, ")
            found = err.get("input")
            if kind.startswith(("value_error", "assertion_error")) or isinstance(found, dict):
                lines.append(f"{key}: {message}")
            else:
                shown = repr(found)
                lines.append(f"{key}: {message}, found {shown if len(shown) <= 120 else shown[:117] + '...'}")
    return format_problems(source, lines)


def _close_match(name: str, allowed: list[str], loc: tuple[Any, ...], top: Any) -> str:
    """`` (did you mean 'x'?)`` for a typo, or where a top-level key belongs under a table; else ""."""
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.7)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if len(loc) == 1:  # a key written above every table, or in the wrong one
        homes = [section for section, field in top.model_fields.items()
                 if isinstance(getattr(field.annotation, "model_fields", None), dict)
                 and name in field.annotation.model_fields]
        if homes:
            return f" (a key of [{homes[0]}]: write it under that table)"
    return ""


def format_problems(source: Path, problems: list[str]) -> str:
    if len(problems) == 1:
        return f"{source}: {problems[0]}"
    return f"{source}: {len(problems)} problems\n" + "\n".join(f"  - {p}" for p in problems)
