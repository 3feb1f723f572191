"""Where an engine comes from, and whether this device may load it: ``engine.json`` as a typed record.

Every engine edgebuild builds (``backends.tensorrt.build_engine`` and ``device.build_from_recipe``)
gets an ``engine.json`` beside its ``engine.plan`` that records what the engine depends on:
TensorRT version, target JetPack/L4T and module, the GPU's compute capability, precision, the
ONNX's and the engine's sha256, the build flags (builder flags, workspace, optimization level,
profile shapes, timing cache, hardware/version compatibility), where (host name, device kind) and
when (UTC) it was built, and edgebuild's version. :class:`EngineProvenance` reads it; a file an
older edgebuild wrote still reads, its missing fields are ``None`` and shown as "unknown".

:func:`refusal` compares a record with the device about to deserialize the engine (its L4T release
and module; ``backends.tensorrt.check_engine_compatible`` its TensorRT and compute capability) and
:func:`engine_damage` with the engine's bytes (sha256), so a mismatched or damaged engine is refused,
both sides named, before TensorRT sees it.

Python 3.8, standard library only.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import datetime
import socket
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

from edgebuild import __version__
from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.engines.engine_header import EngineHeader

__all__ = []  # used only inside the runtime layer

PROVENANCE_SCHEMA = "edgebuild.engine/2"
UNKNOWN = "unknown"

REBUILD_HINT = ("rebuild the engine for this device: with the 'deferred' placement the device builds it at first "
                "start; on the device, `python3 edgebuild-device.pyz build-engine recipe.json` in the model folder; "
                "or compile the group for this device's profile (`edgebuild compile --force --target GROUP`)")


@dataclass(frozen=True)
class EngineProvenance:
    """What ``engine.json`` says an engine depends on; ``None``: the file does not say (an older edgebuild)."""

    tensorrt_version: Optional[str] = None
    compute_capability: Optional[str] = None
    module: Optional[str] = None  # the target module's id
    module_name: Optional[str] = None
    #: the module's device-tree strings: its boards first, the SoC last
    module_compatible: Tuple[str, ...] = ()
    target: Optional[str] = None
    jetpack: Optional[str] = None
    l4t: Optional[str] = None  # the target profile's L4T
    built_on_l4t: Optional[str] = None  # the L4T of the machine that built it (None: not a Jetson, or unknown)
    built_on_board: Optional[str] = None
    precision: Optional[str] = None
    onnx_sha256: Optional[str] = None
    plan_sha256: Optional[str] = None
    plan_bytes: Optional[int] = None
    builder_flags: Optional[Tuple[str, ...]] = None
    #: a strongly typed network (always from TensorRT 11): the ONNX alone sets the precision
    strongly_typed: Optional[bool] = None
    workspace_bytes: Optional[int] = None
    builder_optimization_level: Optional[int] = None
    #: input name -> {"min": shape, "opt": shape, "max": shape}
    profiles: Optional[Dict[str, Dict[str, List[int]]]] = None
    timing_cache_used: Optional[bool] = None
    timing_cache_loaded: Optional[bool] = None
    hardware_compatibility: Optional[str] = None
    version_compatible: Optional[bool] = None
    dla_core: Optional[int] = None
    placement: Optional[str] = None
    hostname: Optional[str] = None
    device_kind: Optional[str] = None
    built_at: Optional[str] = None
    edgebuild_version: Optional[str] = None
    schema: Optional[str] = None

    @classmethod
    def from_engine_json(cls, data: JsonObject) -> "EngineProvenance":
        """The record from an ``engine.json`` object of any edgebuild (unknown keys ignored)."""
        module = data.get("module")
        if isinstance(module, Mapping):
            module_id, module_name = module.get("id"), module.get("name")
            compatible = tuple(module.get("compatible") or ())
        else:
            module_id, module_name, compatible = module, None, ()
        built_on = _mapping(data.get("built_on"))
        board = tuple(built_on.get("compatible") or ())
        cache = data.get("timing_cache", False)  # False: the key is absent (not None, which says "no cache")
        built_by = _mapping(data.get("built_by"))
        flags = data.get("builder_flags")
        return cls(
            tensorrt_version=_text(data.get("tensorrt_version")),
            compute_capability=_text(data.get("compute_capability")),
            module=_text(module_id), module_name=_text(module_name), module_compatible=compatible,
            target=_text(data.get("target")), jetpack=_text(data.get("jetpack")), l4t=_text(data.get("l4t")),
            built_on_l4t=_text(built_on.get("l4t")), built_on_board=board[0] if board else None,
            precision=_text(data.get("precision")), onnx_sha256=_text(data.get("onnx_sha256")),
            plan_sha256=_text(data.get("plan_sha256")), plan_bytes=data.get("plan_bytes"),
            builder_flags=tuple(flags) if isinstance(flags, list) else None,
            strongly_typed=data.get("strongly_typed"),
            workspace_bytes=data.get("workspace_bytes"),
            builder_optimization_level=data.get("builder_optimization_level"),
            profiles=data.get("shapes"),
            timing_cache_used=None if cache is False else cache is not None,
            timing_cache_loaded=bool(cache.get("loaded")) if isinstance(cache, Mapping) else
            (False if cache is None else None),
            hardware_compatibility=_text(data.get("hardware_compatibility")),
            version_compatible=data.get("version_compatible"),
            dla_core=data.get("dla_core"), placement=_text(data.get("placement")),
            hostname=_text(built_by.get("hostname")), device_kind=_text(built_by.get("kind")),
            built_at=_text(data.get("built_at")), edgebuild_version=_text(data.get("edgebuild_version")),
            schema=_text(data.get("provenance_schema")),
        )

    def as_dict(self) -> JsonObject:
        data = asdict(self)
        data["module_compatible"] = list(self.module_compatible)
        if self.builder_flags is not None:
            data["builder_flags"] = list(self.builder_flags)
        return data

    def unknown(self) -> List[str]:
        """The fields the file does not say (an engine.json written before they were recorded)."""
        # dla_core and builder_optimization_level are None when unset; only an old file lacks the flags
        optional = {"dla_core", "builder_optimization_level", "built_on_l4t", "built_on_board", "module_name",
                    "hardware_compatibility"}
        return [f.name for f in fields(self) if getattr(self, f.name) is None and f.name not in optional]

    def lines(self) -> List[Tuple[str, str]]:
        """(label, value) pairs for a terminal; a missing value reads "unknown"."""
        def shown(value: object) -> str:
            if isinstance(value, bool):
                return "yes" if value else "no"
            return UNKNOWN if value is None else str(value)

        profiles = UNKNOWN if self.profiles is None else "; ".join(
            "{} min {} opt {} max {}".format(name, s.get("min"), s.get("opt"), s.get("max"))
            for name, s in self.profiles.items()) or "none (static shapes)"
        cache = UNKNOWN if self.timing_cache_used is None else (
            "not used" if not self.timing_cache_used else "loaded" if self.timing_cache_loaded else "started empty")
        module = self.module if self.module_name is None else "{} ({})".format(self.module_name, self.module)
        return [
            ("TensorRT", shown(self.tensorrt_version)),
            ("compute capability", shown(self.compute_capability)),
            ("target", "{} (module {}, JetPack {}, L4T {})".format(shown(self.target), shown(module),
                                                                   shown(self.jetpack), shown(self.l4t))),
            ("precision", shown(self.precision)),
            ("builder flags", UNKNOWN if self.builder_flags is None else ", ".join(self.builder_flags) or "none"),
            ("strongly typed", shown(self.strongly_typed)),
            ("workspace", shown(self.workspace_bytes) + (" bytes" if self.workspace_bytes is not None else "")),
            ("optimization level", "default" if self.builder_optimization_level is None
             and self.schema else shown(self.builder_optimization_level)),
            ("profile shapes", profiles),
            ("timing cache", cache),
            ("hardware compatibility", "none" if self.hardware_compatibility is None and self.schema
             else shown(self.hardware_compatibility)),
            ("version compatible", shown(self.version_compatible)),
            ("DLA core", "none" if self.dla_core is None else str(self.dla_core)),
            ("built", "{} on {} ({}{}), placement {}".format(
                shown(self.built_at), shown(self.hostname), shown(self.device_kind),
                ", L4T R" + self.built_on_l4t if self.built_on_l4t else "", shown(self.placement))),
            ("edgebuild", shown(self.edgebuild_version)),
            ("ONNX sha256", shown(self.onnx_sha256)),
            ("engine sha256", shown(self.plan_sha256)),
        ]


def _text(value: object) -> Optional[str]:
    return None if value is None else str(value)


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` where it is a JSON object, else an empty one (a key that is absent, null or not an object)."""
    return value if isinstance(value, Mapping) else {}


def build_context(l4t: Optional[str], placement: str, now: Optional[datetime.datetime] = None) -> JsonObject:
    """The engine.json fields that say where and when a build ran, and with which edgebuild."""
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    kind = "jetson" if l4t else ("gpu-host-check" if placement == "host-check" else "gpu-host")
    return {"provenance_schema": PROVENANCE_SCHEMA, "edgebuild_version": __version__,
            "built_at": moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds"),
            "built_by": {"hostname": socket.gethostname(), "kind": kind}}


# -- may this device load it? ----------------------------------------------------------------------

@dataclass(frozen=True)
class RunningDevice:
    """The machine about to deserialize an engine, as the refusal compares it."""

    tensorrt: str
    compute_capability: str
    l4t: Optional[str] = None
    compatible: Tuple[str, ...] = ()

    def describe(self) -> str:
        where = "L4T R{}".format(self.l4t) if self.l4t else "no /etc/nv_tegra_release"
        board = ", board {}".format(self.compatible[0]) if self.compatible else ""
        return "TensorRT {}, compute capability {}, {}{}".format(self.tensorrt, self.compute_capability, where, board)


def _release(version: Optional[str], parts: int = 3) -> Optional[Tuple[str, ...]]:
    return tuple(str(version).split(".")[:parts]) if version else None


def engine_damage(record: Optional[EngineProvenance], engine_sha256: str, engine_file: str) -> Optional[str]:
    """Why the engine is not the one its engine.json describes (damaged, truncated or replaced); None when it
    is, or when the record has no ``plan_sha256`` to compare."""
    if record is None or not record.plan_sha256 or record.plan_sha256 == engine_sha256:
        return None
    size = "" if record.plan_bytes is None else " ({} bytes recorded)".format(record.plan_bytes)
    return ("{}: its sha256 is {} but engine.json records {}{}: the engine was damaged, truncated or replaced after "
            "it was built, and is not loaded".format(engine_file, engine_sha256, record.plan_sha256, size))


def refusal(record: Optional[EngineProvenance], header: Optional[EngineHeader], here: RunningDevice,
            engine_file: str) -> Optional[str]:
    """Why ``engine_file`` must not be deserialized on ``here``, naming both sides; None when nothing says so.

    Checked where both sides are known: the L4T release line (R35 vs R36), the module (its
    device-tree board strings), and, for an engine without an engine.json, the TensorRT version its
    header gives (where the header's layout is relied on: TensorRT 10 and later). The record's
    TensorRT version and compute capability are checked by ``backends.tensorrt.check_engine_compatible``.
    """
    said = "the engine's header says TensorRT {}".format(header.tensorrt_version) \
        if header is not None and header.tensorrt_version else None
    if record is None:
        # only a version read where the layout is relied on (TensorRT 10+) may refuse an engine
        if said and header is not None and header.version_confirmed and \
                _release(header.tensorrt_version) != _release(here.tensorrt):
            return "{}: {}, but this device has {} (and there is no engine.json to say more)".format(
                engine_file, said, here.describe())
        return None
    problems = []
    if record.built_on_l4t and here.l4t and record.built_on_l4t.split(".")[0] != here.l4t.split(".")[0]:
        problems.append("it was built on L4T R{} (JetPack {}) and this device runs L4T R{}".format(
            record.built_on_l4t, record.jetpack or UNKNOWN, here.l4t))
    boards = list(record.module_compatible)[:-1]
    if record.built_on_board and boards and here.compatible and not any(b in here.compatible for b in boards):
        problems.append("it was built for a {} ({}) and this board is {}".format(
            record.module_name or record.module, ", ".join(boards), here.compatible[0]))
    if not problems:
        return None
    built = "TensorRT {} on compute capability {}".format(record.tensorrt_version or UNKNOWN,
                                                         record.compute_capability or UNKNOWN)
    return "{} must not be loaded here: {}. It was built with {}{}; this device has {}.".format(
        engine_file, "; ".join(problems), built, " ({})".format(said) if said else "", here.describe())
