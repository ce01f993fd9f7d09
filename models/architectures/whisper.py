"""Whisper (``WhisperModel``): log-mel frames through two convolutions into a transformer encoder; a decoder
that attends to it. Two cases: the encoder (its frame count is fixed, 2 x ``max_source_positions``: only
the batch varies) and one decoder step with its self-attention KV cache (one token, the encoder's hidden
states, each layer's past keys and values in, grown ones out; the cross-attention keys and values are
computed from the encoder's states in the step)."""

from harness.cases import lazy, randint, randn
from models.architectures._family import VOCAB, custom, single

CONFIG = {"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
          "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_mel_bins": 16,
          "max_source_positions": 24, "max_target_positions": 64, "decoder_start_token_id": 1, "pad_token_id": 0}  # fmt: skip
FRAMES = 2 * CONFIG["max_source_positions"]

single(
    "whisper_encoder",
    "Whisper (encoder)",
    lazy("models._architectures_nets", "WhisperEncoder", CONFIG),
    lambda: randn(2, CONFIG["num_mel_bins"], FRAMES),
    {0: "batch"},
)


def _step(past: int, seed: int = 0) -> dict:
    cache = {
        f"past_{kind}_{layer}": randn(2, 4, past, 8, seed=seed + 2 * layer + (kind == "value") + 1)
        for layer in range(2)
        for kind in ("key", "value")
    }
    states = randn(2, CONFIG["max_source_positions"], CONFIG["d_model"], seed=seed + 9)
    return {"decoder_input_ids": randint(1, VOCAB, 2, 1, seed=seed), "encoder_hidden_states": states, **cache}


custom(
    "whisper_step",
    "Whisper (decoder step)",
    lazy("models._architectures_nets", "WhisperDecodeStep", CONFIG),
    lambda: _step(5),
    probes=lambda: {"past13": _step(13, seed=10)},
    dynamic={
        "decoder_input_ids": {0: "batch"},
        "encoder_hidden_states": {0: "batch"},
        **{f"past_{k}_{i}": {0: "batch", 2: "past"} for i in range(2) for k in ("key", "value")},
    },
)
