"""Mistral (``MistralModel``): Llama's graph with sliding-window attention (window 8 here, so the longer probes
reach past it). Prefill: batch and sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask
over past and new positions, each layer's past keys and values in and grown ones out (batch and past
length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("mistral", "Mistral", "MistralModel", "MistralConfig", {**ROTARY, "sliding_window": 8}, kv=(2, 8))
