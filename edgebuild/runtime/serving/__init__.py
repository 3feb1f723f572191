"""The device's inference server: KServe / Triton v2 over HTTP (``server.py``, ``httpd.py``) and gRPC
(``grpc_server.py``), the protocol (``protocol.py``), the model services that run the arrays
(``service.py``) and the system shared-memory extension.

Layered inside, lowest first: ``wire_types``, ``bad_request``, ``ports``; ``http_messages``,
``http_pool``, ``httpd``; ``shared_memory``; ``protocol``; ``service``; ``model_answers``;
``grpc_server``; ``server``. Imports the runtime's base and engines.
"""
