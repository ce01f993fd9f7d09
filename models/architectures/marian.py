"""Marian (``MarianModel``): the translation models' encoder-decoder, sinusoidal positions, scaled embeddings.
Export: the encoder-decoder's forward pass, source ids and mask and target ids, each of its own dynamic batch and
length."""

from models.architectures._family import seq2seq

seq2seq(
    "marian",
    "Marian",
    "MarianModel",
    "MarianConfig",
    {
        "vocab_size": 128,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 64,
        "decoder_start_token_id": 0,
        "pad_token_id": 0,
    },
)
