"""Qwen3 (``Qwen3Model``): grouped-query attention with RMSNorm on each head's queries and keys. Prefill: batch and
sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask over past and new
positions, each layer's past keys and values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("qwen3", "Qwen3", "Qwen3Model", "Qwen3Config", ROTARY, kv=(2, 8))
