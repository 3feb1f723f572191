"""What the device tool reads of the host: nv_tegra_release and the device tree, under an injectable root."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.runtime.base.identity import parse_nv_tegra_release
from edgebuild.runtime.engines.device import probe


def test_nv_tegra_release_and_device_tree_are_read_from_an_injectable_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nv_tegra_release").write_text(
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64\n")
    (tmp_path / "proc" / "device-tree").mkdir(parents=True)
    (tmp_path / "proc" / "device-tree" / "compatible").write_bytes(
        b"nvidia,p3768-0000+p3767-0005-super\0nvidia,p3767-0005\0nvidia,tegra234\0")
    host = probe(tmp_path)
    assert host.l4t == "36.4.3" and "nvidia,p3767-0005" in host.compatible
    assert parse_nv_tegra_release("# R35 (release), REVISION: 4.1") == "35.4.1"


def test_no_engine_is_built_from_an_onnx_that_is_not_the_recipes(tmp_path: Path) -> None:
    from edgebuild.errors import BundleError
    from edgebuild.runtime.engines.device import DeviceFacts, build_from_recipe
    from tests.fakes.tensorrt_double import make_tensorrt
    from tests.support.runtime_artifacts import write_artifact

    folder = write_artifact(tmp_path / "yard")
    (folder / "model.onnx").write_bytes((folder / "model.onnx").read_bytes() + b"\0")
    host = DeviceFacts("10.3.0", "", "8.9", None, ())
    with pytest.raises(BundleError, match="model.onnx is missing or does not match its sha256 in the recipe"):
        build_from_recipe(folder / "recipe.json", host, verify_device=False, trt=make_tensorrt("10.3.0"))
    assert not (folder / "engine.plan").exists()
