"""BEiT (``BeitModel``): ViT with a relative-position bias per layer (a table indexed by patch offsets),
layer scale, mean pooling. Export: batch, height and width dynamic; the model interpolates its position embeddings to the image
(``interpolate_pos_encoding=True``), probed at 48 x 40."""

from models.architectures._family import VISION, image

image(
    "beit",
    "BEiT",
    "BeitModel",
    "BeitConfig",
    {**VISION, "use_relative_position_bias": True},
    sizes=True,
    net="Interpolated",
    add_pooling_layer=False,
)
