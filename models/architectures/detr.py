"""DETR (``DetrModel``): a ResNet backbone (built from its config here, no timm, no download), sine position
embeddings of the feature map, a transformer encoder-decoder with object queries. Export: batch, height and
width dynamic (the pixel mask is all ones), probed at 48 x 40."""

from harness.cases import lazy, randn
from models.architectures._family import IMAGE, single

CONFIG = {"use_timm_backbone": False, "use_pretrained_backbone": False, "backbone": None,
          "backbone_config": {"model_type": "resnet", "embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1],
                              "out_features": ["stage2"]},
          "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
          "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_queries": 8}  # fmt: skip

single(
    "detr",
    "DETR",
    lazy("models._architectures_nets", "Detr", CONFIG),
    lambda: randn(2, 3, IMAGE, IMAGE),
    {0: "batch", 2: "height", 3: "width"},
    lambda: {"image48x40": randn(2, 3, 48, 40, seed=1)},
)
