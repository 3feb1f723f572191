"""Where each target's TensorRT engine is built, and which candidates it may be built from.

A serialized TensorRT engine is tied to the TensorRT version and the GPU's compute capability and cannot be
cross-built for a Jetson on x86. So every target gets a placement:

- ``local``: this host is a Jetson of the target's module on the target's L4T release, with
  TensorRT: the engine is built here and is shippable;
- ``ssh://user@host``: the fleet group names a build device (``build_on``); edgebuild checks over
  SSH that it is the target's module and L4T, copies the recipe there, runs its device-side
  builder, fetches the engine (``engine.plan``), ``engine.json`` and timing cache and checks their hashes; shippable;
- ``host-check``: this host has TensorRT and a GPU but is not the target: the engine is built to
  catch parser and builder failures, and is never packaged for a Jetson;
- ``deferred``: no suitable builder: the recipe (ONNX + build settings) goes to the device, which
  builds the engine once at first start with the same builder; an INT8 recipe also carries the
  FP16 candidate (``fallback/``), served when the INT8 engine fails its acceptance set there.

The engine stage (``edgebuild.stages.engine``) decides with these; ``devices.engines`` builds,
``devices.acceptance`` measures a shipping engine on its device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgebuild.runtime.engines.device import DeviceFacts, module_matches

if TYPE_CHECKING:
    from edgebuild.accuracy.gate import GateResult
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import Target

__all__ = ["candidate_order", "decide_placement"]


def decide_placement(target: Target, host: DeviceFacts, build_on: str | None = None) -> tuple[str, str]:
    """(placement, why) for one target on this host; ``build_on`` is the group's ssh:// build device."""
    release, module = target.release, target.module
    if build_on:
        return build_on, f"built on {build_on} after checking over SSH that it is a {module.name} on L4T R{release.l4t}"
    if host.tensorrt is not None:
        same_trt = host.tensorrt.split(".")[:3] == release.tensorrt.split(".")[:3]
        same_l4t = host.l4t in (release.l4t, *release.l4t_aliases)
        if host.l4t and same_trt and same_l4t and module_matches(host, module.compatible):
            return "local", f"this host is a {module.name} on L4T R{host.l4t} with TensorRT {host.tensorrt}"
    if host.tensorrt is None or host.compute_capability is None:
        problem = host.tensorrt_problem if host.tensorrt else \
            f"TensorRT is not installed on this host ({host.tensorrt_problem})"
        return "deferred", (f"{problem}; the device builds the engine from the recipe at first start "
                            "(or name a build device with `build_on = \"ssh://user@host\"` in the fleet group)")
    return "host-check", (
        f"this host (TensorRT {host.tensorrt}, sm {host.compute_capability}"
        + (f", L4T R{host.l4t}" if host.l4t else ", not a Jetson")
        + f") is not {target.id} (TensorRT {release.tensorrt}, sm {module.compute_capability}): the engine "
        "checks the build and is never packaged")


def candidate_order(gate: GateResult, accelerator: str = "gpu") -> list[str]:
    """The gate's candidates an engine may be built from, in the order they are tried for a target.

    The selected one first, then every other passing, selectable candidate that keeps more of the
    model in float (``PRECISION_ORDER``: int8, int8-mixed, fp16, fp32): what the accept step falls
    back to when an engine loses the gate's margin on its device. On a DLA core (``accelerator``)
    the candidates the DLA cannot run (``CandidateResult.dla_refused``) are left out: the first
    the DLA runs comes first.
    """
    from edgebuild.accuracy.gate import PRECISION_ORDER

    if gate.selected is None:
        return []
    after = PRECISION_ORDER.index(gate.selected)
    rest = sorted((c for c in gate.candidates if c.passed and c.selectable and c.precision != gate.selected
                   and PRECISION_ORDER.index(c.precision) > after), key=lambda c: PRECISION_ORDER.index(c.precision))
    order = [gate.selected, *(c.precision for c in rest)]
    if accelerator == "gpu":
        return order
    return [name for name in order if not gate.candidate(name).dla_refused]


def chosen_candidate(gate: GateResult, candidate: str | None = None, accelerator: str = "gpu") -> str:
    """``candidate``, else the gate's selection (on a DLA core: the first it runs): what a group's engine is built
    from.

    The engine stage runs only after a gate that selected one: a gate that selected nothing
    stops the compile with its verdict (``accuracy.gate.verdict``) before any recipe is written,
    and a DLA group none of whose passing candidates the DLA runs is stopped by the engine stage.
    """
    chosen = candidate or next(iter(candidate_order(gate, accelerator)), None)
    assert chosen is not None, "the gate selected nothing the group runs: the compile stops before the engine stage"
    return chosen


def fallback_candidate(project: Project, gate: GateResult, candidate: str, accelerator: str = "gpu") -> str | None:
    """The FP16 (else FP32) candidate a first-boot device falls back to when its INT8 (FP8, NVFP4) engine fails
    acceptance.

    Only for a quantized candidate, and only with ``accuracy.first_boot_fallback``; None otherwise.
    """
    if not project.accuracy.first_boot_fallback or not candidate.startswith(_QUANTIZED):
        return None
    return next((c for c in candidate_order(gate, accelerator) if not c.startswith(_QUANTIZED)), None)


#: the candidates a first-boot engine may fail acceptance with for its quantization (INT8, FP8, NVFP4)
_QUANTIZED = ("int8", "fp8", "nvfp4")


def shippable(placement: str) -> bool:
    """An engine built where it runs (``local``, ``ssh://``) ships; host-check and deferred do not."""
    return placement == "local" or placement.startswith("ssh://")
