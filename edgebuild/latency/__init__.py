"""Performance, a concern of its own (as ``edgebuild.accuracy`` is accuracy's): how fast a model will run
on a Jetson before any device or engine, and how fast it did.

- ``graph.py``: an ONNX graph's FLOPs and bytes per fused layer (what TensorRT fuses into one kernel)
- ``model.py``: the roofline per layer, its efficiency factors fitted to published figures, the stored fit
- ``dla.py``: one DLA core: which layers it runs, the fallback layers on the GPU, the hand-overs; its fit
- ``cores.py``: one model on one core (GPU or DLA) at one precision, with the bytes it moves
  (``predict_core``: what a planner placing several models calls)
- ``plan.py``: ``edgebuild plan``'s predictions per module, power mode and precision (``LatencyPlan``)
- ``budget.py``: a fleet group's budget against each candidate precision (``PredictedLatency``), what the
  compile's budget stage applies
- ``calibration.py``: a project's own fit, refitted with its bench results (``plan --calibrate``);
  ``refit.py``: the refit itself
- ``measured.py``: measured against predicted (``build/latency/<group>.json``), what the report shows

It reads the targets' module data and the project's build folder; the stages and workflows above it
decide when to predict.
"""
