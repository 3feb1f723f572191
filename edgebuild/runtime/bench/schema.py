"""The version of a bench result (``bench.py``'s JSON): what the build report checks before it
reads one, without importing the bench itself (numpy, the backends).

Device side: Python 3.8.
"""

__all__ = ["SCHEMA"]

SCHEMA = "edgebuild.bench/1"
