"""onnxruntime's graph optimizer: fusions that change what the model computes.

onnxruntime rewrites every graph at session creation (the default level is
ORT_ENABLE_ALL): it fuses sub-graphs it recognizes into single kernels. A
fusion that matches a pattern without checking every attribute replaces a
sub-graph that only looks like the pattern, and the runtime then computes
something else than the graph it was given. Each gotcha here mismatches torch
with the default session and matches it with ORT_DISABLE_ALL (the table's
*optimizer* column says ``yes``); its fixed twin passes with both.

The cases are hand-written norms whose ``mean(-1)`` lacks ``keepdim=True``,
fed a square input (8 rows × 8 features), so torch broadcasts the per-row
statistics along the feature axis without complaint. The optimized
onnxruntime output equals the ``keepdim=True`` norm — what the author most
likely meant — which is why this can hide a real bug of the torch model too.

Measured, not reproduced (no case), onnxruntime 1.32.0, opset 18, both
exporters, optimizations on vs off: a ``keepdim=True`` layer norm with scale
and bias of shape (1,) (the broadcast lead of microsoft/onnxruntime#25855) or
normalizing over the last two axes with a per-feature scale; tanh-GELU;
MatMul + Add with a (T, N) bias; Conv + Add with a bias that is not per
channel; float16, bfloat16 and int32 Cast round trips: the same result either
way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

ISSUE = "https://github.com/microsoft/onnxruntime/issues/30513"
FIX_PR = "https://github.com/microsoft/onnxruntime/pull/31144"
SOURCE = (
    f"microsoft/onnxruntime#30513 ({ISSUE}: LayerNorm fusion matches ReduceMean with keepdims=0); "
    f"microsoft/onnxruntime#31144 ({FIX_PR}, open: skip LayerNormFusion and SimplifiedLayerNormFusion when keepdims=0)"
)
SQUARE = 8  # rows == features: what lets torch broadcast the (8,) statistics along the last axis


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._optimizer_nets.<cls>`` with seeded weights."""
    return lazy("models._optimizer_nets", cls, seed=seed)


def _inputs() -> dict[str, Any]:
    return {"x": randn(SQUARE, SQUARE)}


def _probes() -> dict[str, dict[str, Any]]:
    return {"offset_rows": {"x": randn(SQUARE, SQUARE, seed=1, scale=3.0, shift=2.0)}}


def _claims(*exporters: str) -> tuple[Claim, ...]:
    """Mismatch at opset 18 on the newest runtime per exporter, and on the oldest runtime that loads it."""
    claims = [Claim("mismatch", exporter=e, probe="example") for e in exporters]
    if "torchscript" in exporters:
        claims.append(Claim("mismatch", exporter="torchscript", probe="example", opset=13, runtime="onnxruntime==1.15.1"))
    if "dynamo" in exporters:  # IR version 10: onnxruntime 1.17 and older refuse it
        claims.append(Claim("mismatch", exporter="dynamo", probe="example", runtime="onnxruntime==1.20.1"))
    return tuple(claims)


def _fixed(name: str, cls: str) -> None:
    register(Case(name=f"{name}_fixed", model=_net(cls), inputs=_inputs, probes=_probes, fixes=name))


# LayerNormFusion: ReduceMean(keepdims=0) → Sub → Pow → ReduceMean → Add → Sqrt → Div → Mul → Add -------------

register(
    Case(
        name="layer_norm_no_keepdim",
        model=_net("LayerNormNoKeepdim"),
        inputs=_inputs,
        probes=_probes,
        card=Card(
            symptom="A hand-written layer norm whose x.mean(-1) lacks keepdim=True, on a square (8, 8) input: "
            "onnxruntime's default session returns other numbers than torch (max diff ~3), with both exporters, at "
            "every opset, on every runtime that loads the model (1.15.1-1.32.0 measured); the same model with graph "
            "optimizations disabled (ORT_DISABLE_ALL) matches torch. No error, no warning.",
            cause="mean(-1) without keepdim exports as ReduceMean(keepdims=0); its (8,) row means broadcast along the "
            "last axis, so torch and the graph subtract row j's mean from column j. onnxruntime's LayerNormFusion "
            "matches ReduceMean → Sub → Pow → ReduceMean → Add → Sqrt → Div → Mul → Add without checking keepdims "
            "and replaces it with LayerNormalization, which normalizes each row by its own statistics. On onnxruntime "
            "1.20+ at opset >= 17 it fuses already at ORT_ENABLE_BASIC (LayerNormFusionL1); with it disabled, "
            "SimplifiedLayerNormFusion fuses the variance tail instead, just as wrongly.",
            fix="Write keepdim=True (x.mean(-1, keepdim=True)) — a real layer norm, which the fusion computes "
            "correctly — or use nn.LayerNorm / F.layer_norm. If the broadcast is meant, spell it (mean.unsqueeze(0)): "
            "the pattern no longer matches. Or create the session with ORT_DISABLE_ALL, or disabled_optimizers="
            "['LayerNormFusion', 'LayerNormFusionL1', 'LayerNormFusionL2', 'SimplifiedLayerNormFusion'] (the names "
            "up to 1.17 and from 1.20; unknown names are ignored).",
            source=SOURCE,
        ),
        claims=_claims("torchscript", "dynamo"),
    )
)
_fixed("layer_norm_no_keepdim", "LayerNormNoKeepdimFixed")

# SimplifiedLayerNormFusion: Pow → ReduceMean(keepdims=0) → Add → Sqrt → Div → Mul ---------------------------------

register(
    Case(
        name="rms_norm_no_keepdim",
        model=_net("RmsNormNoKeepdim"),
        inputs=_inputs,
        probes=_probes,
        card=Card(
            symptom="A hand-written RMSNorm, x / sqrt(x.pow(2).mean(-1) + eps) * weight, lacking keepdim=True, on a "
            "square (8, 8) input: onnxruntime's default session differs from torch (max diff ~2-3), with both "
            "exporters, at every opset, on every runtime that loads the model (1.15.1-1.32.0 measured); with "
            "ORT_DISABLE_ALL it matches.",
            cause="The (8,) mean squares of ReduceMean(keepdims=0) broadcast along the last axis: torch divides column "
            "j by row j's RMS. onnxruntime's SimplifiedLayerNormFusion matches Pow → ReduceMean → Add → Sqrt → Div → "
            "Mul without checking keepdims and replaces it with SimplifiedLayerNormalization, which divides each row "
            "by its own RMS (a level-2 fusion: ORT_ENABLE_BASIC still matches torch).",
            fix="Write keepdim=True — a real RMSNorm, fused correctly — or, if the broadcast is meant, spell it "
            "(unsqueeze). Or create the session with ORT_ENABLE_BASIC, or disabled_optimizers=['SimplifiedLayerNormFusion'].",
            source=SOURCE,
        ),
        claims=_claims("torchscript", "dynamo"),
    )
)
_fixed("rms_norm_no_keepdim", "RmsNormNoKeepdimFixed")

# The Llama form, x * rsqrt(...): the exporter decides whether the fusion sees it --------------------------------

register(
    Case(
        name="rms_norm_rsqrt_no_keepdim",
        model=_net("RmsNormRsqrtNoKeepdim"),
        inputs=_inputs,
        probes=_probes,
        card=Card(
            symptom="RMSNorm written the Llama way, weight * (x * torch.rsqrt(x.pow(2).mean(-1) + eps)), lacking "
            "keepdim=True, on a square (8, 8) input: TorchScript export — onnxruntime's default session differs from "
            "torch at every opset, on every runtime that loads it (1.15.1-1.32.0 measured), ORT_DISABLE_ALL matches; "
            "dynamo export — "
            "matches torch either way.",
            cause="TorchScript exports rsqrt as Div(1, Sqrt(...)), which SimplifiedLayerNormFusion matches without "
            "checking ReduceMean's keepdims=0 (so each row is divided by its own RMS instead of torch's broadcast); "
            "dynamo exports Reciprocal(Sqrt(...)), which the fusion does not match (x86-64 CPU builds measured), so the "
            "graph runs as written. The exporter, not the model, decides whether the optimizer bites.",
            fix="Write keepdim=True (as transformers' LlamaRMSNorm does). Or export with dynamo=True, or create the "
            "session with ORT_ENABLE_BASIC or disabled_optimizers=['SimplifiedLayerNormFusion'].",
            source=SOURCE,
        ),
        claims=_claims("torchscript"),
    )
)
_fixed("rms_norm_rsqrt_no_keepdim", "RmsNormRsqrtNoKeepdimFixed")
