"""The schema of ``edgebuild.toml``: one pydantic model per section, and ``Project`` for the file.

These models check shape and types (unknown keys, wrong types, values out of range); what needs
more than one key, the profile catalog or the disk to see is checked by ``edgebuild.project.config``,
which loads the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgebuild.project.fleet_group import NAME_PATTERN, FleetGroup
from edgebuild.project.streams_schema import StreamEntry, TrackingSection
from edgebuild.project.tracking_section import TrackingGateSection
from edgebuild.targets.presets import parse_size

__all__ = ["HUB_SOURCE", "INSTANCE_KINDS", "NAME_PATTERN", "TASK_KINDS", "WEIGHTED_OPS", "FleetGroup", "OtaSection",
           "ProjectSection", "RuntimeSection"]

PROJECT_FILE = "edgebuild.toml"

DTYPES = ("float32", "float16", "int64", "int32", "uint8", "bool")
DETECTION_METRICS = ("mAP50-95", "mAP50")
CLASSIFICATION_METRICS = ("top-1", "top-5")
# each task's metrics, the gate's default first (edgebuild.accuracy.task_metrics.TASK_METRICS computes them)
SEGMENTATION_METRICS = ("mask mAP50-95", "mask mAP50", "box mAP50-95", "box mAP50")
POSE_METRICS = ("pose mAP50-95", "pose mAP50", "box mAP50-95", "box mAP50")
OBB_METRICS = ("obb mAP50-95", "obb mAP50")
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(gt=0)]


class ProjectSection(_Section):
    name: str
    build_dir: str = "build"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError("must be lower-case letters, digits, '-' or '_', starting with a letter or digit")
        return value


class InputSpec(_Section):
    name: str
    dtype: Literal[DTYPES] = "float32"  # type: ignore[valid-type]
    min_shape: list[PositiveInt]
    opt_shape: list[PositiveInt]
    max_shape: list[PositiveInt]

    @model_validator(mode="after")
    def _shapes_ordered(self) -> InputSpec:
        ranks = {len(self.min_shape), len(self.opt_shape), len(self.max_shape)}
        if len(ranks) != 1:
            raise ValueError(
                f"min_shape, opt_shape and max_shape must have the same rank, found "
                f"{self.min_shape}, {self.opt_shape}, {self.max_shape}"
            )
        for axis, (lo, opt, hi) in enumerate(zip(self.min_shape, self.opt_shape, self.max_shape)):
            if not lo <= opt <= hi:
                raise ValueError(
                    f"axis {axis} needs min <= opt <= max, found {lo}, {opt}, {hi} "
                    f"(min_shape {self.min_shape}, opt_shape {self.opt_shape}, max_shape {self.max_shape})"
                )
        return self

    @property
    def dynamic_axes(self) -> list[int]:
        """Axes whose size varies between min and max: these become ONNX dynamic axes."""
        return [i for i, (lo, hi) in enumerate(zip(self.min_shape, self.max_shape)) if lo != hi]


MODEL_SOURCE_KINDS = ("onnx", "ultralytics", "torchscript")  # what `[model] source` may be: ONNX
# (edgebuild.sources.onnx_file), an Ultralytics checkpoint (edgebuild.sources.ultralytics.checkpoint), a
# TorchScript file (edgebuild.sources.torchscript_file); a name "torchvision:<model>" or "timm:<model>" is a
# model hub's model (edgebuild.sources.model_hub), told by its prefix
HUB_SOURCE = re.compile(r"^(torchvision|timm):")


class ModelSection(_Section):
    # exactly one of: a Python function that builds a torch.nn.Module, or a model file
    entry_point: str | None = None
    source: str | None = None  # a model file, e.g. "model.onnx" (relative to the project folder)
    kind: Literal[MODEL_SOURCE_KINDS] | None = None  # type: ignore[valid-type]  # default: told by the file
    weights: str | None = None
    # an Ultralytics checkpoint (source = "best.pt") is a pickle: loading it runs arbitrary code, only if true
    trust_checkpoint: bool = False
    python_path: list[str] = ["."]
    inputs: list[InputSpec] = Field(min_length=1)
    outputs: list[str] = Field(min_length=1)
    # an NMS-free (YOLOv10/YOLO26) checkpoint: which branch of its head ships. None: "one-to-one" (its top-k, no
    # NMS); "one-to-many": the raw per-anchor head with NMS, as for any YOLO detector (docs/model-sources.md)
    head: Literal["one-to-one", "one-to-many"] | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry_point(cls, value: str | None) -> str | None:
        if value is not None and not _ENTRY_POINT.match(value):
            raise ValueError(
                f"must look like 'package.module:function', found {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if (self.entry_point is None) == (self.source is None):
            raise ValueError(
                "needs exactly one of entry_point (a function that builds the PyTorch model, "
                "'package.module:function') and source (a model file, e.g. \"model.onnx\"), found "
                + ("both" if self.entry_point else "neither"))
        if self.source is not None and self.weights is not None and not HUB_SOURCE.match(self.source):
            raise ValueError("weights applies to entry_point or a model hub's name (source = "
                             "\"torchvision:resnet18\"); a model file (source) carries its own weights")
        if self.kind is not None and self.source is None:
            raise ValueError("kind applies to source (the kind of model file); entry_point is always PyTorch")
        if self.trust_checkpoint and self.source is None:
            raise ValueError("trust_checkpoint applies to source (a checkpoint file); an entry point loads its own")
        if self.head is not None and self.source is None:
            raise ValueError("head applies to source (an Ultralytics checkpoint with an NMS-free head); an entry "
                             "point returns what its function builds")
        return self


class PreprocessSection(_Section):
    input_size: list[PositiveInt] = Field(min_length=2, max_length=2)
    resize: Literal["letterbox", "resize"] = "letterbox"
    pad_value: int = Field(114, ge=0, le=255)
    channel_order: Literal["RGB", "BGR", "GRAY"] = "RGB"
    mean: list[float] = [0.0, 0.0, 0.0]
    std: list[float] = [1.0, 1.0, 1.0]

    @model_validator(mode="after")
    def _normalization(self) -> PreprocessSection:
        channels = 1 if self.channel_order == "GRAY" else 3
        for key in ("mean", "std"):
            if len(getattr(self, key)) != channels:
                raise ValueError(
                    f"{key} needs {channels} value(s) for channel_order {self.channel_order!r}, "
                    f"found {getattr(self, key)}"
                )
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std values must be > 0, found {self.std}")
        return self

    @property
    def channels(self) -> int:
        return 1 if self.channel_order == "GRAY" else 3


def _check_nms_inside(in_model: bool, max_detections: int, boxes_output: str, scores_output: str) -> None:
    """What NMS inside the model needs of a detection's, pose's or segmentation's ``[task.postprocess]``."""
    if not in_model:
        return
    from edgebuild.runtime.base.model_outputs import DetectionParams

    limit = DetectionParams.pre_nms_top_k  # the graph feeds NMS the host decode's candidates at most
    if max_detections > limit:
        raise ValueError(f"max_detections = {max_detections} is more than NMS inside the model returns "
                         f"({limit}: the candidates it keeps before NMS); set max_detections <= {limit}")
    if boxes_output == scores_output:
        raise ValueError(f"boxes_output and scores_output are both {boxes_output!r}")


class DetectionPostprocess(_Section):
    boxes_output: str = "boxes"
    scores_output: str = "scores"
    score_threshold: float = Field(0.001, ge=0.0, lt=1.0)
    nms_iou: float = Field(0.6, gt=0.0, le=1.0)
    max_detections: PositiveInt = 100
    # NMS inside the model: the export appends this decode (the thresholds above, baked in) to the
    # graph, whose outputs become num_detections, detection_boxes, detection_scores, detection_classes
    # (edgebuild.sources.export.nms_graph; docs/detections.md)
    in_model: bool = False

    @model_validator(mode="after")
    def _in_model_limit(self) -> DetectionPostprocess:
        _check_nms_inside(self.in_model, self.max_detections, self.boxes_output, self.scores_output)
        return self


class ClassificationPostprocess(_Section):
    logits_output: str = "logits"


class InstancePostprocess(_Section):
    """Segmentation and pose: boxes and scores as detection's, decoded on the host (NMS as Ultralytics' val)."""

    boxes_output: str = "boxes"
    scores_output: str = "scores"
    score_threshold: float = Field(0.001, ge=0.0, lt=1.0)
    nms_iou: float = Field(0.7, gt=0.0, le=1.0)
    max_detections: PositiveInt = 300
    # NMS inside the model (pose, segmentation): detection's outputs plus each detection's keypoints or mask
    # coefficients and the prototypes (edgebuild.sources.export.nms_graph; docs/tasks.md, "On the device")
    in_model: bool = False

    @model_validator(mode="after")
    def _in_model_limit(self) -> InstancePostprocess:
        _check_nms_inside(self.in_model, self.max_detections, self.boxes_output, self.scores_output)
        return self


class PosePostprocess(InstancePostprocess):
    keypoints_output: str = "keypoints"  # [N, A, K, 3]: x, y in input pixels, confidence


class SegmentationPostprocess(InstancePostprocess):
    coefficients_output: str = "mask_coefficients"  # [N, A, M]
    prototypes_output: str = "prototypes"  # [N, M, H/4, W/4]


class ObbPostprocess(InstancePostprocess):
    """Oriented boxes: boxes_output is [N, A, 5], cx, cy, w, h in input pixels and the angle in radians
    (Ultralytics' xywhr); decoded by rotated NMS (probiou) on the host."""

    @field_validator("in_model")
    @classmethod
    def _no_rotated_nms(cls, value: bool) -> bool:
        if value:
            raise ValueError("NMS inside the model is not built for this task yet: TensorRT has no rotated NMS, "
                             "so the host decodes its outputs (docs/tasks.md); leave in_model out")
        return value


class DetectionTask(_Section):
    kind: Literal["detection"]
    classes: list[str] = Field(min_length=1)
    preprocess: PreprocessSection
    postprocess: DetectionPostprocess = DetectionPostprocess()


class ClassificationTask(_Section):
    kind: Literal["classification"]
    classes: list[str] = Field(min_length=2)
    preprocess: PreprocessSection
    postprocess: ClassificationPostprocess = ClassificationPostprocess()


class PoseTask(_Section):
    kind: Literal["pose"]
    classes: list[str] = Field(min_length=1)
    kpt_shape: list[PositiveInt] = Field(min_length=2, max_length=2)  # [keypoints, 2 or 3], the data.yaml's
    preprocess: PreprocessSection
    postprocess: PosePostprocess = PosePostprocess()

    @field_validator("kpt_shape")
    @classmethod
    def _dims(cls, value: list[int]) -> list[int]:
        if value[1] not in (2, 3):
            raise ValueError(f"must be [keypoints, 2 or 3] (x, y and, with 3, visibility), found {value}")
        return value


class SegmentationTask(_Section):
    kind: Literal["segmentation"]
    classes: list[str] = Field(min_length=1)
    preprocess: PreprocessSection
    postprocess: SegmentationPostprocess = SegmentationPostprocess()


class ObbTask(_Section):
    kind: Literal["obb"]
    classes: list[str] = Field(min_length=1)
    preprocess: PreprocessSection
    postprocess: ObbPostprocess = ObbPostprocess()


#: task.kind -> its section and its metrics (the gate's default first)
TASK_KINDS: dict[str, tuple[type[_Section], tuple[str, ...]]] = {
    "detection": (DetectionTask, DETECTION_METRICS), "classification": (ClassificationTask, CLASSIFICATION_METRICS),
    "segmentation": (SegmentationTask, SEGMENTATION_METRICS), "pose": (PoseTask, POSE_METRICS),
    "obb": (ObbTask, OBB_METRICS)}
#: the kinds whose per-anchor outputs the host decodes (``InstancePostprocess``; docs/tasks.md)
INSTANCE_KINDS = ("segmentation", "pose", "obb")


DATA_FORMATS = ("yolo", "coco", "voc", "folders")  # what `[data] format` may say (edgebuild.datasets reads each)
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_][\w.-]*$")


class ValidationData(_Section):
    # without [data] dataset, the validation set: images (+ annotations for detection: a COCO JSON file or a
    # folder of Pascal VOC XML files); with it, only max_images applies (the set is its validation_split)
    images: str | None = None
    annotations: str | None = None
    max_images: PositiveInt | None = None


class DataSection(_Section):
    # a dataset with splits: a YOLO data.yaml, a Pascal VOC root, or (classification) a folder of split folders
    dataset: str | None = None
    # what the data is; default: told by the files (edgebuild.datasets.formats)
    format: Literal[DATA_FORMATS] | None = None  # type: ignore[valid-type]
    calibration_split: str = "train"  # with dataset: the split that calibrates
    validation_split: str = "val"  # with dataset: the split that validates
    # a folder of calibration images: required without dataset; with one, it replaces calibration_split
    calibration_images: str | None = None
    max_calibration_images: PositiveInt | None = None
    validation: ValidationData = ValidationData()
    prepare: str | None = None

    @field_validator("calibration_split", "validation_split")
    @classmethod
    def _split(cls, value: str) -> str:
        if not _SPLIT_NAME.match(value):
            raise ValueError(f"must be a split name such as 'train' or 'val' (letters, digits, '_', '-', '.'), "
                             f"found {value!r}")
        return value

    @field_validator("prepare")
    @classmethod
    def _prepare(cls, value: str | None) -> str | None:
        if value is not None and not _ENTRY_POINT.match(value):
            raise ValueError(f"must look like 'package.module:function', found {value!r}")
        return value


class AccuracySection(_Section):
    metric: str | None = None
    min_retention: float = 0.92
    # auto: the fastest measured when the backend is the target's TensorRT, otherwise the lowest
    # precision that passes (CPU latency says little about a Jetson's tensor cores)
    select: Literal["auto", "fastest", "lowest-precision"] = "auto"
    # what measures the candidates: ONNX Runtime on the CPU (every host), or this host's real
    # TensorRT (a host check of the real kernels' accuracy; needs TensorRT and an NVIDIA GPU)
    backend: Literal["onnxruntime", "tensorrt"] = "onnxruntime"
    # validation images an engine built on a device (local, ssh://) is measured on there; all if unset
    device_images: int | None = Field(default=None, ge=1)
    # a deferred (first-boot) INT8 recipe also carries the FP16 candidate, which the device serves
    # when its INT8 engine fails the acceptance set (else it stays not ready and the OTA rolls back)
    first_boot_fallback: bool = True
    # false: a dry run of an untrained model (`compile --no-gate`): a candidate is selected without
    # checking its accuracy, and package refuses it unless --ship-ungated
    gate: bool = True
    # the FP32 baseline is judged before any candidate (against chance and the metric the model file records;
    # edgebuild.accuracy.baseline): "check" refuses a wrong one, "accept" says the number is known and right
    baseline: Literal["check", "accept"] = "check"
    # [accuracy.tracking]: the tracking gate (HOTA of tracks, docs/tracking-gate.md); None: not asked for
    tracking: TrackingGateSection | None = None

    @field_validator("min_retention", mode="before")
    @classmethod
    def _retention_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # TOML true/false would otherwise read as 1.0/0.0
            raise ValueError(f"must be a number in (0, 1], such as 0.92; found the boolean {str(value).lower()}")
        return value

    @field_validator("min_retention")
    @classmethod
    def _retention(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"must be in (0, 1], found {value}")
        return value


class ExportSection(_Section):
    opset: int | None = Field(None, ge=9)
    exporter: Literal["auto", "dynamo", "torchscript"] = "auto"
    simplify: bool = True
    atol: float = Field(1e-4, ge=0)
    rtol: float = Field(1e-3, ge=0)
    external_data: bool = False


WEIGHTED_OPS = ["Conv", "ConvTranspose", "Gemm", "MatMul"]  # what TensorRT runs in INT8 (edgebuild.accuracy.quantize)


class QuantizeSection(_Section):
    # candidates that may be selected (FP32 is always evaluated as the reference); fp8, nvfp4: Thor groups only
    precisions: list[Literal["int8", "fp16", "fp32", "fp8", "nvfp4"]] = Field(["int8", "fp16", "fp32"], min_length=1)
    # how activation ranges are chosen: "auto" makes every method's INT8 from one set of statistics
    # (minmax, percentile 99.99 and 99.999, entropy, mse), ranks them by their outputs' error on
    # sensitivity_images and measures the best measure_best with the metric; a method name makes that one
    calibration_method: Literal["auto", "minmax", "percentile", "entropy", "mse"] = "auto"
    percentile: float = Field(99.999, gt=90, le=100)  # calibration_method = "percentile"
    # histogram bins of |x| per activation (every method's range is computed from them)
    calibration_bins: int = Field(2048, ge=16, le=65536)
    # add each quantized Conv/Gemm's expected output shift to its bias: "auto" tries with and without
    bias_correction: Literal["auto", "on", "off"] = "auto"
    # INT8 variants measured with the full metric (the rest are ranked by the cheap signal only)
    measure_best: PositiveInt = 3
    per_channel: bool = True
    # ops whose inputs and weights get Q/DQ (TensorRT's INT8 layers); the rest stays in float
    op_types: list[str] = Field(WEIGHTED_OPS, min_length=1)
    # also quantize the Adds that join a weighted op's output with another activation (TensorRT fuses them)
    residual_add: bool = True
    max_kept_layers: int = Field(8, ge=0)
    # images the layer ranking of the INT8 fallback runs on (quantization error per layer)
    sensitivity_images: PositiveInt = 16

    @model_validator(mode="after")
    def _bins_fit_the_method(self) -> QuantizeSection:
        if self.calibration_method in ("auto", "entropy") and self.calibration_bins < 512:
            raise ValueError(
                f"calibration_bins = {self.calibration_bins} is too few for the entropy method, which compares "
                "128-level quantizations of the histogram: with so few bins it can hardly pick anything but the "
                "maximum, the same ranges as minmax (use 512 or more; the default 2048 is TensorRT's)")
        return self

    @field_validator("op_types")
    @classmethod
    def _onnx_ops(cls, value: list[str]) -> list[str]:
        if value == WEIGHTED_OPS:
            return value  # the default: no need to load ONNX's operator schemas
        from onnx import defs

        unknown = [op for op in value if not defs.has(op)]
        if unknown:
            raise ValueError(f"{', '.join(repr(u) for u in unknown)} {'is' if len(unknown) == 1 else 'are'} not ONNX "
                             f"operator(s) (e.g. {', '.join(WEIGHTED_OPS)}, Add, MaxPool, AveragePool, Concat)")
        return value


class RuntimeSection(_Section):
    warmup_budget_s: float = Field(30.0, gt=0)
    cgroup_preset: str | None = None
    port: int = Field(8000, ge=1, le=65535)
    # dynamic batching: requests that arrive within max_queue_delay_ms of each other and share their
    # non-batch dimensions run as one batch of at most max_batch_size; 1 turns it off
    max_batch_size: PositiveInt = 1
    max_queue_delay_ms: float = Field(2.0, ge=0, le=1000)
    preferred_batch_size: list[PositiveInt] = []  # run at once when reached (Triton's; 2 to max_batch_size)
    instance_count: int = Field(1, ge=1, le=16)  # Triton's instance_group count: sessions or TensorRT contexts
    # which server the fleet runs: edgebuild's (always written: the OTA health check runs it), and
    # with "triton" or "both" also a Triton model repository and container per group
    server: Literal["edgebuild", "triton", "both"] = "edgebuild"
    # a raw-head detector: edgebuild's server also decodes (the host's decode + NMS) and answers
    # detections; a request can ask for them or for the raw tensors either way (docs/serving.md)
    detections: bool = False
    # the server process's own memory on the device (Python, numpy, the TensorRT runtime and its CUDA
    # context), which a fleet group's memory plan counts once for all its models; an estimate: measure
    # yours (`edgebuild bench` reports the peak) and set it
    footprint: str = "512M"
    tracking: TrackingSection | None = None  # how the device runs [[streams]] (streams_schema.py)

    @field_validator("footprint")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size(value)  # its ValueError says how to write a size
        return value


class OtaSection(_Section):
    artifact_name: str | None = None
    version: str = "0.1.0"
    signing_key: str | None = None
    # Mender device types per module id (default: the module id), e.g. the Yocto MACHINE names
    # {"agx-orin-64gb" = ["jetson-agx-orin-devkit"]}
    device_types: dict[str, list[str]] = {}
    # the device provide that says its L4T release, set by the fleet's rootfs artifact (e.g.
    # `mender-artifact write rootfs-image ... --provides edgebuild.l4t:36.4.3`); a model artifact
    # depends on it being the target's release. "" depends on the device type alone.
    l4t_provide: str = "edgebuild.l4t"

    @field_validator("version")
    @classmethod
    def _semantic(cls, value: str) -> str:
        from edgebuild.runtime.base import semver

        if semver.parse(value) is None:  # devices install only newer versions, compared as semver
            raise ValueError(f"must be a semantic version MAJOR.MINOR.PATCH[-prerelease][+build], found {value!r}")
        return value

    @field_validator("artifact_name", "l4t_provide")
    @classmethod
    def _mender_safe(cls, value: str | None) -> str | None:
        # Mender's clears patterns treat * as a wildcard and a backslash as an escape: neither may be in a key
        if value and (any(c in value for c in "*\\") or any(c.isspace() for c in value)):
            raise ValueError(f"must not contain '*', '\\' or spaces (Mender provides patterns), found {value!r}")
        return value


class FarmSection(_Section):
    # host:port of the labgrid coordinator (else --farm ADDRESS or $LG_COORDINATOR)
    coordinator: str | None = None
    timeout_s: float = Field(default=600.0, gt=0)  # how long a job waits for a busy board
    jobs: int | None = Field(default=None, ge=1)  # at most this many boards at once (default: all that match)


class Project(_Section):
    """A validated ``edgebuild.toml``. ``root`` is the folder that holds it."""

    project: ProjectSection
    model: ModelSection
    task: Annotated[DetectionTask | ClassificationTask | SegmentationTask | PoseTask | ObbTask,
                    Field(discriminator="kind")]
    data: DataSection
    export: ExportSection = ExportSection()
    quantize: QuantizeSection = QuantizeSection()
    accuracy: AccuracySection = AccuracySection()
    fleet: list[FleetGroup] = Field(min_length=1)
    runtime: RuntimeSection = RuntimeSection()
    ota: OtaSection = OtaSection()
    farm: FarmSection = FarmSection()
    streams: list[StreamEntry] = []  # what the groups' devices track (streams_schema.py)

    # set by load_project; not part of the file
    root: Path = Field(default=Path("."), exclude=True)
    source: Path = Field(default=Path(PROJECT_FILE), exclude=True)

    @model_validator(mode="after")
    def _one_model(self) -> Project:
        named = [g.name for g in self.fleet if g.models is not None or g.placement is not None]
        if named:
            raise ValueError(f"fleet group(s) {', '.join(named)} name models (models, placement): those are a fleet "
                             "file's keys ([models] composing model projects, docs/fleets.md); a model project's "
                             "group runs its one model, placed with accelerator")
        return self

    @model_validator(mode="after")
    def _detections_on_the_device(self) -> Project:
        if self.runtime.detections and self.task.kind == "classification":
            raise ValueError("runtime.detections decodes a raw head's detections on the device (detection, pose, "
                             "segmentation, obb); a classifier answers its logits: remove it")
        if self.runtime.detections and getattr(self.task.postprocess, "in_model", False):
            raise ValueError("runtime.detections decodes a raw head on the device, but task.postprocess.in_model "
                             "puts the decode inside the model already: keep one of them")
        return self

    @property
    def detection_postprocess(self) -> DetectionPostprocess:
        """The detection task's ``[task.postprocess]``, where the caller has checked the task is detection."""
        assert isinstance(self.task.postprocess, DetectionPostprocess), f"a {self.task.kind} task"
        return self.task.postprocess

    @property
    def metric(self) -> str:
        if self.accuracy.metric:
            return self.accuracy.metric
        return TASK_KINDS[self.task.kind][1][0]

    def path(self, relative: str) -> Path:
        """A path from the project file, resolved against the project folder."""
        return (self.root / relative).resolve()

    @property
    def build_dir(self) -> Path:
        return self.path(self.project.build_dir)

    def group(self, name: str) -> FleetGroup:
        return next(g for g in self.fleet if g.name == name)

    def with_accuracy_backend(self, backend: str) -> Project:
        """The same project measured on another backend (``validate --backend``)."""
        accuracy = self.accuracy.model_copy(update={"backend": backend})
        return self.model_copy(update={"accuracy": accuracy})

