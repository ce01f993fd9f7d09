"""Attention and normalization gotchas: fast paths, fully masked rows, GQA, unbatched SDPA, RMSNorm.

Each case pairs a module whose exported graph fails or disagrees with torch
(torch 2.13, opsets 13-20) with a rewrite that exports with both exporters.
Importing this module does not import torch: the modules live in
:mod:`models._attention_nets`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

SDPA_DOCS = "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html"


def _net(cls: str, seed: int = 0, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._attention_nets.<cls>(**kwargs)`` with seeded weights."""
    return lazy("models._attention_nets", cls, seed=seed, **kwargs)


def _padding(lengths: list[int], seq: int) -> torch.Tensor:
    """A bool key-padding mask, True past each row's length (padding at the end)."""
    import torch

    return torch.arange(seq).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)


def _keep_mask(rows: list[list[int]]) -> torch.Tensor:
    """A bool attention keep-mask (True = attend) from 0/1 rows."""
    import torch

    return torch.tensor(rows, dtype=torch.bool)


# nn.TransformerEncoder: the nested-tensor fast path zeroes padded positions ---------------


def _encoder_inputs() -> dict[str, Any]:
    return {"x": randn(2, 5, 8), "pad": _padding([3, 4], 5)}


def _encoder_probes() -> dict[str, dict[str, Any]]:
    return {"other_lengths": {"x": randn(2, 5, 8, seed=1), "pad": _padding([2, 5], 5)}}


register(
    Case(
        name="transformer_encoder_padding",
        model=_net("PaddedEncoder"),
        inputs=_encoder_inputs,
        probes=_encoder_probes,
        card=Card(
            symptom="Both exporters: the model exports and runs, but outputs at padded positions differ: torch "
            "returns exact zeros there, the ONNX model returns ordinary encoder outputs (max diff ~2). Positions "
            "that are not padding match.",
            cause="In eval under no_grad, nn.TransformerEncoder(enable_nested_tensor=True) takes the 'sparsity fast "
            "path': it packs the batch into a nested tensor by src_key_padding_mask and pads the result back with "
            "0. Both exporters record the ordinary dense path instead (the fast path's checks fail while "
            "tracing), which computes every position.",
            fix="Do not rely on padded outputs: zero them explicitly (out.masked_fill(pad[..., None], 0)) so both "
            "paths agree, or build the encoder with enable_nested_tensor=False.",
            source="pytorch/pytorch#86120; pytorch/pytorch#97111",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript"),
            Claim("mismatch", exporter="dynamo"),
        ),
    )
)
register(
    Case(
        name="transformer_encoder_padding_zeroed",
        model=_net("PaddedEncoderZeroed"),
        inputs=_encoder_inputs,
        probes=_encoder_probes,
        fixes="transformer_encoder_padding",
    )
)

# SDPA with a boolean mask that masks out a whole row ----------------------------------------


def _sdpa_inputs(seed: int, mask: list[list[int]]) -> dict[str, Any]:
    return {
        "q": randn(1, 2, 4, 8, seed=seed),
        "k": randn(1, 2, 4, 8, seed=seed + 1),
        "v": randn(1, 2, 4, 8, seed=seed + 2),
        "mask": _keep_mask(mask),
    }


MASK_ROW2 = [[1, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
MASK_ROW0 = [[0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]]

register(
    Case(
        name="sdpa_fully_masked_row",
        model=_net("MaskedSdpa"),
        inputs=lambda: _sdpa_inputs(0, MASK_ROW2),
        probes=lambda: {"first_row_masked": _sdpa_inputs(10, MASK_ROW0)},
        card=Card(
            symptom="dynamo exporter: a query row whose boolean attn_mask is all False comes out as the plain mean "
            "of v (uniform attention) where torch returns zeros; silent, every other row matches. The TorchScript "
            "exporter (opset 14+) matches torch.",
            cause="Since torch 2.5 SDPA's math path uses _safe_softmax, which zeroes rows where every score is -inf. "
            "The dynamo exporter's SDPA function turns the bool mask into a large finite negative bias, so softmax "
            "over a fully masked row is uniform instead of empty.",
            fix="Zero such rows yourself after attention: out.masked_fill(~mask.any(-1, keepdim=True), 0), or make "
            "sure no query row is fully masked (e.g. let padding attend to itself).",
            source="pytorch/pytorch#159973; microsoft/onnxscript#2479; pytorch/pytorch#103749",
        ),
        claims=(
            Claim("mismatch", exporter="dynamo"),
            Claim("mismatch", exporter="dynamo", probe="first_row_masked", opset=13),
        ),
    )
)
register(
    Case(
        name="sdpa_fully_masked_row_zeroed",
        model=_net("MaskedSdpaZeroed"),
        inputs=lambda: _sdpa_inputs(0, MASK_ROW2),
        probes=lambda: {"first_row_masked": _sdpa_inputs(10, MASK_ROW0)},
        fixes="sdpa_fully_masked_row",
    )
)

# SDPA enable_gqa=True -------------------------------------------------------------------------


def _gqa_inputs(seed: int, seq: int = 5) -> dict[str, Any]:
    return {
        "q": randn(1, 4, seq, 8, seed=seed),
        "k": randn(1, 2, seq, 8, seed=seed + 1),
        "v": randn(1, 2, seq, 8, seed=seed + 2),
    }


GQA_DYNAMIC = {"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}}

register(
    Case(
        name="sdpa_enable_gqa",
        model=_net("GqaSdpa"),
        inputs=lambda: _gqa_inputs(0),
        probes=lambda: {"seq9": _gqa_inputs(10, seq=9)},
        dynamic=GQA_DYNAMIC,
        card=Card(
            symptom='TorchScript exporter: "AssertionError: conversion of scaled_dot_product_attention not '
            'implemented if enable_gqa is True". The dynamo exporter exports it and matches.',
            cause="Grouped-query attention (fewer key/value heads than query heads) was added to SDPA in torch 2.5; "
            "only the dynamo exporter's torchlib implements it (by repeating k/v heads); the TorchScript symbolic "
            "asserts.",
            fix="Export with dynamo=True, or repeat the k/v heads yourself: k.repeat_interleave(hq // hkv, dim=-3) "
            "(likewise v) and call SDPA without enable_gqa.",
            source="pytorch/pytorch#162258; pytorch/pytorch#151762; microsoft/onnxscript#1802",
        ),
        claims=(Claim("export-fail", exporter="torchscript", match="enable_gqa"),),
    )
)
register(
    Case(
        name="sdpa_enable_gqa_repeat",
        model=_net("GqaSdpaRepeat"),
        inputs=lambda: _gqa_inputs(0),
        probes=lambda: {"seq9": _gqa_inputs(10, seq=9)},
        dynamic=GQA_DYNAMIC,
        fixes="sdpa_enable_gqa",
    )
)

# SDPA on 3-D inputs ----------------------------------------------------------------------------


def _sdpa3d_inputs(batch: int, seed: int) -> dict[str, Any]:
    return {"q": randn(batch, 5, 8, seed=seed), "k": randn(batch, 5, 8, seed=seed + 1), "v": randn(batch, 5, 8, seed=seed + 2)}


register(
    Case(
        name="sdpa_3d",
        model=_net("Sdpa3d"),
        inputs=lambda: _sdpa3d_inputs(2, 0),
        probes=lambda: {"other": _sdpa3d_inputs(2, 10)},
        card=Card(
            symptom='dynamo exporter: "AssertionError: only 4D query, key, and value are supported". The '
            "TorchScript exporter (opset 14+) exports the same call and matches.",
            cause="F.scaled_dot_product_attention accepts any (..., L, E) rank, but the dynamo exporter's SDPA "
            "function (which may emit the opset-23 Attention op) insists on (batch, heads, L, E).",
            fix="Add the head dimension around the call: sdpa(q[:, None], k[:, None], v[:, None]).squeeze(1).",
            source=f"microsoft/onnxscript#2558; {SDPA_DOCS}",
        ),
        claims=(Claim("export-fail", exporter="dynamo", match="4D"),),
    )
)
register(
    Case(
        name="sdpa_3d_as_4d",
        model=_net("Sdpa3dAs4d"),
        inputs=lambda: _sdpa3d_inputs(2, 0),
        probes=lambda: {"other": _sdpa3d_inputs(2, 10)},
        fixes="sdpa_3d",
    )
)

# nn.RMSNorm -------------------------------------------------------------------------------------

register(
    Case(
        name="rms_norm",
        model=_net("RmsNorm"),
        inputs=lambda: {"x": randn(2, 3, 8)},
        probes=lambda: {"large": {"x": randn(4, 3, 8, seed=1, scale=50.0)}},
        dynamic={"x": {0: "batch"}},
        card=Card(
            symptom="TorchScript exporter: \"Exporting the operator 'aten::rms_norm' to ONNX opset version N is not "
            'supported" at every opset it offers (13-20). The dynamo exporter decomposes it and matches.',
            cause="nn.RMSNorm (torch 2.4+) calls aten::rms_norm; ONNX only gained RMSNormalization in opset 23 and "
            "the TorchScript exporter, frozen before that, has no symbolic for it.",
            fix="Export with dynamo=True, or write it out: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.",
            source="pytorch/pytorch#159249; NVIDIA/Model-Optimizer#262",
        ),
        claims=(Claim("export-fail", exporter="torchscript", match="rms_norm"),),
    )
)
register(
    Case(
        name="rms_norm_manual",
        model=_net("RmsNormManual"),
        inputs=lambda: {"x": randn(2, 3, 8)},
        probes=lambda: {"large": {"x": randn(4, 3, 8, seed=1, scale=50.0)}},
        dynamic={"x": {0: "batch"}},
        fixes="rms_norm",
    )
)
