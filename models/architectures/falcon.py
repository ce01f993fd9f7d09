"""Falcon (``FalconModel``): rotary positions, multi-query attention (one key/value head for all four query heads),
attention and MLP in parallel. Prefill: batch and sequence dynamic, mask as input, ``use_cache=False``. Decode
step: one token, the mask over past and new positions, each layer's past keys and values in and grown ones out
(batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "falcon",
    "Falcon",
    "FalconModel",
    "FalconConfig",
    {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64},
    kv=(1, 8),
)
