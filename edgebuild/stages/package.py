"""The package stage (per group): the signed OTA bundle and the Mender artifact, and the fleet manifest.

Reads: the group's model folder and container context (the engine and container stages'
records name them), the ``[ota]`` settings and signing key, the accuracy policy (a candidate
selected with the gate off is not packaged unless ``--ship-ungated``). Writes
``build/packages/<group>/`` and ``build/packages/fleet.json``; its record is a ``PackageRecord``.
"""

from __future__ import annotations

from pathlib import Path

from edgebuild.content import digest, file_sha256, tree_sha256
from edgebuild.errors import AccuracyGateError
from edgebuild.pipeline.runner import Stage
from edgebuild.shipping.ota import PackagedAcceptance, PackageRecord
from edgebuild.stages.container import CONTAINER, folder_key, model_folder_key
from edgebuild.stages.engine import ENGINE, model_folder
from edgebuild.stages.gate import GATE
from edgebuild.stages.session import CompileInputs

__all__ = ["PACKAGE"]

#: what the bundle's manifest and fleet.json say of a device acceptance
SHOWN_ACCEPTANCE = ("candidate", "where", "backend", "metric", "value", "retention", "images")


def _context(inputs: CompileInputs) -> Path:
    return inputs.project.build_dir / inputs.record(CONTAINER).context


def _key(inputs: CompileInputs) -> dict[str, str]:
    project = inputs.project
    ota = project.ota
    key = project.path(ota.signing_key) if ota.signing_key else None
    since = inputs.session.settings.package_since
    return {"model_folder": digest(model_folder_key(inputs)), "gated": str(inputs.record(GATE).policy.gated),
            "ship_ungated": str(inputs.session.settings.ship_ungated),
            "run_specs": digest(folder_key(_context(inputs))),
            "ota": digest(ota.model_dump(exclude={"signing_key"})), "project": project.project.name,
            "signing_key": file_sha256(key) if key and key.is_file() else "none",
            "since": (file_sha256(since) if since.is_file() else tree_sha256(since, "*")) if since else ""}


def _run(inputs: CompileInputs) -> PackageRecord:
    from edgebuild.shipping.ota import package_group

    if not inputs.record(GATE).policy.gated and not inputs.session.settings.ship_ungated:
        raise AccuracyGateError(
            f"{inputs.unit.name}: not packaged: the candidate was selected with the gate off (--no-gate, "
            "accuracy.gate = false), so nothing says it keeps the model's accuracy",
            hint="train the model and compile with the gate on, or pass --ship-ungated to package it anyway")
    accepted = inputs.record(ENGINE).accepted
    shown = PackagedAcceptance.from_dict({k: v for k, v in accepted.as_dict().items() if k in SHOWN_ACCEPTANCE}) \
        if accepted else None
    return package_group(inputs.project, inputs.unit, model_folder=model_folder(inputs), context=_context(inputs),
                         since=inputs.session.settings.package_since, accepted=shown, progress=inputs.progress)


def _outputs(inputs: CompileInputs, record: PackageRecord) -> list[Path]:
    root = inputs.project.root
    return [root / record.bundle.path, root / record.mender.path]


def _describe(record: PackageRecord) -> str:
    return (f"{record.bundle.size} bytes{'' if record.signed else ' UNSIGNED'}"
            + (f", delta over {record.delta_over}" if record.delta_over else ""))


PACKAGE = Stage(
    name="package", version=6, summary="signed OTA bundle and Mender artifact, fleet manifest",
    record=PackageRecord, after=("engine", "container", "gate"), per_group=True, key=_key, run=_run,
    outputs=_outputs, describe=_describe)
