"""The error when no exporter's model passes: why each was refused, and what to try.

Another exporter, another opset, or, when the model needs an opset above what some targets'
TensorRT parsers take, which targets cap it and how to split the fleet so the rest export.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from edgebuild.errors import ExportError
from edgebuild.sources.export.checks import ParityError, Refused
from edgebuild.text import Progress

if TYPE_CHECKING:
    from edgebuild.project.config import Project
    from edgebuild.targets.profiles import SelectedGroup

__all__ = []


def export_failure(project: Project, opset: int, refused: list[Refused], groups: Sequence[SelectedGroup] | None,
                   progress: Progress, probe: Callable[[int], str | None]) -> ExportError:
    """One error listing why every attempt was refused, and what to try (another exporter, opset, fleet split).

    ``groups`` are the targets the opset was chosen for (None: the project's fleet); ``probe``
    exports at a higher opset and says which exporter's model passes every check there, or None.
    """
    model = project.model.entry_point or project.model.source
    lines = [f"{project.source}: cannot export {model} to ONNX opset {opset}:"]
    for r in refused:
        lines.append(f"  - {r.summary}")
        lines += [f"      {d}" for d in r.details]
    advice, hint = _opset_advice(project, opset, groups, progress, probe)
    if advice:
        lines.append(advice)
    tried = {r.exporter for r in refused}
    other = 'export.exporter = "torchscript"' if "torchscript" not in tried else \
        'export.exporter = "dynamo"' if "dynamo" not in tried else ""
    if hint is None:
        hint = "try " + (f"{other}, or " if other else "") + "another export.opset"
        if all(r.parity for r in refused):
            hint = ("the model may use an operator the exporter translates inexactly; " + hint
                    + "; loosen export.atol/export.rtol only if the difference is acceptable")
    elif other:
        hint += f"; or try {other}"
    error = ParityError if all(r.parity for r in refused) else ExportError
    return error("\n".join(lines), hint=hint)


def _opset_advice(project: Project, opset: int, groups: Sequence[SelectedGroup] | None,
                  progress: Progress, probe: Callable[[int], str | None]) -> tuple[str, str | None]:
    """Would a higher opset work? Tries, lowest first, the highest opset of each target above ``opset``.

    Returns a sentence for the error (which targets cap the opset, the highest each takes) and a
    hint, or ("", None) when no target takes a higher opset.
    """
    groups = list(groups) if groups is not None else _fleet_groups(project)
    takes = {g.name: g.target.release.max_onnx_opset for g in groups}
    higher_opsets = sorted(o for o in set(takes.values()) if o > opset)
    for higher in higher_opsets:
        progress(f"export: checking whether the model exports at opset {higher}")
        exporter = probe(higher)
        if exporter is None:
            continue
        capped = [g for g in groups if takes[g.name] < higher]
        if not capped:  # every target takes it: export.opset was set below what the model needs
            return (f"At opset {higher}, which every selected target takes, it exports ({exporter} exporter) and "
                    "matches PyTorch."), f"set export.opset = {higher}, or remove export.opset"
        rest = [g for g in groups if takes[g.name] >= higher]
        names = ", ".join(g.name for g in capped)
        return (f"It needs a higher opset than some targets take: at opset {higher} it exports ({exporter} "
                f"exporter) and matches PyTorch, and {_describe(rest, takes)} can parse that, but "
                f"{_describe(capped, takes)} cap the opset at {opset}."), (
                f"give {names} their own project, or leave them out of this compile (--target "
                f"{','.join(g.name for g in rest)}), so the rest exports at opset {higher}; for {names} the model "
                f"must do without what the errors above name (rewrite that part with operators of opset {opset})")
    if higher_opsets:
        return f"It fails at opset {', '.join(map(str, higher_opsets))} too, so the opset is not what stops it.", None
    return "", None


def _describe(groups: list[SelectedGroup], takes: dict[str, int]) -> str:
    return ", ".join(f"{g.name} = {g.target.id} (TensorRT {g.target.release.tensorrt}, up to opset {takes[g.name]})"
                     for g in groups)


def _fleet_groups(project: Project) -> list[SelectedGroup]:
    from edgebuild.errors import EdgebuildError
    from edgebuild.targets.profiles import load_catalog, select_groups

    try:
        return select_groups("all", project.fleet, load_catalog())
    except EdgebuildError:  # the opset advice is a courtesy; the export error is what matters
        return []
