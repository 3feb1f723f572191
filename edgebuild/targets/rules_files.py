"""Reading the rule files under ``profiles/tensorrt/`` and matching their TensorRT version specifiers.

Shared by the parser preflight (``edgebuild.targets.preflight``) and the DLA rules
(``edgebuild.targets.dla``), so neither imports the other for them.
"""

from __future__ import annotations

import operator
import re
from pathlib import Path

from edgebuild._compat import tomllib
from edgebuild.datafiles import data_dir
from edgebuild.errors import ProfileDataError
from edgebuild.jsontypes import JsonObject

__all__ = []


def tensorrt_dir() -> Path:
    return data_dir("profiles") / "tensorrt"


def read_rules(path: Path) -> JsonObject:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileDataError(f"{path}: {exc}") from None


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def version_matches(version: str, spec: str) -> bool:
    """``"10.3.0.30"`` against ``">=10.0,<10.9"``; an empty spec matches every version."""
    have = version_tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.fullmatch(r"(<=|>=|==|<|>)\s*([\d.]+)", clause)
        if not match:
            raise ProfileDataError(f"profiles/tensorrt: bad version specifier {clause!r}")
        want = version_tuple(match.group(2))
        if not _OPS[match.group(1)](have[: len(want)], want):
            return False
    return True
