"""ResNet (``ResNetModel``): bottleneck residual blocks, batch norm folded at export. Export: batch, height and width
dynamic, probed at 48 x 40."""

from models.architectures._family import image

image(
    "resnet",
    "ResNet",
    "ResNetModel",
    "ResNetConfig",
    {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1]},
    sizes=True,
)
