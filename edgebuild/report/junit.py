"""The build report as JUnit XML: a test suite per kind of check, one test case per check."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from edgebuild.report.build_report import SUITES, BuildReport, checks

__all__ = ["to_junit"]


def to_junit(report: BuildReport) -> str:
    """JUnit XML: a testsuite per kind of check (``SUITES``), one testcase per check."""
    found = checks(report)
    root = ET.Element("testsuites", name=f"edgebuild compile {report.project}")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in SUITES:
        cases = [c for c in found if c.suite == suite]
        counts = {"tests": len(cases), "failures": sum(c.status == "failed" for c in cases),
                  "skipped": sum(c.status == "skipped" for c in cases)}
        # every gate case shares the gate's one run: its time counts once
        seconds = max((c.seconds for c in cases), default=0.0) if suite == "gate" else sum(c.seconds for c in cases)
        attributes = {"name": suite, "errors": "0", "timestamp": report.finished, "time": f"{seconds:.3f}",
                      **{k: str(v) for k, v in counts.items()}}
        element = ET.SubElement(root, "testsuite", attributes)
        for case in cases:
            item = ET.SubElement(element, "testcase", classname=f"edgebuild.{suite}", name=case.name,
                                 time=f"{case.seconds:.3f}")
            if case.status == "failed":
                ET.SubElement(item, "failure", message=_xml_safe(case.message)).text = _xml_safe(case.text)
            elif case.status == "skipped":
                ET.SubElement(item, "skipped", message=_xml_safe(case.message))
            elif case.message or case.text:
                ET.SubElement(item, "system-out").text = _xml_safe("\n".join(filter(None, [case.message, case.text])))
        for key in totals:
            totals[key] += counts[key]
    root.attrib.update({k: str(v) for k, v in totals.items()}, errors="0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub("", text)
