"""From cameras to tracked objects on the device: sources (``sources.py``), frames of several streams batched
into the engine's profile (``batching.py``), the model and a tracker per stream (``pipeline.py``,
``tracking.py``), and the results out (``publish.py``: JSON lines, server-sent events, MQTT, region events,
annotated video). ``records.py`` is what every part passes on: a stream's tracked frame.

``edgebuild track DIR --source S ...`` runs it (docs/streams.md).
"""
