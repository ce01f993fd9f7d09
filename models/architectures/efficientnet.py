"""EfficientNet (``EfficientNetModel``): MBConv blocks with squeeze-and-excitation, SiLU, 'same' padding.
Export: batch, height and width dynamic, probed at 48 x 40.
Weights: the convolutions He-initialized, the batch norms given one seeded batch's statistics (variance
floored at 0.1): the library's initializer gives an output of exact zeros, which any export would match."""

from models.architectures._family import image

image(
    "efficientnet",
    "EfficientNet",
    "EfficientNetModel",
    "EfficientNetConfig",
    {"image_size": 32, "width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 320},
    sizes=True,
    calibrated=(4, 3, 32, 32),
)
