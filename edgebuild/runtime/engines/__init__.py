"""Engines on the device: the backends that run a model folder (``backends/``), building and checking
a TensorRT engine here (``device.py``, ``provenance.py``, ``engine_header.py``), what the engines under a
folder are (``engine_info.py``), and an engine's acceptance and evaluation against reference outputs.

Imports the runtime's base only.
"""
