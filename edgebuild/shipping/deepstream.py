"""DeepStream (Gst-nvinfer) configs per fleet group, for fleets whose video pipelines run DeepStream.

The container stage writes ``build/deepstream/<group>/`` for every group whose recipe records a
``task`` and whose model DeepStream can run without a custom library:

    config_infer_primary.txt      Gst-nvinfer's config: the model, its precision, the preprocessing
                                  (scale, offsets, colour order, letterbox) and (a detector) the stock bbox parser
    deepstream_app_config.txt     ``deepstream-app -c``: a file or RTSP source, the model, a sink
    labels.txt                    the classes (a detector: one per line; a classifier: one line, ';')
    <model>-<group>-trt<version>.onnx
                                  the group's ONNX, named so the engine nvinfer builds from it is the
                                  ``model-engine-file`` below (nvinfer names what it builds
                                  ``<onnx-file>_b<batch>_<gpu0|dla0>_<fp32|fp16|int8>.engine``)
    that engine file              edgebuild's engine for the group, where one was built for the device
                                  at the input size DeepStream feeds; else nvinfer builds it on first
                                  start into the same name and reuses it after
    int8.calib                    an INT8 model only: see ``INT8_NOTE``

A fleet group that runs several models (a group folder, ``edgebuild.runtime.base.group``) gets one set:
its detector as the primary model (``config_infer_primary.txt``) and each classifier as a secondary
model on the detector's objects (``config_infer_<model>.txt``, ``labels_<model>.txt``, its ONNX),
as DeepStream runs a detector and a classifier of its crops; the app config names them all.

A pose, segmentation or OBB model gets ``network-type=100`` and ``output-tensor-meta=1``: no stock
parser reads its raw outputs, so nvinfer hands them to the app as tensor meta, and the config's
notes say what to write (``RAW_TENSORS_NOTE``); such a model runs alone, not in a group's set.

A detector needs NMS inside the model (``[task.postprocess] in_model = true``): its four outputs are
what DeepStream's stock ``NvDsInferParseYoloV5CustomBatchedNMSTLT`` reads (docs/detections.md). A
raw-head detector gets no config, and the record says why. Every key written is checked against
Gst-nvinfer's documented property table (``profiles/deepstream/nvinfer-properties.toml``); the
DeepStream release comes from ``profiles/deepstream/releases.toml``. docs/deepstream.md has the rest.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgebuild._compat import tomllib
from edgebuild.content import atomic_output_dir
from edgebuild.datafiles import data_dir
from edgebuild.errors import EdgebuildError, ProfileDataError
from edgebuild.jsontypes import JsonObject
from edgebuild.runtime.base.preprocess_spec import PreprocessSpec
from edgebuild.runtime.base.recipe import ENGINE_FILE, Recipe

__all__ = ["DeepStreamRecord"]

INFER_CONFIG = "config_infer_primary.txt"
APP_CONFIG = "deepstream_app_config.txt"
LABELS = "labels.txt"
INT8_CALIB = "int8.calib"
NETWORK_MODES = {"fp32": 0, "int8": 1, "fp16": 2}
COLOR_FORMATS = {"RGB": 0, "BGR": 1, "GRAY": 2}
RAW_HEAD_REASON = ("DeepStream needs task.postprocess.in_model = true (no stock DeepStream parser reads a raw "
                   "head; docs/detections.md)")
#: nvinfer (6.1.1 to 6.2 sources) sets TensorRT's INT8 flag only when int8-calib-file names a readable file;
#: without one it builds FP16, and a Q/DQ network needs the INT8 flag. TensorRT ignores the calibrator of an
#: explicitly quantized network, so the file's contents are never read for scales.
INT8_NOTE = ("int8-calib-file names an empty file on purpose: nvinfer turns on TensorRT's INT8 mode only when "
             "that key names a readable file, and TensorRT does not calibrate a Q/DQ (explicitly quantized) model")
#: edgebuild's classifiers end in logits; nvinfer's default classifier parser reads probabilities
LOGITS_NOTE = ("the model answers logits, and nvinfer's default classifier parser expects softmax probabilities: "
               "it keeps the largest output above classifier-threshold (at least 0), so an image whose best logit "
               "is negative gets no label and the confidence shown is a logit; the argmax itself is right. Add a "
               "Softmax after the logits in the model (or set parse-classifier-func-name to a parser that applies "
               "one) for probabilities")

#: pose, segmentation and OBB: their models end in raw outputs, which no stock nvinfer parser reads
RAW_TENSOR_TASKS = ("pose", "segmentation", "obb")
RAW_TENSORS_NOTE = (
    "a {kind} model: nvinfer's stock parsers read none of its raw outputs ({outputs}; docs/{kind}.md), so "
    "network-type=100 and output-tensor-meta=1 make nvinfer attach them to each frame as NvDsInferTensorMeta and "
    "draw nothing. Decode them in your app (a pad probe after nvinfer reading the tensor meta, by docs/{kind}.md's "
    "recipe: score threshold, NMS, then the keypoints, masks or rotated boxes of the kept "
    "anchors) or write a custom parser library (parse-bbox-func-name; parse-bbox-instance-mask-func-name for "
    "masks) with custom-lib-path")
#: pose and segmentation with NMS inside: detections, but more than the four outputs the stock parser takes
IN_MODEL_TENSORS_NOTE = (
    "a {kind} model with NMS inside: its outputs ({outputs}) are detections, but the stock parser reads exactly "
    "the four of a detector (docs/{kind}.md), so network-type=100 and output-tensor-meta=1 make nvinfer attach "
    "them to each frame as NvDsInferTensorMeta and draw nothing. Read them in your app (a pad probe after nvinfer): "
    "the first num_detections rows of each, the keypoints as they are, a mask as its coefficients times the "
    "prototypes, above 0, inside its box; or write a custom parser library (parse-bbox-func-name; "
    "parse-bbox-instance-mask-func-name for masks) with custom-lib-path")


# -- the data tables -------------------------------------------------------------------------------

def _table(name: str) -> JsonObject:
    path = data_dir("profiles") / "deepstream" / name
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileDataError(f"{path}: cannot read it: {exc}") from None


def nvinfer_table() -> JsonObject:
    """Gst-nvinfer's documented keys (``profiles/deepstream/nvinfer-properties.toml``)."""
    return _table("nvinfer-properties.toml")


@dataclass(frozen=True)
class DeepStreamRelease:
    jetpack: str  # the key that matched
    deepstream: str
    confirmed: bool


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def deepstream_release(jetpack: str) -> DeepStreamRelease | None:
    """The DeepStream release NVIDIA pairs with a JetPack release (the longest key that matches), or None."""
    table = _table("releases.toml").get("jetpack", {})
    keys = [k for k in table if jetpack == k or jetpack.startswith(k + ".")]
    if not keys:
        return None
    key = max(keys, key=len)
    try:
        return DeepStreamRelease(jetpack=key, **table[key])
    except TypeError as exc:
        raise ProfileDataError(f"profiles/deepstream/releases.toml: [jetpack.\"{key}\"]: {exc}") from None


def stock_parser() -> dict[str, str]:
    """The stock parser library, function and the first DeepStream that has it."""
    return _table("releases.toml")["parser"]


# -- checking a written config ---------------------------------------------------------------------

def _value_problem(value: str, spec: JsonObject) -> str | None:
    kind = spec.get("type", "string")
    items = [v for v in value.split(";") if v] if kind in ("ints", "floats", "strings") else [value]
    numbers: list[float]  # an int is a float here (PEP 484's numeric tower)
    try:
        if kind in ("int", "ints"):
            numbers = [int(v) for v in items]
        elif kind in ("float", "floats"):
            numbers = [float(v) for v in items]
        elif kind == "bool":
            if value not in ("0", "1", "true", "false"):
                return "is not a boolean (0, 1, true, false)"
            numbers = []
        else:
            numbers = []
    except ValueError:
        return f"is not of type {kind}"
    if not items or not all(items):
        return "is empty"
    if "values" in spec and any(n not in spec["values"] for n in numbers):
        return f"is not one of {spec['values']}"
    if "min" in spec and any(n < spec["min"] for n in numbers):
        return f"is below {spec['min']}"
    return None


def _sections(text: str) -> list[tuple[str, str, str]]:
    """(group, key, value) of a GKeyFile text, comments left out."""
    found, group = [], ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        found.append((group, key.strip() if sep else line, value.strip()))
    return found


def check_config(text: str, *, app: bool = False, table: JsonObject | None = None) -> list[str]:
    """Every key of an nvinfer config (``app``: a deepstream-app config) that the property table does not
    document, or whose value it does not accept; empty when all are."""
    table = table or nvinfer_table()
    problems = []
    for group, key, value in _sections(text):
        if app:
            kind = group.rstrip("0123456789")
            known = table["app"].get(kind, {}).get("keys")
            if known is None:
                problems.append(f"[{group}] is not a deepstream-app group")
            elif key not in known:
                problems.append(f"[{group}] {key} is not a deepstream-app key of [{kind}]")
            continue
        section = "property" if group == "property" else "class-attrs" if group.startswith("class-attrs-") else None
        spec = table[section].get(key) if section else None
        if section is None:
            problems.append(f"[{group}] is not a Gst-nvinfer group")
        elif spec is None:
            problems.append(f"[{group}] {key} is not a Gst-nvinfer key of [{section}]")
        elif (problem := _value_problem(value, spec)) is not None:
            problems.append(f"[{group}] {key}={value} {problem}")
    return problems


# -- the config ------------------------------------------------------------------------------------

def engine_file_name(onnx_file: str, recipe: Recipe, batch_size: int = 1) -> str:
    """The name nvinfer gives the engine it builds from ``onnx_file`` (nvdsinfer_model_builder.cpp)."""
    device = f"dla{recipe.dla_core}" if recipe.dla_core is not None else "gpu0"
    return f"{onnx_file}_b{batch_size}_{device}_{recipe.precision}.engine"


def onnx_file_name(recipe: Recipe) -> str:
    return f"{recipe.model_name or recipe.group}-{recipe.group}-trt{recipe.tensorrt}.onnx"


def scale_and_offsets(preprocess: PreprocessSpec) -> tuple[float, list[float], list[str]]:
    """nvinfer's ``net-scale-factor`` and ``offsets`` for edgebuild's ``(pixel / 255 - mean) / std``,
    and what cannot be exact.

    nvinfer computes ``net-scale-factor * (pixel - offset[c])`` with one factor for every channel; edgebuild's
    ``(pixel - 255 mean[c]) / (255 std[c])`` is that with offset[c] = 255 mean[c] and factor 1 / (255 std[c]),
    exactly when every std is the same. With differing stds the factor is 1 / (255 mean(std)) and channel c
    is off by the factor std[c] / mean(std)."""
    channels = 1 if preprocess.channel_order == "GRAY" else 3
    mean = [float(m) for m in preprocess.mean][:channels]
    std = [float(s) for s in preprocess.std][:channels]
    used = sum(std) / len(std)
    notes = []
    if max(std) != min(std):
        off = ", ".join(f"channel {c} x{s / used:.4f}" for c, s in enumerate(std))
        notes.append(f"std differs per channel ({std}) and nvinfer has one net-scale-factor: it is 1/(255 x "
                     f"{used:g}), so the network inputs are scaled {off} against edgebuild's preprocessing")
    return 1.0 / (255.0 * used), [255.0 * m for m in mean], notes


def _number(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))


def _preprocess_notes(pre: PreprocessSpec) -> list[str]:
    notes = []
    if pre.resize == "letterbox" and pre.pad_value != 0:
        notes.append(f"nvinfer pads the letterbox with black (0) where edgebuild pads with {pre.pad_value}: "
                     "the padded border differs, the image inside it does not")
    if pre.channel_order == "GRAY":
        notes.append("GRAY: nvinfer takes the luma plane of the decoded video, edgebuild 0.299 R + 0.587 G + "
                     "0.114 B of an RGB image; they agree up to the video's colour range and rounding")
    return notes


def infer_config(recipe: Recipe, *, onnx_file: str, engine_file: str, batch_size: int = 1, labels: str = LABELS,
                 unique_id: int = 1, operate_on: int | None = None) -> tuple[str, list[str]]:
    """``config_infer_primary.txt`` for a recipe whose task DeepStream can run, and its notes; with
    ``operate_on``, a secondary model's config, run on the objects of the model with that gie-unique-id."""
    task = recipe.task
    assert task is not None and task.outputs != "raw_head"
    pre = task.preprocess
    height, width = pre.input_size
    scale, offsets, notes = scale_and_offsets(pre)
    notes += _preprocess_notes(pre)
    channels = 1 if pre.channel_order == "GRAY" else 3
    letterbox = pre.resize == "letterbox"
    props: list[tuple[str, str]] = [
        ("gpu-id", "0"), ("gie-unique-id", str(unique_id)), ("process-mode", "1" if operate_on is None else "2"),
        *([("operate-on-gie-id", str(operate_on))] if operate_on is not None else []),
        ("onnx-file", onnx_file), ("model-engine-file", engine_file), ("labelfile-path", labels),
        ("batch-size", str(batch_size)), ("network-mode", str(NETWORK_MODES[recipe.precision])),
        ("infer-dims", f"{channels};{height};{width}"),
        ("net-scale-factor", repr(scale)), ("offsets", ";".join(_number(o) for o in offsets)),
        ("model-color-format", str(COLOR_FORMATS[pre.channel_order])),
        ("maintain-aspect-ratio", "1" if letterbox else "0"), ("symmetric-padding", "1" if letterbox else "0"),
        ("scaling-filter", "1"),  # bilinear, as edgebuild resizes
        ("output-blob-names", ";".join(recipe.outputs or {})),
    ]
    if recipe.precision == "int8":
        props.append(("int8-calib-file", INT8_CALIB))
        notes.append(INT8_NOTE)
    if recipe.dla_core is not None:
        props += [("enable-dla", "1"), ("use-dla-core", str(recipe.dla_core))]
    class_attrs: list[tuple[str, str]] = []
    if task.kind == "detection":
        post = task.postprocess
        parser = stock_parser()
        props += [("network-type", "0"), ("num-detected-classes", str(len(task.classes))), ("interval", "0"),
                  ("cluster-mode", "4"),  # none: NMS is done inside the model
                  ("parse-bbox-func-name", parser["function"]), ("custom-lib-path", parser["library"])]
        class_attrs.append(("pre-cluster-threshold", _number(post.score_threshold or 0.0)))
        if (post.max_detections or 0) > 200:
            notes.append(f"max_detections = {post.max_detections}: the stock parser stops at 200 objects per "
                         "frame (keep_top_k in nvdsinfer_custombboxparser.cpp), best first")
    elif task.kind in RAW_TENSOR_TASKS:
        # no stock parser reads these outputs: nvinfer attaches them to the frame as tensor meta for the app
        props += [("network-type", "100"), ("output-tensor-meta", "1")]
        note = IN_MODEL_TENSORS_NOTE if task.postprocess.in_model else RAW_TENSORS_NOTE
        notes.append(note.format(kind=task.kind, outputs=", ".join(recipe.outputs or {})))
    else:
        props += [("network-type", "1"), ("classifier-threshold", "0")]
        notes.append(LOGITS_NOTE)
    header = [f"# Gst-nvinfer config of {recipe.model_name} {recipe.model_version} for fleet group {recipe.group} "
              f"({recipe.target}, {recipe.precision}, TensorRT {recipe.tensorrt}); written by edgebuild.",
              "# Paths are relative to this file. Each key and where its value comes from: docs/deepstream.md.",
              *(f"# NOTE: {n}" for n in notes)]
    lines = [*header, "[property]", *(f"{k}={v}" for k, v in props)]
    if class_attrs:
        lines += ["", "[class-attrs-all]", *(f"{k}={v}" for k, v in class_attrs)]
    return "\n".join(lines) + "\n", notes


def app_config(recipe: Recipe, batch_size: int = 1, secondaries: tuple[tuple[int, str, str], ...] = ()) -> str:
    """``deepstream_app_config.txt``: one source (a video file or an RTSP camera), the model, on-screen
    boxes and a fake sink with the frame rate printed; a file sink to turn on. ``secondaries``: (gie-unique-id,
    config file, model name) of models run on the primary's objects."""
    second = "".join(f"""
# {name}, on every object the primary model finds
[secondary-gie{i}]
enable=1
gpu-id=0
gie-unique-id={unique_id}
operate-on-gie-id=1
batch-size=16
nvbuf-memory-type=0
config-file={config}
""" for i, (unique_id, config, name) in enumerate(secondaries))
    raw = ("# The model answers raw tensors (network-type=100): the OSD draws nothing until your app or a custom\n"
           "# parser turns them into objects (config_infer_primary.txt's NOTE).\n"
           if recipe.task is not None and recipe.task.kind in RAW_TENSOR_TASKS else "")
    return f"""# deepstream-app config for {recipe.model_name} ({recipe.group}); written by edgebuild.
# Run on the device: deepstream-app -c {APP_CONFIG}
{raw}# Set [source0] uri to your video: file:///absolute/path/video.mp4 or rtsp://user:pass@camera/stream
# (the placeholder below makes deepstream-app stop with "no such file" until you do), and [streammux]
# width/height to the source's resolution so frames reach nvinfer with their aspect ratio.
[application]
enable-perf-measurement=1
perf-measurement-interval-sec=5

[tiled-display]
enable=0

[source0]
enable=1
type=3
uri=file:///SET-ME/video.mp4
num-sources=1
gpu-id=0
cudadec-memtype=0

[streammux]
gpu-id=0
live-source=0
batch-size={batch_size}
batched-push-timeout=40000
width=1920
height=1080
enable-padding=0
nvbuf-memory-type=0

[primary-gie]
enable=1
gpu-id=0
gie-unique-id=1
nvbuf-memory-type=0
config-file={INFER_CONFIG}
{second}
[osd]
enable=1
gpu-id=0
border-width=2
text-size=12
text-color=1;1;1;1
text-bg-color=0.3;0.3;0.3;1
font=Serif
show-clock=0
nvbuf-memory-type=0

[sink0]
enable=1
type=1
sync=0
source-id=0
gpu-id=0
nvbuf-memory-type=0

# a video file with the boxes drawn (software H.264: the Orin Nano has no hardware encoder); set enable=1
[sink1]
enable=0
type=3
container=1
codec=1
enc-type=1
sync=0
bitrate=4000000
output-file={recipe.group}-detections.mp4
source-id=0

[tests]
file-loop=0
"""


def labels_text(recipe: Recipe) -> str:
    """nvinfer's label file: a detector's one class per line; a classifier's one line per output, ';'-separated."""
    classes = list(recipe.task.classes) if recipe.task else []
    return (";".join(classes) if recipe.task and recipe.task.kind == "classification" else "\n".join(classes)) + "\n"


# -- writing a group's folder ----------------------------------------------------------------------

@dataclass(frozen=True)
class DeepStreamRecord:
    """What the container stage wrote for DeepStream for one group (or why it wrote nothing)."""

    written: bool
    folder: str | None  # relative to the build folder
    files: list[str] = field(default_factory=list)
    deepstream: str | None = None
    engine_file: str | None = None
    ships_engine: bool = False
    reason: str | None = None  # why nothing was written
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> DeepStreamRecord:
        return cls(**data)


def _not_written(reason: str, out: Path) -> DeepStreamRecord:
    if out.is_dir():  # a config of an earlier compile would no longer match the model
        shutil.rmtree(out)
    return DeepStreamRecord(written=False, folder=None, reason=reason)


def _why_not(recipe: Recipe, folder: Path) -> str | None:
    task = recipe.task
    if task is None:
        return "the recipe records no task (an older edgebuild wrote it)"
    if task.outputs == "raw_head":
        return RAW_HEAD_REASON
    if task.kind not in ("detection", "classification", *RAW_TENSOR_TASKS):
        return f"task kind {task.kind!r} has no DeepStream config"
    release = deepstream_release(recipe.jetpack)
    if release is None:
        return f"no DeepStream release is recorded for JetPack {recipe.jetpack} (profiles/deepstream/releases.toml)"
    parser = stock_parser()
    if task.kind == "detection" and _version(release.deepstream) < _version(parser["min_deepstream"]):
        return (f"JetPack {recipe.jetpack} pairs with DeepStream {release.deepstream}; the stock parser "
                f"{parser['function']} is in DeepStream {parser['min_deepstream']} and later")
    if not recipe.outputs:
        return "the recipe records no outputs (an older edgebuild wrote it); rerun `edgebuild compile --force engine`"
    if recipe.precision not in NETWORK_MODES:
        return f"precision {recipe.precision!r} has no nvinfer network-mode"
    return None


def _engine_fits(recipe: Recipe, folder: Path) -> str | None:
    """Why edgebuild's engine is not shipped for nvinfer to load, or None when it is."""
    if not (recipe.shippable_engine and Recipe.has_engine(folder)):
        return "no engine was built for the device: nvinfer builds one from the ONNX on first start"
    if len(recipe.profiles) != 1:
        return "the model has several inputs: nvinfer builds an engine from the ONNX on first start"
    opt = next(iter(recipe.profiles.values()))[1]
    size = list(recipe.task.preprocess.input_size)  # type: ignore[union-attr]
    if list(opt[-2:]) != size:
        return (f"the engine's optimisation profile runs at {opt[-2:]} (nvinfer loads an engine at its opt shape), "
                f"not the input size {size}: nvinfer builds one from the ONNX on first start")
    return None


def write_deepstream(folder: Path, out: Path, *, build_dir: Path, recipe: Recipe | None = None) -> DeepStreamRecord:
    """``out`` (``build/deepstream/<group>``): the nvinfer and deepstream-app configs, labels and model, or a
    record saying why DeepStream cannot run the group's model (and no folder)."""
    from edgebuild.runtime.base.group import is_group_folder

    if is_group_folder(folder):
        return _write_group(folder, out, build_dir)
    recipe = recipe or Recipe.load(folder)
    reason = _why_not(recipe, folder)
    if reason is not None:
        return _not_written(reason, out)
    release = deepstream_release(recipe.jetpack)
    assert release is not None
    onnx_file = onnx_file_name(recipe)
    engine_file = engine_file_name(onnx_file, recipe)
    text, notes = infer_config(recipe, onnx_file=onnx_file, engine_file=engine_file)
    app = app_config(recipe)
    problems = check_config(text) + check_config(app, app=True)
    if problems:  # edgebuild's own mistake: never ship a config nvinfer would refuse
        raise EdgebuildError(f"the DeepStream config of {recipe.group} has keys the nvinfer property table does not "
                             "accept: " + "; ".join(problems))
    no_engine = _engine_fits(recipe, folder)
    if not release.confirmed:
        notes.append(f"DeepStream {release.deepstream} for JetPack {recipe.jetpack} is unconfirmed in "
                     "profiles/deepstream/releases.toml: check NVIDIA's compatibility table")
    if no_engine:
        notes.append(no_engine)
    files = [INFER_CONFIG, APP_CONFIG, LABELS, onnx_file]
    with atomic_output_dir(out) as staging:
        (staging / INFER_CONFIG).write_text(text)
        (staging / APP_CONFIG).write_text(app)
        (staging / LABELS).write_text(labels_text(recipe))
        shutil.copyfile(folder / recipe.onnx, staging / onnx_file)
        if recipe.precision == "int8":
            (staging / INT8_CALIB).write_text("")
            files.append(INT8_CALIB)
        if no_engine is None:
            shutil.copyfile(folder / ENGINE_FILE, staging / engine_file)
            files.append(engine_file)
    return DeepStreamRecord(written=True, folder=str(out.relative_to(build_dir)), files=files,
                            deepstream=release.deepstream, engine_file=engine_file, ships_engine=no_engine is None,
                            notes=notes)


def _write_group(folder: Path, out: Path, build_dir: Path) -> DeepStreamRecord:
    """One config set for a group's models: its detector primary, each classifier secondary on its objects."""
    from edgebuild.runtime.base.group import model_folders

    models = {name: (path, Recipe.load(path)) for name, path in model_folders(folder).items()}
    for name, (path, recipe) in models.items():
        reason = _why_not(recipe, path)
        if reason is not None:
            return _not_written(f"model {name}: {reason}", out)
    detectors = [n for n, (_, r) in models.items() if r.task is not None and r.task.kind == "detection"]
    if len(detectors) > 1:
        return _not_written(f"models {', '.join(detectors)} are all detectors: a DeepStream pipeline has one primary "
                            "detector, and edgebuild writes secondary models for classifiers only", out)
    primary = detectors[0] if detectors else next(iter(models))
    if not detectors and len(models) > 1:
        return _not_written("no model of the group is a detector: a secondary classifier runs on a detector's "
                            "objects", out)
    raw = [n for n, (_, r) in models.items() if r.task is not None and r.task.kind in RAW_TENSOR_TASKS]
    if raw and len(models) > 1:
        return _not_written(f"model(s) {', '.join(raw)} answer raw tensors (pose, segmentation, OBB): edgebuild "
                            "writes a group's DeepStream set for one detector and classifiers of its objects", out)
    release = deepstream_release(models[primary][1].jetpack)
    assert release is not None
    written: dict[str, str] = {}
    files, notes, secondaries, texts = [], [], [], []
    for index, (name, (path, recipe)) in enumerate([(primary, models[primary])]
                                                   + [(n, m) for n, m in models.items() if n != primary]):
        onnx_file, is_primary = onnx_file_name(recipe), name == primary
        config, labels = (INFER_CONFIG, LABELS) if is_primary else (f"config_infer_{name}.txt", f"labels_{name}.txt")
        text, model_notes = infer_config(recipe, onnx_file=onnx_file, engine_file=engine_file_name(onnx_file, recipe),
                                         labels=labels, unique_id=index + 1, operate_on=None if is_primary else 1)
        texts.append(text)
        notes += [f"{name}: {n}" for n in model_notes]
        if not is_primary:
            secondaries.append((index + 1, config, name))
        written[config], written[labels] = text, labels_text(recipe)
        files += [config, labels, onnx_file] + ([INT8_CALIB] if recipe.precision == "int8" else [])
        notes.append(f"{name}: " + (_engine_fits(recipe, path) or "its engine is shipped"))
    app = app_config(models[primary][1], secondaries=tuple(secondaries))
    problems = [p for t in texts for p in check_config(t)] + check_config(app, app=True)
    if problems:
        raise EdgebuildError(f"the DeepStream configs of {folder.name} have keys the nvinfer property table does not "
                             "accept: " + "; ".join(problems))
    with atomic_output_dir(out) as staging:
        for name, text in written.items():
            (staging / name).write_text(text)
        (staging / APP_CONFIG).write_text(app)
        for path, recipe in models.values():
            shutil.copyfile(path / recipe.onnx, staging / onnx_file_name(recipe))
            if recipe.precision == "int8":
                (staging / INT8_CALIB).write_text("")
            if _engine_fits(recipe, path) is None:
                engine = engine_file_name(onnx_file_name(recipe), recipe)
                shutil.copyfile(path / ENGINE_FILE, staging / engine)
                files.append(engine)
    return DeepStreamRecord(written=True, folder=str(out.relative_to(build_dir)),
                            files=[APP_CONFIG, *dict.fromkeys(files)], deepstream=release.deepstream,
                            engine_file=None, ships_engine=False, notes=notes)
