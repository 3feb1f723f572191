"""DeepStream configs per fleet group (edgebuild/shipping/deepstream.py), checked against nvinfer's property table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edgebuild.accuracy.evaluate import recipe_task
from edgebuild.project.config import load_project
from edgebuild.runtime.base.recipe import ENGINE_FILE, ENGINE_JSON, Recipe, TensorSpec
from edgebuild.runtime.base.vision import NMS_OUTPUTS, preprocess
from edgebuild.shipping.deepstream import (
    APP_CONFIG,
    INFER_CONFIG,
    LABELS,
    RAW_HEAD_REASON,
    check_config,
    deepstream_release,
    nvinfer_table,
    write_deepstream,
)
from tests.support.runtime_artifacts import recipe_for, write_artifact

NMS_SPECS = {"num_detections": TensorSpec("INT32", [-1, 1]), "detection_boxes": TensorSpec("FP32", [-1, 100, 4]),
             "detection_scores": TensorSpec("FP32", [-1, 100]), "detection_classes": TensorSpec("FP32", [-1, 100])}


def _example_recipe(example_copy, tmp_path: Path, example: str, *, in_model: bool = True, target: str,
                    **changes) -> tuple[Path, Recipe]:
    """A model folder whose recipe carries the example's task (the folder's ONNX is a stand-in)."""
    root = example_copy(example)
    if in_model:
        toml = root / "edgebuild.toml"
        toml.write_text(toml.read_text().replace("max_detections = 100", "max_detections = 100\nin_model = true"))
    task = recipe_task(load_project(root, check_paths=False))
    folder = write_artifact(tmp_path / "engines" / "yard-cams")
    outputs = NMS_SPECS if task.outputs == "nms" else {"boxes": TensorSpec("FP32", [-1, 525, 4])} \
        if task.kind == "detection" else {"logits": TensorSpec("FP32", [-1, 10])}
    recipe = recipe_for(folder, target, task=task, outputs=outputs, group="yard-cams",
                        model_name=root.name, **changes)
    recipe.save(folder)
    return folder, recipe


def _properties(text: str) -> dict[str, str]:
    return {k: v for line in text.splitlines() if "=" in line and not line.startswith("#")
            for k, _, v in [line.partition("=")]}


def test_the_shapes_detector_with_nms_inside_gets_a_config_every_key_of_which_nvinfer_documents(
        example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "shapes-detector", target="orin-nano-8gb@6.2",
                                     precision="fp16")
    record = write_deepstream(folder, tmp_path / "deepstream" / "yard-cams", build_dir=tmp_path)
    assert record.written and record.deepstream == "7.1" and record.reason is None
    out = tmp_path / record.folder
    text = (out / INFER_CONFIG).read_text()
    assert check_config(text) == [] and check_config((out / APP_CONFIG).read_text(), app=True) == []
    table = nvinfer_table()
    groups = [line for line in text.splitlines() if line.startswith("[")]
    assert groups == ["[property]", "[class-attrs-all]"]
    props = _properties(text)
    assert all(k in table["property"] or k in table["class-attrs"] for k in props)
    onnx_file = "shapes-detector-yard-cams-trt10.3.0.30.onnx"
    assert props["onnx-file"] == onnx_file and (out / onnx_file).read_bytes() == (folder / "model.onnx").read_bytes()
    # the name nvinfer gives the engine it builds from onnx-file, so it is built once and then loaded
    assert props["model-engine-file"] == f"{onnx_file}_b1_gpu0_fp16.engine" and props["batch-size"] == "1"
    assert props["network-mode"] == "2" and props["infer-dims"] == "3;160;160"
    assert props["model-color-format"] == "0"
    assert props["maintain-aspect-ratio"] == "1" and props["symmetric-padding"] == "1"
    assert props["num-detected-classes"] == "3" and props["cluster-mode"] == "4" and props["network-type"] == "0"
    assert props["output-blob-names"].split(";") == list(NMS_OUTPUTS)
    assert props["parse-bbox-func-name"] == "NvDsInferParseYoloV5CustomBatchedNMSTLT"
    assert props["custom-lib-path"] == "/opt/nvidia/deepstream/deepstream/lib/libnvds_infercustomparser.so"
    assert float(props["pre-cluster-threshold"]) <= (recipe.task.postprocess.score_threshold or 0.0)
    assert props["labelfile-path"] == LABELS and (out / LABELS).read_text() == "circle\nsquare\ntriangle\n"
    assert "[primary-gie]" in (out / APP_CONFIG).read_text() and f"config-file={INFER_CONFIG}" in (
        out / APP_CONFIG).read_text()
    assert any("pads the letterbox with black" in n for n in record.notes)  # pad_value 114
    assert set(record.files) == {INFER_CONFIG, APP_CONFIG, LABELS, onnx_file} and not record.ships_engine


def test_scale_factor_and_offsets_reproduce_edgebuilds_preprocessing(example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "shapes-detector", target="orin-nano-8gb@6.2")
    record = write_deepstream(folder, tmp_path / "deepstream" / "yard-cams", build_dir=tmp_path)
    props = _properties((tmp_path / record.folder / INFER_CONFIG).read_text())
    scale, offsets = float(props["net-scale-factor"]), [float(o) for o in props["offsets"].split(";")]
    spec = recipe.task.preprocess
    image = np.random.default_rng(0).integers(0, 256, (160, 160, 3), dtype=np.uint8)  # the input size: no resize
    tensor, _ = preprocess(image, spec)
    nvinfer = scale * (image.astype(np.float64) - np.asarray(offsets))  # y = net-scale-factor * (x - offset[c])
    np.testing.assert_allclose(tensor.transpose(1, 2, 0), nvinfer, atol=1e-5)


def test_per_channel_std_is_said_to_be_approximate(example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "shapes-detector", target="orin-nano-8gb@6.2")
    pre = dataclasses.replace(recipe.task.preprocess, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                              pad_value=0)
    recipe = dataclasses.replace(recipe, task=dataclasses.replace(recipe.task, preprocess=pre))
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path, recipe=recipe)
    props = _properties((tmp_path / record.folder / INFER_CONFIG).read_text())
    assert [float(o) for o in props["offsets"].split(";")] == pytest.approx([255 * m for m in pre.mean])
    assert float(props["net-scale-factor"]) == pytest.approx(1 / (255 * np.mean(pre.std)))
    (note,) = [n for n in record.notes if "std differs" in n]
    assert "channel 0 x1.0133" in note
    assert "# NOTE: std differs" in (tmp_path / record.folder / INFER_CONFIG).read_text()


@pytest.mark.parametrize(("precision", "mode"), [("fp32", "0"), ("fp16", "2"), ("int8", "1")])
def test_network_mode_follows_the_recipes_precision(example_copy, tmp_path: Path, precision: str, mode: str) -> None:
    folder, _ = _example_recipe(example_copy, tmp_path, "shapes-detector", target="agx-orin-64gb@5.1.2",
                                precision=precision)
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path)
    assert record.deepstream == "6.3"
    props = _properties((tmp_path / record.folder / INFER_CONFIG).read_text())
    assert props["network-mode"] == mode and props["model-engine-file"].endswith(f"_gpu0_{precision}.engine")
    if precision == "int8":  # a Q/DQ model: nvinfer sets TensorRT's INT8 flag only with a readable calib file
        assert props["int8-calib-file"] == "int8.calib" and (tmp_path / record.folder / "int8.calib").read_text() == ""
        assert any("Q/DQ" in n for n in record.notes)
    else:
        assert "int8-calib-file" not in props


def test_a_raw_head_detector_gets_no_config_and_the_reason(example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "shapes-detector", in_model=False,
                                     target="orin-nano-8gb@6.2")
    assert recipe.task.outputs == "raw_head"
    out = tmp_path / "deepstream" / "yard-cams"
    out.mkdir(parents=True)
    (out / INFER_CONFIG).write_text("stale")
    record = write_deepstream(folder, out, build_dir=tmp_path)
    assert not record.written and record.folder is None and record.files == []
    assert record.reason == RAW_HEAD_REASON and "in_model = true" in record.reason
    assert not out.exists()  # an earlier compile's config no longer matches the model


def test_a_classifier_gets_a_classifier_config_and_the_logits_caveat(example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "digits-classifier", in_model=False,
                                     target="orin-nano-4gb@6.2")
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path)
    text = (tmp_path / record.folder / INFER_CONFIG).read_text()
    assert check_config(text) == [] and "[class-attrs-all]" not in text
    props = _properties(text)
    assert props["network-type"] == "1" and props["classifier-threshold"] == "0"
    assert props["model-color-format"] == "2" and props["infer-dims"] == "1;16;16"
    assert props["maintain-aspect-ratio"] == "0" and props["output-blob-names"] == "logits"
    assert "parse-bbox-func-name" not in props and "cluster-mode" not in props
    assert float(props["offsets"]) == pytest.approx(255 * 0.31)
    assert float(props["net-scale-factor"]) == pytest.approx(1 / (255 * 0.32))
    assert (tmp_path / record.folder / LABELS).read_text() == "0;1;2;3;4;5;6;7;8;9\n"  # one line per output
    assert any("logits" in n and "Softmax" in n for n in record.notes)


def test_an_engine_built_at_the_input_size_ships_under_nvinfers_engine_name(example_copy, tmp_path: Path) -> None:
    folder, recipe = _example_recipe(example_copy, tmp_path, "shapes-detector", target="orin-nano-8gb@6.2",
                                     precision="int8", shippable_engine=True, placement="ssh://nvidia@orin",
                                     profiles={"images": [[1, 3, 96, 96], [4, 3, 160, 160], [8, 3, 320, 320]]})
    (folder / ENGINE_FILE).write_bytes(b"plan")
    (folder / ENGINE_JSON).write_text("{}")
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path)
    assert record.ships_engine and record.engine_file in record.files
    assert (tmp_path / record.folder / record.engine_file).read_bytes() == b"plan"
    other = dataclasses.replace(recipe, profiles={"images": [[1, 3, 96, 96], [4, 3, 224, 224], [8, 3, 320, 320]]})
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path, recipe=other)
    assert not record.ships_engine and any("opt shape" in n for n in record.notes)


def test_a_jetpack_whose_deepstream_predates_the_stock_parser_gets_no_detector_config(
        example_copy, tmp_path: Path) -> None:
    folder, _ = _example_recipe(example_copy, tmp_path, "shapes-detector", target="xavier-nx@4.6.1")
    record = write_deepstream(folder, tmp_path / "ds", build_dir=tmp_path)
    assert not record.written and "6.1.1" in record.reason
    assert "NvDsInferParseYoloV5CustomBatchedNMSTLT" in record.reason


def test_the_release_table_pairs_each_orin_jetpack_with_its_deepstream() -> None:
    pairs = {"5.1.2": "6.3", "5.1.1": "6.2", "5.1.5": "6.3", "6.0": "7.0", "6.1": "7.1", "6.2": "7.1", "6.2.1": "7.1"}
    assert {jp: deepstream_release(jp).deepstream for jp in pairs} == pairs
    assert deepstream_release("3.3") is None


def test_the_property_check_names_unknown_keys_and_refused_values() -> None:
    text = "[property]\nnetwork-mode=3\nnet-scale-factr=1\ncluster-mode=4\ninfer-dims=3;x\n[class-attrs-all]\ntopk=20\n"
    problems = check_config(text)
    assert len(problems) == 3
    assert any("network-mode=3 is not one of" in p for p in problems)
    assert any("net-scale-factr is not a Gst-nvinfer key" in p for p in problems)
    assert any("infer-dims=3;x is not of type ints" in p for p in problems)
    assert check_config("[sink0]\nenable=1\n[nosuch]\nx=1\n", app=True) == ["[nosuch] is not a deepstream-app group"]


def test_the_property_table_names_its_source_and_types_every_key() -> None:
    table = nvinfer_table()
    assert table["source"]["url"].startswith("https://docs.nvidia.com/metropolis/deepstream/")
    types = {"int", "float", "bool", "string", "path", "ints", "floats", "strings"}
    for group in ("property", "class-attrs"):
        assert all(spec["type"] in types for spec in table[group].values()), group
