"""The device bench: latency and throughput of a model folder (``bench.py``) or a group of them
(``bench_group.py``), one request's cost (``bench_request.py``), sustained runs and tegrastats.

Imports the runtime's base and engines.
"""
