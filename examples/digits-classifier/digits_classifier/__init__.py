"""Bundled edgebuild example: a small CNN on scikit-learn's 8x8 handwritten digits."""

CLASS_NAMES = tuple(str(i) for i in range(10))

# How an image becomes the network input (see edgebuild.runtime.base.vision.PreprocessSpec).
# The PNGs are 8x8 8-bit gray; they are bilinearly upscaled to 16x16, scaled to [0, 1] and
# normalised with MEAN/STD, which are the mean/std of the 16x16 training split, rounded.
INPUT_SIZE = (16, 16)  # (height, width)
RESIZE = "resize"
CHANNEL_ORDER = "GRAY"
MEAN = (0.31,)
STD = (0.32,)
OUTPUT_NAME = "logits"
