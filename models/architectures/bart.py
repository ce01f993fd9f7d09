"""BART (``BartModel``): a denoising encoder-decoder with learned positions (offset by 2). Export: the
encoder-decoder's forward pass, source ids and mask and target ids, each of its own dynamic batch and length."""

from models.architectures._family import seq2seq

seq2seq(
    "bart",
    "BART",
    "BartModel",
    "BartConfig",
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
    },
)
