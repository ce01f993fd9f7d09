"""The architectures' modules: a ``transformers`` model built from its config, wrapped the way it is deployed.

Imported only in the export environment (torch and transformers are imported here, when a model is built);
:mod:`models.architectures._family` names these builders lazily. Every model is a real class of the library,
built from a config at reduced size (a few layers, small hidden sizes: the same graph) with the weights the
harness seeds: nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import transformers
from torch import nn

LAYERS = 2
"""Every decoder has this many layers: the decode step's signature names each layer's past keys and values."""


def _model(cls: str, config_cls: str, config: Mapping[str, Any], **kwargs: Any) -> Any:
    conf = getattr(transformers, config_cls)(**config)
    return getattr(transformers, cls)(conf, **kwargs)


def _hidden(out: Any) -> Any:
    """The model's last hidden state (a vision model without one returns its pooled feature map)."""
    hidden = getattr(out, "last_hidden_state", None)
    return hidden if hidden is not None else out[0]


class Encoder(nn.Module):
    """Token ids and their attention mask in, the last hidden state out (an encoder, or a decoder's prefill)."""

    def __init__(self, cls: str, config_cls: str, config: Mapping[str, Any], cache: bool = False, **kwargs: Any) -> None:
        super().__init__()
        self.model = _model(cls, config_cls, config, **kwargs)
        self.cache = cache

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = {"use_cache": False} if self.cache else {}
        return _hidden(self.model(input_ids=input_ids, attention_mask=attention_mask, **extra))


class DecodeStep(nn.Module):
    """One decode step with a KV cache, as a decoder is served: the new token, the mask over past and new
    positions and each layer's past keys and values in; the hidden state and each layer's grown keys and
    values out (what the next step takes)."""

    def __init__(self, cls: str, config_cls: str, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = _model(cls, config_cls, config)
        self.config = self.model.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key_0: torch.Tensor,
        past_value_0: torch.Tensor,
        past_key_1: torch.Tensor,
        past_value_1: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        cache = transformers.DynamicCache(
            ddp_cache_data=[(past_key_0, past_value_0), (past_key_1, past_value_1)], config=self.config
        )
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        grown = out.past_key_values
        return (out.last_hidden_state, *(t for layer in grown.layers for t in (layer.keys, layer.values)))


class Seq2Seq(nn.Module):
    """An encoder-decoder's forward pass: source ids and mask, target ids in; the decoder's last hidden state out."""

    def __init__(self, cls: str, config_cls: str, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = _model(cls, config_cls, config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False)
        return out.last_hidden_state


class WhisperDecodeStep(nn.Module):
    """Whisper's decoder, one step with its self-attention KV cache: the new token, the encoder's hidden states
    and each layer's past keys and values in; the hidden state and the grown keys and values out."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = _model("WhisperModel", "WhisperConfig", config).get_decoder()
        self.config = self.model.config

    def forward(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_0: torch.Tensor,
        past_value_0: torch.Tensor,
        past_key_1: torch.Tensor,
        past_value_1: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        own = transformers.DynamicCache(
            ddp_cache_data=[(past_key_0, past_value_0), (past_key_1, past_value_1)], config=self.config
        )
        cache = transformers.EncoderDecoderCache(own, transformers.DynamicCache(config=self.config))
        out = self.model(
            input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states, past_key_values=cache, use_cache=True
        )
        grown = out.past_key_values.self_attention_cache
        return (out.last_hidden_state, *(t for layer in grown.layers for t in (layer.keys, layer.values)))


VARIANCE_FLOOR = 0.1
"""The least variance a calibrated batch norm keeps: a channel of ~0 variance in one random batch would divide by
~sqrt(eps) and amplify float rounding 100-fold (measured: MobileNetV2's exports then differ from torch by 4e-4
where they otherwise differ by 6e-6), which would show rounding noise as a mismatch."""


def calibrate(model: nn.Module, pixels: torch.Tensor | None = None) -> None:
    """He-initialize every convolution and reset every batch norm (weight 1, bias 0, mean 0, variance 1); with
    ``pixels``, give each batch norm that batch's statistics, as training would (variance floored at
    :data:`VARIANCE_FLOOR`). With the library's own initializer (normal, std 0.02) a deep stack of convolutions
    shrinks its activations to ~1e-26 (MobileNetV2) or to zeros (EfficientNet), and every export of such a model
    would pass any comparison."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    for norm in norms:
        norm.reset_parameters()
        norm.momentum = None  # a cumulative average: exactly this batch's statistics
    if pixels is not None:
        model.train()
        with torch.no_grad():
            model(pixels)
        for norm in norms:
            norm.running_var.clamp_(min=VARIANCE_FLOOR)
    model.eval()


class Single(nn.Module):
    """One tensor in (pixels, samples, spectrogram frames), the last hidden state out. ``he``: the convolutions
    He-initialized and the batch norms reset; ``calibrated``: also the statistics of a seeded batch of this shape
    (:func:`calibrate`)."""

    def __init__(
        self,
        cls: str,
        config_cls: str,
        config: Mapping[str, Any],
        he: bool = False,
        calibrated: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.model = _model(cls, config_cls, config, **kwargs)
        if he or calibrated:
            pixels = torch.randn(*calibrated, generator=torch.Generator().manual_seed(1)) if calibrated else None
            calibrate(self.model, pixels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _hidden(self.model(x))


class Interpolated(Single):
    """A vision transformer asked to interpolate its position embeddings to the image's size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _hidden(self.model(x, interpolate_pos_encoding=True))


class WhisperEncoder(Single):
    """Whisper's encoder: log-mel frames in, hidden states out."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        nn.Module.__init__(self)
        self.model = _model("WhisperModel", "WhisperConfig", config).get_encoder()


class Detr(nn.Module):
    """DETR: pixels and their mask in, the decoder's object queries' hidden state out."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.model = _model("DetrModel", "DetrConfig", config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=x).last_hidden_state
