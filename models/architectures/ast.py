"""Audio Spectrogram Transformer (``ASTModel``): a ViT over the spectrogram's overlapping patches, with
class and distillation tokens. Export: the batch is dynamic; the frame count is the config's ``max_length``
(its position embeddings are for that grid)."""

from harness.cases import lazy, randn
from models.architectures._family import single

CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64, "patch_size": 8,
          "frequency_stride": 8, "time_stride": 8, "max_length": 32, "num_mel_bins": 16}  # fmt: skip

single(
    "ast",
    "Audio Spectrogram Transformer",
    lazy("models._architectures_nets", "Single", "ASTModel", "ASTConfig", CONFIG),
    lambda: randn(2, CONFIG["max_length"], CONFIG["num_mel_bins"]),
    {0: "batch"},
)
