"""ModernBERT (``ModernBertModel``): rotary positions, alternating global and local (sliding-window)
attention, GeGLU, no biases. Export: batch and sequence dynamic, mask as input; three layers so that
both a global and a local layer are in the graph. A padded row whose padding covers a local window
leaves that window's queries nothing to attend to: the padded probe pads 3, inside the window of 8."""

from models.architectures._family import TEXT, encoder

encoder(
    "modernbert",
    "ModernBERT",
    "ModernBertModel",
    "ModernBertConfig",
    {**TEXT, "num_hidden_layers": 3, "global_attn_every_n_layers": 2, "local_attention": 8, "pad_token_id": 0},
)
