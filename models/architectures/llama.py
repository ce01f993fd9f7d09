"""Llama (``LlamaModel``): rotary positions, grouped-query attention (4 query heads share 2 key/value heads),
RMSNorm, SwiGLU. Prefill: batch and sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask
over past and new positions, each layer's past keys and values in and grown ones out (batch and past
length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("llama", "Llama", "LlamaModel", "LlamaConfig", ROTARY, kv=(2, 8))
