"""The type of a JSON object as edgebuild reads and writes it (records, results, settings files).

Annotations keep ``Any`` only for values that really are anything (a user's callable, what a
third-party library hands back untyped). A JSON object, whose values a reader checks as it
reads them, is :data:`JsonObject`: the one place the package says "a parsed JSON object".
"""

from __future__ import annotations

from typing import Any

__all__ = ["JsonObject"]

#: a parsed (or to-be-written) JSON object: ``json.loads`` of an object, a record's ``as_dict()``
JsonObject = dict[str, Any]
