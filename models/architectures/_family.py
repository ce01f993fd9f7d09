"""How an architecture becomes cases: each family file calls one of these with its config and its card.

The modules are :mod:`models._architectures_nets` (built lazily: torch and transformers are imported in the
export environment only). Each case has probes beside its example that change every axis a user changes:

- text: batch 2 × 16 tokens; probe ``seq9_padded`` (9 tokens, the second row right-padded by 3);
- decode step: one new token over a cache of 5 past positions; probe ``past13`` (13 past positions);
- images: 2 × 3 × 32 × 32; probe ``image48x40`` where the model takes other sizes;
- audio: 2 × 1600 samples; probe ``samples1200``;

and, for every case, the batch of 3 that ``[probes] batch_sizes`` adds (the example tiled).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from harness.cases import Case, lazy, randint, randn, register

VOCAB = 128
TEXT = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64}  # fmt: skip
"""A BERT-like config at the table's size: the same graph as the real model, a few layers, small widths."""

ROTARY = {**TEXT, "num_key_value_heads": 2, "head_dim": 8, "pad_token_id": 0}
"""A rotary, grouped-query decoder (Llama and its kin): 4 query heads share 2 key/value heads."""

IMAGE = 32
VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "image_size": IMAGE, "patch_size": 8}  # fmt: skip


_FAMILY: list[tuple[str, str]] = []
"""The family file whose call is registering cases: its module name (the cases' source) and its docstring (their card)."""


def _register(name: str, title: str, model: Callable[[], Any], inputs: Callable[[], Mapping[str, Any]], **kw: Any) -> None:
    source, about = _FAMILY[-1]
    register(Case(name=name, model=model, inputs=inputs, title=title, about=about, source_file=source, **kw))


def family(fn: Callable[..., None]) -> Callable[..., None]:
    """Records the family file that calls ``fn`` (its module and docstring) for the cases ``fn`` registers."""

    def wrapped(*args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1).f_globals
        _FAMILY.append((caller["__name__"], inspect.cleandoc(caller.get("__doc__") or "")))
        try:
            fn(*args, **kwargs)
        finally:
            _FAMILY.pop()

    wrapped.__doc__ = fn.__doc__
    wrapped.__name__ = fn.__name__
    return wrapped


def _mask(batch: int, seq: int, padded: int = 0) -> Any:
    """An attention mask of ones, the last row's final ``padded`` positions zero (right padding)."""
    import torch

    mask = torch.ones(batch, seq, dtype=torch.int64)
    if padded:
        mask[-1, seq - padded :] = 0
    return mask


def _text(seq: int, padded: int = 0, seed: int = 0) -> dict[str, Any]:
    return {"input_ids": randint(1, VOCAB, 2, seq, seed=seed), "attention_mask": _mask(2, seq, padded)}


TEXT_DYNAMIC = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


@family
def encoder(name: str, title: str, cls: str, config_cls: str, config: Mapping[str, Any], **kw: Any) -> None:
    """A text encoder: ids and mask of any batch and length in, the last hidden state out."""
    _register(
        name,
        title,
        lazy("models._architectures_nets", "Encoder", cls, config_cls, dict(config), **kw),
        lambda: _text(16),
        probes=lambda: {"seq9_padded": _text(9, padded=3, seed=1)},
        dynamic=TEXT_DYNAMIC,
    )


@family
def decoder(name: str, title: str, cls: str, config_cls: str, config: Mapping[str, Any], kv: tuple[int, int]) -> None:
    """A decoder twice: its prefill (the prompt, no cache) and one decode step with a KV cache of ``kv`` =
    (key/value heads, head size) per layer."""
    _register(
        name,
        f"{title} (prefill)",
        lazy("models._architectures_nets", "Encoder", cls, config_cls, dict(config), cache=True),
        lambda: _text(16),
        probes=lambda: {"seq9_padded": _text(9, padded=3, seed=1)},
        dynamic=TEXT_DYNAMIC,
    )
    heads, size = kv

    def step(past: int, seed: int = 0) -> dict[str, Any]:
        cache = {
            f"past_{kind}_{layer}": randn(2, heads, past, size, seed=seed + 2 * layer + (kind == "value") + 1)
            for layer in range(2)
            for kind in ("key", "value")
        }
        return {"input_ids": randint(1, VOCAB, 2, 1, seed=seed), "attention_mask": _mask(2, past + 1), **cache}

    _register(
        f"{name}_step",
        f"{title} (decode step)",
        lazy("models._architectures_nets", "DecodeStep", cls, config_cls, dict(config)),
        lambda: step(5),
        probes=lambda: {"past13": step(13, seed=10)},
        dynamic={
            "input_ids": {0: "batch"},
            "attention_mask": {0: "batch", 1: "total"},
            **{f"past_{k}_{i}": {0: "batch", 2: "past"} for i in range(2) for k in ("key", "value")},
        },
    )


@family
def seq2seq(name: str, title: str, cls: str, config_cls: str, config: Mapping[str, Any], **kw: Any) -> None:
    """An encoder-decoder's forward pass: source ids and mask, target ids of their own length (``kw``: the case's
    other fields, ``fixes`` for a fix candidate)."""

    def inputs(seq: int, target: int, padded: int = 0, seed: int = 0) -> dict[str, Any]:
        return {**_text(seq, padded, seed), "decoder_input_ids": randint(1, VOCAB, 2, target, seed=seed + 5)}

    _register(
        name,
        title,
        lazy("models._architectures_nets", "Seq2Seq", cls, config_cls, dict(config)),
        lambda: inputs(16, 7),
        probes=lambda: {"seq9_padded": inputs(9, 4, padded=3, seed=1)},
        dynamic={**TEXT_DYNAMIC, "decoder_input_ids": {0: "batch", 1: "target"}},
        **kw,
    )


@family
def image(
    name: str, title: str, cls: str, config_cls: str, config: Mapping[str, Any], *, sizes: bool, net: str = "Single", **kw: Any
) -> None:
    """A vision model: pixels in, the last hidden state out; ``sizes``: it takes other image sizes (probed at
    48 × 40), else its size is fixed and only the batch varies."""
    dims = {0: "batch", 2: "height", 3: "width"} if sizes else {0: "batch"}
    _register(
        name,
        title,
        lazy("models._architectures_nets", net, cls, config_cls, dict(config), **kw),
        lambda: {"x": randn(2, 3, IMAGE, IMAGE)},
        probes=(lambda: {"image48x40": {"x": randn(2, 3, 48, 40, seed=1)}}) if sizes else None,
        dynamic={"x": dims},
    )


@family
def single(
    name: str,
    title: str,
    model: Callable[[], Any],
    example: Callable[[], Any],
    dims: Mapping[int, str],
    probes: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """A model of one tensor input (``x``): its example, the dims that vary, the probe that reaches them."""
    _register(
        name,
        title,
        model,
        lambda: {"x": example()},
        probes=(lambda: {k: {"x": v} for k, v in probes().items()}) if probes else None,
        dynamic={"x": dict(dims)},
    )


@family
def custom(name: str, title: str, model: Callable[[], Any], inputs: Callable[[], Mapping[str, Any]], **kw: Any) -> None:
    """A case whose inputs are its own (Whisper's decoder step, DETR)."""
    _register(name, title, model, inputs, **kw)
