"""DeBERTa-v2 (``DebertaV2Model``): disentangled attention over content and relative positions (log-bucketed
relative positions computed in the graph). Eager attention only. Export: batch and sequence dynamic."""

from models.architectures._family import TEXT, encoder

encoder(
    "deberta_v2",
    "DeBERTa-v2",
    "DebertaV2Model",
    "DebertaV2Config",
    {**TEXT, "relative_attention": True, "position_buckets": 16, "max_relative_positions": 32},
)
