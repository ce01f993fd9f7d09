"""ConvNeXt (``ConvNextModel``): a convolutional network in a transformer's style (7 x 7 depthwise
convolutions, LayerNorm, GELU). Export: batch, height and width dynamic, probed at 48 x 40."""

from models.architectures._family import image

image(
    "convnext",
    "ConvNeXt",
    "ConvNextModel",
    "ConvNextConfig",
    {"num_channels": 3, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2},
    sizes=True,
)
