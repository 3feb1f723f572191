"""Model files a new user brings (``[model] source``): empty, truncated, of another kind than they say, or
an ONNX that validate's model stage would refuse (opset, static batch, external data, inputs, outputs,
stride). Each is refused by ``init`` (the model stage's checks run on the draft) or, for a key edited
after init, by ``check``: never first by ``validate``."""

from __future__ import annotations

import sys
import types
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.bad_inputs.harness import Case, Inputs, invoke
from tests.bad_inputs.harness import substitute as _sub
from tests.bad_inputs.kit import DETECTOR_CLASSES, Kit

# -- ways to break a copy of the kit's models ----------------------------------------------------------


def _classifier(kit: Kit, folder: Path) -> Path:
    return kit.copy(kit.classifier, folder)


def _file(name: str, content: bytes | Callable[[bytes], bytes],
          of: str = "classifier") -> Callable[[Kit, Path], Inputs]:
    """A model file ``name`` holding ``content`` (or ``content(the kit model's bytes)``), with the kit's data."""
    def make(kit: Kit, folder: Path) -> Inputs:
        model = getattr(kit, of)
        data = model.read_bytes()
        path = folder / "models" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content(data) if callable(content) else content)
        return Inputs(model=path, data=kit.folders if of == "classifier" else kit.yolo)
    return make


def _zip(names: dict[str, bytes]) -> Callable[[bytes], bytes]:
    def content(_: bytes) -> bytes:
        import io

        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, value in names.items():
                archive.writestr(name, value)
        return buffer.getvalue()
    return content


def _onnx(change: Callable, of: str = "classifier", name: str = "model.onnx", init_args: tuple[str, ...] = (),
          external: bool = False) -> Callable[[Kit, Path], Inputs]:
    """The kit's ONNX loaded, changed by ``change(proto)`` and saved as ``name``."""
    def make(kit: Kit, folder: Path) -> Inputs:
        import onnx

        proto = onnx.load(str(getattr(kit, of)))
        change(proto)
        path = folder / "models" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if external:
            onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location="weights.bin", size_threshold=0)
            (path.parent / "weights.bin").unlink()
        else:
            onnx.save_model(proto, str(path))
        return Inputs(model=path, data=kit.folders if of == "classifier" else kit.yolo, init_args=init_args)
    return make


def _opset(version: int) -> Callable:
    def change(proto) -> None:
        for entry in proto.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = version
    return change


def _static_batch(proto) -> None:
    for value in (*proto.graph.input, *proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1


def _metadata(**props: str) -> Callable:
    def change(proto) -> None:
        for key, value in props.items():
            entry = next((p for p in proto.metadata_props if p.key == key), None) or proto.metadata_props.add()
            entry.key, entry.value = key, value
    return change


def _second_input(proto) -> None:
    from onnx import TensorProto, helper

    proto.graph.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["batch", 4]))


def _rank3(proto) -> None:
    del proto.graph.input[0].type.tensor_type.shape.dim[0]


def _dangling(proto) -> None:
    proto.graph.node[0].input[0] = "nowhere"


def _init_then_edit(edit: Callable[[str], str], of: str = "classifier",
                    model_edit: Callable[[Path], None] | None = None) -> Callable[[Kit, Path], Inputs]:
    """A project init writes from the kit's own (copied) model, then its edgebuild.toml or model file changed."""
    def make(kit: Kit, folder: Path) -> Inputs:
        model = kit.copy(getattr(kit, of), folder)
        project = folder / "project"
        ran = invoke("init", "--model", str(model), "--data", str(kit.folders if of == "classifier" else kit.yolo),
                     str(project))
        assert ran.exit_code == 0, ran.output
        toml = project / "edgebuild.toml"
        toml.write_text(edit(toml.read_text()))
        if model_edit:
            model_edit(model)
        return Inputs(project=project)
    return make


# -- a detector without metadata whose feature maps at strides 16 and 32 are added: its size must be a
#    multiple of 32 (at 80x80 ONNX Runtime fails with a broadcast error)

def _pyramid(kit: Kit, folder: Path, init_args: tuple[str, ...] = ("--input-size", "80")) -> Inputs:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    channels = 4 + len(DETECTOR_CLASSES)
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(channels, 3, k, k)).astype(np.float32) / 100, f"w{k}")
               for k in (16, 32)]
    consts = [numpy_helper.from_array(np.array([0, channels, -1], dtype=np.int64), "flat"),
              numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
              numpy_helper.from_array(np.array([0], dtype=np.int64), "s0"),
              numpy_helper.from_array(np.array([4], dtype=np.int64), "s4"),
              numpy_helper.from_array(np.array([channels], dtype=np.int64), "sc"),
              numpy_helper.from_array(np.array([2], dtype=np.int64), "ax")]
    nodes = [helper.make_node("Conv", ["images", "w16"], ["p16"], strides=[16, 16]),
             helper.make_node("Conv", ["images", "w32"], ["p32"], strides=[32, 32]),
             helper.make_node("Resize", ["p32", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Add", ["p16", "up"], ["f16"]),
             helper.make_node("Reshape", ["f16", "flat"], ["a16"]),
             helper.make_node("Reshape", ["p32", "flat"], ["a32"]),
             helper.make_node("Concat", ["a16", "a32"], ["heads"], axis=2),
             helper.make_node("Transpose", ["heads"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Slice", ["t", "s0", "s4", "ax"], ["boxes"]),
             helper.make_node("Slice", ["t", "s4", "sc", "ax"], ["logits"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"])]
    graph = helper.make_graph(
        nodes, "pyramid", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", "anchors", 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "anchors", len(DETECTOR_CLASSES)])],
        initializer=weights + consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "models" / "pyramid.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return Inputs(model=path, data=kit.yolo, init_args=init_args)


def _pyramid_then_edit(edit: Callable[[str], str]) -> Callable[[Kit, Path], Inputs]:
    def make(kit: Kit, folder: Path) -> Inputs:
        inputs = _pyramid(kit, folder, ("--input-size", "64"))
        project = folder / "project"
        ran = invoke("init", "--model", str(inputs.model), "--data", str(inputs.data), *inputs.init_args, str(project))
        assert ran.exit_code == 0, ran.output
        toml = project / "edgebuild.toml"
        toml.write_text(edit(toml.read_text()))
        return Inputs(project=project)
    return make


# -- an Ultralytics checkpoint, made without Ultralytics (init and check never unpickle it) -----------

def _checkpoint(name: str = "best.pt", task: str = "detect", init_args: tuple[str, ...] = ()) -> Callable:
    def make(kit: Kit, folder: Path) -> Inputs:
        import torch

        module = types.ModuleType("ultralytics.nn.tasks")
        model_class = type("DetectionModel", (), {"__module__": "ultralytics.nn.tasks"})
        module.DetectionModel = model_class
        saved = {n: sys.modules.get(n) for n in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks")}
        sys.modules.update({"ultralytics": types.ModuleType("ultralytics"),
                            "ultralytics.nn": types.ModuleType("ultralytics.nn"), "ultralytics.nn.tasks": module})
        try:
            model = model_class()
            model.names, model.stride, model.args = dict(enumerate(DETECTOR_CLASSES)), [8, 16, 32], {"task": task}
            path = folder / "models" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model, "train_args": {"imgsz": 64}, "version": "8.3.0"}, path)
        finally:
            for key, value in saved.items():
                if value is None:
                    sys.modules.pop(key, None)
                else:
                    sys.modules[key] = value
        return Inputs(model=path, data=kit.yolo, init_args=init_args)
    return make


def _resave(path: Path, change: Callable) -> None:
    import onnx

    proto = onnx.load(str(path))
    change(proto)
    onnx.save(proto, str(path))


def _static_then_edit(kit: Kit, folder: Path) -> Inputs:
    """A classifier exported with a fixed batch of 1: init writes max_shape [1, ...]; the profile then asks for 4."""
    model = kit.copy(kit.classifier, folder)
    _resave(model, _static_batch)
    project = folder / "project"
    ran = invoke("init", "--model", str(model), "--data", str(kit.folders), str(project))
    assert ran.exit_code == 0, ran.output
    toml = project / "edgebuild.toml"
    toml.write_text(_sub(r"max_shape = \[1, 3, 32, 32\]", "max_shape = [4, 3, 32, 32]")(toml.read_text()))
    return Inputs(project=project)


def _checkpoint_then_untrust(kit: Kit, folder: Path) -> Inputs:
    inputs = _checkpoint(init_args=("--trust-checkpoint",))(kit, folder)
    project = folder / "project"
    ran = invoke("init", "--model", str(inputs.model), "--data", str(inputs.data), *inputs.init_args, str(project))
    assert ran.exit_code == 0, ran.output
    toml = project / "edgebuild.toml"
    toml.write_text(_sub(r"^trust_checkpoint = true", "trust_checkpoint = false")(toml.read_text()))
    return Inputs(project=project)


def _truncated_pt(model: Path) -> None:
    """The project's model.source pointed at a best.pt beside it whose zip lost its end."""
    (model.parent / "best.pt").write_bytes(b"PK\x03\x04" + bytes(300))
    toml = model.parent.parent / "project" / "edgebuild.toml"
    toml.write_text(_sub(r'^source = "(.*)/model.onnx"', r'source = "\1/best.pt"')(toml.read_text()))


def _half(data: bytes) -> bytes:
    return data[:len(data) // 2]


def _input_type(elem_type: str) -> Callable:
    """The image input of another ONNX element type, cast to float inside the graph (a valid model ONNX Runtime
    runs when fed that type)."""
    def change(proto) -> None:
        from onnx import TensorProto, helper

        image = proto.graph.input[0]
        for node in proto.graph.node:
            node.input[:] = [f"{image.name}_float" if n == image.name else n for n in node.input]
        proto.graph.node.insert(0, helper.make_node("Cast", [image.name], [f"{image.name}_float"],
                                                    to=TensorProto.FLOAT))
        image.type.tensor_type.elem_type = getattr(TensorProto, elem_type)
    return change


def _channels_last(proto) -> None:
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[1].dim_value, dims[3].dim_value = dims[3].dim_value, 3


def _float16_file_and_key(kit: Kit, folder: Path) -> Inputs:
    """model.inputs[0].dtype and the file's input agree on float16 (edited after init): check still refuses."""
    return _init_then_edit(_sub(r'^dtype = "float32"', 'dtype = "float16"'),
                           model_edit=lambda p: _resave(p, _input_type("FLOAT16")))(kit, folder)


def _state_dict(kit: Kit, folder: Path) -> Inputs:
    import torch

    path = folder / "models" / "state_dict.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"conv.weight": torch.zeros(3, 3, 3, 3), "fc.weight": torch.zeros(3, 3)}, path)
    return Inputs(model=path, data=kit.folders)


def _torchscript_tuple(kit: Kit, folder: Path) -> Inputs:
    """A TorchScript classifier whose forward returns (logits, features): 2 values, one [N, C] expected."""
    import torch

    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pooled = self.conv(x).mean(dim=(2, 3))
            return pooled, pooled * 2

    path = folder / "models" / "two.ts"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.trace(Two().eval(), torch.zeros(1, 3, 32, 32)).save(str(path))
    return Inputs(model=path, data=kit.folders)


# -- a PyTorch model from Python code (model.entry_point): check builds it and runs it at the profile's shapes ----

#: a detector of the kit's 3 classes whose feature maps at strides 16 and 32 (rounded up, as padded convolutions
#: round) are added: its image sizes must be multiples of 32 (at 40x40 the two do not line up)
KITNET = """
import torch
from torch.nn.functional import avg_pool2d, interpolate


class KitNet(torch.nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.head = torch.nn.Conv2d(3, 4 + classes, 1)

    def forward(self, images):
        maps = avg_pool2d(images, 16, ceil_mode=True) + interpolate(avg_pool2d(images, 32, ceil_mode=True),
                                                                    scale_factor=2.0)
        y = self.head(maps).flatten(2).transpose(1, 2)
        return y[..., :4].abs() * 16.0, torch.sigmoid(y[..., 4:])


def build_model():
    return KitNet().eval()
"""


def _hexagon_in_a2(root: Path) -> None:
    """A fourth object name, in one XML file of the kit's VOC root's val split."""
    xml = root / "Annotations" / "a2.xml"
    xml.write_text(xml.read_text().replace("</annotation>", "<object><name>hexagon</name><difficult>0</difficult>"
                                           "<bndbox><xmin>2</xmin><ymin>2</ymin><xmax>9</xmax><ymax>9</ymax></bndbox>"
                                           "</object></annotation>"))


def _four_classes(text: str) -> str:
    return _sub(r"^classes = \[.*\]", 'classes = ["circle", "hexagon", "square", "triangle"]')(text)


def _entry_point_project(edit: Callable[[str], str], hexagon: bool = False) -> Callable[[Kit, Path], Inputs]:
    """The project init writes for the kit's detector and VOC root, made an entry-point project (KITNET, 3 classes,
    stride 32) and then edited; ``hexagon``: a fourth object name added to the VOC root."""
    def make(kit: Kit, folder: Path) -> Inputs:
        model, data = kit.copy(kit.detector, folder), kit.copy(kit.voc, folder)
        project = folder / "project"
        ran = invoke("init", "--model", str(model), "--data", str(data), str(project))
        assert ran.exit_code == 0, ran.output
        (project / "kitnet.py").write_text(KITNET)
        toml = project / "edgebuild.toml"
        toml.write_text(edit(_sub(r'^source = ".*"', 'entry_point = "kitnet:build_model"\npython_path = ["."]')(
            toml.read_text())))
        if hexagon:
            _hexagon_in_a2(data)
        return Inputs(project=project)
    return make


def _nameless_voc_then_hexagon(kit: Kit, folder: Path) -> Inputs:
    """The kit's detector without its names metadata, with the VOC root: init takes the 3 classes from the XML
    files; then a fourth object name is added and task.classes lists it (the head still scores 3)."""
    import onnx

    proto = onnx.load(str(kit.detector))
    kept = [p for p in proto.metadata_props if p.key != "names"]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    path = folder / "models" / "nameless.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(path))
    data = kit.copy(kit.voc, folder)
    project = folder / "project"
    ran = invoke("init", "--model", str(path), "--data", str(data), str(project))
    assert ran.exit_code == 0, ran.output
    toml = project / "edgebuild.toml"
    toml.write_text(_four_classes(toml.read_text()))
    _hexagon_in_a2(data)
    return Inputs(project=project)


CASES: list[Case] = [
    # -- the file itself: empty, truncated, a folder, missing ------------------------------------------
    Case("model-empty-onnx", _file("model.onnx", b""), "init", 6, ("model.onnx", "empty")),
    Case("model-empty-pt", _file("best.pt", b""), "init", 6, ("best.pt", "empty")),
    Case("model-truncated-onnx", _file("model.onnx", _half), "init", 6, ("model.onnx", "truncated")),
    Case("model-truncated-detector", _file("best.onnx", _half, of="detector"), "init", 6, ("best.onnx", "truncated")),
    Case("model-truncated-zip-pt", _file("best.pt", lambda _: b"PK\x03\x04" + bytes(200)), "init", 6,
         ("best.pt", "truncated")),
    Case("model-truncated-torchscript", _file("model.ts", lambda _: _zip({"model/constants.pkl": b"\x80\x02N.",
                                                                          "model/code/m.py": bytes(500)})(b"")[:300]),
         "init", 6, ("model.ts", "truncated")),
    Case("model-folder", lambda kit, folder: Inputs(model=kit.classifier.parent, data=kit.folders), "init", 6,
         ("classifier", "folder")),
    Case("model-missing", lambda kit, folder: Inputs(model=folder / "nope.onnx", data=kit.folders), "init", 6,
         ("nope.onnx", "not found")),
    # -- declared one kind, its bytes another ------------------------------------------------------------
    Case("model-pickle-named-onnx", _file("model.onnx", b"\x80\x04\x95" + bytes(64)), "init", 6,
         ("model.onnx", "pickle")),
    Case("model-text-named-onnx", _file("model.onnx", b"<html>404 Not Found</html>" * 4), "init", 6,
         ("model.onnx", "not a model file")),
    Case("model-zip-named-onnx", _file("model.onnx", _zip({"data.pkl": b"\x80\x04N."})), "init", 6,
         ("model.onnx", "not an ultralytics checkpoint")),
    Case("model-checkpoint-named-onnx", _checkpoint("best.onnx", init_args=("--trust-checkpoint",)), "init", 6,
         ("best.onnx", "ultralytics checkpoint")),
    Case("model-kind-torchscript-on-onnx", _init_then_edit(_sub(r"^\[model\]$", '[model]\nkind = "torchscript"')),
         "check", 6, ("model.onnx", "model.kind", "onnx model")),
    Case("model-kind-ultralytics-on-onnx", _init_then_edit(_sub(r"^\[model\]$", '[model]\nkind = "ultralytics"')),
         "check", 6, ("model.onnx", "model.kind")),
    Case("model-replaced-by-empty-after-init", _init_then_edit(lambda t: t, model_edit=lambda p: p.write_bytes(b"")),
         "check", 6, ("model.onnx", "empty")),
    Case("model-replaced-by-truncated-after-init",
         _init_then_edit(lambda t: t, model_edit=lambda p: p.write_bytes(_half(p.read_bytes()))), "check", 6,
         ("model.onnx", "truncated")),
    Case("model-source-truncated-pt-after-init", _init_then_edit(lambda t: t, model_edit=_truncated_pt), "check", 3,
         ("best.pt", "truncated")),
    Case("model-source-a-folder", _init_then_edit(_sub(r'^source = "(.*)/model.onnx"', r'source = "\1"')),
         "check", 3, ("model.source", "folder")),
    # -- an ONNX validate's model stage refuses: found by init (on the draft) or by check ---------------
    Case("model-opset-above-every-tensorrt", _onnx(_opset(21)), "init", 6, ("model.onnx", "opset 21", "opset 20")),
    Case("model-opset-above-jetpack-4", _onnx(lambda p: None, init_args=("--fleet", "old=nano@4.6.1")), "init", 6,
         ("model.onnx", "opset 17", "opset 13")),
    Case("model-external-data-missing", _onnx(lambda p: None, external=True), "init", 6,
         ("model.onnx", "weights.bin")),
    Case("model-checker-refuses", _onnx(_dangling), "init", 6, ("model.onnx", "checker")),
    Case("model-two-inputs", _onnx(_second_input), "init", 6, ("model.onnx", "2 inputs")),
    Case("model-no-batch-axis", _onnx(_rank3), "init", 6, ("model.onnx", "not an image batch")),
    Case("model-ultralytics-segment", _onnx(_metadata(task="segment"), of="detector", name="best.onnx"), "init", 6,
         ("best.onnx", "segment")),
    Case("model-static-batch-profile-varies", _static_then_edit, "check", 6,
         ("model.onnx", "axis 0 (batch)", "fixed at 1")),
    Case("model-input-name", _init_then_edit(_sub(r'^name = "images"', 'name = "input"')), "check", 6,
         ("model.onnx", "model.inputs[0]", "'input'")),
    Case("model-input-dtype", _init_then_edit(_sub(r'^dtype = "float32"', 'dtype = "float16"')), "check", 6,
         ("model.onnx", "float16")),
    Case("model-fixed-size-profile-varies",
         _init_then_edit(_sub(r"max_shape = \[4, 3, 32, 32\]", "max_shape = [4, 3, 64, 64]")), "check", 6,
         ("model.onnx", "axis 2 (height)", "fixed at 32")),
    Case("model-output-renamed", _init_then_edit(lambda t: t.replace('"logits"', '"probs"')), "check", 6,
         ("model.onnx", "model.outputs", "logits")),
    Case("model-output-count-vs-classes",
         _init_then_edit(_sub(r'^classes = \["cat", "dog", "fox"\]', 'classes = ["cat", "dog"]')), "check", 6,
         ("logits", "task.classes")),
    Case("model-stride-at-init", _pyramid, "init", 6, ("pyramid.onnx", "stride 32", "80")),
    Case("model-stride-max-shape", _pyramid_then_edit(
        _sub(r"max_shape = \[4, 3, 64, 64\]", "max_shape = [4, 3, 80, 80]")), "check", 6,
        ("pyramid.onnx", "stride 32", "max_shape")),
    Case("model-imgsz-vs-ultralytics-metadata", _init_then_edit(
        lambda t: t.replace("64, 64]", "72, 72]").replace("input_size = [64, 64]", "input_size = [72, 72]"),
        of="detector"), "check", 3, ("best.onnx", "task.preprocess.input_size", "imgsz")),
    # -- an Ultralytics checkpoint -----------------------------------------------------------------------
    Case("model-checkpoint-untrusted", _checkpoint(), "init", 6, ("best.pt", "trust_checkpoint", "--trust-checkpoint")),
    Case("model-checkpoint-untrusted-after-init", _checkpoint_then_untrust, "check", 6,
         ("best.pt", "trust_checkpoint")),
    # -- review of issue 34: the input's layout and type, metadata against the graph, other PyTorch files ---
    Case("model2-nhwc-input", _onnx(_channels_last), "init", 6, ("model.onnx", "'images'", "channels-last", "NCHW")),
    Case("model2-float16-input", _onnx(_input_type("FLOAT16")), "init", 6,
         ("model.onnx", "'images'", "float16", "model.inputs[0].dtype", "float32")),
    Case("model2-uint8-input", _onnx(_input_type("UINT8")), "init", 6, ("model.onnx", "'images'", "uint8", "float32")),
    Case("model2-float16-input-file-and-key", _float16_file_and_key, "check", 6,
         ("model.onnx", "model.inputs[0]", "float16", "feeds the image input float32")),
    Case("model2-meta-task-classify-on-detect-head", _onnx(_metadata(task="classify"), of="detector",
                                                           name="best.onnx"), "init", 6,
         ("best.onnx", "task classify", "[?, 7, ", "contradicts")),
    Case("model2-meta-names-4-head-3", _onnx(_metadata(names=str(dict(enumerate([*DETECTOR_CLASSES, "star"])))),
                                             of="detector", name="best.onnx"), "init", 6,
         ("best.onnx", "model error", "4 classes", "predict 3", "contradicts itself")),
    Case("model2-meta-names-unreadable", _onnx(_metadata(names="{0: circle, 1: square"), of="detector",
                                               name="best.onnx"), "note", 0,
         ("best.onnx", "class names could not be read", "not checked")),
    Case("model2-state-dict-pt", _state_dict, "init", 6, ("state_dict.pt", "torch.onnx.export", "model.entry_point")),
    Case("model2-torchscript-tuple-output", _torchscript_tuple, "init", 6, ("two.ts", "returns 2 values", "[N, C]")),
    # -- issue 44: a model.entry_point built and run by check; an Ultralytics head left unadapted -----------
    Case("model3-entry-point-valid", _entry_point_project(lambda t: t), "note", 0,
         ("kitnet:build_model builds", "fit the detection task"), "the entry-point project itself passes check"),
    Case("model3-entry-point-size-off-stride",
         _entry_point_project(_sub(r"min_shape = \[1, 3, 64, 64\]", "min_shape = [1, 3, 40, 40]")), "check", 3,
         ("model.inputs[0].min_shape", "stride 32", "40x40", "32 or 64"),
         "an image size off the model's stride: the forward fails at min_shape (validate's RuntimeError before)"),
    Case("model3-entry-point-fewer-classes-than-voc-names", _entry_point_project(_four_classes, hexagon=True),
         "check", 6, ("scores have 3 classes, task.classes lists 4", "'hexagon' in 1 XML file", "a2.xml"),
         "a stray object name in the VOC XML files made a fourth class of a 3-class entry-point model"),
    Case("model3-ultralytics-head-fewer-classes-than-voc-names", _nameless_voc_then_hexagon, "check", 6,
         ("nameless.onnx", "'output0' [?, 7, 64] is the Ultralytics raw detection head", "scores 3 classes",
          "task.classes lists 4", "'hexagon' in 1 XML file", "a2.xml", "make task.classes the 3 classes"),
         "an Ultralytics head of 3 classes with task.classes of 4: the adapter does not apply, say why"),
]

