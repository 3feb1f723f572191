"""The DLA as a placement: which accelerators a target has, and which layers of a graph the DLA would run.

A fleet group (or, in a fleet file, one model of a group) is placed on ``gpu``, ``dla0``, ``dla1``
or ``dla`` (either core: the device's runtime picks the one fewer models use). What is possible
comes from data, never from code: the module's ``dla_cores`` (``profiles/modules/*.toml``) and
whether the target's TensorRT runs the DLA at all (``[[availability]]`` of
``profiles/tensorrt/dla.toml``, each entry with its sources). Which ONNX operators the DLA runs is
that file's ``[onnx_ops]`` table; :func:`place_nodes` applies it to a graph, node by node, the way
TensorRT's GPU fallback does: a layer the DLA cannot run goes to the GPU, and what is constant at
build time (shape arithmetic on static shapes, constants) is folded away and runs nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from edgebuild.errors import ProfileDataError
from edgebuild.jsontypes import JsonObject
from edgebuild.targets.rules_files import read_rules, tensorrt_dir, version_matches, version_tuple

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.profiles import JetPackRelease, Module

__all__: list[str] = []

#: where a model runs: the GPU, one DLA core, or either DLA core (the runtime picks)
ACCELERATORS = ("gpu", "dla0", "dla1", "dla")
#: ``NodePlace.on``: on the DLA, on the GPU (a fallback), or folded at build time (runs nowhere)
ON_DLA, ON_GPU, AT_BUILD = "dla", "gpu", "build"
#: standard ONNX domains (a node of another domain is a plugin: it runs on the GPU)
_STANDARD = ("", "ai.onnx")


def uses_dla(accelerator: str) -> bool:
    return accelerator != "gpu"


def build_core(accelerator: str) -> int | None:
    """The DLA core an engine is built for: dla1 -> 1, dla0 and dla (either) -> 0, gpu -> None.

    A DLA engine runs on whichever core the runtime deserializes it onto (``IRuntime.DLA_core``),
    so "either core" is built once, on core 0, and placed when the device opens it.
    """
    if not uses_dla(accelerator):
        return None
    return 1 if accelerator == "dla1" else 0


@lru_cache(maxsize=1)
def dla_table() -> JsonObject:
    return read_rules(tensorrt_dir() / "dla.toml")


@dataclass(frozen=True)
class DlaSupport:
    """Whether one TensorRT release runs the DLA on a Jetson (an ``[[availability]]`` entry of dla.toml)."""

    available: bool
    label: str
    why: str
    unconfirmed: bool
    modules: tuple[str, ...]  # the only modules it runs the DLA on; empty: every module with DLA cores
    sources: tuple[str, ...]


def dla_support(tensorrt: str) -> DlaSupport:
    for entry in dla_table().get("availability", []):
        if version_matches(tensorrt, entry["tensorrt"]):
            return DlaSupport(bool(entry["dla"]), entry["label"], entry["why"], bool(entry.get("unconfirmed")),
                              tuple(entry.get("modules", ())), tuple(entry.get("sources", ())))
    raise ProfileDataError(f"profiles/tensorrt/dla.toml: no [[availability]] entry matches TensorRT {tensorrt}")


def _releases_with_dla() -> str:
    return "; ".join(e["label"] for e in dla_table().get("availability", []) if e["dla"])


def accelerator_problem(accelerator: str, module: Module, release: JetPackRelease) -> str | None:
    """Why ``accelerator`` is impossible on ``module`` with ``release``'s TensorRT, and what to do; else None."""
    if not uses_dla(accelerator):
        return None
    if module.dla_cores == 0:
        return f"{module.name} has no DLA cores; place it on the GPU (accelerator = \"gpu\")"
    doubt = " (dla_cores unconfirmed for this module)" if "dla_cores" in module.unconfirmed else ""
    if accelerator == "dla1" and module.dla_cores < 2:
        return (f"{module.name} has {module.dla_cores} DLA core{doubt}, so there is no dla1; "
                "use accelerator = \"dla0\" (or \"dla\")")
    support = dla_support(release.tensorrt)
    where = f"TensorRT {release.tensorrt} (JetPack {release.jetpack})"
    if not support.available:
        sure = "UNCONFIRMED: " if support.unconfirmed else ""
        return (f"{where} runs no DLA ({sure}{support.why}; profiles/tensorrt/dla.toml); place it on the GPU, or "
                f"target a JetPack whose TensorRT runs the DLA: {_releases_with_dla()}")
    if support.modules and module.id not in support.modules:
        return (f"{where} runs the DLA only on {', '.join(support.modules)}, not on {module.name} "
                f"({support.why}); place it on the GPU or target another JetPack: {_releases_with_dla()}")
    return None


@dataclass(frozen=True)
class NodePlace:
    """Where one ONNX node runs in a DLA engine with GPU fallback, and why."""

    index: int
    name: str
    op_type: str
    on: str  # ON_DLA | ON_GPU | AT_BUILD
    why: str  # for a GPU node: the rule that keeps it off the DLA
    source: str


def place_nodes(model: onnx.ModelProto, tensorrt: str) -> list[NodePlace]:
    """Every node of ``model`` placed by the DLA rules of TensorRT ``tensorrt`` (dla.toml's ``[onnx_ops]``).

    A node whose every input is known at build time (initializers, constants, the static shapes
    the DLA needs anyway) is folded; so are Constant and Identity. An operator that the table marks
    runnable from a later TensorRT (``since``) falls back on an earlier one.
    """
    table = dla_table()
    ops = table.get("onnx_ops", {})
    default_source = table.get("source", "dla.toml")
    known = {i.name for i in model.graph.initializer}
    places = []
    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        entry = ops.get(node.op_type) if node.domain in _STANDARD else None
        source = entry.get("source", default_source) if entry else default_source
        inputs = [i for i in node.input if i]
        if node.op_type in ("Constant", "Identity") or _built(entry) or (inputs and all(i in known for i in inputs)):
            known.update(node.output)
            places.append(NodePlace(index, name, node.op_type, AT_BUILD, "folded at build time", source))
            continue
        if node.domain not in _STANDARD:
            why = f"a custom operator (domain {node.domain!r}): a TensorRT plugin, which runs on the GPU"
        elif entry is None:
            why = "not in the DLA supported-layer list"
        elif not entry.get("dla", False):
            why = "; ".join(entry.get("restrictions", [])) or "the DLA does not run it"
        elif "since" in entry and version_tuple(tensorrt) < version_tuple(entry["since"]):
            why = f"the DLA runs it from TensorRT {entry['since']} on (this target has {tensorrt})"
        else:
            places.append(NodePlace(index, name, node.op_type, ON_DLA, "", source))
            continue
        places.append(NodePlace(index, name, node.op_type, ON_GPU, why, source))
    return places


def _built(entry: JsonObject | None) -> bool:
    """An operator TensorRT resolves at build time when shapes are static (dla.toml: 'Can be inferred at build
    time', such as Shape and ConstantOfShape)."""
    return entry is not None and any("inferred at build time" in r for r in entry.get("restrictions", [])[:1])
