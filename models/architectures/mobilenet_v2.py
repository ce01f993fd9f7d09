"""MobileNetV2 (``MobileNetV2Model``): inverted residuals of depthwise convolutions, ReLU6, TensorFlow-style
'same' padding computed from the input's size. Export: batch, height and width dynamic, probed at 48 x 40.
Width: depth multiplier 0.1 and the last layer narrowed with the rest (``finegrained_output=False``): every block
of the real model, a fifth of the weights of 0.25 (its reproducers were 28 MB). Weights: the convolutions
He-initialized and the batch norms reset (the library's initializer shrinks this model's output to ~1e-26, which
any export would match)."""

from models.architectures._family import image

image(
    "mobilenet_v2",
    "MobileNetV2",
    "MobileNetV2Model",
    "MobileNetV2Config",
    {"depth_multiplier": 0.1, "image_size": 32, "finegrained_output": False},
    sizes=True,
    he=True,
)
