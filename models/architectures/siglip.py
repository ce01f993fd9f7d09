"""SigLIP (``SiglipTextModel``, ``SiglipVisionModel``): CLIP's towers trained with a sigmoid loss. Text: no
causal mask, fixed-length padding in training (batch and sequence dynamic here). Vision: ViT without a class
token, its image size fixed by its position embeddings (the batch is dynamic)."""

from models.architectures._family import VISION, encoder, image

encoder(
    "siglip_text",
    "SigLIP (text)",
    "SiglipTextModel",
    "SiglipTextConfig",
    {
        "vocab_size": 128,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    },
)
image("siglip_vision", "SigLIP (vision)", "SiglipVisionModel", "SiglipVisionConfig", VISION, sizes=False)
