"""BLOOM (``BloomModel``): ALiBi (a per-head linear bias on distance, built from the attention mask) instead of
position embeddings; eager attention only. Prefill: batch and sequence dynamic, mask as input,
``use_cache=False``. Decode step: one token, the mask over past and new positions, each layer's past keys and
values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "bloom", "BLOOM", "BloomModel", "BloomConfig", {"vocab_size": 128, "hidden_size": 32, "n_layer": 2, "n_head": 4}, kv=(4, 8)
)
