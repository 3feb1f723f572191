"""The build folder's layout: every path under ``build/`` is spelled here, once.

::

    build/
      .lock                       one compile at a time (pipeline.runner.build_lock)
      .records/<stage>[/<group>].json, last-compile.json    stage records (pipeline.records)
      sources/                    a model file as edgebuild adapted it (an Ultralytics head with the adapter appended)
      export/opset<N>/            the exported ONNX and its export.json (export stage)
      gate/gate.json, gate/measured/<model>/<candidate>/    the decision and its measurements (gate stage)
      engines/<group>/            the group's model folder: recipe, ONNX, acceptance set, engine (engine stage)
      engines/.state/<group>.json the engine in the folder and its device measurements
      engines/timing-caches/      TensorRT timing caches per module and TensorRT version
      containers/<group>[-cpu]/   build context and run specs (container stage)
      triton/<group>/             Triton model repository (container stage, [runtime] server = triton|both)
      packages/<group>/, packages/fleet.json    OTA bundle and Mender artifact per group (package stage)
      bench/<name>.json, bench/fleet.json       benchmark results (edgebuild bench)
      latency/<group>.json        what devices measured (bench, bench --farm) next to the latency plan's prediction
      fleet.json                  a fleet file's compile: per group its models, candidates, memory plan
      models/<model>/             a fleet model's own build folder (the layout above, again)
      groups/<group>/             a fleet group's folder: group.json and every model's folder
      farm/<command>.json         the device farm's jobs of the last validate/bench --farm
      report/                     the build report (index.html, summary.md, junit.xml)
      .cache/decoded-images.json  what `check` found decoding each image, by content (datasets.decoded)
      .cache/files.json           files' hashes and image sizes, by path and stat (statcache)

A stage writes only under its own folders; a later stage reads the folders its input records
name (an ``EngineRecord.folder``, a ``ContainerRecord.context``), which are these.

Beside ``edgebuild.toml``, outside the build folder (a clean build keeps them):
``latency_model.toml`` and ``latency_measurements.json``, the project's own latency fit and the
measurements it was fitted to (``edgebuild plan --calibrate``; ``project_latency_files``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["BuildLayout", "project_latency_files"]


class _Built(Protocol):
    """What has a build folder: a model project, or a fleet file as the shipping stages read it."""

    @property
    def build_dir(self) -> Path: ...


@dataclass(frozen=True)
class BuildLayout:
    root: Path  # the project's build folder ([project] build_dir)

    @classmethod
    def of(cls, project: _Built) -> BuildLayout:
        return cls(project.build_dir)

    @classmethod
    def default(cls, project_dir: Path) -> BuildLayout:
        """The build folder of a project at ``project_dir`` that keeps the default ``build_dir``."""
        return cls(project_dir / "build")

    # -- the pipeline's own files
    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def records(self) -> Path:
        return self.root / ".records"

    def record(self, stage: str) -> Path:
        """``stage`` is a stage name, or ``<stage>/<group>`` for a per-group stage."""
        return self.records / f"{stage}.json"

    @property
    def last_compile(self) -> Path:
        return self.records / "last-compile.json"

    # -- the stages' outputs
    @property
    def adapted_sources(self) -> Path:
        """Model files as edgebuild adapted them (model stage), named by what they were made from."""
        return self.root / "sources"

    def export(self, opset: int) -> Path:
        return self.root / "export" / f"opset{opset}"

    @property
    def gate(self) -> Path:
        return self.root / "gate"

    @property
    def engines(self) -> Path:
        return self.root / "engines"

    def engine(self, group: str) -> Path:
        """The group's model folder (what ships: recipe, ONNX, acceptance set, engine where built)."""
        return self.engines / group

    def engine_state(self, group: str) -> Path:
        return self.engines / ".state" / f"{group}.json"

    @property
    def timing_caches(self) -> Path:
        return self.engines / "timing-caches"

    def container(self, group: str, flavor: str = "jetson") -> Path:
        return self.root / "containers" / (group + ("-cpu" if flavor == "cpu" else ""))

    def triton(self, group: str) -> Path:
        return self.root / "triton" / group

    def deepstream(self, group: str) -> Path:
        return self.root / "deepstream" / group

    @property
    def packages(self) -> Path:
        return self.root / "packages"

    def package(self, group: str) -> Path:
        return self.packages / group

    @property
    def fleet_manifest(self) -> Path:
        return self.packages / "fleet.json"

    # -- a fleet file's compile
    @property
    def fleet_record(self) -> Path:
        """What a fleet file's compile did per group (``report.fleet.FleetRecord``)."""
        return self.root / "fleet.json"

    def fleet_model(self, model: str) -> Path:
        """A fleet model's own build folder."""
        return self.root / "models" / model

    def fleet_group(self, group: str) -> Path:
        return self.root / "groups" / group

    # -- what commands beside the compile write
    @property
    def bench(self) -> Path:
        return self.root / "bench"

    @property
    def bench_summary(self) -> Path:
        """The fleet-wide table of ``bench --farm``."""
        return self.bench / "fleet.json"

    def latency_check(self, group: str) -> Path:
        """A group's device measurements next to the latency plan's predictions (``latency.measured``)."""
        return self.root / "latency" / f"{group}.json"

    def farm_jobs(self, command: str) -> Path:
        return self.root / "farm" / f"{command}.json"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def decoded_images(self) -> Path:
        """What ``check`` found decoding each data image, by its bytes' SHA-256 (``datasets.decoded``)."""
        return self.root / ".cache" / "decoded-images.json"

    @property
    def file_cache(self) -> Path:
        """What was read from each file (its SHA-256, an image's size), by path and stat (``edgebuild.statcache``)."""
        return self.root / ".cache" / "files.json"


def project_latency_files(project_dir: Path) -> tuple[Path, Path]:
    """(the project's own latency fit, the measurements it was fitted to), beside its edgebuild.toml."""
    return project_dir / "latency_model.toml", project_dir / "latency_measurements.json"
