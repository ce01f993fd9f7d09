"""Phi-3 (``Phi3Model``): fused QKV and gate-up projections, rotary positions, grouped-query attention. Prefill:
batch and sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask over past and new
positions, each layer's past keys and values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("phi3", "Phi-3", "Phi3Model", "Phi3Config", ROTARY, kv=(2, 8))
