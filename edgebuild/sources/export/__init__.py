"""The ONNX export from PyTorch and what it appends to the exported graph.

``onnx_export`` (each exporter tried in turn, ``ExportRecord``) runs the ``checks`` (what the exporter
wrote, the ONNX checker, ONNX Runtime, parity with PyTorch), words the error with ``advice`` when no
exporter passes, and keeps the tools' own output off the terminal (``tool_output``). ``nms_graph``
appends NMS to an exported graph (``[task.postprocess] in_model``).
"""
