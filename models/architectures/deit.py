"""DeiT (``DeiTModel``): ViT with a distillation token beside the class token. Export: batch, height and width
dynamic; the model interpolates its position embeddings to the image (``interpolate_pos_encoding=True``), probed
at 48 x 40."""

from models.architectures._family import VISION, image

image("deit", "DeiT", "DeiTModel", "DeiTConfig", VISION, sizes=True, net="Interpolated", add_pooling_layer=False)
