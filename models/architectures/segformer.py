"""SegFormer (``SegformerModel``): a hierarchical transformer encoder with overlapping patch embeddings and
spatially reduced attention; no position embeddings. Export: batch, height and width dynamic, probed at 48 x 40."""

from models.architectures._family import image

image(
    "segformer",
    "SegFormer",
    "SegformerModel",
    "SegformerConfig",
    {
        "num_encoder_blocks": 2,
        "depths": [1, 1],
        "sr_ratios": [2, 1],
        "hidden_sizes": [16, 32],
        "patch_sizes": [7, 3],
        "strides": [4, 2],
        "num_attention_heads": [1, 2],
        "mlp_ratios": [2, 2],
        "decoder_hidden_size": 32,
    },
    sizes=True,
)
