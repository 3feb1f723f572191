"""Limit presets: the shipped files, sizes, validation, overrides, and the v2 cgroup files written."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgebuild.errors import ConfigError
from edgebuild.targets.limits import CgroupV2, check_against_module, fit_to_host
from edgebuild.targets.presets import available_presets, load_preset, parse_size, preset_path
from edgebuild.targets.profiles import load_catalog


def test_sizes_are_binary_like_dockers() -> None:
    assert parse_size("512M") == 512 << 20
    assert parse_size("2G") == 2 << 30
    assert parse_size("1.5g") == 3 << 29
    assert parse_size("64MiB") == 64 << 20
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_every_module_has_a_preset_that_fits_it() -> None:
    catalog = load_catalog()
    modules = catalog.modules
    assert set(available_presets()) == set(modules)
    for name in available_presets():
        preset = load_preset(name)
        check_against_module(preset, modules[name])
        assert preset.memory_swap == preset.memory, f"{name}: a model server should not swap"
        assert preset.tensorrt_workspace <= preset.engine_device_memory_max


def test_orin_nano_8gb_preset() -> None:
    preset = load_preset("orin-nano-8gb")
    assert (preset.memory, preset.cpus, preset.cpuset, preset.pids) == (2 << 30, 4, "2-5", 256)
    assert preset.tensorrt_workspace == 512 << 20 and preset.engine_device_memory_max == 2 << 30
    assert "memory 2.0 GiB (no swap)" in preset.describe()


def _write_preset(tmp_path: Path, limits: str, gpu: str = 'tensorrt_workspace = "256M"\n'
                  'engine_device_memory_max = "1G"', module: str = "orin-nano-8gb") -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(f'module = "{module}"\n[limits]\n{limits}\n[gpu]\n{gpu}\n')
    return path


@pytest.mark.parametrize(("limits", "message"), [
    ('memory = "many"\ncpus = 2', "not a size"),
    ('memory = "1G"\ncpus = 0', "greater than 0"),
    ('memory = "1G"\ncpus = 2\ncpuset = "two"', "not a cpuset"),
    ('memory = "1G"\nmemory_swap = "512M"\ncpus = 2', "cannot be less than limits.memory"),
    ('memory = "1G"\ncpus = 2\nswap = "1G"', "limits.swap: Extra inputs"),
])
def test_a_broken_preset_is_a_config_error_that_names_the_field(tmp_path: Path, limits: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_preset(str(_write_preset(tmp_path, limits)))


def test_unknown_preset_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="not found") as caught:
        load_preset("orin-nano-9gb")
    assert "orin-nano-8gb" in str(caught.value.hint)


def test_preset_for_another_module_or_too_large_is_refused(tmp_path: Path) -> None:
    catalog = load_catalog()
    module = catalog.target("orin-nano-8gb", "6.2").module
    with pytest.raises(ConfigError, match="is for orin-nano-8gb, not"):
        check_against_module(load_preset("orin-nano-8gb"), catalog.target("orin-nx-16gb", "6.2").module)
    greedy = load_preset(str(_write_preset(tmp_path, 'memory = "5G"\ncpus = 2', 'tensorrt_workspace = "1G"\n'
                                                     'engine_device_memory_max = "2G"')))
    with pytest.raises(ConfigError, match="more than 75% of the Jetson Orin Nano 8GB"):
        check_against_module(greedy, module)


def test_a_project_relative_preset_path(tmp_path: Path) -> None:
    _write_preset(tmp_path, 'memory = "1G"\ncpus = 2')
    assert preset_path("mine.toml", tmp_path) == tmp_path / "mine.toml"
    assert load_preset("mine.toml", tmp_path).name == "mine"


def test_overrides_and_fitting_to_this_host() -> None:
    preset = load_preset("orin-nano-8gb").with_overrides(memory="64M", cpuset="0")
    assert preset.memory == preset.memory_swap == 64 << 20 and preset.cpuset == "0"
    with pytest.raises(ConfigError, match="--memory"):
        load_preset("orin-nano-8gb").with_overrides(memory="big")
    warnings: list[str] = []
    fitted = fit_to_host(load_preset("agx-thor").with_overrides(cpuset="0-4095"), warnings.append)
    assert fitted.cpuset and "4095" not in fitted.cpuset
    assert any("not all on this host" in w for w in warnings)


def test_cgroup_v2_files_written_for_a_preset(tmp_path: Path) -> None:
    """The v2 layout, against a directory that stands in for /sys/fs/cgroup (this host mounts v1)."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    cgroup = CgroupV2("run-1", tmp_path)
    cgroup.create(load_preset("orin-nano-8gb"))
    assert (tmp_path / "cgroup.subtree_control").read_text().split() == ["+memory", "+cpu", "+cpuset", "+pids"]
    assert cgroup.path == tmp_path / "edgebuild" / "run-1"
    assert cgroup.read_back() == {"memory": str(2 << 30), "memory_swap_extra": "0", "cpu_max": "400000 100000",
                                  "cpuset": "2-5", "pids": "256"}
    assert cgroup.procs_files() == [cgroup.path / "cgroup.procs"]
