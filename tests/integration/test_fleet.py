"""A fleet of several models (``examples/camera-box``): every model once, every group with all its models,
one memory plan, one container and one bundle per group; and the fleet file's bad input."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.errors import ConfigError
from edgebuild.project.fleet_file import load_fleet
from edgebuild.runtime.base.group import GroupManifest, model_folders


@pytest.fixture
def camera_box(example_copy) -> Path:
    for name in ("shapes-detector", "digits-classifier"):
        example_copy(name)  # siblings, as in examples/: the fleet file names them as ../<name>
    return example_copy("camera-box")


@pytest.fixture(scope="module")
def yard_cams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The camera box compiled for yard-cams (its group folder and the compile's output), for the tests
    that read it without changing it: a copy of the run's shared compile, compiled again (all reused)."""
    from tests.support.compiled import compiled_copy

    root = compiled_copy(tmp_path_factory, "camera-box", "yard-cams", tmp_path_factory.mktemp("fleet")).parent
    done = CliRunner().invoke(main, ["compile", "--target", "yard-cams", "-p", str(root / "camera-box"),
                                     "--no-progress"])
    assert done.exit_code == 0, done.output
    return root / "camera-box/build/groups/yard-cams", done.output


def _payload(bundle: Path) -> set[str]:
    with tarfile.open(bundle, mode="r:gz") as tar:
        return {m.name.removeprefix("payload/") for m in tar.getmembers() if m.name.startswith("payload/")}


def test_the_camera_box_builds_two_groups_each_carrying_exactly_its_models(compiled_example) -> None:
    camera_box = compiled_example("camera-box", "yard-cams")  # yard-cams compiled: the dock group is new
    done = CliRunner().invoke(main, ["compile", "--target", "orin", "-p", str(camera_box), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "memory plan yard-cams" in done.output and "fleet camera-box:" in done.output
    fleet = json.loads((camera_box / "build/fleet.json").read_text())
    groups = {g["group"]: g for g in fleet["groups"]}
    assert {g: v["models"] for g, v in groups.items()} == {"yard-cams": ["detector", "classifier"],
                                                           "dock": ["detector"]}
    for group in groups.values():
        assert group["error"] is None and group["memory_plan"]["fits"]
        assert set(group["candidates"]) == set(group["models"])
        planned = [m["model"] for m in group["memory_plan"]["models"]]
        assert planned == group["models"]
        folder = camera_box / group["folder"]
        manifest = GroupManifest.load(folder)
        assert [m.name for m in manifest.models] == group["models"]
        assert set(model_folders(folder)) == {"shapes-detector", "digits-classifier"}.intersection(
            {"shapes-detector"} | ({"digits-classifier"} if "classifier" in group["models"] else set()))
        payload = _payload(camera_box / group["bundle"])
        carried = {p.split("/")[1] for p in payload if p.startswith("models/")}
        assert carried == set(group["models"]), payload  # each bundle: exactly its group's models
        assert "group.json" in payload and all(f"models/{m}/reference.npz" in payload for m in group["models"])
        context = camera_box / group["container"]
        assert (context / "model" / "group.json").is_file()
        assert {p.name for p in (context / "model" / "models").iterdir()} == set(group["models"])
    page = (camera_box / "build/report/index.html").read_text()
    assert "Memory plan (preset orin-nano-8gb" in page and "../models/classifier/report/index.html" in page
    assert (camera_box / "build/models/classifier/report/index.html").is_file()
    assert "| yard-cams | orin-nano-8gb@6.2 | detector: int8" in (camera_box / "build/report/summary.md").read_text()
    # the model-level stages ran once per model: each model has its own build folder, with one gate
    assert (camera_box / "build/models/detector/gate/gate.json").is_file()
    assert (camera_box / "build/models/classifier/gate/gate.json").is_file()
    again = CliRunner().invoke(main, ["compile", "--target", "orin", "-p", str(camera_box), "--no-progress"])
    assert again.exit_code == 0 and "gate       ran" not in again.output, again.output


def test_a_set_over_a_small_presets_memory_is_refused_before_any_engine(camera_box: Path) -> None:
    (camera_box / "tight.toml").write_text(
        'module = "orin-nano-8gb"\ndescription = "too small for two models"\n\n[limits]\nmemory = "400M"\n'
        'cpus = 2\n\n[gpu]\ntensorrt_workspace = "64M"\nengine_device_memory_max = "128M"\n')
    toml = camera_box / "edgebuild.toml"
    toml.write_text(toml.read_text().replace('models = ["detector", "classifier"]',
                                             'models = ["detector", "classifier"]\ncgroup_preset = "tight.toml"'))
    done = CliRunner().invoke(main, ["compile", "--target", "orin", "-p", str(camera_box), "--no-progress"])
    assert done.exit_code == 13, done.output
    assert "yard-cams: the group's models need" in done.output and "tight" in done.output
    for line in ("runtime (one server, one CUDA context)", "detector", "classifier", "budget 528.0 MiB"):
        assert line in done.output
    assert not (camera_box / "build/models/detector/engines/yard-cams").exists()  # nothing built for it
    assert not (camera_box / "build/groups/yard-cams").exists()
    assert (camera_box / "build/groups/dock/group.json").is_file()  # the other group went on


@pytest.mark.parametrize("change, words", [
    (('models = ["detector"]', 'models = ["detector", "tracker"]'),
     ["fleet group 'dock' runs 'tracker', which [models] does not define"]),
    (('classifier = "../digits-classifier"', 'classifier = "../shapes-detector"'),
     ["models detector, classifier are all the project 'shapes-detector'"]),
    (('name = "dock"                         # AGX Orin on JetPack 5: the detector alone\nmodule = "agx-orin-64gb"',
      'name = "dock"\nmodule = "orin-nx-16gb"'),
     ["models.detector: its own fleet group 'dock' is agx-orin-64gb@5.1.2, the fleet file's is orin-nx-16gb@5.1.2"]),
    (('models = ["detector"]', 'models = []'), ["fleet group 'dock' names no models"]),
])
def test_a_broken_fleet_file_names_the_group_and_the_models(camera_box: Path, change, words) -> None:
    toml = camera_box / "edgebuild.toml"
    text = toml.read_text()
    assert change[0] in text
    toml.write_text(text.replace(change[0], change[1]))
    with pytest.raises(ConfigError) as caught:
        load_fleet(camera_box)
    for word in words:
        assert word in caught.value.message
    done = CliRunner().invoke(main, ["compile", "-p", str(camera_box), "--no-progress"])
    assert done.exit_code == 3 and words[0] in done.output


def test_a_model_project_command_on_a_fleet_file_says_what_it_is(camera_box: Path) -> None:
    done = CliRunner().invoke(main, ["validate", "-p", str(camera_box), "--no-progress"])
    assert done.exit_code == 3 and "a fleet file" in done.output and "../shapes-detector" in done.output


@pytest.mark.chromium
def test_the_fleet_report_renders_in_chromium_and_no_request_leaves_the_file(tmp_path: Path) -> None:
    from PIL import Image

    from edgebuild.report.fleet_report import write_fleet_report
    from tests.integration.test_report import _chromium, _page_requests

    model = {"precision": "int8", "weights": 1 << 20, "activations": 3 << 20, "workspace": 512 << 20,
             "built_on_device": True, "source": "estimate from the ONNX"}
    plan = {"group": "yard-cams", "preset": "orin-nano-8gb", "budget": 4 << 30, "runtime": 512 << 20,
            "models": [{"model": "detector", **model}, {"model": "classifier", **model}],
            "build_workspace": 512 << 20, "total": (1 << 30) + (8 << 20), "fits": True}
    record = {"fleet": "camera-box", "finished": "2026-12-04T12:00:00Z", "groups": [
        {"group": "yard-cams", "target": "orin-nano-8gb@6.2", "models": ["detector", "classifier"],
         "candidates": {"detector": "int8 (retention 1.000)", "classifier": "int8 (retention 1.000)"},
         "memory_plan": plan, "folder": "build/groups/yard-cams", "error": None},
        {"group": "dock", "target": "agx-orin-64gb@5.1.2", "models": ["detector"], "candidates": {},
         "memory_plan": None, "error": "model error: something failed"}]}
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "fleet.json").write_text(json.dumps(record))
    page = write_fleet_report(tmp_path / "build")["html"]
    png, netlog = tmp_path / "fleet.png", tmp_path / "fleet-netlog.json"
    done = _chromium(page, png, netlog)
    assert done.returncode == 0, done.stderr
    assert _page_requests(netlog) == []
    image = Image.open(png).convert("RGB")
    assert len(image.getcolors(maxcolors=1 << 20)) > 20, "the screenshot is (nearly) blank"
    text = page.read_text()
    assert "Memory plan (preset orin-nano-8gb" in text and "something failed" in text


def test_check_of_a_fleet_file_lists_its_groups_and_checks_every_model(camera_box: Path) -> None:
    done = CliRunner().invoke(main, ["check", "-p", str(camera_box)])
    assert done.exit_code == 0, done.output
    assert "a valid fleet file (2 models, 2 groups)" in done.output
    assert "runs detector, classifier" in done.output and "model classifier" in done.output


def _compiled_group(camera_box: Path) -> Path:
    done = CliRunner().invoke(main, ["compile", "--target", "yard-cams", "-p", str(camera_box), "--no-progress"])
    assert done.exit_code == 0, done.output
    return camera_box / "build/groups/yard-cams"


def _serving(folder: Path):
    import time

    from edgebuild.runtime.serving.server import Server

    running = Server(folder, host="127.0.0.1", port=0, warmup_budget_s=1).start()
    deadline = time.time() + 90
    while time.time() < deadline and not all(s.ready.is_set() or s.failed for s in running.services.values()):
        time.sleep(0.05)
    return running


def test_one_server_answers_every_model_of_the_group_after_each_is_warm_and_accepted(yard_cams) -> None:
    import tritonclient.http as httpclient
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.runtime_artifacts import Client

    running = _serving(yard_cams[0])
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{running.port}")
        assert client.is_server_ready()
        for name, shape, outputs in (("shapes-detector", [1, 3, 160, 160], ["boxes", "scores"]),
                                     ("digits-classifier", [2, 1, 16, 16], ["logits"])):
            assert client.is_model_ready(name)
            metadata = client.get_model_metadata(name)
            assert [o["name"] for o in metadata["outputs"]] == outputs
            assert metadata["parameters"]["acceptance"]["passed"]
            tensor = httpclient.InferInput("images", shape, "FP32")
            tensor.set_data_from_numpy(np.random.default_rng(0).random(shape, dtype=np.float32), binary_data=True)
            result = client.infer(name, [tensor])
            assert result.as_numpy(outputs[0]).shape[0] == shape[0]
        status, text = Client(running.port).request("GET", "/metrics")
        assert status == 200
        metrics = {f.name: f for f in text_string_to_metric_families(text.decode())}  # one family, every model
        ready = {s.labels["model"]: s.value for s in metrics["edgebuild_ready"].samples}
        assert ready == {"shapes-detector": 1.0, "digits-classifier": 1.0}
    finally:
        running.stop()


def test_a_model_that_fails_its_acceptance_keeps_the_whole_group_not_ready(yard_cams, tmp_path: Path) -> None:
    import dataclasses
    import shutil

    import onnx
    from onnx import numpy_helper

    from edgebuild.runtime.base.files import sha256_file
    from edgebuild.runtime.base.recipe import Recipe
    from tests.support.runtime_artifacts import Client

    group = shutil.copytree(yard_cams[0], tmp_path / "group")
    classifier = group / "models/classifier"
    recipe = Recipe.load(classifier)  # no fallback: a failing engine has nothing to fall back to
    dataclasses.replace(recipe, fallback=None, fallback_sha256=None).save(classifier)
    shutil.rmtree(classifier / "fallback")
    model = onnx.load(str(classifier / "model.onnx"))
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:  # a classifier that computes something else, consistently hashed
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 16:
            noisy = values * (1 + 1.0 * rng.standard_normal(values.shape))
            tensor.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), tensor.name))
    onnx.save(model, str(classifier / "model.onnx"))
    dataclasses.replace(Recipe.load(classifier), onnx_sha256=sha256_file(classifier / "model.onnx")).save(classifier)
    running = _serving(group)
    try:
        client = Client(running.port)
        status, body = client.json("GET", "/v2/health/ready")
        assert status == 503 and body["models"] == {"shapes-detector": True, "digits-classifier": False}, body
        assert "digits-classifier: " in body["error"] and "acceptance failed" in body["error"]
        assert client.request("GET", "/v2/models/shapes-detector/ready")[0] == 200  # the other model is fine
    finally:
        running.stop()


def test_bench_of_a_group_measures_each_model_alone_and_all_at_once(yard_cams, tmp_path: Path) -> None:
    folder = yard_cams[0]
    out = tmp_path / "bench.json"
    done = CliRunner().invoke(main, ["bench", str(folder), "--duration", "0.5", "--batch", "1", "--json", str(out)])
    assert done.exit_code == 0, done.output
    assert "every model at once" in done.output and "slowdown" in done.output, done.output
    result = json.loads(out.read_text())
    assert result["schema"] == "edgebuild.bench-group/1" and result["group"] == "yard-cams"
    assert set(result["alone"]) == set(result["together"]["models"]) == {"shapes-detector", "digits-classifier"}
    for row in result["together"]["models"].values():
        assert row["iterations"] > 0 and row["latency"]["p99_ms"] >= row["latency"]["p50_ms"] > 0
        assert row["alone_p50_ms"] > 0 and row["slowdown"] > 0
        assert row["accelerator"] == "gpu"  # the core its recipe places it on (yard-cams: an Orin Nano, no DLA)
    assert result["together"]["memory"]["peak_rss_bytes"] > 0


def test_a_group_gets_one_deepstream_set_its_detector_primary_and_its_classifier_on_the_objects(
        compiled_example) -> None:
    from edgebuild.shipping.deepstream import check_config

    camera_box = compiled_example("camera-box", "yard-cams")  # compiled with the raw head, then NMS inside
    detector = camera_box.parent / "shapes-detector" / "edgebuild.toml"
    detector.write_text(detector.read_text().replace("max_detections = 100", "max_detections = 100\nin_model = true"))
    _compiled_group(camera_box)
    folder = camera_box / "build/deepstream/yard-cams"
    primary = (folder / "config_infer_primary.txt").read_text()
    secondary = (folder / "config_infer_digits-classifier.txt").read_text()
    app = (folder / "deepstream_app_config.txt").read_text()
    assert "parse-bbox-func-name=NvDsInferParseYoloV5CustomBatchedNMSTLT" in primary and "process-mode=1" in primary
    assert "process-mode=2" in secondary and "operate-on-gie-id=1" in secondary and "network-type=1" in secondary
    assert "gie-unique-id=2" in secondary and "labelfile-path=labels_digits-classifier.txt" in secondary
    assert "[secondary-gie0]" in app and "config-file=config_infer_digits-classifier.txt" in app
    assert check_config(primary) == check_config(secondary) == check_config(app, app=True) == []
    assert (folder / "labels_digits-classifier.txt").read_text().strip() == ";".join(str(d) for d in range(10))
    assert (folder / "labels.txt").read_text().split() == ["circle", "square", "triangle"]


def test_a_group_whose_detector_has_a_raw_head_gets_no_deepstream_set_and_the_reason(yard_cams) -> None:
    folder, output = yard_cams
    assert "no DeepStream config: model shapes-detector: DeepStream needs task.postprocess.in_model = true" in output
    assert not (folder.parent.parent / "deepstream/yard-cams").exists()
