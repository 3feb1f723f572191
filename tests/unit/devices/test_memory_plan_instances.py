"""The memory plan counts each model instance's execution context ([runtime] instance_count)."""

from __future__ import annotations

import json
from pathlib import Path

from edgebuild.devices.memory_plan import MemoryPlan, ModelMemory, estimate_model_memory


def test_each_instance_has_its_own_activations_and_shares_the_weights(tmp_path: Path) -> None:
    engine_json = tmp_path / "engine.json"
    engine_json.write_text(json.dumps({"plan_bytes": 100, "device_memory_size": 30}))
    one = estimate_model_memory("m", tmp_path / "model.onnx", "fp16", {}, 0, False, engine_json)
    three = estimate_model_memory("m", tmp_path / "model.onnx", "fp16", {}, 0, False, engine_json, instances=3)
    assert one.engine == 130 and three.engine == 100 + 3 * 30
    plan = MemoryPlan("g", "p", budget=200, runtime=10, models=(three,))
    assert plan.total == 10 + 190 and "x 3 instances" in plan.table()
    assert not MemoryPlan("g", "p", budget=150, runtime=10, models=(three,)).fits
    assert MemoryPlan.from_dict(plan.as_dict()) == plan
    old = plan.as_dict()
    del old["models"][0]["instances"]  # a plan written before instances: one each
    assert MemoryPlan.from_dict(old).models[0] == ModelMemory("m", "fp16", 100, 30, 0, False, "engine.json")
