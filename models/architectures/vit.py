"""ViT (``ViTModel``): patches of 8 x 8 as tokens, a class token, learned positions. Export: batch, height and width
dynamic; the model interpolates its position embeddings to the image (``interpolate_pos_encoding=True``), probed
at 48 x 40."""

from models.architectures._family import VISION, image

image("vit", "ViT", "ViTModel", "ViTConfig", VISION, sizes=True, net="Interpolated", add_pooling_layer=False)
