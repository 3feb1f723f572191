"""JetPack release and Jetson module profiles (data files under ``profiles/``), and targets.

A target is ``module@jetpack`` (``orin-nano-8gb@6.2``). A target selector on the command line
is a family (``orin``), a module id, a ``module@jetpack`` pair, a fleet group name, ``all``,
or several of these separated by commas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from edgebuild._compat import tomllib
from edgebuild.datafiles import data_dir
from edgebuild.errors import ProfileDataError, TargetError
from edgebuild.targets.presets import LimitPreset

__all__ = [
    "Catalog", "GroupFacts", "JetPackRelease", "Module", "ModulePerformance", "SelectedGroup", "Target", "load_catalog",
    "select_groups",
]

FAMILIES = ("orin", "xavier", "nano", "thor")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JetPackRelease(_Record):
    jetpack: str
    l4t: str
    l4t_aliases: list[str]
    ubuntu: str
    kernel: str
    cuda: str
    cudnn: str
    tensorrt: str
    python: str
    cgroup: str
    max_onnx_opset: int
    base_images: list[str]
    modules: list[str]
    unconfirmed: list[str]
    sources: list[str]
    notes: dict[str, str] = {}

    @property
    def tensorrt_major_minor(self) -> tuple[int, int]:
        major, minor = self.tensorrt.split(".")[:2]
        return int(major), int(minor)


class PowerMode(_Record):
    id: int | None = None
    name: str


class ModulePerformance(_Record):
    """A power mode's GPU clock and the dense peaks at that clock (what the latency plan reads).

    ``jetpack_min``/``jetpack_max`` bound the releases whose nvpmodel configuration has this mode
    at this clock (Orin NX's MAXN before JetPack 6.2, MAXN_SUPER from 6.2); unset means every one.
    ``tf32_tflops`` is unset where the GPU has no TF32 (Volta, Maxwell); ``int8_tops`` where it
    has no INT8 path TensorRT uses (Maxwell); ``fp8_tflops``/``fp4_tflops`` where it has no FP8/FP4
    tensor cores (everything before Blackwell). ``cuda_cores``/``tensor_cores`` are the cores the mode
    powers where it gates some off (fewer TPCs), else unset. The DLA's peaks are both cores together;
    ``gpu_arch`` and ``dla_cores`` are the module's, filled in when the module is read.
    """

    power_mode: str
    jetpack_min: str | None = None
    jetpack_max: str | None = None
    gpu_mhz: int
    cuda_cores: int | None = None
    tensor_cores: int | None = None
    memory_bandwidth_gbps: float
    fp32_tflops: float
    tf32_tflops: float | None = None
    fp16_tflops: float
    int8_tops: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    dla_mhz: int | None = None
    dla_int8_tops: float | None = None
    dla_fp16_tflops: float | None = None
    gpu_arch: str | None = None
    dla_cores: int = 0
    unconfirmed: list[str]
    sources: list[str]


class Module(_Record):
    id: str
    name: str
    family: str
    part: str
    soc: str
    gpu_arch: str
    compute_capability: str
    cuda_cores: int
    tensor_cores: int
    dla_cores: int
    memory_gb: int
    memory_bandwidth_gbps: float
    compatible: list[str]
    jetpack: list[str]
    power_modes: list[PowerMode]
    unconfirmed: list[str]
    sources: list[str]
    notes: dict[str, str] = {}
    performance: list[ModulePerformance] = []

    @model_validator(mode="before")
    @classmethod
    def _performance_knows_its_module(cls, data: object) -> object:
        """Each ``[[performance]]`` entry gets the module's GPU architecture and DLA core count (the latency
        model reads a power mode alone)."""
        if not isinstance(data, dict):
            return data
        filled = [{"gpu_arch": data.get("gpu_arch"), "dla_cores": data.get("dla_cores", 0), **entry}
                  if isinstance(entry, dict) else entry for entry in data.get("performance", [])]
        return {**data, "performance": filled}


@dataclass(frozen=True)
class Target:
    module: Module
    release: JetPackRelease

    @property
    def id(self) -> str:
        return f"{self.module.id}@{self.release.jetpack}"

    def precision_refusal(self, precision: str) -> str | None:
        """Why this target cannot build ``precision`` (FP8, NVFP4: no such tensor cores, or a TensorRT before the
        type), or None (profiles/tensorrt/silent-fallbacks.toml, ``[requires]``)."""
        from edgebuild.targets.precision_layouts import precision_refusal

        return precision_refusal(precision, self.module.compute_capability, self.release.tensorrt, self.module.name)


@dataclass(frozen=True)
class Catalog:
    releases: dict[str, JetPackRelease]
    modules: dict[str, Module]

    def target(self, module_id: str, jetpack: str) -> Target:
        module = self.modules.get(module_id)
        if module is None:
            raise TargetError(
                f"unknown module {module_id!r}",
                hint=f"modules: {', '.join(sorted(self.modules))}",
            )
        release = self.releases.get(jetpack)
        if release is None or module.id not in release.modules:
            what = "unknown JetPack release" if release is None else f"{module.name} does not run JetPack"
            raise TargetError(
                f"{what} {jetpack!r}",
                hint=f"JetPack releases for {module.id}: {', '.join(module.jetpack)}",
            )
        return Target(module, release)

    def parse_target(self, text: str) -> Target:
        module_id, sep, jetpack = text.partition("@")
        if not sep:
            raise TargetError(f"{text!r} is not a target: write MODULE@JETPACK, e.g. orin-nano-8gb@6.2")
        return self.target(module_id, jetpack)

    def all_targets(self) -> list[Target]:
        return [
            Target(module, self.releases[jp])
            for module in self.modules.values()
            for jp in module.jetpack
        ]


def _load_records(folder: Path, record: type[_Record]) -> list:
    if not folder.is_dir():
        raise ProfileDataError(f"{folder}: profile folder not found (is edgebuild installed completely?)")
    records = []
    for path in sorted(folder.glob("*.toml")):
        try:
            records.append(record.model_validate(tomllib.loads(path.read_text(encoding="utf-8"))))
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ProfileDataError(f"{path}: {exc}") from None
    return records


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


@lru_cache(maxsize=4)
def load_catalog(root: Path | None = None) -> Catalog:
    root = root or data_dir("profiles")
    releases = sorted(_load_records(root / "jetpack", JetPackRelease), key=lambda r: _version_key(r.jetpack))
    modules = _load_records(root / "modules", Module)
    catalog = Catalog({r.jetpack: r for r in releases}, {m.id: m for m in modules})
    _check_consistency(root, catalog)
    return catalog


def _check_consistency(root: Path, catalog: Catalog) -> None:
    for module in catalog.modules.values():
        if module.family not in FAMILIES:
            raise ProfileDataError(f"{root}/modules/{module.id}.toml: family {module.family!r} not in {FAMILIES}")
        for jp in module.jetpack:
            release = catalog.releases.get(jp)
            if release is None or module.id not in release.modules:
                raise ProfileDataError(
                    f"{root}: module {module.id} lists JetPack {jp}, which does not list the module"
                )
    for release in catalog.releases.values():
        for module_id in release.modules:
            listed = catalog.modules.get(module_id)
            if listed is None or release.jetpack not in listed.jetpack:
                raise ProfileDataError(
                    f"{root}: JetPack {release.jetpack} lists module {module_id}, which does not list it"
                )


# -- selecting fleet groups --------------------------------------------------------------

@dataclass(frozen=True)
class GroupFacts:
    """One fleet group as a compile records it (``last-compile.json``'s ``units``) and ``check`` shows it."""

    group: str
    in_fleet: bool
    target: str
    module: str = ""
    compute_capability: str = ""
    jetpack: str = ""
    l4t: str = ""
    tensorrt: str = ""
    cuda: str = ""
    max_onnx_opset: int = 0
    use_dla: bool = False  # the accelerator is a DLA core (kept for readers of older records)
    #: the limit preset's name; a group without one has no ``limits`` key
    limits: str | None = None
    #: gpu, dla0, dla1 or dla (either core); a GPU group has no ``accelerator`` key
    accelerator: str = "gpu"

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        if self.limits is None:
            del data["limits"]
        if self.accelerator == "gpu":
            del data["accelerator"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> GroupFacts:
        """A group as stored; a key an older edgebuild did not write takes its default (in the fleet)."""
        data = {"in_fleet": True, **data}
        if data.get("use_dla") and "accelerator" not in data:  # written before placements: use_dla was DLA core 0
            data["accelerator"] = "dla0"
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class SelectedGroup:
    """A fleet group (or an ad-hoc target not in the fleet: ``in_fleet`` False) and its target.

    The one group type from selection to the last stage. ``limits`` is the group's runtime limit
    preset, resolved once when the compile's work is selected (``edgebuild.workflows.work.select_work``).
    """

    name: str
    target: Target
    accelerator: str = "gpu"  # gpu, dla0, dla1 or dla (either core): edgebuild.targets.dla
    in_fleet: bool = True
    build_on: str | None = None  # the group's ssh:// build device, if it names one
    cgroup_preset: str | None = None  # the group's own runtime limit preset, if it names one
    limits: LimitPreset | None = None
    power_mode: str | None = None  # the power_mode tag its farm boards must have, if the group names one

    def describe(self) -> GroupFacts:
        module, release = self.target.module, self.target.release
        return GroupFacts(self.name, self.in_fleet, self.target.id, module.name, module.compute_capability,
                          release.jetpack, release.l4t, release.tensorrt, release.cuda, release.max_onnx_opset,
                          self.use_dla, self.limits.name if self.limits else None, self.accelerator)

    @property
    def use_dla(self) -> bool:
        """Whether the group runs on a DLA core (``accelerator`` is dla0, dla1 or dla)."""
        return self.accelerator != "gpu"


def select_groups(selector: str, fleet: list, catalog: Catalog) -> list[SelectedGroup]:
    """Resolve a --target selector against the project's fleet groups (in fleet order)."""
    groups = [SelectedGroup(g.name, catalog.target(g.module, g.jetpack), g.accelerator, build_on=g.build_on,
                            cgroup_preset=g.cgroup_preset, power_mode=getattr(g, "power_mode", None))
              for g in fleet]
    chosen: dict[str, SelectedGroup] = {}
    for part in [p.strip() for p in selector.split(",") if p.strip()] or ["all"]:
        matched = _match(part, groups, catalog)
        for group in matched:
            chosen.setdefault(group.name, group)
    order = {g.name: i for i, g in enumerate(groups)}
    return sorted(chosen.values(), key=lambda g: order.get(g.name, len(order)))


def _match(part: str, groups: list[SelectedGroup], catalog: Catalog) -> list[SelectedGroup]:
    if part == "all":
        return groups
    if part in FAMILIES:
        matched = [g for g in groups if g.target.module.family == part]
        what = f"family {part!r}"
    elif part in catalog.modules:
        matched = [g for g in groups if g.target.module.id == part]
        what = f"module {part!r}"
    elif "@" in part:
        target = catalog.parse_target(part)
        matched = [g for g in groups if g.target.id == target.id]
        return matched or [SelectedGroup(target.id, target, in_fleet=False)]
    else:
        matched = [g for g in groups if g.name == part]
        if not matched:
            raise TargetError(
                f"unknown target {part!r}",
                hint=(
                    "use a family (" + ", ".join(FAMILIES) + "), a module id, MODULE@JETPACK, "
                    "'all', or a fleet group (" + ", ".join(g.name for g in groups) + "); "
                    "`edgebuild profiles list` shows every target"
                ),
            )
        return matched
    if not matched:
        raise TargetError(
            f"no fleet group matches {what}",
            hint="fleet groups: " + ", ".join(f"{g.name} = {g.target.id}" for g in groups),
        )
    return matched
