"""What the tests share: the pytest plugin (plugin.py) that tests/conftest.py registers, and helper modules."""
