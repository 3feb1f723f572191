"""What this device is, whether it matches a build recipe, and the engine build from that recipe.

Runs wherever an engine is built: on the Jetson itself (``local``, ``deferred`` at first start,
over SSH), or on a GPU workstation (``host-check``). Python 3.8, standard library only; TensorRT
is imported by the builder when it runs.

The device's identity (L4T release, device-tree board) is read by ``runtime.identity``, under an
injectable root (``root=`` or ``EDGEBUILD_DEVICE_ROOT``) so tests can supply those files. Every
engine built here gets its provenance in ``engine.json`` (``runtime.provenance``).
"""

# ruff: noqa: UP006, UP007, UP035, UP045
# (typing.Dict/Optional/Tuple on purpose: this file must run on Python 3.8)

import importlib
import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from edgebuild.errors import CapabilityMissing, TargetError
from edgebuild.runtime.base.files import atomic_write_text, sha256_file
from edgebuild.runtime.base.identity import read_identity
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.base.progress import Progress
from edgebuild.runtime.base.recipe import (
    ENGINE_FILE,
    ENGINE_JSON,
    RECIPE_FILE,  # noqa: F401 (engine.py still imports it from here)
    Recipe,
    recipe_of,
)
from edgebuild.runtime.engines.provenance import build_context

if TYPE_CHECKING:  # TensorRT itself is imported by the builder when it runs
    from edgebuild.runtime.engines.backends.trt_api import TensorRT

__all__ = ["DeviceFacts", "build_from_recipe", "module_matches", "probe", "require_match"]


@dataclass(frozen=True)
class DeviceFacts:
    """What a machine offers for engine builds, as the placement decision and the recipe check see it."""

    tensorrt: Optional[str]
    tensorrt_problem: str
    compute_capability: Optional[str]
    l4t: Optional[str]
    compatible: Tuple[str, ...]
    python: str = platform.python_version()
    machine: str = platform.machine()

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> "DeviceFacts":
        fields = dict(data)
        fields["compatible"] = tuple(fields.get("compatible") or ())
        # JSON values as as_dict wrote them; a key the record lacks (an engine record's empty "host") reads as None
        known = {k: fields.get(k) for k in ("tensorrt", "tensorrt_problem", "compute_capability", "l4t",
                                            "compatible", "python", "machine")}  # type: JsonObject
        return cls(**known)

    def describe(self) -> str:
        board = self.compatible[0] if self.compatible else "no device tree"
        l4t = f"L4T R{self.l4t}" if self.l4t else "not a Jetson (no /etc/nv_tegra_release)"
        trt = f"TensorRT {self.tensorrt}" if self.tensorrt else "no TensorRT"
        return f"{board}, {l4t}, {trt}, Python {self.python}"


def tensorrt_version() -> Tuple[Optional[str], str]:
    """(version, why not) of the importable TensorRT; JetPack's apt package has no pip metadata."""
    try:
        module = importlib.import_module("tensorrt")
    except ImportError as exc:
        return None, "import tensorrt failed: {}".format(exc)
    return str(getattr(module, "__version__", "unknown")), ""


def probe(root: Optional[Path] = None) -> DeviceFacts:
    """This machine's identity, TensorRT and GPU."""
    l4t, compatible = read_identity(root)
    version, problem = tensorrt_version()
    capability = None
    if version:
        try:
            from edgebuild.runtime.engines.backends.cuda_memory import default_memory

            capability = default_memory().compute_capability()
        except Exception as exc:  # no GPU or no CUDA binding: the reason is part of the placement
            problem = "TensorRT {} is installed but no CUDA GPU is usable through pycuda or cuda-python: {}".format(
                version, exc)
    return DeviceFacts(version, problem, capability, l4t, compatible)


def module_matches(facts: DeviceFacts, module_compatible: Sequence[str]) -> bool:
    """The board strings name the module; the last compatible string is the SoC, shared by a family."""
    return any(c in facts.compatible for c in list(module_compatible)[:-1])


def mismatches(facts: DeviceFacts, recipe: Union[Recipe, JsonObject]) -> List[str]:
    """Why this device is not the recipe's target profile (empty when it is)."""
    recipe = recipe_of(recipe)
    module = recipe.module
    problems = []
    if not module_matches(facts, module.compatible):
        found = ", ".join(facts.compatible) or "no /proc/device-tree/compatible"
        problems.append("the module is not a {} (device tree: {}; expected one of {})".format(
            module.name, found, ", ".join(module.compatible[:-1])))
    accepted = recipe.l4t_accepted or [recipe.l4t]
    if facts.l4t not in accepted:
        problems.append("L4T is {} but JetPack {} is L4T R{}".format(
            "R" + facts.l4t if facts.l4t else "missing (no /etc/nv_tegra_release)", recipe.jetpack,
            " or R".join(accepted)))
    if facts.tensorrt and facts.tensorrt.split(".")[:3] != recipe.tensorrt.split(".")[:3]:
        problems.append("TensorRT is {} but JetPack {} ships {}".format(
            facts.tensorrt, recipe.jetpack, recipe.tensorrt))
    return problems


def require_match(facts: DeviceFacts, recipe: Union[Recipe, JsonObject], where: str = "this device") -> None:
    recipe = recipe_of(recipe)
    problems = mismatches(facts, recipe)
    if problems:
        raise TargetError(
            "{} ({}) does not match the recipe's target {}: {}".format(
                where, facts.describe(), recipe.target, "; ".join(problems)),
            hint="build on a device of that module and JetPack release, or use the 'deferred' placement",
        )


def build_from_recipe(recipe_path: Path, facts: DeviceFacts, *, timing_cache_dir: Optional[Path] = None,
                      verify_device: bool = True, trt: Optional["TensorRT"] = None,
                      progress: Progress = lambda _: None) -> Path:
    """Build the recipe's engine here: writes ``engine.plan`` and ``engine.json`` beside the recipe.

    With ``verify_device`` (every placement but host-check) the device must be the recipe's module
    on its L4T release, so no engine is ever built for a profile it will not run on.
    """
    recipe_path = Path(recipe_path)
    recipe = Recipe.load(recipe_path)
    if verify_device:
        require_match(facts, recipe)
    for name, expected in ((recipe.onnx, recipe.onnx_sha256), (recipe.dynamic_ranges, recipe.dynamic_ranges_sha256)):
        if name and (not (recipe_path.parent / name).is_file() or sha256_file(recipe_path.parent / name) != expected):
            from edgebuild.errors import BundleError

            raise BundleError("{}: {} is missing or does not match its sha256 in the recipe; no engine is built from "
                              "it".format(recipe_path.parent, name), hint="copy the model folder again")
    if trt is None:
        if facts.tensorrt is None:
            raise CapabilityMissing(
                "TensorRT is not installed on the device ({}; {})".format(facts.describe(), facts.tensorrt_problem),
                hint="install JetPack's TensorRT (apt install nvidia-tensorrt / python3-libnvinfer) on the device",
            )
    from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, build_engine

    folder = recipe_path.parent
    cache_dir = Path(timing_cache_dir) if timing_cache_dir is not None else folder.parent / "timing-caches"
    cache_dir.mkdir(parents=True, exist_ok=True)
    settings = BuildSettings(
        onnx_path=folder / recipe.onnx, engine_path=folder / ENGINE_FILE, precision=recipe.precision,
        # a recipe's profile is [min, opt, max] (Recipe.from_dict checks it)
        profiles={name: (tuple(low), tuple(opt), tuple(high)) for name, (low, opt, high) in recipe.profiles.items()},
        workspace_bytes=recipe.workspace_bytes, timing_cache_path=cache_dir / recipe.timing_cache,
        dla_core=recipe.dla_core, fp32_layers=tuple(recipe.kept_fp32), progress=progress,
        dynamic_ranges=folder / recipe.dynamic_ranges if recipe.dynamic_ranges else None)
    metadata = build_engine(settings, trt=trt)
    capability = facts.compute_capability
    if capability is None and verify_device:  # the SoC fixes the SM version; the device was verified above
        capability = recipe.module.compute_capability
    engine_json = dict(metadata)
    engine_json.update({
        "target": recipe.target, "module": asdict(recipe.module), "jetpack": recipe.jetpack,
        "l4t": recipe.l4t, "placement": recipe.placement, "shippable": recipe.shippable_engine,
        "compute_capability": capability, "built_on": facts.as_dict(), "onnx_sha256": recipe.onnx_sha256,
        "plan": ENGINE_FILE, "onnx": recipe.onnx,  # relative to engine.json, so the folder can move
    })
    engine_json.update(build_context(facts.l4t, recipe.placement))  # where, when, which edgebuild
    out = folder / ENGINE_JSON
    atomic_write_text(out, json.dumps(engine_json, indent=2, default=str))
    return out
