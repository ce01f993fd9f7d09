"""GPT-J (``GPTJModel``): rotary positions on part of each head (interleaved), attention and MLP in parallel.
SDPA attention (what transformers builds for it by default). Prefill: batch and sequence dynamic, mask as input,
``use_cache=False``. Decode step: one token, the mask over past and new positions, each layer's past keys and values
in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "gptj",
    "GPT-J",
    "GPTJModel",
    "GPTJConfig",
    {"vocab_size": 128, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "rotary_dim": 4},
    kv=(4, 8),
)
