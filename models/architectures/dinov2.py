"""DINOv2 (``Dinov2Model``): ViT with layer scale, always interpolating its position embeddings (bicubic)
to the image's grid. Export: batch, height and width dynamic, probed at 48 x 40."""

from models.architectures._family import VISION, image

image("dinov2", "DINOv2", "Dinov2Model", "Dinov2Config", {**VISION, "image_size": 32}, sizes=True)
