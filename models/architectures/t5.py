"""T5 (``T5Model``): encoder-decoder with a bucketed relative-position bias shared across layers, RMS layer norm, no
attention scaling. SDPA attention (what transformers builds for it by default); its fix candidate ``t5_eager`` is the
same model built with ``attn_implementation="eager"``. Export: the encoder-decoder's forward pass, source ids and mask
and target ids, each of its own dynamic batch and length."""

from models.architectures._family import seq2seq

seq2seq(
    "t5",
    "T5",
    "T5Model",
    "T5Config",
    {
        "vocab_size": 128,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "decoder_start_token_id": 0,
    },
)
