"""OPT (``OPTModel``): learned positions offset by 2 and computed from the attention mask (``cumsum``). Prefill:
batch and sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask over past and new
positions, each layer's past keys and values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "opt",
    "OPT",
    "OPTModel",
    "OPTConfig",
    {
        "vocab_size": 128,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "ffn_dim": 64,
        "max_position_embeddings": 64,
        "word_embed_proj_dim": 32,
        "pad_token_id": 1,
    },
    kv=(4, 8),
)
