"""YOLOS (``YolosModel``): ViT with detection tokens, interpolating its position embeddings to the image.
Export: batch, height and width dynamic, probed at 48 x 40."""

from models.architectures._family import VISION, image

image(
    "yolos",
    "YOLOS",
    "YolosModel",
    "YolosConfig",
    {**VISION, "image_size": [32, 32], "num_detection_tokens": 4},
    sizes=True,
    add_pooling_layer=False,
)
