"""Semantic versions (semver.org 2.0.0): parse ``MAJOR.MINOR.PATCH[-prerelease][+build]`` and order them.

The OTA installer refuses a bundle that is not newer than what the device installed, so the
order must be the one semver.org §11 defines: numbers compared as numbers; a pre-release sorts
before its release; pre-release identifiers compared one by one, numeric ones as numbers and
below alphanumeric ones, which compare in ASCII order; a longer list of equal leading
identifiers sorts after a shorter one. Build metadata does not take part in the order.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import re
from typing import Optional, Tuple, Union

__all__ = []

_NUMBER = r"(?:0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    r"^(?P<major>{n})\.(?P<minor>{n})\.(?P<patch>{n})"
    r"(?:-(?P<pre>{p}(?:\.{p})*))?"
    r"(?:\+(?P<build>[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$".format(n=_NUMBER, p=_PRE_ID))

Identifier = Tuple[int, Union[int, str]]  # (0, number) sorts below (1, text), as §11.4.3 says
Key = Tuple[int, int, int, int, Tuple[Identifier, ...]]


def parse(version: str) -> Optional[Key]:
    """A sort key for a semantic version, or None when ``version`` is not one."""
    match = _SEMVER.match(version) if isinstance(version, str) else None
    if match is None:
        return None
    pre = match.group("pre")
    identifiers = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ()
    # a release (no pre-release) sorts after every pre-release of the same MAJOR.MINOR.PATCH
    return (int(match.group("major")), int(match.group("minor")), int(match.group("patch")),
            0 if identifiers else 1, identifiers)


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` precedes, equals or follows ``b``; ValueError if either is not semver."""
    key_a, key_b = _key(a), _key(b)
    return (key_a > key_b) - (key_a < key_b)


def _key(version: str) -> Key:
    """``version``'s sort key; ValueError when it is not semver."""
    key = parse(version)
    if key is None:
        raise ValueError("{!r} is not a semantic version (MAJOR.MINOR.PATCH[-prerelease][+build])".format(version))
    return key
