"""Over-the-air updates on the device: a native bundle's format and signature (``bundle.py``), and
installing, health-checking and rolling back a version (``ota.py``).

Imports the runtime's base, engines and serving (the health check runs a model service).
"""
