"""Which opset the export uses for a fleet, and the reason the record and the CLI give for it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgebuild.errors import ExportError
from edgebuild.sources.export.onnx_export import choose_opset
from edgebuild.targets.profiles import load_catalog


def _project(opset: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(source="edgebuild.toml", export=SimpleNamespace(opset=opset),
                           model=SimpleNamespace(source=None))  # no model file: no RT-DETR's LayerNorms to keep apart


def test_a_fleet_spanning_parsers_exports_at_the_lowest_maximum_and_says_what_the_others_take() -> None:
    releases = load_catalog().releases
    opset, reason = choose_opset(_project(), [releases["6.2"], releases["5.1.2"], releases["5.1.3"]])
    assert opset == 17
    assert reason == ("highest opset every target's TensorRT parser takes; limited by JetPack 5.1.2 "
                      "(TensorRT 8.5.2.2), JetPack 5.1.3 (TensorRT 8.5.2.2); "
                      "JetPack 6.2 (TensorRT 10.3.0.30) would take up to 20")


def test_one_parser_has_no_others_and_export_opset_is_kept_with_the_ceiling_said() -> None:
    releases = load_catalog().releases
    assert choose_opset(_project(), [releases["6.2"]]) == (
        20, "highest opset every target's TensorRT parser takes; limited by JetPack 6.2 (TensorRT 10.3.0.30)")
    assert choose_opset(_project(16), [releases["6.2"], releases["5.1.2"]]) == (
        16, "export.opset in the project file (every target's TensorRT parser takes up to 17)")
    with pytest.raises(ExportError, match="export.opset: 18 is above what JetPack 5.1.2"):
        choose_opset(_project(18), [releases["6.2"], releases["5.1.2"]])
