"""Container build contexts and run specs: Dockerfiles per JetPack family, docker run, compose, systemd."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from edgebuild.errors import ConfigError, TargetError
from edgebuild.runtime.base.recipe import Recipe
from edgebuild.shipping.container import (
    ENGINE_CACHE,
    RUNTIME_UID,
    container_spec,
    docker_size,
    run_args,
    tensorrt_base_image,
    write_container,
)
from edgebuild.targets.presets import LimitPreset, load_preset
from edgebuild.targets.profiles import load_catalog
from tests.support.runtime_artifacts import recipe_for, write_artifact

CATALOG = load_catalog()
#: one target per JetPack family the issue names, with the image and CUDA major it must get
FAMILIES = {
    "agx-orin-64gb@5.1.2": ("nvcr.io/nvidia/l4t-tensorrt:r8.5.2-runtime", "11", "v1"),
    "orin-nx-16gb@6.1": ("nvcr.io/nvidia/l4t-tensorrt:r10.3.0-runtime", "12", "v2"),
    "orin-nano-8gb@6.2": ("nvcr.io/nvidia/l4t-tensorrt:r10.3.0-runtime", "12", "v2"),
}


def _artifact(tmp_path: Path, target: str, **recipe_changes) -> Path:
    folder = write_artifact(tmp_path / "engines" / "yard")
    recipe_for(folder, target, **recipe_changes).save(folder)
    return folder


def _plan(folder: Path, **options):
    recipe = Recipe.load(folder)
    target = CATALOG.parse_target(recipe.target)
    return container_spec(recipe, target, LimitPreset.from_dict(dataclasses.asdict(recipe.limits)), **options)


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = dockerfile.replace("\\\n", " ")
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), " ".join(rest.split())))
    return result


@pytest.mark.parametrize("target", sorted(FAMILIES))
def test_dockerfile_per_jetpack_family(tmp_path: Path, target: str) -> None:
    base, cuda_major, _ = FAMILIES[target]
    spec = _plan(_artifact(tmp_path, target))
    record = write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    steps = _instructions((tmp_path / "ctx" / "Dockerfile").read_text())
    words = [w for w, _ in steps]
    assert steps[0] == ("ARG", f"BASE_IMAGE={base}") and steps[1] == ("FROM", "${BASE_IMAGE}")
    assert record["base_image"] == base
    install = f"sh /tmp/install-runtime-deps.sh jetson {cuda_major} && rm -f /tmp/install-runtime-deps.sh"
    assert ("RUN", install) in steps
    # non-root from USER on, and every later instruction runs as that user
    user = words.index("USER")
    assert steps[user] == ("USER", f"{RUNTIME_UID}:{RUNTIME_UID}") and "RUN" not in words[user:]
    assert ("VOLUME", f'["{ENGINE_CACHE}"]') in steps
    assert any(w == "ENV" and f"EDGEBUILD_ENGINE_CACHE={ENGINE_CACHE}" in a for w, a in steps)
    health = dict(steps)["HEALTHCHECK"]
    assert "/v2/health/ready" in health and "--start-period=1205s" in health  # warm-up 5 s + a deferred build
    entry = json.loads(dict(steps)["ENTRYPOINT"])
    assert entry == ["python3", "/opt/edgebuild/edgebuild-device.pyz", "serve", "/opt/edgebuild/model", "--port",
                     "8000", "--backend", "tensorrt"]
    # the context holds what the Dockerfile copies, and no engine for a deferred group
    context = tmp_path / "ctx"
    for _, source in (s for s in steps if s[0] == "COPY"):
        assert (context / source.split()[0]).exists(), source
    assert sorted(p.name for p in (context / "model").iterdir()) == ["model.onnx", "recipe.json"]


def test_a_built_engine_ships_in_the_image(tmp_path: Path) -> None:
    folder = _artifact(tmp_path, "orin-nano-8gb@6.2", placement="ssh://nvidia@orin-01", shippable_engine=True)
    (folder / "engine.plan").write_bytes(b"serialized engine from the build device")
    (folder / "engine.json").write_text("{}")
    spec = _plan(folder)
    assert spec.ships_engine and spec.start_period_s == 5 + 60 and not spec.notes
    write_container(folder, tmp_path / "ctx", spec)
    assert (tmp_path / "ctx" / "model" / "engine.plan").read_bytes() == b"serialized engine from the build device"
    (folder / "engine.plan").unlink()
    with pytest.raises(ConfigError, match="engine.plan missing"):
        write_container(folder, tmp_path / "ctx", spec)


def test_docker_run_line_carries_the_presets_limits(tmp_path: Path) -> None:
    spec = _plan(_artifact(tmp_path, "orin-nano-8gb@6.2"))
    write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    script = tmp_path / "ctx" / "run.sh"
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    command = shlex.split(script.read_text().split("set -e\n", 1)[1].replace("\\\n", " "))
    assert command[:2] == ["docker", "run"] and command[-1] == spec.image
    options = dict(zip(command[2:-1], command[3:-1]))
    preset = load_preset("orin-nano-8gb")
    assert options["--runtime"] == "nvidia"
    assert options["--memory"] == docker_size(preset.memory) == "2g"
    assert options["--memory-swap"] == "2g" and options["--cpus"] == "4"
    assert options["--cpuset-cpus"] == "2-5" and options["--pids-limit"] == "256"
    assert "--read-only" in command and options["--volume"] == f"{spec.volume}:{ENGINE_CACHE}"
    assert json.loads((tmp_path / "ctx" / "container.json").read_text())["run"] == command


def test_compose_file_carries_the_same_limits(tmp_path: Path) -> None:
    spec = _plan(_artifact(tmp_path, "agx-orin-64gb@5.1.2"))
    write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    compose = yaml.safe_load((tmp_path / "ctx" / "compose.yaml").read_text())
    service = compose["services"]["yard"]
    preset = load_preset("agx-orin-64gb")
    assert service["image"] == spec.image and service["runtime"] == "nvidia"
    assert service["mem_limit"] == docker_size(preset.memory) and service["memswap_limit"] == docker_size(
        preset.memory_swap)
    assert service["cpus"] == preset.cpus and service["cpuset"] == preset.cpuset
    assert service["pids_limit"] == preset.pids and service["read_only"] is True
    assert service["volumes"] == [f"engine-cache:{ENGINE_CACHE}"] and "engine-cache" in compose["volumes"]
    assert service["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    # compose's own names for the docker run options, so both specs say the same
    args = run_args(spec)
    flags = dict(zip(args, args[1:]))
    assert flags["--memory"] == service["mem_limit"] and flags["--cpuset-cpus"] == service["cpuset"]


def _verify(unit: Path) -> str:
    """systemd-analyze verify's complaints (it exits 0 on unknown keys, so its output is what counts)."""
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is needed to check the unit (apt-get install systemd)"
    done = subprocess.run([tool, "verify", unit.name], cwd=unit.parent, capture_output=True, text=True)
    return "\n".join(line for line in (done.stdout + done.stderr).splitlines() if line.strip()) + (
        f"\nexit {done.returncode}" if done.returncode else "")


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    spec = _plan(_artifact(tmp_path, "orin-nano-8gb@6.2"))
    record = write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    unit = tmp_path / "ctx" / record["systemd_unit"]
    assert _verify(unit) == ""
    text = unit.read_text()
    for line in ("MemoryMax=2147483648", "MemorySwapMax=0", "CPUQuota=400%", "AllowedCPUs=2-5", "TasksMax=256",
                 "Type=notify", "DynamicUser=yes", "ProtectSystem=strict", "CacheDirectory=edgebuild/yard"):
        assert line in text.splitlines(), line
    # the check reads the output: the same unit with a misspelt key is caught
    broken = tmp_path / "ctx" / "broken.service"
    broken.write_text(text.replace("MemoryMax=", "MemoryMaximum="))
    assert "Unknown key 'MemoryMaximum'" in _verify(broken)


def test_no_systemd_unit_on_cgroup_v1_releases(tmp_path: Path) -> None:
    spec = _plan(_artifact(tmp_path, "agx-orin-64gb@5.1.2"))
    record = write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    assert record["systemd_unit"] is None and not list((tmp_path / "ctx").glob("*.service"))
    assert any("cgroup v1" in note for note in record["notes"])


def test_cpu_flavor_uses_onnx_runtime_and_no_nvidia_runtime(tmp_path: Path) -> None:
    spec = _plan(_artifact(tmp_path, "orin-nano-8gb@6.2"), flavor="cpu", base_image="localhost/base:1")
    record = write_container(tmp_path / "engines" / "yard", tmp_path / "ctx", spec)
    steps = _instructions((tmp_path / "ctx" / "Dockerfile").read_text())
    assert steps[0] == ("ARG", "BASE_IMAGE=localhost/base:1")
    assert any(w == "RUN" and a.startswith("sh /tmp/install-runtime-deps.sh cpu ") for w, a in steps)
    assert json.loads(dict(steps)["ENTRYPOINT"])[-1] == "onnxruntime"
    assert "--runtime" not in record["run"] and record["systemd_unit"] is None
    assert spec.image.endswith("-cpu") and spec.container_name.endswith("-cpu")


def test_install_script_is_valid_sh() -> None:
    from edgebuild.datafiles import data_dir

    assert subprocess.run(["sh", "-n", str(data_dir("docker") / "install-runtime-deps.sh")]).returncode == 0


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    folder = _artifact(tmp_path, "orin-nano-8gb@6.2")
    recipe = Recipe.load(folder)
    target = CATALOG.parse_target("orin-nano-8gb@6.2")
    with pytest.raises(ConfigError, match="preset agx-orin-64gb is for agx-orin-64gb, not orin-nano-8gb"):
        container_spec(recipe, target, load_preset("agx-orin-64gb"))
    with pytest.raises(ConfigError, match="flavor 'arm'"):
        container_spec(recipe, target, load_preset("orin-nano-8gb"), flavor="arm")
    with pytest.raises(TargetError, match="lists no NVIDIA image with TensorRT") as caught:
        tensorrt_base_image(CATALOG.parse_target("agx-thor@7.0"))
    assert "--base-image" in caught.value.hint
    with pytest.raises(ConfigError, match="no recipe.json"):
        write_container(tmp_path / "nothing", tmp_path / "ctx", _plan(folder))
    assert not (tmp_path / "ctx").exists()


def test_docker_sizes_are_exact() -> None:
    assert [docker_size(n) for n in (2 << 30, 512 << 20, 1536 << 20, 4096 + 1)] == ["2g", "512m", "1536m", "4097b"]
