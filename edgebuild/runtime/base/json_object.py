"""The type of a JSON object as the device side reads and writes it (manifests, records, results).

The build side's ``edgebuild.jsontypes`` says the same, but the device code may not import it
(it is a layer above, and written for Python 3.10): this is its Python 3.8 twin. ``Any`` stays
for the values, which a reader checks as it reads them.
"""

# ruff: noqa: UP006, UP035
# (typing.Dict on purpose: this alias is evaluated on the device's Python 3.8)

from typing import Any, Dict

__all__: list = []  # used by the runtime's modules only, the same layer

#: a parsed (or to-be-written) JSON object: ``json.loads`` of an object, a record's ``as_dict()``
JsonObject = Dict[str, Any]
