"""The ports the server listens on unless told otherwise.

Its own module, without numpy, so the command lines (``edgebuild/runtime/options.py``, the build
host's ``edgebuild/cli/``) and the container writer (``edgebuild/shipping/container.py``) can name
them without importing the server.

Python 3.8 and the standard library.
"""

__all__ = ["GRPC_PORT"]

#: Triton's gRPC port: where ``serve`` answers KServe v2 over gRPC unless ``--grpc-port`` says otherwise
GRPC_PORT = 8001
