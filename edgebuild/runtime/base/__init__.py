"""What every part of the device side shares, and the build side may import: file writes and
digests, JSON objects, versions, progress, the device identity, a model folder's recipe and a group
folder's manifest, and the vision and task decoding both sides run the same way.

The lowest layer of the runtime: nothing here imports another runtime sub-package.
"""
