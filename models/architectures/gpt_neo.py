"""GPT-Neo (``GPTNeoModel``): GPT-2's shape with alternating global and local attention (window 8 here), no scaling
of the attention scores. Eager attention only. Prefill: batch and sequence dynamic, mask as input,
``use_cache=False``. Decode step: one token, the mask over past and new positions, each layer's past keys and
values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "gpt_neo",
    "GPT-Neo",
    "GPTNeoModel",
    "GPTNeoConfig",
    {
        "vocab_size": 128,
        "hidden_size": 32,
        "num_layers": 2,
        "num_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "attention_types": [[["global", "local"], 1]],
        "window_size": 8,
    },
    kv=(4, 8),
)
