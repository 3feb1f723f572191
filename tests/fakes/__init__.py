"""Test doubles. They live only in tests/: nothing in the package pretends to be TensorRT."""
