"""Gemma (``GemmaModel``): embeddings scaled by the square root of the width, RMSNorm with ``1 + weight``, GeGLU,
grouped-query attention. Prefill: batch and sequence dynamic, mask as input, ``use_cache=False``. Decode step: one
token, the mask over past and new positions, each layer's past keys and values in and grown ones out (batch and
past length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("gemma", "Gemma", "GemmaModel", "GemmaConfig", ROTARY, kv=(2, 8))
