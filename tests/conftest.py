"""Registers the suite's pytest plugin; the markers, fixtures and helpers live in tests/support/."""

pytest_plugins = ["tests.support.plugin"]
