"""`edgebuild bench` end to end: on this host in a fresh process, and over SSH against a loopback sshd."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgebuild.cli import main
from edgebuild.runtime.bench.bench import SCHEMA, run_bench
from tests.support.runtime_artifacts import write_artifact

PNG = b"\x89PNG\r\n\x1a\n"


def _bench(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["bench", *args])
    return result.exit_code, result.stdout, result.stderr


def test_bench_here_writes_table_json_and_plot(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    code, out, err = _bench(str(folder), "--batch", "1,2", "--concurrency", "1,2", "--iterations", "40",
                            "--warmup", "3", "--json", str(tmp_path / "run.json"), "--plot", str(tmp_path / "run.png"))
    assert code == 0, out + err
    result = json.loads((tmp_path / "run.json").read_text())
    assert result["schema"] == SCHEMA and result["ran_on"] == "this host"
    assert result["backend"].startswith("onnxruntime-cpu") and "NOT TensorRT" in result["backend_reason"]
    assert set(result["artifact"]["files"]) == {"recipe.json", "model.onnx"}
    assert [(c["batch"], c["concurrency"]) for c in result["configs"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for config in result["configs"]:
        lat = config["latency"]
        assert lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p95_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert config["iterations"] >= 40 and config["stopped_by"] == "iterations" and config["throughput_ips"] > 0
        assert config["shapes"]["images"][0] == config["batch"] and config["stages"] is None
    cold = result["cold_start"]
    assert 0 < cold["process_to_first_result_s"] < 60 and cold["backend_load_s"] > 0
    assert cold["process_to_first_result_s"] >= cold["backend_load_s"]
    assert result["memory"]["peak_rss_bytes"] > 10 << 20
    assert result["jetson"]["power_mode"]["available"] is False and result["tegrastats"]["available"] is False
    assert result["versions"]["python"] and result["settings"]["batches"] == [1, 2]
    assert (tmp_path / "run.png").read_bytes()[:8] == PNG
    assert "p50" in out and "power mode: none (not a Jetson)" in out and "stopped by" in out
    assert "copy/compute split: not available" in out


def test_the_stopping_rule_says_why_it_stopped(tmp_path: Path) -> None:
    """A real model through run_bench: the result says which rule stopped it. Which one fires on this machine
    depends on how busy it is, so only the rule's word and its numbers are asserted here; the rule itself is
    tested on samples with a clock the runner advances (tests/unit/runtime/bench/test_bench.py)."""
    folder = write_artifact(tmp_path / "yard")
    quiet = dict(progress=lambda _: None, warmup=2, batches=[1])
    ruled = run_bench(folder, ci_pct=5.0, budget_s=2.0, min_iterations=20, **quiet)["configs"][0]
    assert ruled["stopped_by"] in ("ci", "budget") and ruled["iterations"] >= 20
    assert ruled["stopped_by"] == "budget" or ruled["p50_ci_width_pct"] <= 5.0
    timed = run_bench(folder, duration_s=0.3, **quiet)["configs"][0]
    assert timed["stopped_by"] == "duration" and timed["wall_s"] >= 0.3


def test_compare_against_a_baseline(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    common = ["--batch", "1", "--iterations", "30", "--warmup", "2"]
    assert _bench(str(folder), *common, "--json", str(tmp_path / "base.json"))[0] == 0
    code, out, err = _bench(str(folder), *common, "--compare", str(tmp_path / "base.json"))
    assert code == 0, out + err
    assert "p50_ms" in out and "throughput_ips" in out and "%" in out
    # a baseline from another power mode is refused unless forced
    base = json.loads((tmp_path / "base.json").read_text())
    base["jetson"]["power_mode"] = {"available": True, "name": "15W", "id": 0}
    (tmp_path / "other.json").write_text(json.dumps(base))
    code, out, err = _bench(str(folder), *common, "--compare", str(tmp_path / "other.json"))
    assert code == 3 and "different power modes (15W then, none (not a Jetson) now)" in out + err
    assert _bench(str(folder), *common, "--compare", str(tmp_path / "other.json"), "--force")[0] == 0
    (tmp_path / "junk.json").write_text("{}")
    code, out, err = _bench(str(folder), *common, "--compare", str(tmp_path / "junk.json"))
    assert code == 3 and "not a bench result" in out + err


def test_bad_bench_input_is_a_clear_error(tmp_path: Path) -> None:
    folder = write_artifact(tmp_path / "yard")
    code, out, err = _bench(str(folder), "--batch", "9", "--iterations", "5")
    assert code == 3 and "outside the profile" in out + err
    code, out, err = _bench(str(tmp_path), "--iterations", "5")
    assert code == 3 and "no recipe.json" in out + err
    code, out, err = _bench(str(folder), "--iterations", "5", "--duration", "1")
    assert code == 2 and "not both" in out + err
    code, out, err = _bench(str(folder), "--device", "nvidia@orin", "--iterations", "5")
    assert code == 12 and "ssh://" in out + err


@pytest.mark.ssh
def test_bench_over_ssh_on_a_loopback_device(tmp_path: Path, loopback_jetson) -> None:
    import numpy

    # a Jetson's Python has no ONNX Runtime (it would run the engine); this stand-in gets this run's
    # packages so the runner falls back to ONNX Runtime, as it would on a device without an engine
    jetson = loopback_jetson("orin-nano-4gb@6.2", extra_pythonpath=Path(numpy.__file__).parent.parent)
    folder = write_artifact(tmp_path / "yard")
    code, out, err = _bench(str(folder), "--device", jetson.url, "--batch", "1,4", "--iterations", "30",
                            "--warmup", "2", "--json", str(tmp_path / "ssh.json"), "--plot", str(tmp_path / "ssh.png"))
    assert code == 0, out + err
    result = json.loads((tmp_path / "ssh.json").read_text())
    assert result["ran_on"] == jetson.url
    assert result["device"]["l4t"] == "36.4.3"  # read from the device's /etc/nv_tegra_release
    assert [c["batch"] for c in result["configs"]] == [1, 4]
    assert result["jetson"]["power_mode"]["reason"].startswith("nvpmodel not found")
    assert (tmp_path / "ssh.png").read_bytes()[:8] == PNG
    copied = list((jetson.workdir / "bench").iterdir())
    assert len(copied) == 1 and (copied[0] / "model.onnx").is_file()


def test_without_an_artifact_the_target_must_pick_one_compiled_group(tiny_project: Path) -> None:
    code, out, err = _bench("-p", str(tiny_project), "--iterations", "5")
    assert code == 3 and "selects 0 compiled group(s) (none); bench needs one" in out + err


@pytest.mark.parametrize("in_model", [False, True], ids=["raw-head", "nms-inside"])
def test_bench_of_a_compiled_detector_times_each_stage_of_a_request(compiled_example, tmp_path: Path,
                                                                    in_model: bool) -> None:
    root = compiled_example("shapes-detector", "yard-cams")
    if in_model:
        toml = root / "edgebuild.toml"
        toml.write_text(toml.read_text().replace("max_detections = 100", "max_detections = 100\nin_model = true"))
    compiled = CliRunner().invoke(main, ["compile", "-p", str(root), "--target", "yard-cams", "--no-progress"])
    assert compiled.exit_code == 0, compiled.output
    code, out, err = _bench(str(root / "build/engines/yard-cams"), "--batch", "1", "--iterations", "20",
                            "--warmup", "2", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    request = json.loads((tmp_path / "run.json").read_text())["request"]
    decode = "split_detections" if in_model else "decode_outputs"
    assert request["measured"] and request["outputs"] == ("nms" if in_model else "raw_head")
    assert request["postprocess_step"].startswith(decode) and request["input_shape"] == [1, 3, 160, 160]
    assert request["image"]["decoder"].startswith("PIL") and request["image"]["jpeg_bytes"] > 10_000
    for stage in ("preprocess", "inference", "postprocess", "end_to_end"):
        assert 0 < request[stage]["p50_ms"] <= request[stage]["p99_ms"], stage
    parts = sum(request[s]["p50_ms"] for s in ("preprocess", "inference", "postprocess"))
    assert 0.5 * parts <= request["end_to_end"]["p50_ms"] <= 1.5 * parts
    table = out[out.index("per request"):]
    for label in ("preprocess", "inference", "post-processing", "end to end", decode, "decoded with PIL"):
        assert label in table, table
