"""Differences between the Python versions the build side supports (3.10+)."""

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

__all__ = ["tomllib"]
