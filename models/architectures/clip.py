"""CLIP (``CLIPTextModel``, ``CLIPVisionModel``): the contrastive image-text model's two towers. Text: a causal
transformer over token ids with the attention mask (batch and sequence dynamic). Vision: ViT with a
pre-LayerNorm, its image size fixed by its position embeddings (the batch is dynamic)."""

from models.architectures._family import VISION, encoder, image

encoder(
    "clip_text",
    "CLIP (text)",
    "CLIPTextModel",
    "CLIPTextConfig",
    {
        "vocab_size": 128,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    },
)
image("clip_vision", "CLIP (vision)", "CLIPVisionModel", "CLIPVisionConfig", VISION, sizes=False)
