"""The ``edgebuild`` command line: ``main`` (the console script) and its command groups.

``app`` (the group, errors and exit codes, ``-v``), ``project`` (init, check, data, profiles,
doctor), ``build`` (compile, export, preflight, validate, report, container, package) and
``device`` (bench, serve, run, ota, farm); ``render`` turns results into text and ``options``
holds the shared options. Each command parses its options, calls one function of
``edgebuild.workflows`` (or of the library), and renders what it returns.
"""

from edgebuild.cli.app import main

__all__ = ["main"]
