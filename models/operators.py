"""Operators one exporter supports and the other does not, or neither does, and their rewrites.

Measured with torch 2.13 at opsets 13-20: the TorchScript exporter and the
dynamo exporter have separate operator tables, so a model that fails with one
often exports with the other, and a few operators (``searchsorted``,
``cumprod``, ``linalg.inv``) have no ONNX translation in either; ``prod(dim)``
exports from dynamo below opset 18 as an invalid model. Importing this module
does not import torch: the modules live in :mod:`models._operators_nets`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

BATCH = {"x": {0: "batch"}}
REDUCEPROD_SPEC = "https://onnx.ai/onnx/operators/onnx__ReduceProd.html"


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._operators_nets.<cls>`` with seeded weights."""
    return lazy("models._operators_nets", cls, seed=seed)


def _tensor(values: list[Any], dtype: str = "float32") -> torch.Tensor:
    """A literal tensor, built without importing torch at module import time."""
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype))


# torch.cdist: TorchScript only ---------------------------------------------------------

CDIST_INPUTS = {"a": {0: "batch"}, "b": {0: "batch"}}

register(
    Case(
        name="cdist",
        model=_net("Cdist"),
        inputs=lambda: {"a": randn(2, 5, 4), "b": randn(2, 6, 4, seed=1)},
        probes=lambda: {"batch3": {"a": randn(3, 5, 4, seed=2), "b": randn(3, 6, 4, seed=3)}},
        dynamic=CDIST_INPUTS,
        card=Card(
            symptom="dynamo exporter: \"No ONNX function found for <OpOverload(op='aten._cdist_forward' ...)>\". "
            "The TorchScript exporter, which once lacked cdist too, now exports it and matches.",
            cause="The two exporters have separate operator tables: torch.onnx's opset-9 symbolic covers aten::cdist, "
            "the onnxscript torchlib used by dynamo has no aten._cdist_forward and torch.export does not decompose it.",
            fix="Write the distance out: ((a[..., :, None, :] - b[..., None, :, :]) ** 2).sum(-1).sqrt(), or export "
            "with dynamo=False.",
            source="pytorch/pytorch#69201; pytorch/pytorch#144212",
        ),
        claims=(Claim("export-fail", exporter="dynamo", match="cdist"),),
    )
)
register(
    Case(
        name="cdist_explicit",
        model=_net("CdistExplicit"),
        inputs=lambda: {"a": randn(2, 5, 4), "b": randn(2, 6, 4, seed=1)},
        probes=lambda: {"batch3": {"a": randn(3, 5, 4, seed=2), "b": randn(3, 6, 4, seed=3)}},
        dynamic=CDIST_INPUTS,
        fixes="cdist",
    )
)

# torch.searchsorted: neither exporter ------------------------------------------------------


def _search_inputs() -> dict[str, Any]:
    # Values on the edges themselves: the left/right tie rule decides their bin.
    return {"x": _tensor([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, -2.0])}


def _search_probes() -> dict[str, dict[str, Any]]:
    return {
        "random": {"x": randn(8, seed=1, scale=1.5)},
        "edges_only": {"x": _tensor([-1.0, -0.25, 0.0, 0.5, 1.0, 1.0, 0.0, -1.0])},
    }


register(
    Case(
        name="searchsorted",
        model=_net("SearchSorted"),
        inputs=_search_inputs,
        probes=_search_probes,
        card=Card(
            symptom="Neither exporter: TorchScript raises \"Exporting the operator 'aten::searchsorted' to ONNX opset "
            'version N is not supported"; dynamo raises "No ONNX function found for aten.searchsorted.Tensor".',
            cause="ONNX has no binary-search operator and neither exporter carries a decomposition for searchsorted. "
            "torch.bucketize, the same operation with its arguments swapped, has one in both.",
            fix="torch.bucketize(x, edges) for searchsorted(edges, x) (same left-side rule on ties; right=True for "
            "side='right'), or (x[..., None] > edges).sum(-1).",
            source="pytorch/pytorch#151648; pytorch/pytorch#126549",
        ),
        claims=(
            Claim("export-fail", exporter="torchscript", match="searchsorted"),
            Claim("export-fail", exporter="dynamo", match="searchsorted"),
        ),
    )
)
register(
    Case(
        name="searchsorted_bucketize",
        model=_net("Bucketize"),
        inputs=_search_inputs,
        probes=_search_probes,
        fixes="searchsorted",
    )
)

# torch.cumprod: neither exporter -------------------------------------------------------------


def _cumprod_input(seed: int, batch: int = 2) -> torch.Tensor:
    # Zeros and negatives: what breaks the usual exp(cumsum(log(x))) workaround.
    x = randn(batch, 6, seed=seed)
    x[0, 2] = 0.0
    return x


register(
    Case(
        name="cumprod",
        model=_net("Cumprod"),
        inputs=lambda: {"x": _cumprod_input(0)},
        probes=lambda: {"batch4": {"x": _cumprod_input(1, batch=4)}},
        dynamic=BATCH,
        card=Card(
            symptom="Neither exporter: TorchScript raises \"Exporting the operator 'aten::cumprod' to ONNX opset "
            'version N is not supported"; dynamo decomposes it to prims.prod and then finds no ONNX function for it.',
            cause="ONNX has CumSum but no CumProd. The usual workaround exp(cumsum(log(x))) is wrong for zeros and "
            "negative entries.",
            fix="For a short, fixed axis, unroll it: multiply slice by slice and concatenate (exact for zeros and "
            "negatives); avoid the log/exp trick.",
            source="pytorch/pytorch#102948; onnx/onnx#6590",
        ),
        claims=(
            Claim("export-fail", exporter="torchscript", match="cumprod"),
            Claim("export-fail", exporter="dynamo", match="prod"),
        ),
    )
)
register(
    Case(
        name="cumprod_unrolled",
        model=_net("CumprodUnrolled"),
        inputs=lambda: {"x": _cumprod_input(0)},
        probes=lambda: {"batch4": {"x": _cumprod_input(1, batch=4)}},
        dynamic=BATCH,
        fixes="cumprod",
    )
)

# torch.linalg.inv: neither exporter ------------------------------------------------------------


def _matrices(batch: int, seed: int) -> torch.Tensor:
    """Well-conditioned 3×3 matrices: random plus 3·I."""
    import torch

    return randn(batch, 3, 3, seed=seed) + 3 * torch.eye(3)


register(
    Case(
        name="linalg_inv",
        model=_net("Inverse"),
        inputs=lambda: {"m": _matrices(2, 0)},
        probes=lambda: {"batch5": {"m": _matrices(5, 1)}},
        dynamic={"m": {0: "batch"}},
        card=Card(
            symptom="Neither exporter: TorchScript raises \"Exporting the operator 'aten::linalg_inv' to ONNX opset "
            'version N is not supported"; dynamo raises "No ONNX function found for aten.linalg_inv_ex".',
            cause="Standard ONNX has no matrix inverse (onnxruntime's Inverse is a com.microsoft contrib op), so "
            "neither exporter translates inv, solve, cholesky, qr, svd or eigh. det is supported.",
            fix="For small fixed sizes write the closed form: a 3×3 inverse is the adjugate (cross products of the "
            "rows) over the determinant; otherwise invert outside the graph.",
            source="pytorch/pytorch#107948; pytorch/pytorch#136622",
        ),
        claims=(
            Claim("export-fail", exporter="torchscript", match="linalg_inv"),
            Claim("export-fail", exporter="dynamo", match="linalg_inv"),
        ),
    )
)
register(
    Case(
        name="linalg_inv_adjugate",
        model=_net("Inverse3x3"),
        inputs=lambda: {"m": _matrices(2, 0)},
        probes=lambda: {"batch5": {"m": _matrices(5, 1)}},
        dynamic={"m": {0: "batch"}},
        fixes="linalg_inv",
    )
)

# Complex numbers: rotary embeddings via torch.polar / view_as_complex -------------------------

ROPE_BATCH = {"x": {0: "batch"}}  # (batch, seq=6, dim=8): seq and dim are fixed by the angle buffer

register(
    Case(
        name="rope_complex",
        model=_net("RopeComplex"),
        inputs=lambda: {"x": randn(2, 6, 8)},
        probes=lambda: {"batch4": {"x": randn(4, 6, 8, seed=1, scale=3.0)}},
        dynamic=ROPE_BATCH,
        card=Card(
            symptom="TorchScript exporter: \"Exporting the operator 'aten::polar' to ONNX opset version N is not "
            'supported" (then view_as_complex). The dynamo exporter exports the same model and matches.',
            cause="ONNX and onnxruntime have no complex tensors. The dynamo exporter rewrites complex values as real "
            "tensors with a trailing dimension of 2; the TorchScript exporter has no symbolics for polar, "
            "view_as_complex or complex multiplication.",
            fix="Export with dynamo=True, or write the rotation in real arithmetic: (a·cos − b·sin, a·sin + b·cos) on "
            "the (even, odd) pairs.",
            source="onnx/onnx#6480; pytorch/pytorch#49793; pytorch/pytorch#59246",
        ),
        claims=(Claim("export-fail", exporter="torchscript", match="polar"),),
    )
)
register(
    Case(
        name="rope_real",
        model=_net("RopeReal"),
        inputs=lambda: {"x": randn(2, 6, 8)},
        probes=lambda: {"batch4": {"x": randn(4, 6, 8, seed=1, scale=3.0)}},
        dynamic=ROPE_BATCH,
        fixes="rope_complex",
    )
)

# x.prod(dim) from the dynamo exporter below opset 18: an invalid model ------------------------------

register(
    Case(
        name="prod_dim_below_opset18",
        model=_net("ProdLastDim"),
        inputs=lambda: {"x": randn(2, 5)},
        probes=lambda: {"batch4": {"x": randn(4, 5, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="dynamo exporter at opsets 13 and 17: export succeeds, then onnxruntime refuses the model: "
            '"INVALID_GRAPH ... ReduceProd ... Unrecognized attribute: noop_with_empty_axes for operator '
            'ReduceProd". Opsets 18 and 20, and the TorchScript exporter at every opset, are fine.',
            cause="noop_with_empty_axes (and axes as an input) arrived in ReduceProd-18. Below opset 18 the exporter "
            "still emits the opset-18 form of the node under the older opset import, which the checker rejects.",
            fix="Export at opset 18 or later, or with dynamo=False; a product over a short fixed axis can "
            "also be unrolled into Muls.",
            source=REDUCEPROD_SPEC,
        ),
        claims=(
            Claim("load-fail", exporter="dynamo", opset=17, match="noop_with_empty_axes"),
            Claim("load-fail", exporter="dynamo", opset=13, match="noop_with_empty_axes"),
        ),
    )
)
