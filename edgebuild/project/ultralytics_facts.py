"""What an Ultralytics model says of itself, read without running it, and the project against it.

A checkpoint (``best.pt``) is read by ``peek_checkpoint``: its pickle is unpickled with every class
it names replaced by a stub, so nothing it names is imported or run (``torch.load`` with full
unpickling would run arbitrary code). An Ultralytics ONNX export says the same in its
``metadata_props``. Either gives ``UltralyticsFacts`` (task, class names, imgsz, stride, and whether
the head is NMS-free: YOLOv10's and YOLO26's one-to-one branch, or RT-DETR's decoder), which fill
what ``[task]`` leaves out (``fill_raw_defaults``, before validation) and are checked against what
it states (``project_problems``, each naming both). Neither torch nor ultralytics is imported here;
``edgebuild.sources.ultralytics.adapter`` loads and adapts the model.
"""

from __future__ import annotations

import ast
import pickle
import zipfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base import semver
from edgebuild.runtime.base.model_outputs import NMS_OUTPUTS

if TYPE_CHECKING:
    from edgebuild.project.schema import Project

__all__ = ["NMS_FREE_NOTE", "TASKS", "UltralyticsFacts", "VAL_DEFAULTS", "VAL_PRE_NMS_TOP_K",
           "facts_from_checkpoint", "facts_from_props", "nms_free_head",
           "nms_free_outputs", "project_problems", "read_literal", "recorded_metric", "source_facts"]

# Ultralytics' task -> edgebuild's task.kind
TASKS = {"detect": "detection", "classify": "classification", "segment": "segmentation", "pose": "pose",
         "obb": "obb"}
MODEL_CLASSES = {"DetectionModel": "detect", "ClassificationModel": "classify", "SegmentationModel": "segment",
                 "PoseModel": "pose", "OBBModel": "obb", "WorldModel": "detect", "YOLOEModel": "detect",
                 "RTDETRDetectionModel": "detect"}
# Ultralytics' preprocessing: letterbox padded with 114, RGB, pixels / 255, no normalisation
PREPROCESS: JsonObject = {"resize": "letterbox", "pad_value": 114, "channel_order": "RGB",
                              "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
CLASSIFY_PREPROCESS: JsonObject = {"resize": "resize", "channel_order": "RGB",
                                       "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
# Ultralytics' validation settings (`yolo val`: conf 0.001, iou 0.7, max_det 300) for edgebuild's knobs
VAL_DEFAULTS: JsonObject = {"score_threshold": 0.001, "nms_iou": 0.7, "max_detections": 300}
# Ultralytics' NMS takes at most the 30000 best (box, class) candidates (its max_nms) into NMS; not a
# project key: edgebuild's decode takes it for an Ultralytics detector (``source_facts``), 1000 otherwise
VAL_PRE_NMS_TOP_K = 30000
#: an NMS-free head's top-k when it does not say otherwise (Ultralytics' Detect.max_det)
NMS_FREE_MAX_DET = 300
#: what the project says of an NMS-free head: its one-to-one top-k ships as the detections, no NMS added
NMS_FREE_NOTE = "NMS-free (one-to-one) head: no NMS added"
#: Ultralytics' RT-DETR: its decoder's top-k queries are the detections (docs/transformer-detectors.md)
DETR_NOTE = "NMS-free RT-DETR decoder: its top-k queries, no NMS added"
DETR_HEADS = ("RTDETRDecoder",)
DETR_MODELS = ("RTDETRDetectionModel",)



@dataclass(frozen=True)
class UltralyticsFacts:
    """What an Ultralytics model says of itself."""

    task: str  # Ultralytics' name: detect, classify, segment, pose, obb
    classes: list[str] = field(default_factory=list)
    imgsz: list[int] = field(default_factory=list)  # [h, w]; [] where it does not say
    stride: int = 0  # the head's largest stride; 0 where it does not say
    version: str = ""
    told_by: str = ""  # "checkpoint" or "ONNX metadata"
    model_class: str = ""
    # YOLOv10/YOLO26: the head has a one-to-one branch whose top-k detections need no NMS
    nms_free: bool = False
    max_det: int = 0  # the NMS-free head's top-k (0: not NMS-free)
    kpt_shape: list[int] = field(default_factory=list)  # pose: [keypoints, 2 or 3]; [] otherwise
    # RT-DETR: a DETR decoder (NMS-free, its top-k queries; its images stretched to imgsz, not letterboxed)
    detr: bool = False

    def as_dict(self) -> JsonObject:
        return {"task": self.task, "classes": self.classes, "imgsz": self.imgsz, "stride": self.stride,
                "version": self.version, "told_by": self.told_by, "model_class": self.model_class,
                "nms_free": self.nms_free, "max_det": self.max_det, "kpt_shape": self.kpt_shape, "detr": self.detr}

    @property
    def head_note(self) -> str:
        """What the project says of an NMS-free head: YOLO's one-to-one branch, or RT-DETR's decoder."""
        return DETR_NOTE if self.detr else NMS_FREE_NOTE

    def summary(self) -> str:
        shown = ", ".join(self.classes[:3]) + (", ..." if len(self.classes) > 3 else "")
        return (f"Ultralytics{' ' + self.version if self.version else ''} {self.model_class or self.told_by}: task "
                f"{self.task}, {len(self.classes)} classes ({shown}), imgsz {self.imgsz or '?'}, "
                f"stride {self.stride or '?'}"
                + (f", {self.head_note} (top {self.max_det})" if self.nms_free else ""))


# -- reading a checkpoint without running it ------------------------------------------------------

class _Stub:
    """Whatever class a pickle names: it records its arguments and state, and runs nothing."""

    _name = "?"

    args: tuple[Any, ...]
    state: object
    items: dict[object, object]

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:  # not __init__: NEWOBJ (an object with no state) skips it
        self = super().__new__(cls)
        self.args, self.state, self.items = args, None, {}
        return self

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.items[len(self.items)] = value

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)


_DTYPES = {"FloatStorage": "<f4", "HalfStorage": "<f2", "DoubleStorage": "<f8", "LongStorage": "<i8",
           "IntStorage": "<i4"}


class _Peeker(pickle.Unpickler):
    def __init__(self, handle: Any, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(handle)
        self.archive, self.prefix = archive, prefix
        self._stubs: dict[str, type[_Stub]] = {}

    def find_class(self, module: str, name: str) -> Any:  # never the real class: nothing is imported or run
        key = f"{module}.{name}"
        if key not in self._stubs:
            self._stubs[key] = type(name, (_Stub,), {"_name": key})
        return self._stubs[key]

    def persistent_load(self, pid: Any) -> Any:  # a storage: its raw bytes, read only for small ones
        import numpy as np

        try:
            _, storage, key, _, numel = pid
            dtype = _DTYPES.get(getattr(storage, "_name", "").rsplit(".", 1)[-1])
            if dtype is None or numel > 64:
                return None
            return np.frombuffer(self.archive.read(f"{self.prefix}/data/{key}"), dtype=dtype)
        except Exception:  # a layout this reader does not know: no values
            return None


@lru_cache(maxsize=8)
def _peek(path: str, mtime_ns: int, size: int) -> JsonObject:
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if not pickles:
            return {}
        with archive.open(pickles[0]) as handle:
            found = _Peeker(handle, archive, pickles[0].rsplit("/", 1)[0]).load()
    return found if isinstance(found, dict) else {}


def peek_checkpoint(path: Path) -> JsonObject:
    """A PyTorch zip checkpoint's top-level dict with every object a ``_Stub`` ({} if it is not one)."""
    try:
        stat = path.stat()
        return _peek(str(path), stat.st_mtime_ns, stat.st_size)
    except Exception:  # not a zip, not a pickle, a truncated file: not an Ultralytics checkpoint
        return {}


def _model_stub(checkpoint: JsonObject) -> _Stub | None:
    for key in ("ema", "model"):
        value = checkpoint.get(key)
        if isinstance(value, _Stub) and value._name.startswith("ultralytics."):
            return value
    return None


def is_ultralytics_checkpoint(path: Path) -> bool:
    return _model_stub(peek_checkpoint(path)) is not None


def facts_from_checkpoint(path: Path) -> UltralyticsFacts | None:
    """Task, classes, imgsz and stride of an Ultralytics checkpoint, read without running its pickle."""
    checkpoint = peek_checkpoint(path)
    stub = _model_stub(checkpoint)
    if stub is None:
        return None
    state = stub.state if isinstance(stub.state, dict) else {}
    model_class = stub._name.rsplit(".", 1)[-1]
    args = state.get("args")
    args = args if isinstance(args, dict) else {}
    train = checkpoint.get("train_args")
    train = train if isinstance(train, dict) else {}
    task = MODEL_CLASSES.get(model_class) or args.get("task") or "unknown"
    names = state.get("names")
    classes = [str(names[k]) for k in sorted(names)] if isinstance(names, dict) else \
        [str(n) for n in names] if isinstance(names, (list, tuple)) else []
    head = _head_state(state)
    detr = task == "detect" and model_class in DETR_MODELS
    nms_free = detr or task == "detect" and isinstance(head.get("_modules"), dict) and \
        isinstance(head["_modules"].get("one2one_cv2"), _Stub)
    max_det = head.get("num_queries") if detr else head.get("max_det")  # RT-DETR: at most one per query
    return UltralyticsFacts(task=str(task), classes=classes, imgsz=_size(train.get("imgsz") or args.get("imgsz")),
                            stride=_stride(state.get("stride")), version=str(checkpoint.get("version") or ""),
                            told_by="checkpoint", model_class=model_class, nms_free=nms_free,
                            max_det=(int(max_det) if isinstance(max_det, int) else NMS_FREE_MAX_DET) if nms_free else 0,
                            kpt_shape=_size(head.get("kpt_shape")) if task == "pose" else [], detr=detr)


def _head_state(state: JsonObject) -> JsonObject:
    """The state of the model's last layer (the head: Detect, v10Detect, ...), {} where it is not there."""
    modules = state.get("_modules")
    layers = modules.get("model") if isinstance(modules, dict) else None
    found = layers.state.get("_modules") if isinstance(layers, _Stub) and isinstance(layers.state, dict) else None
    head = list(found.values())[-1] if isinstance(found, dict) and found else None
    return head.state if isinstance(head, _Stub) and isinstance(head.state, dict) else {}


def _size(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return []


def _stride(value: Any) -> int:
    """The largest stride: an int, a list, or a tensor stub whose storage the peek read."""
    if isinstance(value, _Stub):  # torch._utils._rebuild_tensor_v2(storage, offset, size, ...)
        value = value.args[0] if value.args else None
    try:
        return int(max(float(v) for v in value)) if value is not None and not isinstance(value, (int, float)) \
            else int(value or 0)
    except (TypeError, ValueError):
        return 0


def facts_from_props(props: dict[str, str], proto: Any = None) -> UltralyticsFacts | None:
    """From an ONNX export's metadata_props (as ``onnx_checks.ultralytics_summary`` reads them), or None; an
    RT-DETR's top-k from its graph (``proto``, ``detr_export_top_k``), which the metadata does not say."""
    said_by = (props.get("author", "") + " " + props.get("description", "")).lower()
    if "ultralytics" not in said_by and not {"task", "names", "stride"} <= set(props):
        return None
    names = read_literal(props.get("names"))
    classes = [str(names[k]) for k in sorted(names)] if isinstance(names, dict) else \
        [str(n) for n in names] if isinstance(names, (list, tuple)) else []
    args = read_literal(props.get("args"))
    max_det = args.get("max_det") if isinstance(args, dict) else None
    # Ultralytics 8.4 names the head; before, an RT-DETR export says so only in its description ("rtdetr-l")
    detr = props.get("task") == "detect" and (props.get("head") in DETR_HEADS if "head" in props else
                                              "rtdetr" in said_by.replace("-", ""))
    nms_free = detr or props.get("task") == "detect" and read_literal(props.get("end2end")) is True
    kpt_shape = _size(read_literal(props.get("kpt_shape"))) if props.get("task") == "pose" else []
    facts = UltralyticsFacts(task=props.get("task", "unknown"), classes=classes,
                            imgsz=_size(read_literal(props.get("imgsz"))),
                            stride=_stride(read_literal(props.get("stride"))), version=props.get("version", ""),
                            told_by="ONNX metadata", model_class="RT-DETR export" if detr else "export",
                            nms_free=nms_free, detr=detr, kpt_shape=kpt_shape,
                            max_det=(int(max_det) if isinstance(max_det, int) else NMS_FREE_MAX_DET) if nms_free else 0)
    k = detr_export_top_k(proto) if detr and proto is not None else None
    return replace(facts, max_det=k) if k else facts


def detr_export_top_k(proto: Any) -> int | None:
    """An RT-DETR export's K: its last TopK's (the decoder's top-k; with one TopK, the encoder's query count), a
    constant, or in a dynamic export the bound its computed K is clamped to (Clip's max, or Min's constant)."""
    from onnx import numpy_helper

    values = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    values.update({n.output[0]: numpy_helper.to_array(a.t) for n in proto.graph.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value"})
    produced = {o: n for n in proto.graph.node for o in n.output}
    tops = [n for n in proto.graph.node if n.op_type == "TopK" and len(n.input) > 1]
    names = [tops[-1].input[1]] if tops else []
    for _ in range(8):
        known = [values[n] for n in names if n in values and values[n].size == 1]
        if known:
            return int(known[0].reshape(-1)[0])
        node = produced.get(names[0]) if names else None
        if node is None or node.op_type not in ("Clip", "Min", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Identity"):
            return None
        names = [node.input[2]] if node.op_type == "Clip" and len(node.input) > 2 else \
            list(node.input) if node.op_type == "Min" else [node.input[0]]
    return None


def read_literal(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


# -- the facts against the project -----------------------------------------------------------------

def project_defaults(facts: UltralyticsFacts, head: object = None) -> JsonObject:
    """What the model says, as the ``[task]`` keys a project may leave out (``head``: the project's
    ``model.head``; "one-to-many" reads an NMS-free checkpoint's raw head, decoded as any detector's)."""
    kind = TASKS.get(facts.task)
    if kind is None:
        return {}
    preprocess = dict(ultralytics_preprocess(facts))
    if facts.imgsz:
        preprocess["input_size"] = list(facts.imgsz)
    task: JsonObject = {"kind": kind, "preprocess": preprocess}
    if facts.classes:
        task["classes"] = list(facts.classes)
    if kind != "classification":  # detection, segmentation, pose, obb: boxes decoded as Ultralytics' val does
        task["postprocess"] = dict(VAL_DEFAULTS)
    if kind == "pose" and facts.kpt_shape:
        task["kpt_shape"] = list(facts.kpt_shape)
    if facts.nms_free and head != "one-to-many":  # the one-to-one top-k is the detections: NMS_OUTPUTS themselves
        task["postprocess"] = nms_free_outputs(facts.max_det)[1]
    return task


def ultralytics_preprocess(facts: UltralyticsFacts) -> JsonObject:
    """How Ultralytics preprocesses the model's images: a letterbox, but a classifier's and RT-DETR's are
    stretched to imgsz (RT-DETR's validator and predictor resize without keeping the aspect ratio)."""
    return CLASSIFY_PREPROCESS if TASKS.get(facts.task) == "classification" or facts.detr else PREPROCESS


def nms_free_outputs(max_det: int) -> tuple[list[str], JsonObject]:
    """``model.outputs`` and ``[task.postprocess]`` for an NMS-free head whose top-k is ``max_det``: its
    detections are ``NMS_OUTPUTS``, read as NMS inside the model answers them (``in_model``, nothing added)."""
    return list(NMS_OUTPUTS), {**VAL_DEFAULTS, "in_model": True, "boxes_output": NMS_OUTPUTS[1],
                               "scores_output": NMS_OUTPUTS[2], "max_detections": max_det}


def fill_raw_defaults(raw: JsonObject, facts: UltralyticsFacts) -> JsonObject:
    """The project file's dict with what it leaves out taken from the model (what it states is kept)."""
    model = raw.get("model")
    defaults = project_defaults(facts, model.get("head") if isinstance(model, dict) else None)
    task = raw.get("task")
    if not defaults or not isinstance(task, dict | None):
        return raw
    task = dict(task or {})
    if task.get("kind", defaults["kind"]) != defaults["kind"]:
        return raw  # the check names the mismatch
    for key in ("kind", "classes", "kpt_shape"):
        if key in defaults:
            task.setdefault(key, defaults[key])
    for section in ("preprocess", "postprocess"):
        if section in defaults and isinstance(task.get(section, {}), dict):
            task[section] = {**defaults[section], **task.get(section, {})}
    return {**raw, "task": task}


def project_problems(project: Project, facts: UltralyticsFacts) -> list[str]:
    """Where the project states something the model says otherwise (each names both), and a profile off the stride."""
    said = f"the {facts.told_by} says"
    kind = TASKS.get(facts.task)
    if kind is None:
        return [f"{said} task {facts.task!r}: edgebuild does not take that task yet (it builds detection, "
                "classification, segmentation, pose and obb models): use one of those variants, or a wrapper "
                "torch.nn.Module named with model.entry_point"]
    problems = []
    task = project.task
    if task.kind != kind:
        problems.append(f"task.kind: {task.kind!r}, but {said} task {facts.task!r} ({kind})")
    elif facts.classes and list(task.classes) != facts.classes:
        problems.append(f"task.classes: {_short(task.classes)} ({len(task.classes)}), but {said} "
                        f"{_short(facts.classes)} ({len(facts.classes)}): leave task.classes out to use the model's")
    pre = task.preprocess
    if facts.imgsz and list(pre.input_size) != facts.imgsz:
        problems.append(f"task.preprocess.input_size: {list(pre.input_size)}, but {said} imgsz {facts.imgsz}")
    if kind == "pose" and task.kind == "pose" and facts.kpt_shape and list(task.kpt_shape) != facts.kpt_shape:
        problems.append(f"task.kpt_shape: {list(task.kpt_shape)}, but {said} kpt_shape {facts.kpt_shape}: leave "
                        "task.kpt_shape out to use the model's")
    for key, value in ultralytics_preprocess(facts).items():
        if key == "pad_value" and pre.resize != "letterbox":
            continue
        if getattr(pre, key) != value:
            problems.append(f"task.preprocess.{key}: {getattr(pre, key)!r}, but Ultralytics preprocesses with "
                            f"{key} {value!r}" + (" (RT-DETR stretches each image to imgsz)" if facts.detr else ""))
    if facts.stride and project.model.inputs:
        spec = project.model.inputs[0]
        for which in ("min_shape", "opt_shape", "max_shape"):
            shape = getattr(spec, which)
            off = [size for size in shape[2:] if size % facts.stride]
            if len(shape) == 4 and off:
                problems.append(f"model.inputs[0].{which}: {shape}: image sizes must be multiples of the model's "
                                f"stride {facts.stride}, {off} {'is' if len(off) == 1 else 'are'} not")
    if facts.detr and project.model.head == "one-to-many":
        problems.append("model.head: \"one-to-many\", but RT-DETR has one head, its decoder, whose top-k queries "
                        "are the detections (no NMS): leave head out")
    elif facts.nms_free and kind == "detection" and project.model.head == "one-to-many" \
            and facts.told_by != "checkpoint":
        problems.append("model.head: \"one-to-many\", but the ONNX export has only its NMS-free (one-to-one) head "
                        "(exported with nms=False): leave head out, or export again without nms=False (the raw "
                        "one-to-many head, NMS added by edgebuild)")
    elif nms_free_head(project):
        problems += _nms_free_problems(project, facts)
    elif facts.nms_free and kind == "detection":  # head = "one-to-many": the raw head's boxes and scores, NMS after
        post = project.detection_postprocess
        if len(project.model.outputs) != 2 or [post.boxes_output, post.scores_output] != list(project.model.outputs):
            problems.append(f"model.outputs: {project.model.outputs}, but model.head = \"one-to-many\" answers the raw "
                            "head's boxes and scores (NMS after, as for any YOLO detector): set model.outputs = "
                            "[\"boxes\", \"scores\"] and in [task.postprocess] boxes_output = \"boxes\", "
                            "scores_output = \"scores\" (in_model = true appends NMS to the graph)")
    if project.model.head is not None and not facts.nms_free:
        problems.append(f"model.head: {project.model.head!r}, but the {facts.told_by} has no NMS-free (one-to-one) "
                        "detection head to choose from (head applies to YOLOv10/YOLO26 detectors): leave head out")
    return problems


def _nms_free_problems(project: Project, facts: UltralyticsFacts) -> list[str]:
    """An NMS-free head ships its one-to-one top-k as ``NMS_OUTPUTS``: the project must read those."""
    said, post = f"the {facts.told_by} says the head is NMS-free (one-to-one)", project.detection_postprocess
    problems = []
    if list(project.model.outputs) != list(NMS_OUTPUTS):
        problems.append(f"model.outputs: {project.model.outputs}, but {said}: its top-k detections come out as "
                        f"{list(NMS_OUTPUTS)} (no NMS is added); set model.outputs to those")
    if not post.in_model:
        problems.append(f"task.postprocess.in_model: false, but {said}: the model answers detections itself; "
                        "leave in_model out (it is true for such a head)")
    if (post.boxes_output, post.scores_output) != NMS_OUTPUTS[1:3]:
        problems.append(f"task.postprocess.boxes_output/scores_output: {post.boxes_output!r}/{post.scores_output!r}, "
                        f"but {said}: leave them out (they are {NMS_OUTPUTS[1]!r}/{NMS_OUTPUTS[2]!r})")
    if facts.told_by == "ONNX metadata" and post.max_detections != facts.max_det:
        problems.append(f"task.postprocess.max_detections: {post.max_detections}, but the export's NMS-free head "
                        f"returns its top {facts.max_det}: leave max_detections out, or export again with "
                        f"max_det={post.max_detections}")
    if facts.detr and facts.told_by == "checkpoint" and post.max_detections > facts.max_det:
        problems.append(f"task.postprocess.max_detections: {post.max_detections}, but the RT-DETR decoder has "
                        f"{facts.max_det} queries and keeps at most that many: leave max_detections out, or set it "
                        f"to {facts.max_det} or less")
    if facts.stride and project.model.inputs and len(project.model.inputs[0].min_shape) == 4:
        # the top-k's K is fixed in the graph: the smallest image must have at least K anchors (strides 8, 16, 32);
        # RT-DETR's encoder picks its queries among them (a K fixed in the graph, TensorRT 8.5's TopK needs that)
        height, width = project.model.inputs[0].min_shape[2:]
        anchors = sum((height // s) * (width // s) for s in (facts.stride // 4, facts.stride // 2, facts.stride) if s)
        wanted = facts.max_det if facts.detr or facts.told_by != "checkpoint" else post.max_detections
        if anchors < wanted:
            problems.append(f"model.inputs[0].min_shape: {project.model.inputs[0].min_shape} gives {anchors} anchors, "
                            f"fewer than the NMS-free head's top {wanted}: raise the smallest image size"
                            + (f" (RT-DETR's encoder picks its {wanted} queries among them)" if facts.detr else
                               " or lower task.postprocess.max_detections"))
    return problems


def _short(names: list[str]) -> str:
    return "[" + ", ".join(repr(n) for n in names[:4]) + (", ...]" if len(names) > 4 else "]")


def facts_for_source(path: Path) -> UltralyticsFacts | None:
    """What an Ultralytics checkpoint or ONNX export at ``path`` says of itself; None for any other file.
    Read once per content stamp (mtime and size): loading a project asks twice."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _facts_for_source(str(path), stat.st_mtime_ns, stat.st_size)


def nms_free_head(project: Project) -> bool:
    """Whether the project's model is an Ultralytics detector whose NMS-free (one-to-one) head ships:
    its outputs are already the detections (``NMS_OUTPUTS``), and nothing is appended to it."""
    facts = source_facts(project)
    return facts is not None and facts.nms_free and project.task.kind == "detection" \
        and project.model.head != "one-to-many"


def source_facts(project: Project) -> UltralyticsFacts | None:
    """What the project's ``model.source`` says of itself if it is an Ultralytics model, else None."""
    if project.model.source is None:
        return None
    path = project.path(project.model.source)
    return facts_for_source(path) if path.is_file() else None


@lru_cache(maxsize=8)
def _facts_for_source(name: str, mtime_ns: int, size: int) -> UltralyticsFacts | None:
    path = Path(name)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return None
    if head == b"PK\x03\x04":
        return facts_from_checkpoint(path)
    if path.suffix.lower() != ".onnx" and not (len(head) > 1 and head[0] == 0x08):
        return None
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # the model stage says what is wrong with it
        return None
    return facts_from_props({p.key: p.value for p in proto.metadata_props}, proto)


# -- the validation metric a model file records for itself -----------------------------------------

#: Ultralytics' names of its validation metrics (a checkpoint's ``train_metrics``) -> edgebuild's metric names,
#: for a detector or a classifier (and a model whose task is not known)
RECORDED_KEYS = {"metrics/mAP50-95(B)": "mAP50-95", "metrics/mAP50(B)": "mAP50", "metrics/accuracy_top1": "top-1",
                 "metrics/accuracy_top5": "top-5"}
#: the same for the other tasks (edgebuild's task.kind), as Ultralytics' SegmentMetrics / PoseMetrics / OBBMetrics
#: name them: (M) masks, (P) keypoints, (B) boxes, which for an OBB model are its oriented boxes
TASK_RECORDED_KEYS = {
    "segmentation": {"metrics/mAP50-95(M)": "mask mAP50-95", "metrics/mAP50(M)": "mask mAP50",
                     "metrics/mAP50-95(B)": "box mAP50-95", "metrics/mAP50(B)": "box mAP50"},
    "pose": {"metrics/mAP50-95(P)": "pose mAP50-95", "metrics/mAP50(P)": "pose mAP50",
             "metrics/mAP50-95(B)": "box mAP50-95", "metrics/mAP50(B)": "box mAP50"},
    "obb": {"metrics/mAP50-95(B)": "obb mAP50-95", "metrics/mAP50(B)": "obb mAP50"},
}
#: an ONNX file's ``metadata_props`` key for a metric in edgebuild's names (docs/accuracy.md): ``val_metric.top-1``
ONNX_METRIC_PREFIX = "val_metric."


def recorded_metric(project: Project) -> tuple[str, float, str] | None:
    """The project's metric as ``model.source`` records it: (metric, value, where), or None."""
    if project.model.source is None:
        return None
    path = project.path(project.model.source)
    if not path.is_file():
        return None
    found = recorded_metric_of(path, project.task.kind).get(project.metric)
    facts = source_facts(project)
    if found is not None and facts is not None and facts.nms_free and not facts.detr and facts.told_by == "checkpoint" \
            and project.task.kind == "detection" and semver.parse(facts.version) is not None \
            and semver.compare(facts.version, "8.4.0") >= 0:
        # Ultralytics 8.4 validates an NMS-free model during training through its one-to-many head and NMS
        # (its validator's nms=None): not the head that ships by default (docs/model-sources.md)
        metric, value, where = found
        found = (metric, value, f"{where}, measured by training through the one-to-many head with NMS")
    return found


def recorded_metric_of(path: Path, kind: str | None = None) -> dict[str, tuple[str, float, str]]:
    """Every validation metric a checkpoint (``train_metrics``, read without running it) or an ONNX file
    (``metadata_props``: Ultralytics' key names or ``val_metric.<metric>``) records, by edgebuild's metric name.

    Ultralytics' names mean another metric per task (``metrics/mAP50-95(B)``: a detector's mAP50-95, a pose or
    segmentation model's box mAP50-95, an OBB model's obb mAP50-95): ``kind`` is edgebuild's task.kind, and
    where it is None the file's own ``task`` says (``facts_for_source``)."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    if kind is None:
        facts = facts_for_source(path)
        kind = TASKS.get(facts.task) if facts is not None else None
    return _recorded(str(path), stat.st_mtime_ns, stat.st_size, kind or "")


@lru_cache(maxsize=8)
def _recorded(name: str, mtime_ns: int, size: int, kind: str) -> dict[str, tuple[str, float, str]]:
    path = Path(name)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return {}
    if head == b"PK\x03\x04":
        metrics = peek_checkpoint(path).get("train_metrics")
        where = f"{path.name} train_metrics"
        values = metrics if isinstance(metrics, dict) else {}
    elif path.suffix.lower() == ".onnx" or (len(head) > 1 and head[0] == 0x08):
        import onnx

        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception:  # the model stage says what is wrong with it
            return {}
        where = f"{path.name} metadata_props"
        values = {p.key: read_literal(p.value) for p in proto.metadata_props}
    else:
        return {}
    names = TASK_RECORDED_KEYS.get(kind, RECORDED_KEYS)
    found: dict[str, tuple[str, float, str]] = {}
    for key, value in values.items():
        metric = names.get(key) or (key[len(ONNX_METRIC_PREFIX):] if isinstance(key, str) and
                                    key.startswith(ONNX_METRIC_PREFIX) else None)
        percent = isinstance(value, str) and value.strip().endswith("%")  # "76.1%"
        if percent:
            value = read_literal(value.strip()[:-1])
        if not metric or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if 0 < value <= 1 and not percent:
            found[metric] = (metric, float(value), f"{where}[{key!r}]")
        elif 0 < value <= 100 and (percent or value > 1):  # a percentage (76.1 for 0.761): read as one, said so
            found[metric] = (metric, float(value) / 100, f"{where}[{key!r}] = {value}, read as a percentage")
    return found
