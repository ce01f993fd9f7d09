"""Five real architectures from Hugging Face ``transformers``, built from their configs with seeded random
weights (no hub download), each wrapped to return its ``last_hidden_state`` as one tensor.

Not a corpus file itself: :func:`hf_cases` gives the cases at a size, and ``examples/hf_models.py``
registers them at full size (BERT-base, GPT-2 small, ViT-base, ResNet-50, Whisper-tiny's encoder).
The end-to-end test registers the same classes at a tiny size (a few layers, hidden size 32).
torch and transformers are imported when a model is built, in the export environment only.
"""

from __future__ import annotations

from typing import Any

from harness.cases import Case, lazy, randint, randn

# Config overrides per size. "full" is each architecture's reference size (the config's defaults are
# bert-base-uncased, gpt2, vit-base-patch16-224, resnet-50; Whisper's are set to whisper-tiny).
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "full": {
        "bert": {},
        "gpt2": {"use_cache": False},
        "vit": {},
        "resnet50": {},
        "whisper_encoder": {
            "d_model": 384,
            "encoder_layers": 4,
            "encoder_attention_heads": 6,
            "encoder_ffn_dim": 1536,
            "decoder_layers": 4,
            "decoder_attention_heads": 6,
            "decoder_ffn_dim": 1536,
        },
    },
    "tiny": {
        "bert": {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 64, "max_position_embeddings": 64},
        "gpt2": {"use_cache": False, "vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64},
        "vit": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "image_size": 32, "patch_size": 8},
        "resnet50": {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1]},
        "whisper_encoder": {"d_model": 32, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
                            "decoder_layers": 1, "decoder_attention_heads": 2, "decoder_ffn_dim": 64,
                            "num_mel_bins": 16, "max_source_positions": 50},
    },
}  # fmt: skip


def build(name: str, size: str = "full") -> Any:
    """The model ``name`` at ``size``, returning its last hidden state (the harness seeds torch first)."""
    import transformers
    from torch import nn

    over = SIZES[size][name]

    class LastHidden(nn.Module):
        """``model(x).last_hidden_state``: one tensor out, named input in, as a deployment takes it."""

        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

    class Text(LastHidden):
        def forward(self, input_ids: Any) -> Any:
            return self.model(input_ids).last_hidden_state

    class Pixels(LastHidden):
        def forward(self, pixel_values: Any) -> Any:
            return self.model(pixel_values).last_hidden_state

    class Audio(LastHidden):
        def forward(self, input_features: Any) -> Any:
            return self.model(input_features).last_hidden_state

    if name == "bert":
        return Text(transformers.BertModel(transformers.BertConfig(**over), add_pooling_layer=False))
    if name == "gpt2":
        return Text(transformers.GPT2Model(transformers.GPT2Config(**over)))
    if name == "vit":
        return Pixels(transformers.ViTModel(transformers.ViTConfig(**over), add_pooling_layer=False))
    if name == "resnet50":
        return Pixels(transformers.ResNetModel(transformers.ResNetConfig(**over)))
    if name == "whisper_encoder":
        return Audio(transformers.WhisperModel(transformers.WhisperConfig(**over)).get_encoder())
    raise ValueError(f"no model {name!r}; use one of {', '.join(SIZES[size])}")


def hf_cases(size: str = "full") -> list[Case]:
    """The five models at ``size`` as corpus cases: example inputs, the dims that vary in deployment, and
    a probe that reaches them (another sequence length, another image size); every case with a dynamic
    batch dim is also probed at ``[probes] batch_sizes``."""
    sz = SIZES[size]
    tokens = 128 if size == "full" else 16
    image = 224 if size == "full" else sz["vit"]["image_size"]
    mels = 80 if size == "full" else sz["whisper_encoder"]["num_mel_bins"]
    frames = 3000 if size == "full" else 2 * sz["whisper_encoder"]["max_source_positions"]
    vocab = {"bert": 30522, "gpt2": 50257} if size == "full" else {"bert": 100, "gpt2": 100}

    def text(name: str) -> Case:
        """A text model: token ids of any batch and length in, probed at another length and batch."""
        return Case(
            name=name,
            model=lazy("examples.hf_nets", "build", name, size),
            inputs=lambda: {"input_ids": randint(0, vocab[name], 1, tokens)},
            dynamic={"input_ids": {0: "batch", 1: "sequence"}},
            probes=lambda: {"seq37": {"input_ids": randint(0, vocab[name], 2, 37, seed=1)}},
        )

    return [
        text("bert"),
        text("gpt2"),
        Case(
            name="vit",
            model=lazy("examples.hf_nets", "build", "vit", size),
            inputs=lambda: {"pixel_values": randn(1, 3, image, image)},
            dynamic={"pixel_values": {0: "batch"}},  # its position embeddings are for one image size
        ),
        Case(
            name="resnet50",
            model=lazy("examples.hf_nets", "build", "resnet50", size),
            inputs=lambda: {"pixel_values": randn(1, 3, image, image)},
            dynamic={"pixel_values": {0: "batch", 2: "height", 3: "width"}},
            probes=lambda: {"odd_size": {"pixel_values": randn(2, 3, image - 31, image + 33, seed=1)}},
        ),
        Case(
            name="whisper_encoder",
            model=lazy("examples.hf_nets", "build", "whisper_encoder", size),
            inputs=lambda: {"input_features": randn(1, mels, frames)},
            dynamic={"input_features": {0: "batch"}},  # Whisper takes 30 s of audio: the frame count is fixed
        ),
    ]
