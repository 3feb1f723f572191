"""quantize.precisions: fp8 and nvfp4 for Jetson AGX Thor groups, refused for a group without FP8/FP4 units."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.errors import ConfigError
from edgebuild.project.config import load_project
from tests.support.project import TINY_TOML, write_tiny_project

THOR_ONLY = TINY_TOML.split("[[fleet]]")[0] + '[[fleet]]\nname = "arm"\nmodule = "agx-thor"\njetpack = "7.0"\n'


def _with_precisions(text: str, precisions: str) -> str:
    return text + f"\n[quantize]\nprecisions = {precisions}\n"


def test_fp8_and_nvfp4_load_for_a_thor_group(tmp_path: Path) -> None:
    root = write_tiny_project(tmp_path, _with_precisions(THOR_ONLY, '["nvfp4", "fp8", "int8", "fp16", "fp32"]'))
    project = load_project(root)
    assert project.quantize.precisions == ["nvfp4", "fp8", "int8", "fp16", "fp32"]


@pytest.mark.parametrize("precision", ["fp8", "nvfp4"])
def test_a_group_without_fp8_or_fp4_units_is_refused_naming_each_group_and_why(tmp_path: Path,
                                                                                precision: str) -> None:
    """TINY_TOML's groups: Orin Nano (Ampere 8.7), AGX Orin (8.7), Xavier NX (Volta 7.2)."""
    root = write_tiny_project(tmp_path, _with_precisions(TINY_TOML, f'["{precision}", "fp16"]'))
    with pytest.raises(ConfigError) as caught:
        load_project(root)
    message = caught.value.message
    name = {"fp8": "FP8 (E4M3)", "nvfp4": "NVFP4"}[precision]
    for group, capability in (("yard-cams", "8.7"), ("dock", "8.7"), ("legacy", "7.2")):
        assert f"quantize.precisions: '{precision}' for fleet group '{group}'" in message
        assert f"(compute capability {capability}) has no {name}" in message
    assert "compile the Thor groups from a project of their own" in message


def test_a_mixed_fleet_is_refused_for_its_orin_group_only(tmp_path: Path) -> None:
    text = THOR_ONLY + '\n[[fleet]]\nname = "dock"\nmodule = "agx-orin-64gb"\njetpack = "6.2"\n'
    root = write_tiny_project(tmp_path, _with_precisions(text, '["fp8", "int8"]'))
    with pytest.raises(ConfigError) as caught:
        load_project(root)
    assert "fleet group 'dock'" in caught.value.message and "fleet group 'arm'" not in caught.value.message


def test_an_unknown_precision_names_the_ones_there_are(tmp_path: Path) -> None:
    root = write_tiny_project(tmp_path, _with_precisions(THOR_ONLY, '["fp4"]'))
    with pytest.raises(ConfigError) as caught:
        load_project(root)
    assert "quantize.precisions" in caught.value.message and "'nvfp4'" in caught.value.message
