"""Triton model repositories (``[runtime] server = "triton"``), parsed with Triton's own config schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from edgebuild.cli import main
from edgebuild.runtime.base.recipe import Recipe


def _parsed(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())  # raises on anything unknown


def _onnx_io(path: Path) -> tuple[dict, dict]:
    graph = onnx.load(str(path)).graph
    dims = lambda v: [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim]  # noqa: E731
    return {i.name: dims(i) for i in graph.input}, {o.name: dims(o) for o in graph.output}


@pytest.mark.parametrize("example", ["digits-classifier", "shapes-detector", "shapes-detector+nms"])
def test_every_group_gets_a_model_repository_triton_can_read(example_copy, example: str) -> None:
    root = example_copy(example.removesuffix("+nms"))
    toml = root / "edgebuild.toml"
    text = toml.read_text()
    if example.endswith("+nms"):
        text = text.replace("max_detections = 100", "max_detections = 100\nin_model = true")
    runtime = '[runtime]\nserver = "both"\nmax_batch_size = 4\nmax_queue_delay_ms = 3\n'
    toml.write_text(text.replace("[runtime]\n", runtime, 1) if "[runtime]\n" in text else text + "\n" + runtime)
    done = CliRunner().invoke(main, ["compile", "-p", str(root), "--no-progress", "--json"])
    assert done.exit_code == 0, done.output
    containers = next(s for s in json.loads(done.stdout)["stages"] if s["name"] == "container")
    for run in containers["runs"]:
        group, triton = run["group"], run["record"]["triton"]
        recipe = Recipe.load(root / "build" / "engines" / group)
        model_dir = root / "build" / triton["repository"] / recipe.model_name
        config = _parsed(model_dir / "config.pbtxt")
        inputs, outputs = _onnx_io(model_dir / "1" / "model.onnx")
        assert config.name == recipe.model_name and config.platform == "onnxruntime_onnx"  # deferred here
        (name, (low, opt, high)), = recipe.profiles.items()
        assert config.max_batch_size == high[0]  # axis 0 is dynamic: the batch is implicit
        assert [i.name for i in config.input] == list(inputs) == [name]
        assert list(config.input[0].dims) == inputs[name][1:]
        assert config.input[0].data_type == model_config_pb2.TYPE_FP32
        assert {o.name: list(o.dims) for o in config.output} == {k: v[1:] for k, v in outputs.items()}
        if example.endswith("+nms"):  # detections, fixed size: Triton needs no ensemble or Python backend
            assert [(o.name, o.data_type) for o in config.output] == [
                ("num_detections", model_config_pb2.TYPE_INT32), ("detection_boxes", model_config_pb2.TYPE_FP32),
                ("detection_scores", model_config_pb2.TYPE_FP32), ("detection_classes", model_config_pb2.TYPE_FP32)]
            assert list(config.output[1].dims) == [100, 4] and not any("raw head" in n for n in triton["notes"])
        elif example == "shapes-detector":
            assert any("in_model = true" in n for n in triton["notes"])
        assert config.dynamic_batching.max_queue_delay_microseconds == 3000
        assert 4 in config.dynamic_batching.preferred_batch_size
        assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
        warm = config.model_warmup[0]
        assert warm.batch_size == opt[0] and list(warm.inputs[name].dims) == opt[1:]
        assert warm.inputs[name].random_data
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator[0]
        assert accelerator.name == "tensorrt"
        assert accelerator.parameters["precision_mode"] == {"int8": "INT8", "fp16": "FP16"}.get(recipe.precision,
                                                                                                 "FP32")
        assert accelerator.parameters["trt_engine_cache_path"] == "/engine-cache"
        if recipe.jetpack.startswith("6"):  # an -igpu container; JetPack 5: the tarball's instructions
            assert triton["image"].endswith("-igpu") and (model_dir.parent.parent / "Dockerfile").is_file()
        else:
            assert triton["image"] is None and (model_dir.parent.parent / "README.txt").is_file()
        assert any("unconfirmed" in n for n in triton["notes"])


def test_a_shippable_engine_is_served_as_a_tensorrt_plan_for_the_modules_compute_capability(tmp_path: Path) -> None:
    from edgebuild.shipping.triton import config_pbtxt, write_repository
    from tests.support.runtime_artifacts import write_artifact

    folder = write_artifact(tmp_path / "folder")
    recipe = dataclasses.replace(Recipe.load(folder), shippable_engine=True, placement="ssh://nvidia@orin")
    config = _parsed_text(config_pbtxt(recipe, engine=True))
    assert config.platform == "tensorrt_plan"
    assert dict(config.cc_model_filenames) == {recipe.module.compute_capability: "model.plan"}
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator
    without = dataclasses.replace(recipe, outputs=None)
    with pytest.raises(Exception, match="records no outputs"):
        config_pbtxt(without, engine=True)
    record = write_repository(folder, tmp_path / "triton" / "yard", build_dir=tmp_path)
    assert record.platform == "onnxruntime_onnx"  # the folder holds no engine
    assert (tmp_path / record.repository / "tiny" / "1" / "model.onnx").is_file()


def _parsed_text(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_the_triton_release_table_covers_every_orin_jetpack_and_marks_what_is_unconfirmed() -> None:
    from edgebuild.shipping.triton import triton_release

    for jetpack in ("6.2", "6.2.1", "6.1", "6.0", "5.1.2", "5.1.5"):
        release = triton_release(jetpack)
        assert release is not None and release.tensorrt
        assert (release.kind == "container") == jetpack.startswith("6")
        assert release.image.endswith("-igpu") if release.kind == "container" else release.tarball
    assert triton_release("6.2.1").jetpack == "6.2" and triton_release("4.6") is None
