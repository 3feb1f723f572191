"""The preflight text report: identical findings grouped into one row per kind."""

from __future__ import annotations

from edgebuild.targets.preflight import BLOCKING, WARNING, Finding, TargetPreflight, group_findings, preflight_text


def _ln(node: str) -> Finding:
    return Finding(node, "LayerNormalization", BLOCKING, "LayerNormalization is marked unsupported",
                   "export with export.opset = 16", "operators.md")


def test_findings_that_differ_only_by_node_are_one_group_in_first_seen_order() -> None:
    findings = [_ln(f"ln_{i}") for i in range(25)]
    findings.insert(3, Finding("shape", "Shape", WARNING, "INT64", "cast"))
    groups = group_findings(findings)
    assert [(g.op_type, len(g.nodes)) for g in groups] == [("LayerNormalization", 25), ("Shape", 1)]
    assert groups[0].node_list() == "ln_0, ln_1, ln_2 and 22 more"
    assert groups[1].node_list() == "shape"


def test_text_report_has_one_row_per_group_and_keeps_the_counts() -> None:
    findings = (*[_ln(f"ln_{i}") for i in range(25)],
                Finding("ln_x", "LayerNormalization", WARNING, "another problem", "another fix"))
    result = TargetPreflight("dock", "agx-orin-64gb@5.1.2", "8.5.2.2", "onnx-parser-8.5.toml", findings)
    text = preflight_text("model.onnx", [result])
    assert "25 blocking, 1 other" in text
    rows = [line for line in text.splitlines() if "LayerNormalization" in line]
    assert len(rows) == 2
    assert rows[0].startswith("ln_0, ln_1, ln_2 and 22 more") and "LayerNormalization \u00d725" in rows[0]
    assert "export with export.opset = 16" in rows[0]
    assert rows[1].startswith("ln_x") and "\u00d7" not in rows[1]
