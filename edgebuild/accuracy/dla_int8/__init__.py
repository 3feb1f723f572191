"""INT8 on the DLA by implicit quantization: a dynamic range on every tensor, and the layout measured on the CPU.

``ranges``: calibration of every activation of the FP32 graph that ships; ``emulation``: the ONNX
ONNX Runtime measures for one TensorRT version's DLA placement; ``layout``: the gate's measurement
and record of it (docs/targets.md, "INT8 on the DLA").
"""

__all__: list[str] = []
