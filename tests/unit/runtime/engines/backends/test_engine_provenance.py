"""Contract tests: every engine built records its provenance, and the runner refuses a mismatched or
damaged engine before TensorRT's ``deserialize_cuda_engine`` is ever called (TensorRT test double,
held to the API listings of 8.5.3.1, 8.6.1 and 10.3.0)."""

from __future__ import annotations

import datetime
import json
import socket
import struct
from pathlib import Path

import pytest

from edgebuild import __version__
from edgebuild.errors import BundleError, TargetError
from edgebuild.runtime.base.files import sha256_bytes
from edgebuild.runtime.engines.backends.tensorrt import BuildSettings, TensorRTRunner, build_engine
from edgebuild.runtime.engines.device import DeviceFacts, build_from_recipe
from edgebuild.runtime.engines.provenance import EngineProvenance
from tests.fakes.tensorrt_double import PLAN, make_tensorrt
from tests.support.jetson import JETSON_FILES, write_device_root
from tests.support.runtime_artifacts import write_artifact

SHAPES = {"images": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
LISTED = ("8.5.3.1", "8.6.1", "10.3.0")
NANO = "orin-nano-8gb@6.2"
NANO_BOARD = tuple(s for s in JETSON_FILES[NANO][1].decode().split("\0") if s)


def _settings(tmp_path: Path, **overrides) -> BuildSettings:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"an ONNX file the double only checks exists")
    values = dict(onnx_path=onnx, engine_path=tmp_path / "model.plan", precision="fp16", profiles=SHAPES,
                  workspace_bytes=1 << 28)
    values.update(overrides)
    return BuildSettings(**values)


# -- what a build records --------------------------------------------------------------------------

@pytest.mark.parametrize("version", LISTED)
@pytest.mark.parametrize(("precision", "dla", "flags"), [("fp32", None, []), ("fp16", None, ["FP16"]),
                                                         ("int8", None, ["FP16", "INT8"]),
                                                         ("fp16", 0, ["FP16", "GPU_FALLBACK"])])
def test_the_builder_records_the_flags_the_config_held(tmp_path: Path, version: str, precision: str,
                                                       dla: int | None, flags: list[str]) -> None:
    trt = make_tensorrt(version)
    static = {"images": ((1, 3, 64, 64),) * 3}  # a DLA engine runs one shape
    meta = build_engine(_settings(tmp_path, precision=precision, dla_core=dla,
                                  **({"profiles": static} if dla is not None else {})), trt=trt)
    assert meta["builder_flags"] == flags and meta["version_compatible"] is False
    # the hardware compatibility level exists from 8.6; edgebuild never raises it
    assert meta["hardware_compatibility"] == (None if version == "8.5.3.1" else "NONE")
    assert "IBuilderConfig.get_flag" not in trt.call_names()  # read from the flags bitmask, no extra calls


def test_a_device_build_writes_the_whole_provenance(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    device = DeviceFacts("10.3.0", "", "8.7", "36.4.3", NANO_BOARD)
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    engine_json = build_from_recipe(folder / "recipe.json", device, trt=make_tensorrt("10.3.0"))
    data = json.loads(engine_json.read_text())
    record = EngineProvenance.from_engine_json(data)
    assert record.unknown() == []
    assert record.tensorrt_version == "10.3.0" and record.compute_capability == "8.7"
    assert record.module == "orin-nano-8gb" and record.jetpack == "6.2" and record.built_on_l4t == "36.4.3"
    assert record.plan_sha256 == sha256_bytes(PLAN) and record.plan_bytes == len(PLAN)
    assert record.builder_flags == () and record.precision == "fp32"  # the artifact's recipe is fp32
    assert record.strongly_typed is False  # 10.x builds a weakly typed network unless asked
    assert record.timing_cache_used is True and record.timing_cache_loaded is False
    assert record.hardware_compatibility == "NONE" and record.version_compatible is False
    assert record.hostname == socket.gethostname() and record.device_kind == "jetson"
    assert record.edgebuild_version == __version__ and record.schema == "edgebuild.engine/2"
    built = datetime.datetime.fromisoformat(record.built_at)
    assert built.utcoffset() == datetime.timedelta(0) and built >= before


def test_an_older_engine_json_still_reads_with_its_gaps_named() -> None:
    old = {"tensorrt_version": "8.5.2.2", "compute_capability": "8.7", "module": "agx-orin-64gb",
           "jetpack": "5.1.2", "plan": "build/engines/dock/model.plan", "plan_sha256": "ab" * 32}
    record = EngineProvenance.from_engine_json(old)
    assert record.module == "agx-orin-64gb" and record.module_compatible == ()
    assert {"builder_flags", "built_at", "hostname", "edgebuild_version", "timing_cache_used"} <= set(record.unknown())
    shown = dict(record.lines())
    assert shown["builder flags"] == "unknown" and shown["timing cache"] == "unknown"
    assert shown["TensorRT"] == "8.5.2.2"


# -- the runner refuses before deserializing ---------------------------------------------------------

def _engine(tmp_path: Path, plan: bytes = PLAN, **record) -> tuple[Path, dict]:
    path = tmp_path / "engine.plan"
    path.write_bytes(plan)
    data = {"tensorrt_version": "10.3.0", "compute_capability": "8.7", "plan_sha256": sha256_bytes(PLAN),
            "plan_bytes": len(PLAN), "jetpack": "6.2",
            "module": {"id": "orin-nano-8gb", "name": "Jetson Orin Nano 8GB",
                       "compatible": ["nvidia,p3767-0003", "nvidia,p3767-0005", "nvidia,tegra234"]},
            "built_on": {"l4t": "36.4.3", "compatible": list(NANO_BOARD)}}
    data.update(record)
    return path, data


def _refused(trt, plan: Path, record: dict | None, root: Path, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        TensorRTRunner(plan, record, trt=trt, memory=trt.memory("8.7"), device_root=root)
    assert "Runtime.deserialize_cuda_engine" not in trt.call_names() and "Runtime()" not in trt.call_names()
    assert "deferred" in info.value.hint and "build-engine" in info.value.hint


def test_the_matching_engine_loads(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0")
    plan, record = _engine(tmp_path)
    TensorRTRunner(plan, record, trt=trt, memory=trt.memory("8.7"), device_root=write_device_root(tmp_path / "d", NANO))
    assert "Runtime.deserialize_cuda_engine" in trt.call_names()


def test_a_plan_that_is_not_its_records_is_refused(tmp_path: Path) -> None:
    plan, record = _engine(tmp_path, plan=PLAN[:-4])  # truncated
    _refused(make_tensorrt("10.3.0"), plan, record, write_device_root(tmp_path / "d", NANO), BundleError,
             r"engine.plan: its sha256 is [0-9a-f]{64} but engine.json records [0-9a-f]{64} \(\d+ bytes recorded\): "
             "the engine was damaged, truncated or replaced")


def test_an_engine_built_on_another_l4t_line_is_refused(tmp_path: Path) -> None:
    plan, record = _engine(tmp_path)
    root = write_device_root(tmp_path / "d", "agx-orin-64gb@5.1.2")
    _refused(make_tensorrt("10.3.0"), plan, record, root, TargetError,
             r"built on L4T R36.4.3 \(JetPack 6.2\) and this device runs L4T R35.4.1.*"
             r"this device has TensorRT 10.3.0, compute capability 8.7, L4T R35.4.1")


def test_an_engine_for_another_module_is_refused(tmp_path: Path) -> None:
    plan, record = _engine(tmp_path)
    root = write_device_root(tmp_path / "d", NANO)
    (root / "proc" / "device-tree" / "compatible").write_bytes(JETSON_FILES["agx-orin-64gb@5.1.2"][1])
    _refused(make_tensorrt("10.3.0"), plan, record, root, TargetError,
             r"built for a Jetson Orin Nano 8GB \(nvidia,p3767-0003, nvidia,p3767-0005\) and this board is "
             r"nvidia,p3737-0000\+p3701-0005")


def test_an_engine_for_another_tensorrt_or_gpu_is_refused(tmp_path: Path) -> None:
    plan, record = _engine(tmp_path, tensorrt_version="8.6.1")
    _refused(make_tensorrt("10.3.0"), plan, record, tmp_path, TargetError, "TensorRT version differ")
    plan, record = _engine(tmp_path, compute_capability="7.2")
    _refused(make_tensorrt("10.3.0"), plan, record, tmp_path, TargetError, "compute capability differ")


def test_without_engine_json_the_engine_header_decides(tmp_path: Path) -> None:
    # a header laid out as trtexec's printPlanVersion reads it: b"ftrt", layout word 0, version at 24-27
    head = bytearray(28)
    head[0:4], head[24:28] = b"ftrt", bytes((10, 3, 0, 30))
    struct.pack_into("<I", head, 4, 0)
    plan = tmp_path / "bare.plan"
    plan.write_bytes(bytes(head) + bytes(64))
    _refused(make_tensorrt("8.6.1"), plan, None, tmp_path, TargetError,
             r"the engine's header says TensorRT 10.3.0.30, but this device has TensorRT 8.6.1")


def test_an_unconfirmed_8_x_header_never_refuses_on_its_own(tmp_path: Path) -> None:
    head = bytearray(28)
    head[0:4], head[24:28] = b"ftrt", bytes((8, 5, 2, 2))  # bytes 24-27 are not relied on before TensorRT 10
    plan = tmp_path / "bare.plan"
    plan.write_bytes(bytes(head))
    trt = make_tensorrt("8.6.1")
    with pytest.raises(TargetError, match="TensorRT 8.6.1 cannot load"):  # TensorRT itself says no
        TensorRTRunner(plan, trt=trt, memory=trt.memory("8.7"), device_root=tmp_path)
    assert "Runtime.deserialize_cuda_engine" in trt.call_names()
