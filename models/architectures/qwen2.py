"""Qwen2 (``Qwen2Model``): Llama's graph with biases on the query, key and value projections. Prefill: batch and
sequence dynamic, mask as input, ``use_cache=False``. Decode step: one token, the mask over past and new
positions, each layer's past keys and values in and grown ones out (batch and past length dynamic)."""

from models.architectures._family import ROTARY, decoder

decoder("qwen2", "Qwen2", "Qwen2Model", "Qwen2Config", ROTARY, kv=(2, 8))
