"""What the server answers from its model services, the same over HTTP (``server.py``) and gRPC
(``grpc_server.py``): a parsed inference run through a service, Triton's model configuration of a
service, and the repository index.

Above ``service.py`` and ``protocol.py``: the protocol reads requests and writes answers without
knowing what a model service is; these functions take one.

Python 3.8, the standard library and numpy.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import time
from typing import Dict, FrozenSet, List, Tuple

import numpy as np

from edgebuild.runtime.base.json_object import JsonObject
from edgebuild.runtime.serving.bad_request import BadRequest
from edgebuild.runtime.serving.protocol import DATATYPES, Inference, InputSpec, platform
from edgebuild.runtime.serving.service import ModelService
from edgebuild.runtime.serving.shared_memory import SystemSharedMemory

__all__ = []


class InferenceFailed(Exception):
    """The backend (or the decode) failed on a request that parsed: HTTP 500, gRPC INTERNAL."""


def run_inference(service: ModelService, parsed: Inference, memory: SystemSharedMemory,
                  stages: Dict[str, float]) -> Tuple[Dict[str, np.ndarray], float, int, FrozenSet[str]]:
    """A parsed request through ``service`` (a ``ModelService``), the same for every transport: (the
    outputs asked for, backend ms, batch rows, the names of those written in ``memory``'s regions). The
    backend's and the decode's seconds go to ``stages``; the outcome to the service's metrics. Raises
    InferenceFailed, or BadRequest when an output does not fit its region."""
    try:
        outputs, ms, rows = service.infer(parsed.inputs, stages)
        if parsed.decode:
            clock = time.perf_counter()
            outputs = service.decode(outputs)
            stages["decode"] = time.perf_counter() - clock
    except Exception as exc:
        service.record("failure")
        raise InferenceFailed("inference failed: {}".format(exc)) from exc
    if parsed.outputs is not None:
        outputs = {n: outputs[n] for n in parsed.outputs}
    try:
        placed = memory.write_outputs(parsed.shared_outputs, outputs)
    except BadRequest:
        service.record("bad_request")
        raise
    service.record("success", ms)
    return outputs, ms, rows, placed


def model_config(service: ModelService) -> JsonObject:
    """Triton's model configuration of a model service (``ModelConfig`` as JSON: ``GET /v2/models/NAME/config``
    and gRPC's ``ModelConfig``).

    As ``config.pbtxt`` has it (``shipping/triton.py``): where axis 0 of every input is dynamic from 1,
    ``max_batch_size`` is the profile's max batch and the dims leave the batch axis out; -1 for a dynamic
    axis; the outputs are what an inference answers by default; ``dynamic_batching`` where the server batches.
    """
    inputs: Dict[str, InputSpec] = service.inputs
    outputs = service.answer_outputs(service.forms.decode)
    lows = [s.min_shape[0] for s in inputs.values()]
    highs = [s.max_shape[0] for s in inputs.values()]
    batched = bool(inputs) and min(lows) == 1 and all(hi > lo for lo, hi in zip(lows, highs))
    skip = 1 if batched else 0

    def tensor(name: str, kind: str, shape: List[int]) -> JsonObject:
        return {"name": name, "data_type": "TYPE_" + (kind if kind in DATATYPES else "INVALID"),
                "dims": [int(d) for d in shape[skip:]]}

    config = {"name": service.name, "platform": platform(service.backend),
              "max_batch_size": min(highs) if batched else 0,
              "input": [tensor(n, s.datatype, s.as_dict()["shape"]) for n, s in inputs.items()],
              "output": [tensor(o["name"], o.get("datatype", ""), list(o.get("shape") or [])) for o in outputs]}
    if batched and service.max_batch_size > 1:
        batching: JsonObject = {"max_queue_delay_microseconds": int(round(service.max_queue_delay_ms * 1000))}
        if service.preferred_batch_size:
            batching["preferred_batch_size"] = list(service.preferred_batch_size)
        config["dynamic_batching"] = batching
    kind = "KIND_GPU" if service.backend.startswith("tensorrt") else "KIND_CPU"
    config["instance_group"] = [{"count": len(service.runners) or service.instance_count, "kind": kind}]
    return config


def repository_index(services: Dict[str, ModelService]) -> List[Dict[str, str]]:
    """The models of a server's model services, as Triton's repository index: name, version, state, reason."""
    index = []
    for name, service in services.items():
        state = "READY" if service.ready.is_set() else "UNAVAILABLE" if service.failed else "LOADING"
        index.append({"name": name, "version": service.version, "state": state, "reason": service.failed or ""})
    return index
