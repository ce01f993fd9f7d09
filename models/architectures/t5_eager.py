"""T5 with eager attention (``T5Model`` built with ``attn_implementation="eager"``): the fix candidate of ``t5``, whose
default build uses SDPA. The setting is the user's to choose (``from_pretrained(...,
attn_implementation="eager")``); the model is otherwise ``t5``'s, config, weights' seed and inputs alike. Export: the
encoder-decoder's forward pass, source ids and mask and target ids, each of its own dynamic batch and length."""

from models.architectures._family import seq2seq

seq2seq(
    "t5_eager",
    "T5 (eager attention)",
    "T5Model",
    "T5Config",
    {  # t5.py's config, and the attention implementation
        "vocab_size": 128,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "decoder_start_token_id": 0,
        "attn_implementation": "eager",
    },
    fixes="t5",
)
