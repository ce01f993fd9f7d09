"""HuBERT (``HubertModel``): wav2vec2's graph trained on clustered targets. Export: batch and sample count
dynamic, probed at 1200 samples."""

from harness.cases import lazy, randn
from models.architectures._family import single

CONFIG = {"vocab_size": 32, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "conv_dim": [16, 16, 16], "conv_stride": [5, 4, 2], "conv_kernel": [10, 8, 4], "num_conv_pos_embeddings": 16,
          "num_conv_pos_embedding_groups": 4}  # fmt: skip

single(
    "hubert",
    "HuBERT",
    lazy("models._architectures_nets", "Single", "HubertModel", "HubertConfig", CONFIG),
    lambda: randn(2, 1600),
    {0: "batch", 1: "samples"},
    lambda: {"samples1200": randn(2, 1200, seed=1)},
)
