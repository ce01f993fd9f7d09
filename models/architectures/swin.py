"""Swin (``SwinModel``): shifted-window attention in stages, padding each stage's map to whole windows.
Export: batch, height and width dynamic, probed at 48 x 40."""

from models.architectures._family import image

image(
    "swin",
    "Swin",
    "SwinModel",
    "SwinConfig",
    {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 4], "window_size": 4},
    sizes=True,
)
