"""GPT-2 (``GPT2Model``): learned positions, fused QKV projection (``Conv1D``). Prefill: batch and sequence
dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask over past and new positions,
each layer's past keys and values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import decoder

decoder(
    "gpt2",
    "GPT-2",
    "GPT2Model",
    "GPT2Config",
    {"vocab_size": 128, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
    kv=(4, 8),
)
