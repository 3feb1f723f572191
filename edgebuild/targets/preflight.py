"""Preflight: every ONNX node checked against each target's TensorRT ONNX parser.

What a target's TensorRT can parse lives in data files under ``profiles/tensorrt/``:
``onnx-parser-<major.minor>.toml`` (onnx-tensorrt's operators.md of that release),
``known-restrictions.toml`` (attribute-, equation- and constant-level limits) and ``dla.toml``
(what the DLA can run). This module only reads them: no operator table lives in code.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.errors import ExportError, ProfileDataError
from edgebuild.jsontypes import JsonObject
from edgebuild.targets.dla import uses_dla
from edgebuild.targets.rules_files import read_rules as _read_toml
from edgebuild.targets.rules_files import tensorrt_dir as _tensorrt_dir
from edgebuild.targets.rules_files import version_matches
from edgebuild.targets.rules_files import version_tuple as _version

if TYPE_CHECKING:
    import onnx

    from edgebuild.targets.profiles import JetPackRelease, SelectedGroup

__all__ = ["Finding", "TargetPreflight", "check_target", "load_graph", "preflight", "preflight_text", "rules_digest"]

STANDARD_DOMAINS = ("", "ai.onnx")
BLOCKING, WARNING, DLA_FALLBACK = "blocking", "warning", "dla-fallback"


@dataclass(frozen=True)
class Finding:
    node: str
    op_type: str
    severity: str  # blocking | warning | dla-fallback
    problem: str
    fix: str
    source: str = ""


@dataclass(frozen=True)
class TargetPreflight:
    group: str
    target: str
    tensorrt: str
    parser_table: str
    findings: tuple[Finding, ...]

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == BLOCKING]

    def rejection(self) -> str:
        """The gate's one line of why this target's TensorRT would reject the graph ("": it would not)."""
        if not self.blocking:
            return ""
        first = self.blocking[0]
        return (f"{self.group} (TensorRT {self.tensorrt}): {len(self.blocking)} node(s), e.g. {first.node}: "
                f"{first.problem}")

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["blocking"] = len(self.blocking)
        return data

    @classmethod
    def from_dict(cls, data: JsonObject) -> TargetPreflight:
        return cls(data["group"], data["target"], data["tensorrt"], data["parser_table"],
                   tuple(Finding(**f) for f in data["findings"]))


# -- data files ----------------------------------------------------------------------------

@lru_cache(maxsize=16)
def rules_digest() -> str:
    """Content hash of every rule preflight applies (the parser tables and known restrictions)."""
    from edgebuild.content import tree_sha256

    return tree_sha256(_tensorrt_dir(), "*.toml")


def parser_table(tensorrt_version: str) -> JsonObject:
    """The operator table of the TensorRT release ``major.minor`` of ``tensorrt_version``."""
    major_minor = ".".join(tensorrt_version.split(".")[:2])
    path = _tensorrt_dir() / f"onnx-parser-{major_minor}.toml"
    if not path.is_file():
        known = sorted(p.stem.removeprefix("onnx-parser-") for p in _tensorrt_dir().glob("onnx-parser-*.toml"))
        raise ProfileDataError(
            f"{path}: no ONNX parser table for TensorRT {major_minor} (tables: {', '.join(known)})"
        )
    table = _read_toml(path)
    table["_path"] = path.name
    return table


@lru_cache(maxsize=1)
def restrictions() -> JsonObject:
    return _read_toml(_tensorrt_dir() / "known-restrictions.toml")


# -- the ONNX side -------------------------------------------------------------------------

def load_graph(path: Path) -> onnx.ModelProto:
    """The model's structure (external weights are not loaded), with inferred value types."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # DecodeError and friends: a truncated or foreign file
        raise ExportError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # preflight still works on the un-inferred graph; INT64 checks see less
        return model


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), 0)


def _attribute(node: onnx.NodeProto, name: str) -> Any:
    import onnx

    for attr in node.attribute:
        if attr.name == name:
            value = onnx.helper.get_attribute_value(attr)
            return value.decode() if isinstance(value, bytes) else value
    return None


def _constant_value(model: onnx.ModelProto, name: str) -> list[float] | None:
    import onnx.numpy_helper

    for init in model.graph.initializer:
        if init.name == name and init.data_location != onnx.TensorProto.EXTERNAL:
            return onnx.numpy_helper.to_array(init).ravel().tolist()
    for node in model.graph.node:
        if node.op_type == "Constant" and name in node.output:
            value = _attribute(node, "value")
            return onnx.numpy_helper.to_array(value).ravel().tolist() if value is not None else None
    return None


def _rank(model: onnx.ModelProto, name: str) -> int | None:
    """The rank the graph declares or shape inference found for ``name``, None where unknown."""
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.name == name and value.type.tensor_type.HasField("shape"):
            return len(value.type.tensor_type.shape.dim)
    return None


def _rule_hits(rule: JsonObject, node: onnx.NodeProto, model: onnx.ModelProto, types: dict[str, str]) -> bool:
    if "input_type" in rule and (not node.input or types.get(node.input[0]) != rule["input_type"]):
        return False
    if rule.get("always"):
        return True
    if "input_rank_not_in" in rule:
        rank = _rank(model, node.input[0]) if node.input else None
        return rank is not None and rank not in rule["input_rank_not_in"]
    if "axis_not_in_last" in rule:
        rank, axis = (_rank(model, node.input[0]) if node.input else None), _attribute(node, "axis")
        return rank is not None and axis is not None and not rank - rule["axis_not_in_last"] <= axis % rank
    if "scalar_constant_input" in rule:
        index = rule["scalar_constant_input"]
        values = _constant_value(model, node.input[index]) if len(node.input) > index else None
        return values is None or len(values) != 1
    if "attribute_not_in" in rule:
        cond = rule["attribute_not_in"]
        value = _attribute(node, cond["name"])
        return value is not None and value not in cond["values"]
    if "equation_matches" in rule:
        return re.search(rule["equation_matches"], _attribute(node, "equation") or "") is not None
    if rule.get("einsum_repeated_index"):
        terms = (_attribute(node, "equation") or "").replace(" ", "").split("->")[0].split(",")
        return any(len(set(t.replace("...", ""))) < len(t.replace("...", "")) for t in terms)
    if "opset_at_least" in rule:
        return default_opset(model) >= rule["opset_at_least"]
    if rule.get("zero_point_nonzero"):
        if len(node.input) < 3 or not node.input[2]:
            return False
        values = _constant_value(model, node.input[2])
        return values is not None and any(v != 0 for v in values)
    if rule.get("per_channel_on_activation"):
        scale = _constant_value(model, node.input[1]) if len(node.input) > 1 else None
        return scale is not None and len(scale) > 1 and not _is_weight(model, node.input[0])
    if "input_not_constant" in rule:
        index = rule["input_not_constant"]["index"]
        return len(node.input) > index and bool(node.input[index]) and _constant_value(model, node.input[index]) is None
    if "constant_input_above" in rule:
        cond = rule["constant_input_above"]
        if len(node.input) <= cond["index"]:
            return False
        values = _constant_value(model, node.input[cond["index"]])
        return values is not None and bool(values) and max(values) > cond["limit"]
    raise ProfileDataError(f"known-restrictions.toml: rule {rule.get('id')!r} has no condition edgebuild knows")


def _is_weight(model: onnx.ModelProto, name: str) -> bool:
    """A constant, or a constant through QuantizeLinear (Q -> DQ on a weight, which TensorRT folds)."""
    if any(i.name == name for i in model.graph.initializer) or _constant_value(model, name) is not None:
        return True
    producer = next((n for n in model.graph.node if name in n.output), None)
    return producer is not None and producer.op_type == "QuantizeLinear" and _is_weight(model, producer.input[0])


#: ONNX element types by the names the parser tables use
_TRT_TYPE_NAMES = {1: "FP32", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "FP16", 11: "FP64",
                   16: "BF16", 17: "FP8", 18: "FP8", 19: "FP8", 20: "FP8", 22: "INT4", 23: "FP4"}
_INDEX_TYPES = frozenset({"INT32", "INT64", "BOOL"})


def tensor_types(model: onnx.ModelProto) -> dict[str, str]:
    """Every tensor's element type the graph declares or shape inference found, as the tables name it."""
    types: dict[str, str] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.tensor_type.elem_type:
            types[value.name] = _TRT_TYPE_NAMES.get(value.type.tensor_type.elem_type, "OTHER")
    for init in model.graph.initializer:
        types[init.name] = _TRT_TYPE_NAMES.get(init.data_type, "OTHER")
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            value = _attribute(node, "value")
            if value is not None:
                types[node.output[0]] = _TRT_TYPE_NAMES.get(value.data_type, "OTHER")
    return types


def _dtype_finding(name: str, node: onnx.NodeProto, entry: JsonObject, found: str | None, release: Any,
                   settings: JsonObject) -> Finding | None:
    """The node's data input against the op's Supported Types column, or None when it fits (or is unknown)."""
    aliases = settings.get("aliases", {})
    listed = {aliases.get(t, t) for t in entry.get("dtypes", []) if t.isupper() and " " not in t}
    if not listed or found is None or node.op_type in settings.get("shape_input", []):
        return None
    if found == "INT64" and _version(release.tensorrt) < _version(settings.get("int64_as_int32_before", "0")):
        found = "INT32"  # cast down by the 8.x parser (the [int64] warning says so)
    if found in listed:
        return None
    strict = node.op_type in settings.get("strict", [])
    severity = WARNING if not strict and found in _INDEX_TYPES else BLOCKING
    return Finding(name, node.op_type, severity,
                   f"{node.op_type} reads {found}; TensorRT {release.tensorrt}'s parser takes "
                   f"{', '.join(sorted(listed))} for it",
                   "cast the input to a supported type in the model" if not strict else
                   "quantize to signed INT8 with zero point 0 and keep biases in float "
                   "(edgebuild's INT8 candidates do)", settings.get("source", ""))


def _int64_tensors(model: onnx.ModelProto) -> list[str]:
    import onnx

    int64 = onnx.TensorProto.INT64
    names = [i.name for i in model.graph.initializer if i.data_type == int64]
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.tensor_type.elem_type == int64:
            names.append(value.name)
    return names


# -- checking ------------------------------------------------------------------------------

def check_target(model: onnx.ModelProto, group: SelectedGroup, precision: str | None = None) -> TargetPreflight:
    """Every finding of ``model`` for ``group``'s target. ``precision``: the candidate precision the graph is
    built at (a gate candidate's: fp8 of an FP8 candidate), else the lowest the graph carries (its Q/DQ types,
    its FP16 tensors); the layouts the target's TensorRT would build in a wider type are refused for it."""
    release = group.target.release
    table = parser_table(release.tensorrt)
    operators = table.get("operators", {})
    rules = restrictions()
    parser_source: str = table["source"] if "source" in table else table["_path"]
    findings: list[Finding] = []

    types = tensor_types(model)
    dtype_settings = rules.get("dtypes", {})
    opset = default_opset(model)
    if not table["min_opset"] <= opset <= table["max_opset"]:
        findings.append(Finding(
            "(model)", "opset", BLOCKING,
            f"the model imports ONNX opset {opset}; TensorRT {release.tensorrt}'s parser takes opsets "
            f"{table['min_opset']}..{table['max_opset']}",
            f"export at opset {min(table['max_opset'], max(opset, table['min_opset']))} (export.opset)",
            parser_source))

    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        native = rules.get("parser_custom_ops", {}).get(node.op_type)  # a TRT_* op the parser imports itself
        native = native is not None and version_matches(release.tensorrt, native["tensorrt"])
        if node.domain not in STANDARD_DOMAINS and not native:
            custom = rules["custom_domain"]
            findings.append(Finding(name, node.op_type, custom["severity"],
                                    custom["problem"].format(domain=node.domain), custom["fix"], custom["source"]))
            continue
        entry = operators.get(node.op_type)
        if native:
            pass
        elif entry is None or not entry.get("supported", False):
            findings.append(_unsupported(name, node.op_type, entry is not None, release, opset, parser_source, rules))
        elif node.input:
            typed = _dtype_finding(name, node, entry, types.get(node.input[0]), release, dtype_settings)
            if typed is not None:
                findings.append(typed)
        for rule in rules.get("rule", []):
            if rule["op"] == node.op_type and version_matches(release.tensorrt, rule["tensorrt"]) \
                    and _rule_hits(rule, node, model, types):
                findings.append(Finding(name, node.op_type, rule["severity"], rule["problem"], rule["fix"],
                                        rule["source"]))

    int64_rule = rules.get("int64")
    if int64_rule and version_matches(release.tensorrt, int64_rule["tensorrt"]):
        tensors = _int64_tensors(model)
        if tensors:
            shown = ", ".join(tensors[:5]) + (f" and {len(tensors) - 5} more" if len(tensors) > 5 else "")
            findings.append(Finding(f"({len(tensors)} tensors: {shown})", "INT64", int64_rule["severity"],
                                    int64_rule["problem"], int64_rule["fix"], int64_rule["source"]))

    typed_rule = rules.get("strongly_typed")  # TensorRT 11+: the ONNX alone sets the precision
    if typed_rule and version_matches(release.tensorrt, typed_rule["tensorrt"]) \
            and not _carries_precision(model, types):
        findings.append(Finding("(model)", "precision", typed_rule["severity"],
                                typed_rule["problem"].format(tensorrt=release.tensorrt), typed_rule["fix"],
                                typed_rule["source"]))

    findings += _precision_findings(model, types, group, precision)
    if uses_dla(group.accelerator) and group.target.module.dla_cores > 0:
        findings += _dla_fallbacks(model, release.tensorrt)
    return TargetPreflight(group.name, group.target.id, release.tensorrt, table["_path"], tuple(findings))


def _precision_findings(model: onnx.ModelProto, types: dict[str, str], group: SelectedGroup,
                        precision: str | None) -> list[Finding]:
    """The module's and TensorRT's refusal of the precision, and the silent wider-type layouts the graph has
    (``edgebuild.targets.precision_layouts``, profiles/tensorrt/silent-fallbacks.toml)."""
    from edgebuild.targets.precision_layouts import (
        graph_precision,
        precision_refusal,
        requirement_source,
        silent_fallbacks,
    )

    release, module = group.target.release, group.target.module
    claimed = precision or graph_precision(model, types)
    findings = []
    why = precision_refusal(claimed, module.compute_capability, release.tensorrt, module.name)
    if why:
        findings.append(Finding("(model)", "precision", BLOCKING, f"{claimed} candidate: {why}",
                                "build this group from an INT8, FP16 or FP32 candidate (quantize.precisions)",
                                requirement_source(claimed)))
    for node, op_type, case in silent_fallbacks(model, types, release.tensorrt, claimed):
        findings.append(Finding(node, op_type, BLOCKING,
                                f"{case['problem']} [{case['id']}: TensorRT {release.tensorrt} builds {case['builds']} "
                                f"for a {claimed} candidate]", case["fix"], case["source"]))
    return findings


def _carries_precision(model: onnx.ModelProto, types: dict[str, str]) -> bool:
    """Whether the graph itself is reduced precision: Q/DQ nodes (INT8) or FP16/BF16 tensors."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node) \
        or any(t in ("FP16", "BF16") for t in types.values())


def _unsupported(name: str, op_type: str, listed: bool, release: JetPackRelease, opset: int, parser_source: str,
                 rules: JsonObject) -> Finding:
    """A node the parser has no importer for, with the fixes that exist: a lower opset, a later TensorRT."""
    later = _first_supporting_release(op_type)
    fixes = []
    decomposed = rules.get("decomposed_below", {}).get(op_type)
    if decomposed and opset >= decomposed["since_opset"]:
        fixes.append(decomposed["fix"])
        parser_source = f"{parser_source}; {decomposed['source']}"
    if later:
        fixes.append(f"TensorRT {later} supports it: target a JetPack with it{_jetpacks_with(later)}")
    instead = rules.get("unsupported_instead", {}).get(op_type)
    if instead:  # what the models that use it can do (RT-DETR's GridSample)
        fixes.append(instead["fix"])
        parser_source = f"{parser_source}; {instead['source']}"
    fixes.append("rewrite this part of the model with supported operators")
    return Finding(
        name, op_type, BLOCKING,
        f"{op_type} is {'marked unsupported in' if listed else 'not in'} the operator table of TensorRT "
        f"{release.tensorrt}'s ONNX parser",
        "; or ".join(fixes), parser_source)


def _jetpacks_with(tensorrt: str) -> str:
    """" (JetPack 5.1.1, 5.1.2, ...)": the catalog's releases whose TensorRT is ``tensorrt`` (major.minor) or later."""
    from edgebuild.targets.profiles import load_catalog

    wanted = _version(tensorrt)[:2]
    found = sorted((r.jetpack for r in load_catalog().releases.values() if r.tensorrt_major_minor >= wanted),
                   key=_version)
    return f" (JetPack {found[0]} or later)" if found else ""


def _first_supporting_release(op_type: str) -> str | None:
    for path in sorted(_tensorrt_dir().glob("onnx-parser-*.toml"),
                       key=lambda p: _version(p.stem.removeprefix("onnx-parser-"))):
        entry = parser_table(path.stem.removeprefix("onnx-parser-")).get("operators", {}).get(op_type)
        if entry and entry.get("supported"):
            return path.stem.removeprefix("onnx-parser-")
    return None


def _dla_fallbacks(model: onnx.ModelProto, tensorrt: str) -> list[Finding]:
    """What a DLA engine cannot take as it is: dynamic input axes (built static), and each layer that falls back
    to the GPU under that TensorRT's DLA rules (``edgebuild.targets.dla.place_nodes``)."""
    from edgebuild.targets.dla import ON_GPU, dla_table, place_nodes

    source = dla_table().get("source", "dla.toml")
    findings = []
    dynamic = [i.name for i in model.graph.input
               if any(d.dim_param or not d.dim_value for d in i.type.tensor_type.shape.dim)]
    if dynamic:
        findings.append(Finding(
            "(model)", "dynamic shapes", DLA_FALLBACK,
            f"inputs {dynamic} have dynamic axes; the DLA runs only static shapes, so DLA engines are built "
            "with min = opt = max = the input's opt_shape",
            "requests of another shape are refused by a DLA engine: give the model a fixed input shape, or place "
            "the group on the GPU", source))
    for place in place_nodes(model, tensorrt):
        if place.on == ON_GPU:
            findings.append(Finding(
                place.name, place.op_type, DLA_FALLBACK,
                f"the DLA cannot run {place.op_type} ({place.why}); it falls back to the GPU",
                "fine with GPU fallback; to keep the layer on the DLA use a DLA-supported operator", place.source))
    return findings


def preflight(onnx_path: Path, groups: list[SelectedGroup], precision: str | None = None) -> list[TargetPreflight]:
    """Check the model against every selected group's target (as a ``precision`` candidate, where given)."""
    model = load_graph(onnx_path)
    return [check_target(model, group, precision) for group in groups]


@dataclass(frozen=True)
class FindingGroup:
    """Findings that say the same about several nodes (same op, severity, problem and fix): one row."""

    op_type: str
    severity: str
    problem: str
    fix: str
    source: str
    nodes: tuple[str, ...]

    def node_list(self, shown: int = 3) -> str:
        more = len(self.nodes) - shown
        return ", ".join(self.nodes[:shown]) + (f" and {more} more" if more > 0 else "")


def group_findings(findings: tuple[Finding, ...] | list[Finding]) -> list[FindingGroup]:
    """One group per (op, severity, problem, fix), in the order each first appears."""
    groups: dict[tuple[str, str, str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.op_type, f.severity, f.problem, f.fix), []).append(f)
    return [FindingGroup(*key, same[0].source, tuple(f.node for f in same)) for key, same in groups.items()]


def preflight_text(onnx_path: Path | str, results: list[TargetPreflight]) -> str:
    """Per target: its findings as a table, one row per kind of finding with a count and the first nodes."""
    from edgebuild.text import table

    lines = [f"preflight of {onnx_path}"]
    for t in results:
        head = f"\n{t.group} = {t.target} (TensorRT {t.tensorrt}, {t.parser_table}): "
        if not t.findings:
            lines.append(head + "clean")
            continue
        lines.append(head + f"{len(t.blocking)} blocking, {len(t.findings) - len(t.blocking)} other")
        rows = [[g.node_list(), g.op_type + (f" \u00d7{len(g.nodes)}" if len(g.nodes) > 1 else ""), g.severity,
                 g.problem, g.fix] for g in group_findings(t.findings)]
        lines.append(table(rows, ["node", "op", "severity", "problem", "suggested fix"]))
    return "\n".join(lines)
