"""Device-side code: runs on the Jetson with Python 3.8, numpy and the device's TensorRT.

Nothing here may import torch, click, pydantic or the build side of edgebuild.
"""
