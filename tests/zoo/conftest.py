"""The zoo tests: torchvision importable without its compiled ops, Ultralytics offline, before any model imports.

The shim is tests.support.zoo.import_torchvision (why it is needed: that module's docstring). The
stages import each project's wrapper module in this process, so doing it here once suffices.
"""

from tests.support.zoo import import_torchvision, offline_ultralytics

offline_ultralytics()
try:
    import_torchvision()
except Exception:  # not installed, or broken otherwise: the zoo marker's probe says why, and the tests skip
    pass  # (or fail under EDGEBUILD_REQUIRE=zoo); the rest of the suite must still collect
