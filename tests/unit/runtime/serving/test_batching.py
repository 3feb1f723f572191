"""The dynamic batcher and model instances (``service.py``), with a slow test-double runner."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgebuild.runtime.base.recipe import Recipe, RuntimeSettings
from edgebuild.runtime.serving import service as service_module
from edgebuild.runtime.serving.model_answers import model_config
from edgebuild.runtime.serving.server import request_threads
from edgebuild.runtime.serving.service import ModelService
from tests.support.runtime_artifacts import TARGET, recipe_for, write_artifact

#: a profile whose axis 0 reaches 8
PROFILE = [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]


class SlowRunner:
    """A runner whose runs take ``seconds`` (or wait for ``gate``), recording each batch and how many ran at once."""

    backend = "test-double"

    def __init__(self, seconds: float = 0.0, gate: threading.Event | None = None, log: dict | None = None) -> None:
        self.seconds, self.gate = seconds, gate
        self.log = log if log is not None else {"batches": [], "running": 0, "most": 0, "instances": 1,
                                                "lock": threading.Lock(), "threads": set()}
        self.output_names = ["scores"]

    def instance(self, threads: int | None = None) -> SlowRunner:
        with self.log["lock"]:
            self.log["instances"] += 1
        return SlowRunner(self.seconds, self.gate, self.log)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        log = self.log
        with log["lock"]:
            log["running"] += 1
            log["most"] = max(log["most"], log["running"])
            log["batches"].append(int(inputs["images"].shape[0]))
            log["threads"].add(threading.current_thread().name)
        try:
            if self.gate is not None:
                assert self.gate.wait(10)
            time.sleep(self.seconds)
            return {"scores": inputs["images"].mean(axis=(2, 3))}
        finally:
            with log["lock"]:
                log["running"] -= 1


def _service(tmp_path: Path, monkeypatch, runner: SlowRunner, **options) -> ModelService:
    folder = write_artifact(tmp_path / "yard")
    recipe_for(folder, TARGET, profiles={"images": PROFILE}).save(folder)
    monkeypatch.setattr(service_module, "load_backend", lambda *a, **k: (runner, "a test double"))
    service = ModelService(folder, warmup=False, **options)
    service.start()
    assert service.ready.wait(10), service.failed
    return service


def _call_together(service: ModelService, count: int, gap_s: float = 0.0) -> list:
    answers: list = [None] * count

    def call(i: int) -> None:
        answers[i] = service.infer({"images": np.full([1, 3, 8, 8], i, np.float32)})

    threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
        time.sleep(gap_s)
    for thread in threads:
        thread.join(10)
    return answers


def test_sixteen_requests_with_max_batch_8_run_as_two_batches_of_8(tmp_path, monkeypatch) -> None:
    gate = threading.Event()
    runner = SlowRunner(gate=gate)
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=8, max_queue_delay_ms=300)
    calls = threading.Thread(target=_call_together, args=(service, 16))
    calls.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (runner.log["batches"] and service._jobs.qsize() == 8):
        time.sleep(0.01)
    # the first batch runs with 8 while the other 8 are already in the batching queue
    assert runner.log["batches"] == [8] and service._jobs.qsize() == 8
    gate.set()
    calls.join(10)
    assert runner.log["batches"] == [8, 8]
    assert service.batches == {"runs": 2, "requests": 16, "rows": 16}
    assert 'edgebuild_batch_size_average{model="tiny"} 8.000' in service.metrics_text()


def test_each_request_gets_its_own_rows_back(tmp_path, monkeypatch) -> None:
    service = _service(tmp_path, monkeypatch, SlowRunner(), max_batch_size=8, max_queue_delay_ms=100)
    answers = _call_together(service, 6)
    for i, (outputs, _, rows) in enumerate(answers):
        np.testing.assert_allclose(outputs["scores"], np.full([1, 3], i))
        assert 1 <= rows <= 8


def test_a_preferred_batch_size_runs_before_the_delay(tmp_path, monkeypatch) -> None:
    runner = SlowRunner()
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=8, max_queue_delay_ms=5000,
                       preferred_batch_size=[4])
    assert service.preferred_batch_size == (4,)
    started = time.monotonic()
    answers = _call_together(service, 4, gap_s=0.02)
    assert time.monotonic() - started < 2.0  # not the 5 s delay
    assert runner.log["batches"] == [4] and all(rows == 4 for _, _, rows in answers)


def test_without_a_preferred_size_the_batch_waits_out_the_delay(tmp_path, monkeypatch) -> None:
    runner = SlowRunner()
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=8, max_queue_delay_ms=400)
    started = time.monotonic()
    _call_together(service, 4)
    assert time.monotonic() - started >= 0.35
    assert runner.log["batches"] == [4]


def test_a_batch_past_a_preferred_size_is_cut_to_it(tmp_path, monkeypatch) -> None:
    gate = threading.Event()
    runner = SlowRunner(gate=gate)
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=8, max_queue_delay_ms=5000,
                       preferred_batch_size=[2, 4])
    first = threading.Thread(target=_call_together, args=(service, 2))
    first.start()
    while not runner.log["batches"]:  # two: a preferred size, run at once (held by the gate)
        time.sleep(0.01)
    rest = threading.Thread(target=_call_together, args=(service, 6))
    rest.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and service._jobs.qsize() < 6:
        time.sleep(0.01)
    started = time.monotonic()
    gate.set()
    first.join(10)
    rest.join(10)
    # the 6 waiting run at once as the largest preferred size, 4, then the 2 left: a preferred size too
    assert runner.log["batches"] == [2, 4, 2]
    assert time.monotonic() - started < 2.0


def test_two_instances_run_two_batches_at_once(tmp_path, monkeypatch) -> None:
    runner = SlowRunner(seconds=0.4)
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=2, max_queue_delay_ms=200, instance_count=2)
    assert len(service.runners) == 2 and runner.log["instances"] == 2
    started = time.monotonic()
    _call_together(service, 4)
    assert runner.log["batches"] == [2, 2]
    assert runner.log["most"] == 2  # the two batches ran at once, not one after the other
    assert time.monotonic() - started < 0.4 * 2 + 0.2
    assert len(runner.log["threads"]) == 2  # each instance on its own worker thread
    assert 'edgebuild_model_instances{model="tiny"} 2' in service.metrics_text()
    config = model_config(service)
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]


def test_one_instance_runs_one_batch_at_a_time(tmp_path, monkeypatch) -> None:
    runner = SlowRunner(seconds=0.2)
    service = _service(tmp_path, monkeypatch, runner, max_batch_size=2, max_queue_delay_ms=200)
    _call_together(service, 4)
    assert runner.log["most"] == 1 and runner.log["instances"] == 1


def test_settings_come_from_the_recipe_and_bad_ones_are_refused(tmp_path, monkeypatch) -> None:
    folder = write_artifact(tmp_path / "yard")
    settings = RuntimeSettings(warmup_budget_s=1.0, port=8000, max_batch_size=8, max_queue_delay_ms=2.0,
                               instance_count=3, preferred_batch_size=[4, 8])
    recipe_for(folder, TARGET, profiles={"images": PROFILE}, runtime=settings).save(folder)
    loaded = Recipe.load(folder).runtime
    assert loaded.instance_count == 3 and loaded.preferred_batch_size == [4, 8]
    service = ModelService(folder, warmup=False)
    assert service.instance_count == 3 and service.preferred_batch_size == (4, 8)
    assert request_threads(8, [service]) == 4 * 8  # three batches running, one gathering
    for field, value, words in (("instance_count", 0, "runtime.instance_count"),
                                ("preferred_batch_size", [16], "runtime.preferred_batch_size"),
                                ("instance_count", "two", "runtime.instance_count")):
        data = Recipe.load(folder).to_dict() if hasattr(Recipe, "to_dict") else None
        if data is None:
            pytest.skip("Recipe has no to_dict")
        data["runtime"][field] = value
        with pytest.raises(Exception, match=words):
            Recipe.from_dict(data)


def test_request_threads_leave_room_for_every_batch(tmp_path, monkeypatch) -> None:
    service = _service(tmp_path, monkeypatch, SlowRunner(), max_batch_size=8, max_queue_delay_ms=2)
    assert request_threads(8, [service]) == 16  # one batch running, the next gathering
    unbatched = _service(tmp_path / "b", monkeypatch, SlowRunner())
    assert request_threads(8, [unbatched]) == 8
