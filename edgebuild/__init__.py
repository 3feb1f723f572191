"""edgebuild: a build system that takes a PyTorch vision model to a fleet of NVIDIA Jetsons."""

__version__ = "0.1.0"
